"""Base paths other than the default local root: an fsspec URL DuckDB cannot read by itself (memory://), and a
second local root given as a plain path and as a file:// URL. Real materializations, real DuckDB catalogs."""
from __future__ import annotations

import uuid

import duckdb
import pandas as pd
import pytest
from dagster import materialize

from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.foundation.storage import asset_path, read_parquet
from causal_assets.defs.corpus import corpus_chunks, sparse_postings_and_vocabulary
from causal_assets.resources import ParquetIOManagerFactory, Storage


def _with_storage(resources, storage: Storage) -> dict:
    return {**resources, "storage": storage, "io_manager": ParquetIOManagerFactory(storage=storage)}


def _view_status(result, asset: str) -> str:
    mat = [e.materialization for e in result.get_asset_materialization_events()
           if e.materialization.asset_key.path[-1] == asset][0]
    return mat.metadata["duckdb_view"].value


def test_memory_base_path_gets_duckdb_views(resources, tmp_path):
    base = f"memory://causal-{uuid.uuid4().hex[:8]}/parquet"
    catalog_path = tmp_path / "memory_catalog.duckdb"
    storage = Storage(base_path=base, catalog_path=str(catalog_path), reports_dir=str(tmp_path / "reports"))
    result = materialize([corpus_chunks, sparse_postings_and_vocabulary], resources=_with_storage(resources, storage),
                         partition_key="hotpotqa")
    assert result.success
    assert _view_status(result, "corpus_chunks") == "corpus_chunks (created)"
    assert not (tmp_path / "parquet").exists()  # nothing went to a local path by mistake
    chunks = read_parquet(asset_path(base, "corpus_chunks", "hotpotqa"))
    assert len(chunks) == 30

    # The view names the memory:// URL; a connection with the fsspec filesystem registered reads it.
    with storage.catalog().connect() as con:
        views = dict(con.execute("select view_name, sql from duckdb_views() where not internal").fetchall())
        assert {"corpus_chunks", "sparse_postings", "sparse_vocabulary"} <= set(views)
        assert f"{base}/corpus_chunks/*.parquet" in views["corpus_chunks"]
        assert con.execute("select count(*), count(distinct chunk_id) from corpus_chunks").fetchone() == (30, 30)
        n_postings = con.execute("select count(*) from sparse_postings").fetchone()[0]
    assert n_postings == len(read_parquet(asset_path(base, "sparse_postings", "hotpotqa")))
    # Why the registration is needed: DuckDB alone has no memory:// filesystem (so the view cannot be bound).
    with duckdb.connect(str(catalog_path), read_only=True) as plain, pytest.raises(duckdb.IOException, match="No files found"):
        plain.execute("select count(*) from corpus_chunks").fetchone()

    # A full refresh (what `causal-assets catalog` does) works on the fsspec base as well, into a fresh catalog.
    fresh = DuckDBCatalog(tmp_path / "fresh.duckdb")
    status = fresh.refresh_from_storage(base)
    assert status == {"corpus_chunks": "created", "sparse_postings": "created", "sparse_vocabulary": "created"}
    with fresh.connect() as con:
        assert con.execute("select count(*) from corpus_chunks where corpus = 'hotpotqa'").fetchone()[0] == 30


def test_second_local_root_as_path_and_as_file_url(resources, tmp_path, capsys):
    root_a, root_b = tmp_path / "root_a", tmp_path / "root_b"
    storage_a = Storage(base_path=str(root_a), catalog_path=str(tmp_path / "a.duckdb"), reports_dir=str(tmp_path / "ra"))
    storage_b = Storage(base_path=root_b.as_uri(), catalog_path=str(tmp_path / "b.duckdb"), reports_dir=str(tmp_path / "rb"))
    assert storage_b.base_path.startswith("file:///")
    assert materialize([corpus_chunks, sparse_postings_and_vocabulary], resources=_with_storage(resources, storage_a),
                       partition_key="hotpotqa").success
    assert materialize([corpus_chunks, sparse_postings_and_vocabulary], resources=_with_storage(resources, storage_b),
                       partition_key="scifact").success
    assert sorted(p.name for p in (root_a / "corpus_chunks").iterdir()) == ["hotpotqa.parquet"]
    assert sorted(p.name for p in (root_b / "corpus_chunks").iterdir()) == ["scifact.parquet"]
    # Each catalog sees only its own root (local views name the path, not the file:// URL, so duckdb reads them).
    with DuckDBCatalog(storage_a.catalog_path).connect() as con:
        assert con.execute("select corpus, count(*) from corpus_chunks group by corpus").fetchall() == [("hotpotqa", 30)]
    with DuckDBCatalog(storage_b.catalog_path).connect() as con:
        assert con.execute("select corpus, count(*) from corpus_chunks group by corpus").fetchall() == [("scifact", 120)]
        assert "file://" not in con.execute("select sql from duckdb_views() where view_name = 'corpus_chunks'").fetchone()[0]
    # The library and the CLI read from the file:// root too.
    index = CorpusIndex.load(storage_b.base_path, "scifact", dense=False)
    first = pd.read_parquet(root_b / "corpus_chunks" / "scifact.parquet").iloc[7]
    assert index.search(first["title"], k=1)[0].chunk_id == first["chunk_id"]
    from causal_assets.cli import main

    assert main(["--base-path", storage_b.base_path, "sql", "select count(*) as n from corpus_chunks",
                 "--catalog-path", storage_b.catalog_path]) == 0
    assert capsys.readouterr().out.split() == ["n", "120"]


def test_a_damaged_catalog_is_a_warning_never_a_half_written_run(tmp_path, capsys):
    """A truncated catalog must not fail a run at its first output, after that output's Parquet was written, leaving
    a multi-asset half-written. The catalog is derived data: the run writes every output
    and says which file to rebuild; `causal-assets catalog` fails in one line naming it."""
    from dagster import AssetOut, multi_asset

    from causal_assets.cli import main

    @multi_asset(outs={"first_half": AssetOut(), "second_half": AssetOut()})
    def halves():
        return pd.DataFrame({"a": [1]}), pd.DataFrame({"b": [2]})

    base, catalog = tmp_path / "parquet", tmp_path / "catalog.duckdb"
    DuckDBCatalog(catalog).ensure_views({"one": "select 1 as x"})
    catalog.write_bytes(catalog.read_bytes()[:5000])  # a copy cut short
    storage = Storage(base_path=str(base), catalog_path=str(catalog), reports_dir=str(tmp_path / "reports"))
    result = materialize([halves], resources={"io_manager": ParquetIOManagerFactory(storage=storage)},
                         raise_on_error=False)
    assert result.success
    assert (base / "first_half.parquet").exists() and (base / "second_half.parquet").exists()
    assert _view_status(result, "second_half") == "second_half (not updated: catalog error)"
    capsys.readouterr()
    assert main(["--base-path", str(base), "catalog", "--catalog-path", str(catalog)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"causal-assets: DuckDB catalog {catalog}: views not updated (IO Error") and \
        "`causal-assets catalog` rebuilds it" in line, line
