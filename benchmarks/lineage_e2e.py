"""The default lineage end to end, cold and then warm, with the time of every asset step and the Monte Carlo cost.

    python benchmarks/lineage_e2e.py [--keep]

Runs the README's quick-start job exactly as a user would (`dagster job execute -m causal_assets.definitions -j
default_lineage_job --tags '{"dagster/partition": "default"}'`), in a fresh temporary directory: its own
DAGSTER_HOME, CAUSAL_ASSETS_BASE_PATH (so the embedding cache is empty too), CAUSAL_ASSETS_CATALOG and
CAUSAL_ASSETS_LLM_CACHE (and reports, queries), so the first run is cold and nothing of data/ is touched. Then the same job again: every
chunk embedding and every solver call must come from the caches (100% hits).

Per run: wall time of the command (process start to exit, Python imports and the local LLM server included) and
each step's duration from the Dagster event log (`get_run_step_stats`). From the `solver_calls` table: solver calls
per question, cached share, and the Monte Carlo step's wall time per question with the local server.
Writes data/benchmarks/lineage_e2e.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import OUT_DIR, ROOT, Figure, load_average, machine, write_result

TARGET_COLD_S = 600.0
TARGET_CACHE_HIT = 1.0
COMMAND = [str(ROOT / ".venv" / "bin" / "dagster"), "job", "execute", "-m", "causal_assets.definitions",
           "-j", "default_lineage_job", "--tags", '{"dagster/partition": "default"}']


def step_stats(home: Path) -> list[dict]:
    """Per run (oldest first): run id, status and each step's duration from the instance's event log."""
    from dagster import DagsterInstance

    instance = DagsterInstance.from_config(str(home))
    out = []
    for run in reversed(instance.get_runs()):
        steps = {}
        for s in instance.get_run_step_stats(run.run_id):
            if s.start_time and s.end_time:
                steps[s.step_key] = round(s.end_time - s.start_time, 2)
        stats = instance.get_run_stats(run.run_id)
        out.append({"run_id": run.run_id, "status": run.status.value, "steps_s": steps,
                    "run_s": round((stats.end_time or 0) - (stats.start_time or 0), 2)})
    instance.dispose()
    return out


def solver_summary(base: Path, mc_step_s: float | None) -> dict:
    import pandas as pd

    path = base / "solver_calls" / "default.parquet"
    if not path.exists():
        return {}
    calls = pd.read_parquet(path)
    ok = calls[calls["status"] == "ok"]
    questions = int(calls["question_id"].nunique())
    out = {"calls": len(calls), "ok_calls": len(ok), "errored_calls": int((calls["status"] != "ok").sum()),
           "questions": questions, "calls_per_question": round(len(calls) / max(questions, 1), 2),
           "cache_hits": int(ok["cached"].sum()), "cache_hit_rate": float(ok["cached"].mean()) if len(ok) else None,
           "median_uncached_latency_s": float(ok.loc[~ok["cached"], "latency_s"].median())
           if (~ok["cached"]).any() else None,
           "prompt_tokens": int(ok["prompt_tokens"].fillna(0).sum()),
           "completion_tokens": int(ok["completion_tokens"].fillna(0).sum())}
    if mc_step_s is not None and questions:
        out["mc_step_s_per_question"] = round(mc_step_s / questions, 2)
    return out


def run_once(env: dict, log: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(COMMAND, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    return time.perf_counter() - t0, rc


def run(keep: bool) -> tuple[list[Figure], dict]:
    tmp = Path(tempfile.mkdtemp(prefix="lineage_e2e_"))
    home, base = tmp / "dagster_home", tmp / "parquet"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "CAUSAL_ASSETS_BASE_PATH": str(base),
           "CAUSAL_ASSETS_CATALOG": str(tmp / "causal_assets.duckdb"),
           "CAUSAL_ASSETS_LLM_CACHE": str(tmp / "llm_calls.sqlite"), "CAUSAL_ASSETS_REPORTS": str(tmp / "reports"),
           "CAUSAL_ASSETS_QUERIES": str(tmp / "queries")}
    logs = OUT_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    details: dict = {"command": " ".join(COMMAND[:-1]) + " '" + COMMAND[-1] + "'", "tmp": str(tmp), "runs": {}}
    for name in ("cold", "warm"):
        load_before = load_average()
        seconds, rc = run_once(env, logs / f"lineage_e2e_{name}.log")
        stats = step_stats(home)[-1]
        mc_step = next((v for k, v in stats["steps_s"].items() if k.startswith("mc_trials")), None)
        details["runs"][name] = {"wall_s": round(seconds, 1), "returncode": rc, "load_before": load_before,
                                 "load_after": load_average(), **stats, "solver": solver_summary(base, mc_step)}
        print(f"{name}: {seconds:.1f} s, rc {rc}, status {stats['status']}", flush=True)
        for step, s in sorted(stats["steps_s"].items(), key=lambda kv: -kv[1]):
            print(f"   {step:40s} {s:8.1f} s", flush=True)
        if rc != 0:
            break
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    cold, warm = details["runs"]["cold"], details["runs"].get("warm", {})
    top = sorted(cold["steps_s"].items(), key=lambda kv: -kv[1])[:4]
    solver = cold.get("solver", {})
    figures = [
        Figure("default lineage end to end, cold (fresh instance, storage and caches; 2 cores)",
               cold["wall_s"] if cold["returncode"] == 0 else None, "s", TARGET_COLD_S, "<=",
               "slowest steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in top) +
               f"; load {cold['load_before']} -> {cold['load_after']}"),
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
    args = ap.parse_args()
    started = machine()
    figures, details = run(args.keep)
    write_result("lineage_e2e", figures, details, started, False)


if __name__ == "__main__":
    main()
