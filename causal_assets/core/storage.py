"""Parquet files written atomically, on a local path or any fsspec URL.

A reader (DuckDB, a concurrent run) sees either the old file or the new one, never a half-written file:
we write to a hidden temporary name in the same directory and rename it over the target. On object
stores a rename is a copy, but the target key still only appears once the object is complete.
"""
from __future__ import annotations

import posixpath
import uuid

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath


def safe_name(name: str, what: str = "partition") -> str:
    """An asset or partition name that becomes a file name: refuse anything that could leave its directory."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise ValueError(f"invalid {what} name {name!r}: it is used as a file name, so it must not be empty, "
                         "start with '.' or contain '/', '\\' or NUL")
    return name


LOCAL_PROTOCOLS = ("", "file", "local")   # fsspec protocols of the local disk


def check_within(base: str | UPath, path: str | UPath) -> UPath:
    """`path` itself if it lies under `base` once normalised; a partition key such as '../../x' would otherwise
    read or write anywhere the process may."""
    base, path = UPath(base), UPath(path)
    root, target = posixpath.normpath(base.path), posixpath.normpath(path.path)
    same_fs = base.protocol == path.protocol or (base.protocol in LOCAL_PROTOCOLS and path.protocol in LOCAL_PROTOCOLS)
    if not same_fs or not (target == root or target.startswith(root.rstrip("/") + "/")):
        raise ValueError(f"{path}: outside the storage base path {base} (refusing to read or write it)")
    return path


def asset_path(base: str | UPath, asset: str, partition: str | None = None) -> UPath:
    """The one layout used by the IO manager, the DuckDB views and the library loaders."""
    safe_name(asset, "asset")
    if partition:
        safe_name(partition)
    root = UPath(base) / asset
    return root / f"{partition}.parquet" if partition else UPath(base) / f"{asset}.parquet"


def write_parquet_atomic(frame: pd.DataFrame | pa.Table, path: UPath) -> None:
    path = UPath(path)
    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Hidden name without the .parquet suffix, so `*.parquet` globs (DuckDB views) never match it.
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with tmp.open("wb") as fh:
            pq.write_table(table, fh, compression="zstd")
        tmp.rename(path)  # os.replace semantics locally: atomic
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def read_parquet(path: str | UPath, columns: list[str] | None = None) -> pd.DataFrame:
    path = UPath(path)
    with path.open("rb") as fh:
        return pq.read_table(fh, columns=columns).to_pandas()
