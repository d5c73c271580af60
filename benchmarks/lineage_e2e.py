"""The default lineage end to end, cold and then warm, with the time of every asset step and the Monte Carlo cost.

    python benchmarks/lineage_e2e.py [--keep] [--busy N]

Runs the README's quick-start job exactly as a user would, in a fresh temporary directory with its own
DAGSTER_HOME, base path, catalog and LLM call cache, so the first run is cold and nothing of data/ is touched; then
the same job again, where every embedding and solver call must come from the caches. Per run: the command's wall
time (imports and the local LLM server included), each step's duration from the event log, and from
`solver_calls` the calls per question, cached share and the labelling step's time per question. `--busy N` runs N
CPU-bound loops beside both runs. Writes data/benchmarks/lineage_e2e.json (`lineage_e2e_busyN.json` with --busy).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from common import OUT_DIR, ROOT, Figure, busy_loops, load_average, machine, write_result

TARGET_COLD_S = 600.0
TARGET_CACHE_HIT = 1.0
COMMAND = [str(ROOT / ".venv" / "bin" / "dagster"), "job", "execute", "-m", "causal_assets.definitions",
           "-j", "default_lineage_job", "--tags", '{"dagster/partition": "default"}']


def step_stats(home: Path) -> list[dict]:
    """Per run (oldest first): run id, status and each step's duration from the instance's event log."""
    from dagster import DagsterEventType, DagsterInstance

    instance = DagsterInstance.from_config(str(home))
    out = []
    for run in reversed(instance.get_runs()):
        steps = {}
        for s in instance.get_run_step_stats(run.run_id):
            if s.start_time and s.end_time:
                steps[s.step_key] = round(s.end_time - s.start_time, 2)
        stats = instance.get_run_stats(run.run_id)
        threads = [e.asset_materialization.metadata["llama_threads"].value
                   for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
                   if e.asset_materialization.asset_key.path[-1] == "mc_trials"
                   and "llama_threads" in e.asset_materialization.metadata]
        out.append({"run_id": run.run_id, "status": run.status.value, "steps_s": steps,
                    "run_s": round((stats.end_time or 0) - (stats.start_time or 0), 2),
                    "llama_threads": threads[0] if threads else None})
    instance.dispose()
    return out


def solver_summary(base: Path, mc_step_s: float | None) -> dict:
    import pandas as pd

    path = base / "solver_calls" / "default.parquet"
    if not path.exists():
        return {}
    calls = pd.read_parquet(path)
    ok = calls[calls["status"] == "ok"]
    questions = int(calls["query_id"].nunique())
    out = {"calls": len(calls), "ok_calls": len(ok), "errored_calls": int((calls["status"] != "ok").sum()),
           "questions": questions, "calls_per_question": round(len(calls) / max(questions, 1), 2),
           "cache_hits": int(ok["cached"].sum()), "cache_hit_rate": float(ok["cached"].mean()) if len(ok) else None,
           "median_uncached_latency_s": float(ok.loc[~ok["cached"], "latency_s"].median())
           if (~ok["cached"]).any() else None,
           "prompt_tokens": int(pd.to_numeric(ok["prompt_tokens"], errors="coerce").fillna(0).sum()),
           "completion_tokens": int(pd.to_numeric(ok["completion_tokens"], errors="coerce").fillna(0).sum())}
    if mc_step_s is not None and questions:
        out["mc_step_s_per_question"] = round(mc_step_s / questions, 2)
    return out


def run_once(env: dict, log: Path, timeout_s: float) -> tuple[float, int | None]:
    """Wall seconds and return code; past `timeout_s` the run's whole process group is stopped (return code None)
    and what it finished is still read from the event log."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.Popen(COMMAND, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = None
    return time.perf_counter() - t0, rc


def llm_calls_journalled(cache: Path) -> int | None:
    import sqlite3

    if not cache.exists():
        return None
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as con:
        return int(con.execute("select count(*) from llm_calls").fetchone()[0])


def run(keep: bool, timeout_s: float, existing: Path | None = None) -> tuple[list[Figure], dict]:
    tmp = existing or Path(tempfile.mkdtemp(prefix="lineage_e2e_"))
    home, base = tmp / "dagster_home", tmp / "parquet"
    home.mkdir(exist_ok=existing is not None)
    env = {**os.environ, "DAGSTER_HOME": str(home), "CAUSAL_ASSETS_BASE_PATH": str(base),
           "CAUSAL_ASSETS_CATALOG": str(tmp / "causal_assets.duckdb"),
           "CAUSAL_ASSETS_LLM_CACHE": str(tmp / "llm_calls.sqlite"), "CAUSAL_ASSETS_REPORTS": str(tmp / "reports"),
           "CAUSAL_ASSETS_QUERIES": str(tmp / "queries")}
    logs = OUT_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    details: dict = {"command": " ".join(COMMAND[:-1]) + " '" + COMMAND[-1] + "'", "tmp": str(tmp), "runs": {}}
    if existing is not None:
        return from_instance(tmp, home, base, details)
    for name in ("cold", "warm"):
        load_before = load_average()
        if existing is not None:  # an interrupted run's instance: read what it finished, run nothing
            seconds, rc = None, None
        else:
            seconds, rc = run_once(env, logs / f"lineage_e2e_{name}.log", timeout_s)
        stats = step_stats(home)[-1]
        mc_step = next((v for k, v in stats["steps_s"].items() if k.startswith("mc_trials")), None)
        details["runs"][name] = {"wall_s": None if seconds is None else round(seconds, 1), "returncode": rc,
                                 "load_before": load_before, "load_after": load_average(), **stats,
                                 "solver": solver_summary(base, mc_step),
                                 "llm_calls_journalled": llm_calls_journalled(tmp / "llm_calls.sqlite")}
        if rc is None:
            details["runs"][name]["incomplete"] = (f"stopped after {timeout_s:.0f} s" if existing is None else
                                                   f"read from the interrupted run in {tmp}")
        print(f"{name}: {seconds} s, rc {rc}, status {stats['status']}", flush=True)
        for step, s in sorted(stats["steps_s"].items(), key=lambda kv: -kv[1]):
            print(f"   {step:40s} {s:8.1f} s", flush=True)
        print(f"   llama.cpp threads in mc_trials: {stats['llama_threads']}", flush=True)
        if rc != 0:
            break
    if not keep and existing is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures_of(details)


