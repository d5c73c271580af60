"""Errors a user can act on: each names the file, line or field and the offending value."""
from __future__ import annotations

import os
from contextlib import contextmanager


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (a library's may run to many), or its class name if it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class CausalAssetsError(Exception):
    """Base class for bad input detected by causal_assets."""


class CorpusError(CausalAssetsError):
    """A corpus source is missing, empty or malformed."""


class ConfigError(CausalAssetsError):
    """A registry or configuration file is invalid."""


class ParquetReadError(CausalAssetsError):
    """A Parquet file that cannot be read (damaged, truncated, not Parquet)."""


class CatalogError(CausalAssetsError):
    """The DuckDB catalog cannot be read or written (damaged file, read-only directory): derived data, so a run only
    warns; `causal-assets catalog` says it in one line."""


@contextmanager
def naming_file(path: str | os.PathLike):
    """Give a write's OSError that names no file (a full disk or quota: ENOSPC, EFBIG, EDQUOT; an I/O error) the
    file being written, `path`: `[Errno 28] No space left on device: 'data/parquet/corpus_chunks/x.parquet'`."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        if e.errno is None:
            raise OSError(f"{os.fspath(path)}: {e}") from e
        raise OSError(e.errno, e.strerror or str(e), os.fspath(path)) from e


class RegistryWarning(UserWarning):
    """A registry that loads but will not do what its user likely means (the commands show it on one line)."""
