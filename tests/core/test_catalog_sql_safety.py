"""The DuckDB catalog quotes every identifier and path it splices into SQL, and
`causal-assets sql` cannot write files, read outside the Parquet base or load extensions."""
from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from causal_assets.core.outputs.catalog import DuckDBCatalog, check_analysis_sql, quote_ident, view_source
from causal_assets.core.foundation.storage import write_parquet_atomic

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
    code, out, _ = sql("select count(*) as n from 'base://corpus_chunks/*.parquet'")  # the Parquet directly: fine
    assert code == 0 and "2" in out
    code, out, err = sql(f"select count(*) as n from '{base}/corpus_chunks/*.parquet'")  # by local path: no
    assert code == 2 and "'base://<asset>/*.parquet'" in err, err
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


def _tree(root):
    """Every file and directory under `root` with its content hash: what a write of any kind would change."""
    import hashlib
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


# Statements that write, each wrapped a way a check of the outer statement alone lets through, or aimed at the
# read-only file system's own URLs; run on the analysis connection itself, with no statement check in front.
WRITES = [
    "EXPLAIN ANALYZE COPY (select 'EVIL' as chunk_id) TO '{source}'",
    "EXPLAIN ANALYZE COPY (select 'EVIL' as chunk_id) TO 'base://corpus_chunks/default.parquet'",
    "COPY (select 'EVIL' as chunk_id) TO '{base}/cache/embeddings/poison.parquet'",
    "COPY (select 'EVIL' as chunk_id) TO 'base://cache/embeddings/poison.parquet'",
    "COPY (select 1 as a, 2 as b) TO 'base://corpus_chunks' (format parquet, partition_by a, overwrite_or_ignore)",
    "PREPARE w AS COPY (select 1) TO 'base://w.csv'; EXECUTE w",
    "select 1; COPY (select 1) TO 'base://two.csv'",
    "WITH x AS (select 'EVIL' as chunk_id) select * from x; COPY (select 1) TO '{base}/cte.csv'",
    "EXPORT DATABASE 'base://exported'",
    "ATTACH 'base://new.duckdb' AS n",
    "ATTACH '{base}/new.duckdb' AS n",
    "SET disabled_filesystems = ''",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "PRAGMA enable_profiling = 'json'",
    "SET profiling_output = '{base}/profile.json'",
    "CALL enable_logging(storage = 'file', storage_path = '{base}/log')",
    "SET temp_directory = '{base}/spill'",
    "INSTALL httpfs",
]


@pytest.mark.parametrize("statement", WRITES)
def test_the_analysis_connection_writes_nothing_however_a_statement_is_wrapped(tmp_path, statement):
    base = _base(tmp_path)
    (base / "cache" / "embeddings").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("outside")
    catalog = DuckDBCatalog(tmp_path / "catalog.duckdb")
    catalog.refresh_from_storage(base)
    source = base / "corpus_chunks" / "default.parquet"
    before = _tree(tmp_path)
    with catalog.connect_for_analysis(base) as con:
        with pytest.raises(duckdb.Error):
            relation = con.sql(statement.format(base=base, source=source))   # what `causal-assets sql` runs
            if relation is not None:
                relation.fetchall()
        # the connection still reads (a refused statement did not break it), and only under the base path
        assert con.execute("select count(*) from corpus_chunks").fetchall() == [(2,)]
        assert con.execute("select count(*) from 'base://corpus_chunks/*.parquet'").fetchall() == [(2,)]
        for outside in ("base://../outside.txt", "base://corpus_chunks/../../outside.txt"):
            try:
                rows = con.execute(f"select content from read_text('{outside}')").fetchall()
            except duckdb.Error:
                rows = []
            assert rows == [], outside
    assert _tree(tmp_path) == before


