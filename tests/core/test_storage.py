"""Atomic Parquet writes and the DuckDB catalog under a concurrent reader."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from causal_assets.core.outputs.catalog import DuckDBCatalog, view_source
from causal_assets.core.foundation.storage import asset_path, read_parquet, write_parquet_atomic


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


def test_a_killed_writers_temp_file_is_swept_by_the_next_write_never_a_live_ones(tmp_path):
    """A writer SIGKILLed mid-write leaves `.p.parquet.<...>.tmp` behind. Temp names carry the writer's host and
    pid: the next write of the file removes those of dead writers on this host, and keeps a live writer's (here or
    on another host)."""
    from causal_assets.core.foundation.storage import HOST

    path = asset_path(tmp_path, "t", "p")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        temps = {who: path.parent / f".p.parquet.{host}.{pid}.{'0' * 32}.tmp" for who, host, pid in
                 [("dead", HOST, dead.pid), ("live", HOST, live.pid), ("elsewhere", "otherhost", dead.pid)]}
        path.parent.mkdir(parents=True)
        for tmp in temps.values():
            tmp.write_bytes(b"PAR1 half a file")
        write_parquet_atomic(pd.DataFrame({"a": [1]}), path)
    finally:
        live.kill()
        live.wait()
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(["p.parquet", temps["live"].name,
                                                                    temps["elsewhere"].name])


def test_a_damaged_parquet_file_is_one_error_naming_it(tmp_path):
    """pyarrow read through a file handle named no file: "Could not open Parquet input source '<Buffer>'"."""
    from causal_assets.core.foundation.errors import ParquetReadError

    path = asset_path(tmp_path, "t", "p")
    write_parquet_atomic(pd.DataFrame({"a": range(100)}), path)
    path.write_bytes(path.read_bytes()[:200])  # a copy cut short
    with pytest.raises(ParquetReadError, match=rf"^{path}: cannot read Parquet \(.*magic bytes") as info:
        read_parquet(path)
    assert "<Buffer>" not in str(info.value)


def test_an_unchanged_view_needs_no_write_lock(tmp_path):
    """An unchanged view is seen as unchanged (by its fingerprint, since DuckDB keeps only a normalised copy of the
    SQL), so a reader holding the catalog does not defer every refresh; a changed one (a new column) is
    re-created."""
    base = tmp_path / "pq"
    write_parquet_atomic(pd.DataFrame({"chunk_id": ["d"], "v": [1]}), asset_path(base, "evaluation_runs", "a"))
    assert DuckDBCatalog(tmp_path / "cat.duckdb").refresh_from_storage(base) == {"evaluation_runs": "created"}
    assert DuckDBCatalog(tmp_path / "cat.duckdb").refresh_from_storage(base) == {"evaluation_runs": "unchanged"}
    reader = _hold_catalog(tmp_path / "cat.duckdb", 30)
    try:
        catalog = DuckDBCatalog(tmp_path / "cat.duckdb", lock_timeout_s=0.3)
        assert catalog.refresh_from_storage(base) == {"evaluation_runs": "unchanged"}
        write_parquet_atomic(pd.DataFrame({"chunk_id": ["e"], "v": [2], "w": [3.0]}),
                             asset_path(base, "evaluation_runs", "b"))
        assert catalog.refresh_from_storage(base) == {"evaluation_runs": "deferred"}
    finally:
        reader.kill()
        reader.wait()
    assert DuckDBCatalog(tmp_path / "cat.duckdb").refresh_from_storage(base) == {"evaluation_runs": "created"}
    with DuckDBCatalog(tmp_path / "cat.duckdb").connect() as con:
        assert con.execute("select count(*), count(w), count(chunk_id) from evaluation_runs").fetchone() == (2, 1, 2)


@pytest.fixture
def full_disk():
    """Writes in this process fail as on a full disk (EFBIG through RLIMIT_FSIZE: the write itself fails, with an
    OSError that names no file) while the test body runs."""
    import resource
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    class Disk:
        def __enter__(self):
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))

        def __exit__(self, *exc):
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    try:
        yield Disk()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_full_disk_names_the_file_being_written(tmp_path, full_disk):
    """`[Errno 27] File too large` (or 28, No space left on device) said nothing of which file: the asset's
    Parquet, the query record and the search report each name themselves, and leave no temporary file."""
    from causal_assets.core.local_search import inbox
    from causal_assets.core.local_search.search import _write_atomic

    target = asset_path(tmp_path / "parquet", "corpus_chunks", "default")
    target.parent.mkdir(parents=True)
    report = tmp_path / "reports" / "causal_search_report_x.md"
    report.parent.mkdir()
    (tmp_path / "queries").mkdir()
    writes = {str(target): lambda: write_parquet_atomic(pd.DataFrame({"x": range(1000)}), target),
              str(report): lambda: _write_atomic(report, "# report\n" * 1000),
              str(tmp_path / "queries"): lambda: inbox.submit(tmp_path / "queries", "Who wrote Killing Pablo?",
                                                              "hotpotqa")}
    for where, write in writes.items():
        with full_disk, pytest.raises(OSError) as raised:
            write()
        assert raised.value.errno in (27, 28) and str(raised.value.filename).startswith(where), raised.value
        assert where in str(raised.value)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == [], leftovers


def _old_labels(path, question, doc):
    """An mc_labels partition as versions before one name per id wrote it: `question_id` and `doc_id`."""
    write_parquet_atomic(pd.DataFrame({"question_id": [question], "doc_id": [doc], "label": ["YES"]}), path)


def test_a_file_with_the_old_id_names_reads_with_todays(tmp_path):
    """Files of earlier versions stored a question's id as `question_id` and a chunk's as `doc_id` (and the
    multi-hop chunks' question as that metadata key): every stage reads them as `query_id` and `chunk_id`."""
    labels = asset_path(tmp_path, "mc_labels", "old")
    _old_labels(labels, "q1", "q1/0")
    frame = read_parquet(labels)
    assert list(frame.columns) == ["query_id", "chunk_id", "label"]
    assert frame[["query_id", "chunk_id"]].values.tolist() == [["q1", "q1/0"]]
    assert read_parquet(labels, columns=["label", "query_id"]).to_dict("list") == {"label": ["YES"], "query_id": ["q1"]}
    chunks = asset_path(tmp_path, "corpus_chunks", "old")
    metadata = ['{"position": 0, "question_id": "q1", "supporting": true}', '{"doc": "say \\"question_id\\": x"}']
    write_parquet_atomic(pd.DataFrame({"chunk_id": ["q1/0", "c"], "metadata": metadata}), chunks)
    assert [json.loads(m) for m in read_parquet(chunks)["metadata"]] == [
        {"position": 0, "query_id": "q1", "supporting": True}, {"doc": 'say "question_id": x'}]


def test_views_over_files_of_both_ages_show_todays_id_names(tmp_path):
    """A view over partitions written before and after the renaming has one column per id, under today's name
    (filled from either), with its comment; a view over old files alone renames them."""
    base = tmp_path / "pq"
    _old_labels(asset_path(base, "mc_labels", "old"), "q1", "q1/0")
    write_parquet_atomic(pd.DataFrame({"query_id": ["q2"], "chunk_id": ["q2/0"], "label": ["NO"]}),
                         asset_path(base, "mc_labels", "new"))
    _old_labels(asset_path(base, "candidate_pools", "old"), "q1", "q1/0")
    catalog = DuckDBCatalog(tmp_path / "cat.duckdb")
    assert catalog.refresh_from_storage(base) == {"candidate_pools": "created", "mc_labels": "created"}
    with catalog.connect() as con:
        for view in ("mc_labels", "candidate_pools"):
            comments = dict(con.execute("select column_name, comment from duckdb_columns() where table_name = ?",
                                        [view]).fetchall())
            assert set(comments) == {"query_id", "chunk_id", "label"} and "corpus_chunks" in comments["chunk_id"]
        assert con.execute("select query_id, chunk_id from mc_labels order by all").fetchall() == \
            [("q1", "q1/0"), ("q2", "q2/0")]
    with catalog.connect_for_analysis(base) as con:
        assert con.execute("select count(*) from mc_labels join candidate_pools using (query_id, chunk_id)"
                           ).fetchone() == (1,)
