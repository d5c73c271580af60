"""Atomic Parquet writes and the DuckDB catalog under a concurrent reader."""
from __future__ import annotations

import subprocess
import sys
import time

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from causal_assets.core.catalog import DuckDBCatalog, view_source
from causal_assets.core.storage import asset_path, read_parquet, write_parquet_atomic


def test_atomic_write_keeps_old_file_when_a_write_fails(tmp_path, monkeypatch):
    path = asset_path(tmp_path, "t", "p")
    write_parquet_atomic(pd.DataFrame({"a": [1, 2]}), path)

    def broken(table, where, **kw):
        where.write(b"PAR1 partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_parquet_atomic(pd.DataFrame({"a": [9]}), path)
    monkeypatch.undo()
    assert read_parquet(path)["a"].tolist() == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["p.parquet"]  # no temp file left behind


def test_fsspec_url_base_path():
    path = asset_path("memory://causal-test", "chunks", "c1")
    write_parquet_atomic(pd.DataFrame({"x": ["a"]}), path)
    assert read_parquet(path)["x"].tolist() == ["a"]


def _hold_catalog(path, seconds: float) -> subprocess.Popen:
    """Another process (a user's DuckDB session) holding the catalog open read-only."""
    code = (f"import duckdb, time, sys; c = duckdb.connect({str(path)!r}, read_only=True); "
            f"print('open', flush=True); time.sleep({seconds})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"
    return proc


def test_view_refresh_with_concurrent_reader_is_deferred_not_failed(tmp_path):
    write_parquet_atomic(pd.DataFrame({"corpus": ["a"], "v": [1]}), asset_path(tmp_path / "pq", "chunks", "a"))
    catalog = DuckDBCatalog(tmp_path / "cat.duckdb", lock_timeout_s=0.3)
    assert catalog.ensure_views({"first": "select 1 as x"}) == {"first": "created"}
    reader = _hold_catalog(tmp_path / "cat.duckdb", 30)
    try:
        t0 = time.monotonic()
        status = catalog.ensure_views({"chunks": view_source(tmp_path / "pq", "chunks", True)})
        assert status == {"chunks": "deferred"}
        assert time.monotonic() - t0 < 5  # bounded wait: never hold a run hostage
    finally:
        reader.kill()
        reader.wait()
    assert catalog.refresh_from_storage(tmp_path / "pq")["chunks"] == "created"
    # Views over globs see new partitions without a refresh.
    write_parquet_atomic(pd.DataFrame({"corpus": ["b"], "v": [2]}), asset_path(tmp_path / "pq", "chunks", "b"))
    with DuckDBCatalog(str(tmp_path / "cat.duckdb")).connect() as con:
        assert con.execute("select count(*), sum(v) from chunks").fetchone() == (2, 3)