def test_sql_command_explain_analyze_copy_leaves_the_partition_as_it_was(tmp_path, capsys):
    from causal_assets.cli import main

    base = _base(tmp_path)
    catalog_path = tmp_path / "catalog.duckdb"
    DuckDBCatalog(catalog_path).refresh_from_storage(base)
    source = base / "corpus_chunks" / "default.parquet"
    before = _tree(tmp_path)
    for target in (source, "base://corpus_chunks/default.parquet"):
        code = main(["--base-path", str(base), "sql", f"EXPLAIN ANALYZE COPY (select 'EVIL' as chunk_id, 'default' "
                     f"as corpus, 'injected' as text) TO '{target}'", "--catalog-path", str(catalog_path)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert "only queries are allowed here, also under EXPLAIN; got EXPLAIN COPY" in err, err
    assert _tree(tmp_path) == before
    assert pd.read_parquet(source)["chunk_id"].tolist() == ["a", "b"]


@pytest.mark.parametrize("statement", ["EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", "explain analyze checkpoint",
                                       "EXPLAIN (ANALYZE, FORMAT json) VACUUM", "EXPLAIN ANALYZE SET threads = 1"])
def test_explain_wraps_only_queries(statement):
    """EXPLAIN ANALYZE executes what it explains: a statement that writes is refused under it too."""
    with pytest.raises(ValueError, match="only queries are allowed here, also under EXPLAIN"):
        check_analysis_sql(statement)
    for query in ("EXPLAIN ANALYZE select 1", "explain (analyze) with x as (select 1) select * from x",
                  "EXPLAIN from mc_labels", "EXPLAIN ANALYZE summarize select 1"):
        check_analysis_sql(query)


def _sql(tmp_path, capsys, query: str) -> tuple[int, str, str]:
    from causal_assets.cli import main

    base = _base(tmp_path)
    catalog_path = tmp_path / "catalog.duckdb"
    if not catalog_path.exists():
        DuckDBCatalog(catalog_path).refresh_from_storage(base)
    code = main(["--base-path", str(base), "sql", query, "--catalog-path", str(catalog_path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_statement_of_several_prints_its_result(tmp_path, capsys):
    """`select 1; select 2` printed the second result only: the first was run and its result dropped."""
    code, out, err = _sql(tmp_path, capsys, "select 1 as one; select count(*) as n from corpus_chunks")
    assert code == 0, err
    assert out.split() == ["one", "1", "n", "2"] and "\n\n" in out, out


@pytest.mark.parametrize("query, said", [
    ("/* c */ EXPLAIN ANALYZE COPY (select 1) TO 'x.csv'", "also under EXPLAIN; got EXPLAIN COPY"),
    ("-- a note\nEXPLAIN /* x */ ANALYZE /* y */ COPY (select 1) TO 'x.csv'", "also under EXPLAIN; got EXPLAIN COPY"),
    ("/* c */ COPY (select 1) TO 'x.csv'", "are allowed here; got COPY"),
    ("select 1; -- then\n  /* write */ ATTACH ':memory:' AS m", "are allowed here; got ATTACH"),
])
def test_a_refusal_names_the_statement_not_the_comment_before_it(query, said):
    """A comment before the statement (or between EXPLAIN and what it explains) was named as the statement:
    `got EXPLAIN /*`."""
    with pytest.raises(ValueError) as e:
        check_analysis_sql(query)
    assert str(e.value).endswith(said), str(e.value)


@pytest.mark.parametrize("path", ["base://../outside.txt", "base://corpus_chunks/../../outside.txt",
                                  "base://../*.txt"])
def test_a_path_leaving_the_base_is_refused_not_read_as_nothing(tmp_path, capsys, path):
    """The read-only file system refused such a path, but DuckDB reads files through a glob, whose walk swallowed
    the refusal: the query returned no rows, as if the file were empty."""
    (tmp_path / "outside.txt").write_text("outside")
    code, out, err = _sql(tmp_path, capsys, f"select content from read_text('{path}')")
    assert code == 2 and "outside" not in out, out
    # refused by the read-only file system, or by DuckDB's allowed directories (which resolve some of the `..`)
    assert err.startswith("causal-assets: sql: Permission") and path in err and err.count("\n") == 1, err
    assert "outside the base path" in err or "disabled by configuration" in err, err
