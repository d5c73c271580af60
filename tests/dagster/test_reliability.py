"""Reliability with real processes: a whole Dagster run killed with SIGKILL and re-executed, the local LLM server
stopped in the middle of a labelling run and brought back, and two runs writing partitions of the same assets at
once. Real `dagster asset materialize` processes, the real llama.cpp server (SmolLM2-135M), real Parquet/DuckDB.
Everything lives in tmp dirs; the small registries point the shipped partition names at small real data."""
from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, materialize

from causal_assets.core.outputs.catalog import DuckDBCatalog
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.cores import free_cores
from causal_assets.core.llm.server import LocalLlamaServer
from causal_assets.core.foundation.storage import read_parquet
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from causal_assets.defs.labels import candidate_pools, mc_labels, mc_trials
from causal_assets.resources import LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage
from tests.conftest import HOTPOT, require
from tests.dagster.procs import (IN_PROCESS, group_alive, kill_group, processes_with_env, project_env,
                                 start_materialize)

BUDGET = 4          # solver calls per question (naive estimator: exactly this many trials)
UPSTREAM = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges]
LABELS = [candidate_pools, mc_trials, mc_labels]


@pytest.fixture(scope="module")
def registry(tmp_path_factory, scifact_small) -> Path:
    """Corpora scifact (120 real abstracts) and hotpotqa (3 real questions); the hotpotqa benchmark labels one
    question with a pool of 3 short paragraphs and BUDGET naive trials, so each solver call is ~1-3 s."""
    root = tmp_path_factory.mktemp("reliability_registry")
    hotpot = root / "hotpot_small.jsonl"
    hotpot.write_text("\n".join(require(HOTPOT).read_text().splitlines()[:3]) + "\n")
    (root / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "python_package", "package": "networkx",
         "options": {"subpackages": ["algorithms.shortest_paths.unweighted"]}},
        {"name": "scifact", "loader": "beir", "path": str(scifact_small)},
        {"name": "hotpotqa", "loader": "hotpotqa", "path": str(hotpot)}]}))
    (root / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "hotpotqa", "loader": "hotpotqa", "corpus": "hotpotqa", "path": str(hotpot),
         "splits": ["dev"], "eval_splits": ["dev"], "validator": "answer_f1",
         "pooling": {"size": 3, "max_doc_chars": 200},
         "monte_carlo": {"split": "dev", "max_questions": 1, "estimator": "naive", "outcome": "success",
                         "budget": BUDGET}}]}))
    return root


def make_resources(registry: Path, root: Path, **llm_kw) -> dict:
    storage = Storage(base_path=str(root / "parquet"), catalog_path=str(root / "catalog.duckdb"),
                      reports_dir=str(root / "reports"))
    return {"storage": storage, "corpus_registry": CorpusRegistry(path=str(registry / "corpora.yaml")),
            "benchmark_registry": BenchmarkRegistry(path=str(registry / "benchmarks.yaml")),
            "io_manager": ParquetIOManagerFactory(storage=storage),
            "llm": LLM(cache_path=str(root / "llm_calls.sqlite"), **llm_kw)}


@pytest.fixture(scope="module")
def index_root(registry, tmp_path_factory) -> Path:
    """The hotpotqa index and graph, built once; each test copies it into its own storage."""
    root = tmp_path_factory.mktemp("reliability_index")
    assert materialize(UPSTREAM, resources=make_resources(registry, root), partition_key="hotpotqa").success
    return root


@pytest.fixture(scope="module")
def llama():
    server = LocalLlamaServer(n_threads=free_cores())  # the cores other processes leave free, as the LLM resource
    server.start()
    yield server
    server.stop()


def _copy_index(index_root: Path, root: Path) -> None:
    shutil.copytree(index_root / "parquet", root / "parquet")


def _ok_calls(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10) as con:
            return con.execute("select count(*) from llm_calls where status = 'ok'").fetchone()[0]
    except sqlite3.OperationalError:  # created by the run but its schema not written yet
        return 0


