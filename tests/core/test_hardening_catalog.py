"""Issue 15, findings 6 and 7: the DuckDB catalog quotes every identifier and path it splices into SQL, and
`causal-assets sql` cannot write files, read outside the Parquet base or load extensions."""
from __future__ import annotations

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
    with DuckDBCatalog(str(tmp_path / "catalog.duckdb")).connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == 2   # the view was not dropped
        names = {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert names == {"corpus_chunks"}


def test_quoting_helpers_keep_hostile_names_inert(tmp_path):
    # Even a name that reached ensure_views directly stays one identifier.
    base = _base(tmp_path)
    catalog = DuckDBCatalog(tmp_path / "catalog.duckdb")
    catalog.ensure_views({"corpus_chunks": view_source(base, "corpus_chunks", True),
                          INJECTION: "select 2 as two"})
    with DuckDBCatalog(str(tmp_path / "catalog.duckdb")).connect() as con:
        assert con.execute("select count(*) from corpus_chunks").fetchone()[0] == 2
        assert con.execute(f"select two from {quote_ident(INJECTION)}").fetchone()[0] == 2
    with pytest.raises(ValueError):
        quote_ident("a\0b")
    src = view_source(tmp_path / "it's", "x", True)
    assert "it''s" in src


def test_sql_command_cannot_write_read_outside_the_base_or_load_extensions(tmp_path, capsys, monkeypatch):
    from causal_assets.cli import main

    base = _base(tmp_path)
    catalog_path = tmp_path / "catalog.duckdb"
    DuckDBCatalog(catalog_path).refresh_from_storage(base)
    source = base / "corpus_chunks" / "default.parquet"
    before = source.read_bytes()
    monkeypatch.setenv("CAUSAL_ASSETS_LLM_API_KEY", "sk-do-not-show-me")

    def sql(query):
        code = main(["--base-path", str(base), "sql", query, "--catalog-path", str(catalog_path)])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = sql("select count(*) as n from corpus_chunks")
    assert code == 0 and "2" in out
    # each view once, with its comments (temporary views shadowing the catalog's listed every view twice)
    code, out, _ = sql("select count(*) as n, count(comment) as described from duckdb_columns() "
                       "where table_name = 'corpus_chunks'")
    columns = len(pd.read_parquet(base / "corpus_chunks" / "default.parquet").columns)
    assert code == 0 and out.split()[-2:] == [str(columns), str(columns)], out
    # a user's views in the catalog: one over a view it sorts before, one with a column list
    with DuckDBCatalog(catalog_path).connect(read_only=False) as con:
        con.execute("create view a_chunk_count as select count(*) as n from corpus_chunks")
        con.execute("create view my_cols(x) as select 1")
    for query in ("select n from a_chunk_count", "select x from my_cols"):
        code, out, err = sql(query)
        assert code == 0 and out.split()[-1] in ("1", "2"), (query, out, err)
    # the in-memory session has no spill directory: DuckDB adds it (.tmp under the working directory) to the
    # directories a query may read
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "notes.txt").write_text("secret-token-123")
    code, out, err = sql("select content from read_text('.tmp/notes.txt')")
    assert code == 2 and "secret-token-123" not in out + err, (out, err)
    code, out, _ = sql(f"select count(*) as n from '{base}/corpus_chunks/*.parquet'")  # the Parquet directly: fine
    assert code == 0 and "2" in out
    for query in (f"COPY (select 1) TO '{source}'", f"copy (select 1) to '{base}/corpus_chunks/x.parquet'",
                  f"export database '{tmp_path}/exp'", "install httpfs", "load httpfs", "attach ':memory:' as m",
                  "set enable_external_access = true", "create table t as select 1"):
        code, _, err = sql(query)
        assert code == 2 and "only queries" in err, (query, err)
        assert err.strip().endswith(f"got {query.split()[0].upper()}"), (query, err)   # INSTALL was named LOAD
    for query in ("select * from read_text('/proc/self/environ')", "select * from read_csv('/etc/passwd')",
                  f"select * from read_text('{base}/../../../../proc/self/environ')",
                  "select * from read_parquet('https://example.invalid/x.parquet')"):
        code, out, err = sql(query)
        assert code == 2 and "sk-do-not-show-me" not in out + err and "root:" not in out, (query, err)
        assert "disabled by configuration" in err or "Permission" in err, (query, err)
    assert source.read_bytes() == before and not (base / "corpus_chunks" / "x.parquet").exists()
    assert not (tmp_path / "exp").exists()