def from_instance(tmp: Path, home: Path, base: Path, details: dict) -> tuple[list[Figure], dict]:
    """Report runs made earlier in `tmp` (same layout: dagster_home, parquet, llm_calls.sqlite), e.g. by someone
    else or interrupted: the first run is the cold one, the second the warm one; wall time is the run's span in the
    event log (process start-up excluded). The solver table holds the latest run's calls."""
    runs = step_stats(home)
    details["source"] = f"runs read from {tmp} (not started by this script)"
    questions = None
    for i, (name, stats) in enumerate(zip(("cold", "warm"), runs[:2])):
        mc_step = next((v for k, v in stats["steps_s"].items() if k.startswith("mc_trials")), None)
        solver = solver_summary(base, mc_step) if i == len(runs[:2]) - 1 else {}
        questions = questions or solver.get("questions")
        details["runs"][name] = {"wall_s": stats["run_s"], "returncode": 0 if stats["status"] == "SUCCESS" else None,
                                 "load_before": None, "load_after": None, **stats, "solver": solver,
                                 "llm_calls_journalled": llm_calls_journalled(tmp / "llm_calls.sqlite")}
        if stats["status"] != "SUCCESS":
            details["runs"][name]["incomplete"] = f"run status {stats['status']} in {tmp}"
    cold = details["runs"].get("cold")
    if cold and not cold["solver"] and cold["llm_calls_journalled"]:  # the cold run paid every journalled call
        mc_step = next((v for k, v in cold["steps_s"].items() if k.startswith("mc_trials")), None)
        q = details["runs"].get("warm", {}).get("solver", {}).get("questions")
        cold["solver"] = {"calls": cold["llm_calls_journalled"], "questions": q,
                          "calls_per_question": round(cold["llm_calls_journalled"] / q, 2) if q else None,
                          "mc_step_s_per_question": round(mc_step / q, 1) if q and mc_step else None}
    return figures_of(details)


def figures_of(details: dict) -> tuple[list[Figure], dict]:
    cold, warm = details["runs"]["cold"], details["runs"].get("warm", {})
    top = sorted(cold["steps_s"].items(), key=lambda kv: -kv[1])[:4]
    solver = cold.get("solver", {})
    figures = [
        Figure("default lineage end to end, cold (fresh instance, storage and caches; 2 cores)",
               cold["wall_s"] if cold["returncode"] == 0 else None, "s", TARGET_COLD_S, "<=",
               ("NOT COMPLETED (" + cold["incomplete"] + f", {cold['llm_calls_journalled']} solver calls made); "
                if cold.get("incomplete") else "") +
               "slowest steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in top) +
               (f"; load {cold['load_before']} -> {cold['load_after']}" if cold["load_before"] else
                f"; {details.get('source', '')}")),
        Figure("default lineage re-run (warm: caches filled)", warm.get("wall_s"), "s",
               note=f"run status {warm.get('status')}"),
        Figure("MC solver calls per question (default benchmark, adaptive estimator)",
               solver.get("calls_per_question"), "calls",
               note=f"{solver.get('calls')} calls for {solver.get('questions')} questions"),
        Figure("MC wall time per question with the local server (mc_trials step / questions)",
               solver.get("mc_step_s_per_question"), "s",
               note=f"median uncached call {solver.get('median_uncached_latency_s')} s"),
        Figure("solver-call cache hits on the repeated run", warm.get("solver", {}).get("cache_hit_rate"), "share",
               TARGET_CACHE_HIT, ">=", f"{warm.get('solver', {}).get('cache_hits')} of "
                                       f"{warm.get('solver', {}).get('ok_calls')} calls"),
    ]
    return figures, details


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the JSON (default data/benchmarks)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a run is stopped (default 1800)")
    ap.add_argument("--from-instance", type=Path,
                    help="report an earlier, interrupted run from its temporary directory instead of running")
    ap.add_argument("--busy", type=int, default=0,
                    help="CPU-bound loops beside the runs (the time on a busy machine); JSON: lineage_e2e_busyN.json")
    args = ap.parse_args()
    with busy_loops(args.busy):
        started = machine()
        figures, details = run(args.keep, args.timeout, args.from_instance)
    details["busy_loops"] = args.busy
    write_result(f"lineage_e2e{f'_busy{args.busy}' if args.busy else ''}", figures, details, started, False, args.out)


if __name__ == "__main__":
    main()