def _wait(predicate, timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _parquet_state(base: Path) -> dict[str, int]:
    """Every visible Parquet file (what `*.parquet` globs and DuckDB views see) -> rows; each must be readable."""
    return {str(p.relative_to(base)): len(read_parquet(p)) for p in sorted(base.rglob("*.parquet"))}


def _ok_rows_per_key(cache: CallCache) -> Counter:
    return Counter(c.key for c in cache.history() if c.status == "ok")


@pytest.mark.slow
@pytest.mark.llm
def test_sigkill_of_a_whole_run_then_rerun_pays_no_completed_call_twice(registry, index_root, llama, tmp_path):
    _copy_index(index_root, tmp_path)
    base, calls_db = tmp_path / "parquet", tmp_path / "llm_calls.sqlite"
    upstream_digests = {p: _digest(p) for p in base.rglob("*.parquet")}
    # No LLM URL: the run's LLM resource starts its own llama.cpp server (the shipped default).
    env = project_env(make_resources(registry, tmp_path), tmp_path / "dagster_home")
    env.pop("CAUSAL_ASSETS_LLM_BASE_URL", None)
    run_config = IN_PROCESS

    t0 = time.monotonic()
    run = start_materialize("candidate_pools,mc_trials,solver_calls,mc_labels", "hotpotqa", env, run_config,
                            log_path=tmp_path / "killed_run.log")
    # Kill point, deterministic: candidate_pools is written and mc_trials has completed 2 of its BUDGET calls.
    _wait(lambda: _ok_calls(calls_db) >= 2, 240, "2 completed solver calls", run)
    assert run.poll() is None and not (base / "mc_trials").exists()
    servers = processes_with_env(str(tmp_path), "llama_cpp.server")
    assert len(servers) == 1  # the run's own server, in its own session (so not in the run's process group)
    kill_group(run, signal.SIGKILL)
    killed_after = time.monotonic() - t0
    assert run.returncode == -signal.SIGKILL
    _wait(lambda: not group_alive(run.pid), 10, "the run's process group to be gone")
    # The server notices its parent is gone (core/llm/parent_guard.py) instead of living on as an orphan.
    _wait(lambda: not processes_with_env(str(tmp_path), "llama_cpp.server"), 10, "the run's LLM server to exit")
    completed = _ok_calls(calls_db)
    assert 2 <= completed < BUDGET

    # After the crash: every visible Parquet file is whole and readable, upstream untouched, nothing half-written.
    state = _parquet_state(base)
    assert state["candidate_pools/hotpotqa.parquet"] == 3
    assert not [k for k in state if k.split("/")[0] in ("mc_trials", "solver_calls", "mc_labels")]
    assert all(_digest(p) == d for p, d in upstream_digests.items())
    hidden_tmp = [p.name for p in base.rglob("*.tmp")]
    assert all(n.startswith(".") and not n.endswith(".parquet") for n in hidden_tmp)  # never matched by *.parquet
    with DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        [killed] = instance.get_runs()
        # Nobody was left to record the end: the run stays STARTED until run monitoring (dagster-daemon) fails it.
        assert killed.status == DagsterRunStatus.STARTED
        done = {e.step_key for e in instance.all_logs(killed.run_id, of_type=DagsterEventType.STEP_SUCCESS)}
        assert done == {"candidate_pools"}

    # Re-execute from the killed step (mc_trials and what follows), in this process, with the shipped default again
    # (a local server of its own: the cache key leaves its port out, as it names only configured endpoints).
    resources = make_resources(registry, tmp_path)
    rerun = materialize(UPSTREAM + LABELS, resources=resources, partition_key="hotpotqa",
                        selection=["mc_trials", "solver_calls", "mc_labels"])
    assert rerun.success
    calls = read_parquet(base / "solver_calls" / "hotpotqa.parquet")
    trials = read_parquet(base / "mc_trials" / "hotpotqa.parquet")
    assert len(trials) == BUDGET and (calls["status"] == "ok").all()
    assert int(calls["cached"].sum()) >= completed            # every completed call came back from the journal
    per_key = _ok_rows_per_key(CallCache(calls_db))
    assert max(per_key.values()) == 1                          # no answered call was paid for twice
    assert sum(per_key.values()) == len(set(trials["call_key"])) and len(calls) == BUDGET
    assert _parquet_state(base)["mc_labels/hotpotqa.parquet"] > 0
    print(f"\nkill -9 after {killed_after:.1f}s with {completed}/{BUDGET} calls done; rerun paid "
          f"{len(calls) - int(calls['cached'].sum())}, served {int(calls['cached'].sum())} from the cache")


@pytest.mark.slow
@pytest.mark.llm
def test_llm_server_stopped_mid_run_then_back(registry, index_root, llama, tmp_path):
    _copy_index(index_root, tmp_path)
    # max_retries=1: an outage exhausts the client's retries in ~1 s, so the labelling loop sees errored calls.
    resources = make_resources(registry, tmp_path, base_url=llama.base_url, model=llama.alias, max_retries=1)
    calls_db = tmp_path / "llm_calls.sqlite"
    timeline: dict[str, float] = {}

    def outage(instance: DagsterInstance) -> None:
        t0 = time.monotonic()
        _wait(lambda: _ok_calls(calls_db) >= 1, 240, "the first answered call")
        llama.stop()
        timeline["ok_before_stop"] = _ok_calls(calls_db)
        timeline["stopped_at"] = time.monotonic() - t0

        def retry_scheduled() -> bool:
            runs = instance.get_runs(limit=1)
            return bool(runs and instance.all_logs(runs[0].run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY))

        _wait(retry_scheduled, 120, "mc_trials to fail and be scheduled for retry")
        llama.start()  # same port: the run's client reconnects to the same URL
        timeline["back_at"] = time.monotonic() - t0

    (tmp_path / "dagster_home").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster_home")) as instance:
        chaos = threading.Thread(target=outage, args=(instance,), daemon=True)
        chaos.start()
        try:
            result = materialize(UPSTREAM + LABELS, resources=resources, partition_key="hotpotqa", instance=instance,
                                 selection=["candidate_pools", "mc_trials", "solver_calls", "mc_labels"])
        finally:
            chaos.join(timeout=180)
            if not llama.running:
                llama.start()
        events = instance.all_logs(result.run_id)
    assert result.success
    retries = [e for e in events if e.dagster_event and e.dagster_event.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert retries and {e.step_key for e in retries} == {"mc_trials"}  # it failed and Dagster's RetryPolicy re-ran it

    journal = CallCache(calls_db).history()
    errors = [c for c in journal if c.status == "error"]
    assert errors and all("[connection]" in c.error for c in errors)   # the outage: journalled as errors
    ok_text = {c.key: c.text for c in journal if c.status == "ok"}
    assert {c.key for c in errors} <= set(ok_text)                       # and every errored call was answered later
    trials = read_parquet(tmp_path / "parquet" / "mc_trials" / "hotpotqa.parquet")
    calls = read_parquet(tmp_path / "parquet" / "solver_calls" / "hotpotqa.parquet")
    assert len(trials) == BUDGET                                         # nothing lost, nothing counted as failed
    assert all(ok_text[k][:500] == a for k, a in zip(trials["call_key"], trials["answer"]))  # trials from ok calls
    assert (calls["status"] == "ok").all() and int(calls["cached"].sum()) >= timeline["ok_before_stop"]
    assert max(_ok_rows_per_key(CallCache(calls_db)).values()) == 1
    checks = result.get_asset_check_evaluations()
    assert {c.check_name: c.passed for c in checks}["no_trial_from_errored_call"]
    print(f"\nserver stopped at {timeline['stopped_at']:.1f}s after {timeline['ok_before_stop']} ok call(s), back at "
          f"{timeline['back_at']:.1f}s; {len(errors)} errored calls journalled; trials {len(trials)}")


@pytest.mark.slow
def test_two_runs_write_partitions_of_the_same_assets_concurrently(registry, tmp_path):
    resources = make_resources(registry, tmp_path)
    env = project_env(resources, tmp_path / "dagster_home")
    select = "corpus_chunks,sparse_postings,sparse_vocabulary"
    runs = {p: start_materialize(select, p, env, log_path=tmp_path / f"{p}.log") for p in ("scifact", "hotpotqa")}
    codes = {p: r.wait(timeout=300) for p, r in runs.items()}
    assert codes == {"scifact": 0, "hotpotqa": 0}, {p: (tmp_path / f"{p}.log").read_text()[-3000:] for p in runs}

    base = tmp_path / "parquet"
    state = _parquet_state(base)
    assert state["corpus_chunks/scifact.parquet"] == 120 and state["corpus_chunks/hotpotqa.parquet"] == 30
    assert not list(base.rglob("*.tmp"))
    with DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        finished = instance.get_runs()
        assert [r.status for r in finished] == [DagsterRunStatus.SUCCESS] * 2
        view_status = [str(e.asset_materialization.metadata["duckdb_view"].value)
                       for r in finished for e in instance.all_logs(r.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)]
    # Both runs raced to create the same three views; each got the write lock in turn (or deferred to the other).
    assert len(view_status) == 6 and all(s.split("(")[1].rstrip(")") in ("created", "unchanged", "deferred")
                                         for s in view_status)
    assert sum("created" in s for s in view_status) >= 3
    catalog = DuckDBCatalog(resources["storage"].catalog_path)
    assert set(catalog.existing_views()) == {"corpus_chunks", "sparse_postings", "sparse_vocabulary"}
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        assert dict(con.execute("select corpus, count(*) from corpus_chunks group by corpus").fetchall()) == \
            {"scifact": 120, "hotpotqa": 30}
        for view in ("sparse_postings", "sparse_vocabulary"):
            by_corpus = dict(con.execute(f"select corpus, count(*) from {view} group by corpus").fetchall())
            assert by_corpus == {p: state[f"{view}/{p}.parquet"] for p in ("scifact", "hotpotqa")}
    assert pd.read_parquet(base / "corpus_chunks").groupby("corpus").size().to_dict() == {"hotpotqa": 30, "scifact": 120}
    print("\nview statuses: " + json.dumps(sorted(view_status)))
