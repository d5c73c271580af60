"""A copied or moved `data/` keeps reading its own Parquet (views name paths relative to the catalog, so a copy never
reads the original's files); views carry column comments and join on `chunk_id` and `query_id`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pandas as pd

from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.core.foundation.storage import asset_path, write_parquet_atomic


def make_data(root):
    base = root / "parquet"
    write_parquet_atomic(pd.DataFrame({"query_id": ["q1"], "chunk_id": ["c1"], "rank": [1], "score": [2.0]}),
                         asset_path(base, "evaluation_runs", "toy"))
    write_parquet_atomic(pd.DataFrame({"chunk_id": ["c1"], "text": ["hello"]}), asset_path(base, "corpus_chunks", "toy"))
    catalog = DuckDBCatalog(root / "causal_assets.duckdb")
    assert set(catalog.refresh_from_storage(base).values()) == {"created"}
    return catalog


def test_a_moved_copy_reads_its_own_files(tmp_path):
    make_data(tmp_path / "data")
    shutil.copytree(tmp_path / "data", tmp_path / "copy")
    write_parquet_atomic(pd.DataFrame({"chunk_id": ["c1", "c2"], "text": ["hello", "only in the copy"]}),
                         asset_path(tmp_path / "copy" / "parquet", "corpus_chunks", "toy"))
    shutil.rmtree(tmp_path / "data")  # the original is gone: a view naming it would fail, not read stale files
    with DuckDBCatalog(tmp_path / "copy" / "causal_assets.duckdb").connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchall()[0][0] == 2
        # every view joins on chunk_id / query_id
        assert con.sql("select c.text from evaluation_runs r join corpus_chunks c using (chunk_id)").fetchall() == \
            [("hello",)]
        comments = dict(con.sql("select column_name, comment from duckdb_columns() where table_name = "
                                "'evaluation_runs'").fetchall())
    assert "corpus_chunks.chunk_id" in comments["chunk_id"] and comments["rank"].startswith("Rank")
    # the plain duckdb client, run from inside the data directory, needs nothing else
    code = ("import duckdb; print(duckdb.connect('causal_assets.duckdb', read_only=True)"
            ".execute('select count(*) from corpus_chunks').fetchall()[0][0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "copy", capture_output=True, text=True)
    assert out.stdout.strip() == "2", out.stderr


def test_the_sql_command_reads_a_moved_copy(tmp_path):
    make_data(tmp_path / "data")
    os.rename(tmp_path / "data", tmp_path / "moved")
    from causal_assets.cli import main

    assert main(["--base-path", str(tmp_path / "moved" / "parquet"), "sql",
                 "select r.query_id, c.text from evaluation_runs r join corpus_chunks c using (chunk_id)",
                 "--catalog-path", str(tmp_path / "moved" / "causal_assets.duckdb")]) == 0
