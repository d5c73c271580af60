"""Celery workers on this machine: labelling throughput with 1 and 2 workers, and the per-step overhead of the Celery
executor against the multiprocess one. Writes data/benchmarks/celery_workers.json (docs/scale-out.md, "Sizing").

    python benchmarks/celery_workers.py [--questions 8] [--workers 1 2] [--overhead-runs 3]

The set-up is tests/deploy/test_celery.py's (its throwaway Redis and PostgreSQL on 127.0.0.1, the shipped example's
questions, the packaged Gemma-3-270M in each worker). Throughput: the four `mc_trial_shards` of the questions launched
at once by `dagster asset materialize`, the `llm` pool one slot per worker (each worker holds its own solver), a fresh
call cache per worker count; questions a minute from the first launch to the last run's end. Overhead: runs of one
`embedding_shards` step whose chunks are all cached (a few milliseconds of work), warm workers; a run's span minus
its step's span, from the instance's events.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from dagster import DagsterEventType, DagsterInstance, materialize  # noqa: E402

from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary  # noqa: E402
from causal_assets.defs.graph import graph_nodes_and_edges  # noqa: E402
from causal_assets.defs.labels import candidate_pools  # noqa: E402
from causal_assets.resources import LLM, BenchmarkRegistry, CorpusRegistry, ParquetIOManagerFactory, Storage  # noqa: E402
from tests.deploy.services import Postgres, Redis  # noqa: E402  (the tests' throwaway services)
from tests.deploy.systemd_units import exec_start  # noqa: E402

BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "own-documents"
SHARDS = 4


def setup(root: Path, questions: int, models: Path) -> None:
    (root / "corpora.yaml").write_text(yaml.safe_dump({"corpora": [
        {"name": "default", "loader": "folder", "path": str(EXAMPLE / "docs")}]}))
    lines = (EXAMPLE / "questions.jsonl").read_text().splitlines()[:questions]
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n")
    (root / "benchmarks.yaml").write_text(yaml.safe_dump({"benchmarks": [
        {"name": "default", "loader": "questions", "corpus": "default", "path": str(root / "questions.jsonl"),
         "pooling": {"size": 3}, "monte_carlo": {"budget": 8}}]}))
    storage = Storage(base_path=str(root / "base"), catalog_path=None, reports_dir=str(root / "reports"))
    res = {"storage": storage, "io_manager": ParquetIOManagerFactory(storage=storage),
           "corpus_registry": CorpusRegistry(path=str(root / "corpora.yaml")),
           "benchmark_registry": BenchmarkRegistry(path=str(root / "benchmarks.yaml"), corpora=str(root / "corpora.yaml")),
           "llm": LLM(cache_path=str(root / "setup_calls.sqlite"), models_dir=str(models))}
    upstream = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges, candidate_pools]
    assert materialize(upstream, resources=res, partition_key="default").success


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def start_workers(n: int, env: dict, root: Path, redis: Redis) -> list[subprocess.Popen]:
    from celery import Celery

    workers = []
    for i in range(n):
        argv = exec_start("celery-worker", env, BIN)
        argv[argv.index("--"):argv.index("--")] = ["-n", f"w{i}"]
        workers.append(start(argv, env, root / f"w{i}-{n}.log"))
    app = Celery(broker=redis.url(0), backend=redis.url(1))
    while len(app.control.ping(timeout=1)) < n:
        time.sleep(1)
    return workers


def stop(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=60)


def run(env: dict, select: str, partition: str, log: Path) -> subprocess.Popen:
    return start([str(BIN / "dagster"), "asset", "materialize", "-m", "causal_assets.definitions", "--select", select,
                  "--partition", partition], env, log)


def spans(instance: DagsterInstance, run_id: str) -> tuple[float, float]:
    events = instance.all_logs(run_id)
    at = {}
    for e in events:
        if e.dagster_event is not None:
            at.setdefault(e.dagster_event.event_type, e.timestamp)
    run_s = at[DagsterEventType.RUN_SUCCESS] - at[DagsterEventType.RUN_START]
    step_s = at[DagsterEventType.STEP_SUCCESS] - at[DagsterEventType.STEP_START]
    return run_s, step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--overhead-runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "data" / "benchmarks" / "celery_workers.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="celery_workers_"))
    models = root / "models"
    setup(root, args.questions, models)
    redis, pg = Redis("bench-" + os.urandom(6).hex()), Postgres()
    result = {"questions": args.questions, "shards": SHARDS, "budget": 8, "pool_size": 3, "throughput": [],
              "overhead": {}}
    try:
        redis.start()
        pg.start()
        home = root / "home"
        home.mkdir()
        shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
        (root / "celery.yaml").write_text(yaml.safe_dump(
            {"execution": {"config": {"broker": redis.url(0), "backend": redis.url(1)}}}))
        os.environ.update(pg.env())
        base_env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    "CAUSAL_ASSETS_EXECUTOR": "celery", "CAUSAL_ASSETS_EXECUTOR_CONFIG": str(root / "celery.yaml"),
                    "CAUSAL_ASSETS_CORPORA": str(root / "corpora.yaml"),
                    "CAUSAL_ASSETS_BENCHMARKS": str(root / "benchmarks.yaml"),
                    "CAUSAL_ASSETS_BASE_PATH": str(root / "base"), "CAUSAL_ASSETS_CATALOG": "none",
                    "CAUSAL_ASSETS_REPORTS": str(root / "reports"), "CAUSAL_ASSETS_MODELS_DIR": str(models),
                    "CAUSAL_ASSETS_LABEL_SHARDS": str(SHARDS), "CAUSAL_ASSETS_EMBEDDING_SHARDS": "2"}
        with DagsterInstance.from_config(str(home)) as instance:
            for n in args.workers:
                env = {**base_env, "CAUSAL_ASSETS_LLM_CACHE": str(root / f"calls-{n}.sqlite")}
                subprocess.run([str(BIN / "dagster"), "instance", "concurrency", "set", "llm", str(n)], env=env,
                               check=True, capture_output=True)
                workers = start_workers(n, env, root, redis)
                try:
                    load0, t0 = os.getloadavg()[0], time.monotonic()
                    procs = [run(env, "mc_trial_shards", f"default|{s}", root / f"label-{n}-{s}.log")
                             for s in range(SHARDS)]
                    codes = [p.wait() for p in procs]
                    wall = time.monotonic() - t0
                    assert codes == [0] * SHARDS, codes
                    row = {"workers": n, "wall_s": round(wall, 1),
                           "questions_per_min": round(args.questions / wall * 60, 2),
                           "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}
                    result["throughput"].append(row)
                    print(row, flush=True)
                finally:
                    stop(workers)
            # Overhead: one warm worker, a cached embedding shard; then the multiprocess executor.
            env = {**base_env, "CAUSAL_ASSETS_LLM_CACHE": str(root / "calls-1.sqlite")}
            workers = start_workers(1, env, root, redis)
            try:
                for executor in ("celery", "multiprocess"):
                    env_x = {**env, "CAUSAL_ASSETS_EXECUTOR": executor}
                    overheads, loads = [], []
                    for i in range(args.overhead_runs + 1):   # the first run warms the worker (imports, model)
                        before = {r.run_id for r in instance.get_runs(limit=100)}
                        assert run(env_x, "embedding_shards", "default|0", root / f"over-{executor}-{i}.log").wait() == 0
                        [new] = [r.run_id for r in instance.get_runs(limit=100) if r.run_id not in before]
                        run_s, step_s = spans(instance, new)
                        if i:
                            overheads.append(run_s - step_s)
                            loads.append(os.getloadavg()[0])
                    result["overhead"][executor] = {"per_step_s": [round(o, 2) for o in overheads],
                                                    "load": [round(x, 2) for x in loads]}
                    print(executor, result["overhead"][executor], flush=True)
            finally:
                stop(workers)
    finally:
        redis.cleanup()
        pg.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
