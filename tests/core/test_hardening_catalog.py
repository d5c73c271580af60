"""Issue 15, findings 6 and 7: the DuckDB catalog quotes every identifier and path it splices into SQL, and
`causal-assets sql` cannot write files, read outside the Parquet base or load extensions."""
from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from causal_assets.core.catalog import DuckDBCatalog, quote_ident, view_source
from causal_assets.core.storage import write_parquet_atomic

INJECTION = 'y" as select 2; drop view corpus_chunks; --'


def _base(tmp_path):
    base = tmp_path / "parquet"
    write_parquet_atomic(pd.DataFrame({"chunk_id": ["a", "b"]}), base / "corpus_chunks" / "default.parquet")
    return base


def test_directory_name_cannot_inject_sql_into_the_catalog(tmp_path):
    base = _base(tmp_path)
    evil = base / INJECTION
    evil.mkdir()
    write_parquet_atomic(pd.DataFrame({"x": [1]}), evil / "p.parquet")
    catalog = DuckDBCatalog(tmp_path / "catalog.duckdb")
    status = catalog.refresh_from_storage(base)
    assert status["corpus_chunks"] == "created"
    assert status[INJECTION].startswith("skipped")
    with duckdb.connect(str(tmp_path / "catalog.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == 2   # the view was not dropped
        names = {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert names == {"corpus_chunks"}


def test_quoting_helpers_keep_hostile_names_inert(tmp_path):
    # Even a name that reached ensure_views directly stays one identifier.
    base = _base(tmp_path)
    catalog = DuckDBCatalog(tmp_path / "catalog.duckdb")
    catalog.ensure_views({"corpus_chunks": view_source(base, "corpus_chunks", True),
                          INJECTION: "select 2 as two"})
    with duckdb.connect(str(tmp_path / "catalog.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == 2
        assert con.execute(f"select two from {quote_ident(INJECTION)}").fetchone()[0] == 2
    with pytest.raises(ValueError):
        quote_ident("a\0b")
    src = view_source(tmp_path / "it's", "x", True)
    assert "it''s" in src
