"""What a user waits for at the command line: `causal-assets --help`, `search` (BM25 and dense, default corpus) and
`ask` (first and second question of a process-fresh run), each end to end as a subprocess, with the load average.

    python benchmarks/cli_timings.py [--quick]

Every figure is the median of repeated runs (`--quick`: fewer). `ask` needs the default corpus built (README
command 1, or `causal-assets build default`) and the local LLM: "cold" is the first `ask` of a question (the LLM
call cache has nothing for it: the local server starts and both LLM stages run), "warm" the same question again
(its LLM calls come from the call cache; the server still starts, since each `ask` is its own process and run).
The first `ask` on a fresh data directory also builds the corpus; that build time is printed by `ask` itself
("built in ...") and is not part of these figures. Writes data/benchmarks/cli_timings.json.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid

from common import ROOT, Figure, load_average, run_script

PY = sys.executable
HELP_TARGET_S = 1.0
BM25_TARGET_S = 2.0


def timed(args: list[str], timeout: float = 900) -> tuple[float, subprocess.CompletedProcess, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("DAGSTER_HOME", str(ROOT / "data" / "dagster_home"))
    load = load_average()
    t0 = time.perf_counter()
    done = subprocess.run([PY, "-m", "causal_assets.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"causal-assets {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds, done, load


def series(args: list[str], repeats: int) -> dict:
    runs = [timed(args) for _ in range(repeats)]
    secs = [round(s, 3) for s, _, _ in runs]
    return {"seconds": secs, "median_s": round(statistics.median(secs), 3), "load_average": [l for _, _, l in runs],
            "stderr_lines": len(runs[-1][1].stderr.strip().splitlines())}


def run(quick: bool) -> tuple[list[Figure], dict]:
    n = 3 if quick else 5
    details = {
        "help": series(["--help"], n),
        "search_bm25": series(["search", "shortest path between two nodes", "--corpus", "default", "-k", "5"], n),
        "search_dense": series(["search", "shortest path between two nodes", "--corpus", "default", "-k", "5",
                                "--method", "dense"], max(2, n - 2)),
    }
    question = f"Which networkx function returns the shortest path between two nodes? ({uuid.uuid4().hex[:6]})"
    ask = ["ask", question, "--corpus", "default"]
    cold_s, cold, cold_load = timed(ask)
    warm_s, warm, warm_load = timed(ask)
    details["ask"] = {"question": question, "cold_s": round(cold_s, 1), "warm_s": round(warm_s, 1),
                      "load_average": {"cold": cold_load, "warm": warm_load}, "answer": cold.stdout[-1500:]}
    figures = [
        Figure("causal-assets --help, median", details["help"]["median_s"], "s", HELP_TARGET_S, "<="),
        Figure("search bm25 (default corpus, end to end), median", details["search_bm25"]["median_s"], "s",
               BM25_TARGET_S, "<="),
        Figure("search dense (default corpus, end to end), median", details["search_dense"]["median_s"], "s"),
        Figure("ask, cold (new question; server start + 2 LLM stages)", details["ask"]["cold_s"], "s"),
        Figure("ask, warm (same question; LLM calls from the cache)", details["ask"]["warm_s"], "s"),
    ]
    return figures, details


if __name__ == "__main__":
    run_script("cli_timings", run, __doc__)
