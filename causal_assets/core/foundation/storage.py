"""Parquet files written atomically, on a local path or any fsspec URL.

A reader (DuckDB, a concurrent run) sees either the old file or the new one, never a half-written file:
we write to a hidden temporary name in the same directory and rename it over the target. On object
stores a rename is a copy, but the target key still only appears once the object is complete.

A writer killed mid-write (SIGKILL, OOM, power) cannot remove its temporary file, so the name carries the writer's
host and pid: the next write of the same file removes the ones whose writer is known dead (this host, pid gone),
never one a live writer (here or on another host) is still writing.
"""
from __future__ import annotations

import os
import posixpath
import re
import socket
import uuid

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from upath import UPath

from causal_assets.core.foundation.errors import ParquetReadError, first_line, naming_file


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


def cache_path(base: str | UPath, name: str) -> UPath:
    """A cache kept beside the assets under the base path (the embedding cache: `cache_path(base, "embeddings")`)."""
    return UPath(base) / "cache" / name


def asset_path(base: str | UPath, asset: str, partition: str | None = None) -> UPath:
    """The one layout used by the IO manager, the DuckDB views and the library loaders."""
    safe_name(asset, "asset")
    if partition:
        safe_name(partition)
    root = UPath(base) / asset
    return root / f"{partition}.parquet" if partition else UPath(base) / f"{asset}.parquet"


HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def temp_path(path: UPath) -> UPath:
    """A hidden name beside `path`, without the .parquet suffix (`*.parquet` globs, i.e. DuckDB views, never match
    it), naming this writer: `.<name>.<host>.<pid>.<random>.tmp`."""
    return path.parent / f".{path.name}.{HOST}.{os.getpid()}.{uuid.uuid4().hex}.tmp"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def sweep_dead_temps(path: UPath) -> None:
    """Remove the temporary files of `path` left by writers that died on this host. Best effort: a listing or
    removal that fails (a concurrent sweep, an object store's permissions) is not the write's failure."""
    ours = re.compile(rf"^\.{re.escape(path.name)}\.{re.escape(HOST)}\.(\d+)\.[0-9a-f]{{32}}\.tmp$")
    try:
        for entry in path.parent.glob(f".{path.name}.*.tmp"):
            m = ours.match(entry.name)
            if m and not _pid_alive(int(m.group(1))):
                entry.unlink()
    except OSError:
        pass


def write_parquet_atomic(frame: pd.DataFrame | pa.Table, path: UPath) -> None:
    path = UPath(path)
    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_dead_temps(path)
    tmp = temp_path(path)
    try:
        with naming_file(path), tmp.open("wb") as fh:   # a full disk names the asset's file, not the temporary one
            pq.write_table(table, fh, compression="zstd")
        tmp.rename(path)  # os.replace semantics locally: atomic
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


# Ids stored under other names by files written before every table named them `chunk_id` and `query_id`: read
# under today's names here, and in the catalog's views (`catalog.todays_names`), so no stage sees the old ones.
RENAMED_COLUMNS = {"doc_id": "chunk_id", "question_id": "query_id"}
# The same id as a key of a chunk's `metadata` JSON (the multi-hop loaders' question); a quote inside a JSON string
# is escaped, so the quoted key followed by its colon matches keys only.
RENAMED_METADATA_KEYS = {'"question_id": ': '"query_id": '}


def with_todays_names(table: pa.Table) -> pa.Table:
    """`table` with the ids of a file written before `RENAMED_COLUMNS` under today's names: an old column renamed,
    or, beside a column of the new name, filling its gaps and dropped; the old key of a chunk's `metadata` too."""
    for old, new in RENAMED_COLUMNS.items():
        if old not in table.column_names:
            continue
        at = table.column_names.index(old)
        if new in table.column_names:
            column = table.column(new)
            filled = pc.coalesce(column, table.column(old).cast(column.type))
            table = table.set_column(table.column_names.index(new), new, filled).remove_column(at)
        else:
            table = table.rename_columns([new if i == at else n for i, n in enumerate(table.column_names)])
    if "metadata" in table.column_names and table.schema.field("metadata").type in (pa.string(), pa.large_string()):
        metadata = table.column("metadata")
        for old, new in RENAMED_METADATA_KEYS.items():
            metadata = pc.replace_substring(metadata, old, new)
        table = table.set_column(table.column_names.index("metadata"), "metadata", metadata)
    return table


def read_parquet(path: str | UPath, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet file as a DataFrame (only `columns`, when given), its ids under today's names whenever it was
    written (`with_todays_names`)."""
    path = UPath(path)
    with path.open("rb") as fh:
        try:
            if columns is not None:   # a column asked for by today's name, read under the file's
                stored = set(pq.read_schema(fh).names)
                old = {new: old for old, new in RENAMED_COLUMNS.items() if old in stored and new not in stored}
                columns = [old.get(c, c) for c in columns]
                fh.seek(0)
            table = pq.read_table(fh, columns=columns)
        except (pa.ArrowException, OSError) as e:  # pyarrow names the handle ('<Buffer>'), not the file
            cause = first_line(e).replace(" '<Buffer>'", "")
            raise ParquetReadError(f"{path}: cannot read Parquet ({cause})") from e
    return with_todays_names(table).to_pandas()


def parquet_column_values(path: str | UPath, column: str) -> set | None:
    """The distinct values of one column of a Parquet file (None when it has no such column), from the row groups'
    statistics where each holds a single value (a constant column: no data read), else from the column alone."""
    path = UPath(path)
    with path.open("rb") as fh:
        try:
            parquet = pq.ParquetFile(fh)
            names = parquet.schema_arrow.names
            if column not in names:
                return None
            index = parquet.metadata.schema.names.index(column) if column in parquet.metadata.schema.names else None
            values: set = set()
            for group in range(parquet.metadata.num_row_groups):
                stats = parquet.metadata.row_group(group).column(index).statistics if index is not None else None
                if stats is None or not stats.has_min_max or stats.min != stats.max or stats.null_count:
                    values = None
                    break
                values.add(stats.min)
            if values is None:
                values = set(pc.unique(parquet.read(columns=[column]).column(0)).to_pylist())
            return values
        except (pa.ArrowException, OSError) as e:
            cause = first_line(e).replace(" '<Buffer>'", "")
            raise ParquetReadError(f"{path}: cannot read Parquet ({cause})") from e
