"""The heavy stages on Celery workers, for real: `redis-server` (the broker, with a password) and a throwaway PostgreSQL
cluster (the instance database) on 127.0.0.1, two `dagster-celery worker start` processes, and runs of
`mc_trial_shards` and `embedding_shards` launched with `CAUSAL_ASSETS_EXECUTOR=celery` by `dagster asset materialize`.

The LLM call cache is a table in the same PostgreSQL (`CAUSAL_ASSETS_LLM_CACHE=postgresql://...`, the cache of several
machines). The corpus is the shipped example folder (examples/own-documents, eight pages) with four of its questions, labelled
by the packaged Gemma-3-270M in the workers; the reference is the same labelling run by the multiprocess executor,
beside them (its own storage, call cache and SQLite instance). Then the
faults: a worker killed by SIGKILL in the middle of a shard (the step goes to the other worker, the run succeeds, no
call is paid twice), and the broker stopped under a running step (the run fails naming the broker's address, not its
password, and leaves no partial file). No planted secret reaches a log or a step's metadata."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance, materialize

from causal_assets.core.llm.cache_location import open_call_cache
from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from causal_assets.defs.labels import candidate_pools, mc_labels, mc_trials
from causal_assets.resources import LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage
from tests.conftest import load_scaled_s, require_system
from tests.dagster.procs import ROOT, group_alive, init_instance, kill_group
from tests.deploy.services import Postgres, Redis
from tests.deploy.systemd_units import exec_start

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "own-documents"
PASSWORD = "brokerpw-planted-5e1d"             # must never appear in a log or in metadata
API_KEY = "sk-planted-celery-test-0a9f3c77"    # likewise (in every process's environment)
QUESTIONS, SHARDS = 4, 2
UPSTREAM = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges, candidate_pools]


def resources(base: Path, cache: Path | str, root: Path, models: Path) -> dict:
    storage = Storage(base_path=str(base), catalog_path=None, reports_dir=str(root / "reports"))
    return {"storage": storage, "io_manager": ParquetIOManagerFactory(storage=storage),
            "corpus_registry": CorpusRegistry(path=str(root / "corpora.yaml")),
            "benchmark_registry": BenchmarkRegistry(path=str(root / "benchmarks.yaml"),
                                                    corpora=str(root / "corpora.yaml")),
            "llm": LLM(cache_path=str(cache), models_dir=str(models))}


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def materialize_cmd(select: str, partition: str) -> list[str]:
    return [str(BIN / "dagster"), "asset", "materialize", "-m", "causal_assets.definitions", "--select", select,
            "--partition", partition]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, models_dir):
    require_system("redis-server")
    require_system("postgresql")
    root = tmp_path_factory.mktemp("celery")
    (root / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "folder", "path": str(EXAMPLE / "docs")}]}))
    lines = (EXAMPLE / "questions.jsonl").read_text().splitlines()[:QUESTIONS]
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n")
    (root / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "default", "loader": "questions", "corpus": "default", "path": str(root / "questions.jsonl"),
         "pooling": {"size": 3}, "monte_carlo": {"budget": 8}}]}))
    # Index and pools in this process; the reference labels come from a multiprocess run (the test below).
    ref = resources(root / "ref", root / "ref_calls.sqlite", root, models_dir)
    assert materialize(UPSTREAM, resources=ref, partition_key="default").success
    # The workers' storage starts with the same index and pools, and no embedding cache.
    shutil.copytree(root / "ref", root / "celery", ignore=shutil.ignore_patterns("cache"))

    with mock.patch.dict(os.environ):
        redis, pg = Redis(PASSWORD), Postgres()
        workers: dict[str, subprocess.Popen] = {}
        try:
            redis.start()
            pg.start()
            home = root / "dagster_home"
            home.mkdir()
            shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")   # PostgreSQL, `llm` pool of 1
            (root / "celery.yaml").write_text(yaml.safe_dump(
                {"execution": {"config": {"broker": redis.url(0), "backend": redis.url(1)}}}))
            env = {**os.environ, **pg.env(), "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
                   "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "OPENAI_API_KEY": API_KEY,
                   "CAUSAL_ASSETS_EXECUTOR": "celery", "CAUSAL_ASSETS_EXECUTOR_CONFIG": str(root / "celery.yaml"),
                   "CAUSAL_ASSETS_CORPORA": str(root / "corpora.yaml"),
                   "CAUSAL_ASSETS_BENCHMARKS": str(root / "benchmarks.yaml"),
                   "CAUSAL_ASSETS_BASE_PATH": str(root / "celery"), "CAUSAL_ASSETS_CATALOG": "none",
                   "CAUSAL_ASSETS_REPORTS": str(root / "reports"), "CAUSAL_ASSETS_MODELS_DIR": str(models_dir),
                   "CAUSAL_ASSETS_LLM_CACHE": pg.url(), "PGPASSWORD": pg.password,
                   "CAUSAL_ASSETS_LABEL_SHARDS": str(SHARDS), "CAUSAL_ASSETS_EMBEDDING_SHARDS": str(SHARDS)}
            os.environ.update({**pg.env(), "PGPASSWORD": pg.password})   # this process reads the instance's events
            # The pool's slots exist before the first runs: two runs creating them at once on a fresh PostgreSQL
            # instance race (a unique violation on concurrency_limits fails one of them).
            subprocess.run([str(BIN / "dagster"), "instance", "concurrency", "set", "llm", "1"], env=env, check=True,
                           capture_output=True, timeout=load_scaled_s(60))
            for name in ("w1", "w2"):   # the command of deploy/systemd/causal-assets-celery-worker.service, named
                argv = exec_start("celery-worker", env, BIN)
                argv[argv.index("--"):argv.index("--")] = ["-n", name]
                workers[name] = start(argv, env, root / f"{name}.log")
            from celery import Celery

            app = Celery(broker=redis.url(0), backend=redis.url(1))
            deadline = time.monotonic() + load_scaled_s(60)
            while len(app.control.ping(timeout=1)) < 2:
                for name, proc in workers.items():
                    assert proc.poll() is None, (root / f"{name}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "two workers not answering pings"
            with DagsterInstance.from_config(str(home)) as instance:
                yield {"root": root, "env": env, "ref": ref, "workers": workers, "redis": redis, "app": app,
                       "instance": instance, "models": models_dir, "pg": pg,
                       "celery": resources(root / "celery", pg.url(), root, models_dir)}
        finally:
            for proc in workers.values():
                kill_group(proc)
            redis.cleanup()
            pg.stop()


def launch(cluster: dict, select: str, partition: str, log: str) -> subprocess.Popen:
    return start(materialize_cmd(select, partition), cluster["env"], cluster["root"] / log)


def wait_all(cluster: dict, procs: dict[str, subprocess.Popen], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    codes = {}
    for log, proc in procs.items():
        try:
            codes[log] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            codes[log] = None
    return codes


def materializations(instance: DagsterInstance, asset: str) -> list:
    records = instance.fetch_materializations(AssetKey(asset), limit=100).records
    return [r.event_log_entry for r in records]


def meta(entry) -> dict:
    return {k: v.value for k, v in entry.asset_materialization.metadata.items()}


def worker_of(cluster: dict, pid: int) -> str | None:
    """The worker (w1/w2) whose process group holds `pid` (each worker started in its own session)."""
    for name, proc in cluster["workers"].items():
        if pid in group_alive(proc.pid):
            return name
    return None


def sql(cluster: dict, query: str) -> list[tuple]:
    """A statement on the shared call cache (PostgreSQL), committed."""
    import psycopg2

    con = psycopg2.connect(cluster["pg"].url())
    try:
        with con, con.cursor() as cur:
            cur.execute(query)
            return cur.fetchall() if cur.description else []
    finally:
        con.close()


def ok_rows_per_key(cluster: dict) -> pd.Series:
    return pd.Series([n for (_, n) in sql(cluster, "select key, count(*) from llm_calls where status = 'ok' group by key")])


def test_label_and_embedding_shards_run_on_two_celery_workers(cluster):
    root, instance = cluster["root"], cluster["instance"]
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    procs = {f"{select}_{s}.log": launch(cluster, select, f"default|{s}", f"{select}_{s}.log")
             for select in ("mc_trial_shards", "embedding_shards") for s in range(SHARDS)}
    # The reference: the whole labelling (mc_trials, then mc_labels) on the multiprocess executor, at the same time.
    init_instance(root / "ref_home")
    reference = start(materialize_cmd("mc_trials,solver_calls,mc_labels", "default"),
                      {**cluster["env"], "CAUSAL_ASSETS_EXECUTOR": "multiprocess", "CAUSAL_ASSETS_EXECUTOR_CONFIG": "",
                       "CAUSAL_ASSETS_BASE_PATH": str(root / "ref"), "DAGSTER_HOME": str(root / "ref_home"),
                       "CAUSAL_ASSETS_LLM_CACHE": str(root / "ref_calls.sqlite")}, root / "reference.log")
    codes = wait_all(cluster, {**procs, "reference.log": reference}, load_scaled_s(240))
    wall = time.monotonic() - t0
    logs = {log: (root / log).read_text(errors="replace") for log in codes}
    assert all(c == 0 for c in codes.values()), {k: logs[k][-3000:] for k, c in codes.items() if c != 0}

    # Every step ran in a worker process, not in the run's own process, and both workers did work.
    shard_meta = {a: [meta(e) for e in materializations(instance, a)] for a in ("mc_trial_shards", "embedding_shards")}
    assert all(len(m) == SHARDS for m in shard_meta.values()), shard_meta
    launchers = {p.pid for p in procs.values()} | {os.getpid()}
    multiprocess = "Executing steps using multiprocess executor"
    assert multiprocess in logs["reference.log"] and not any(multiprocess in logs[k] for k in procs)
    ran_on = {}
    for asset, metas in shard_meta.items():
        for m in metas:
            assert m["worker_pid"] not in launchers
            ran_on[(asset, m["shard"])] = worker_of(cluster, m["worker_pid"])
    assert set(ran_on.values()) == {"w1", "w2"}, ran_on

    # The llm pool (one slot, deploy/dagster.yaml) held the two label steps apart, across both workers.
    spans = []
    for entry in materializations(instance, "mc_trial_shards"):
        events = instance.all_logs(entry.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS})
        starts = [e.timestamp for e in events if e.dagster_event.event_type == DagsterEventType.STEP_START]
        ends = [e.timestamp for e in events if e.dagster_event.event_type == DagsterEventType.STEP_SUCCESS]
        spans.append((min(starts), max(ends)))
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0, f"label steps overlapped under a pool of one: {spans}"

    # Nothing paid twice: each call key once in the shared cache; the trials assemble without a call.
    assert len(ok_rows_per_key(cluster)) > 0 and (ok_rows_per_key(cluster) == 1).all()
    selection = ["mc_trials", "solver_calls", "mc_labels"]
    assembled = materialize(UPSTREAM + [mc_trials, mc_labels], resources=cluster["celery"], partition_key="default",
                            selection=selection)
    assert assembled.success
    calls = pd.read_parquet(root / "celery" / "solver_calls" / "default.parquet")
    assert calls["cached"].all() and len(calls) == sum(m["calls"] for m in shard_meta["mc_trial_shards"])
    # The same labels and effects as the multiprocess run's.
    celery, ref = (pd.read_parquet(root / side / "mc_labels" / "default.parquet") for side in ("celery", "ref"))
    keys = [c for c in ("query_id", "chunk_id", "estimator") if c in ref.columns]
    celery, ref = (f.sort_values(keys, ignore_index=True) for f in (celery, ref))
    assert len(ref) > 0 and celery[keys + ["label"]].equals(ref[keys + ["label"]])
    assert np.allclose(celery["effect"], ref["effect"], equal_nan=True)

    # Embeddings: corpus_embeddings finds every shard's vectors cached, equal by content hash to the reference.
    embedded = materialize([corpus_chunks, corpus_embeddings], resources=cluster["celery"], partition_key="default",
                           selection=[corpus_embeddings])
    m = {k: v.value for k, v in embedded.get_asset_materialization_events()[0].materialization.metadata.items()}
    chunks = pd.read_parquet(root / "celery" / "corpus_chunks" / "default.parquet")
    assert m["newly_embedded"] == 0 and m["cache_hits"] == len(chunks)
    vectors = {}
    for side in ("celery", "ref"):
        frame = pd.read_parquet(root / side / "corpus_embeddings" / "default.parquet")
        vectors[side] = dict(zip(frame["content_hash"], frame["embedding"]))
    assert vectors["celery"].keys() == vectors["ref"].keys()
    assert all(np.allclose(vectors["celery"][h], vectors["ref"][h], atol=1e-5) for h in vectors["ref"])
    assert_no_secret(cluster)
    print(f"\n4 shard runs on 2 celery workers: {wall:.1f}s wall (load {load0:.1f} -> {os.getloadavg()[0]:.1f}); "
          f"ran on {ran_on}")


def step_worker(instance: DagsterInstance, run_id: str) -> str | None:
    """The Celery worker (`w1@host`) the run's step was handed to, from the worker's engine event."""
    for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        if "Executing steps" in (e.dagster_event.message or ""):
            return str(e.dagster_event.engine_event_data.metadata["Celery worker"].value)
    return None


def wait_for(what: str, predicate, timeout_s: float, interval_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f}s"
        time.sleep(interval_s)
    return value


def paid_calls(cluster: dict) -> int:
    return sql(cluster, "select count(*) from llm_calls where status = 'ok'")[0][0]


def new_run(instance: DagsterInstance, before: set[str]) -> str | None:
    """The run started since `before` (the run ids there were), if it has started."""
    runs = [r.run_id for r in instance.get_runs(limit=50) if r.run_id not in before]
    assert len(runs) <= 1, runs
    return runs[0] if runs else None


def run_ids(instance: DagsterInstance) -> set[str]:
    return {r.run_id for r in instance.get_runs(limit=1000)}


def test_killed_worker_step_resubmitted_then_broker_down_fails_clearly(cluster):
    root, instance = cluster["root"], cluster["instance"]
    open_call_cache(cluster["pg"].url()).close()   # the table exists; the shard pays its calls again, so there is a
    sql(cluster, "delete from llm_calls")          # middle to kill it in
    t0 = time.monotonic()
    before = run_ids(instance)
    proc = launch(cluster, "mc_trial_shards", "default|0", "killed.log")
    run_id = wait_for("the run", lambda: new_run(instance, before), load_scaled_s(120))
    worker = wait_for("the step on a worker", lambda: step_worker(instance, run_id), load_scaled_s(120))
    wait_for("a solver call paid", lambda: paid_calls(cluster) > 0, load_scaled_s(120), interval_s=0.2)
    victim = worker.split("@")[0]
    survivor = ({"w1", "w2"} - {victim}).pop()
    kill_group(cluster["workers"][victim])   # SIGKILL to the worker and its pool process
    killed_at = time.monotonic()
    assert wait_all(cluster, {"killed.log": proc}, load_scaled_s(240)) == {"killed.log": 0}, \
        (root / "killed.log").read_text()[-4000:]
    log = (root / "killed.log").read_text(errors="replace")
    assert f"its worker {worker} has not answered" in log and "submitting it again" in log
    [entry] = [e for e in materializations(instance, "mc_trial_shards") if e.run_id == run_id]
    m = meta(entry)
    assert worker_of(cluster, m["worker_pid"]) == survivor
    assert (ok_rows_per_key(cluster) == 1).all()
    assert m["cache_hits"] > 0   # what the killed worker paid was not paid again
    recovered_s = time.monotonic() - killed_at

    # The broker stopped under a running step: one clear error naming its address, not its password.
    before = run_ids(instance)
    proc = launch(cluster, "mc_trial_shards", "default|1", "broker_down.log")
    run_id = wait_for("the run", lambda: new_run(instance, before), load_scaled_s(120))
    wait_for("the step on a worker", lambda: step_worker(instance, run_id), load_scaled_s(180))
    cluster["redis"].stop()
    codes = wait_all(cluster, {"broker_down.log": proc}, load_scaled_s(180))
    log = (root / "broker_down.log").read_text(errors="replace")
    assert codes["broker_down.log"] not in (0, None), log[-4000:]
    assert f"127.0.0.1:{cluster['redis'].port}" in log and "unreachable" in log, log[-4000:]
    assert PASSWORD not in log
    assert not [p for p in (root / "celery").rglob("*") if ".tmp" in p.name]
    for parquet in (root / "celery").rglob("*.parquet"):
        pd.read_parquet(parquet)
    assert_no_secret(cluster)
    print(f"\nkilled worker: run SUCCESS {recovered_s:.1f}s after the kill, {time.monotonic() - t0:.1f}s in all "
          f"(load {os.getloadavg()[0]:.1f})")


def assert_no_secret(cluster: dict) -> None:
    root, instance = cluster["root"], cluster["instance"]
    texts = {p.name: p.read_text(errors="replace") for p in root.glob("*.log")}
    for asset in ("mc_trial_shards", "embedding_shards"):
        texts[asset] = json.dumps([meta(e) for e in materializations(instance, asset)], default=str)
    for name, text in texts.items():
        assert PASSWORD not in text and API_KEY not in text and cluster["pg"].password not in text, name
