"""What a user waits for at the command line: `causal-assets --help`, `search` (BM25 and dense, default corpus) and
`ask` (a new question, then the same again), each end to end as a subprocess, with the load average; and the import
of the code location (`causal_assets.definitions`), which every Dagster process pays first.

    python benchmarks/cli_timings.py [--quick] [--out DIR]
    python benchmarks/cli_timings.py --busy 3 --compare-with /path/to/other/checkout --no-ask

Every figure is the median of repeated runs. `ask` needs the default corpus built and the local LLM: "cold" is a
question the call cache has not seen, "warm" the same again. `--busy N` runs N CPU-bound loops beside the
measurement; `--compare-with DIR` times another checkout's CLI on the same data, run for run alternating, so the
ratio comes from one run under one load. `--quick`: 2 runs each, no `ask`, and the first 300 chunks of the default
corpus indexed in a temporary directory (the base path of every command), so nothing needs to be built first.
Writes data/benchmarks/cli_timings[_quick].json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import ROOT, Figure, busy_loops, load_average, quick_base, run_script

PY = sys.executable
ENV: dict[str, str] = {}   # set for every command timed (--quick: the temporary base path)
HELP_TARGET_S = 1.0
BM25_TARGET_S = 2.0


def _timed(python_args: list[str], what: str, timeout: float, tree: Path) -> tuple[float, subprocess.CompletedProcess,
                                                                                  list[float]]:
    """`python -P <python_args>` as a new process: the code of `tree` (`-P`: the working directory is not put on
    sys.path, so PYTHONPATH decides), the data of this checkout; (seconds, the process, the load average before)."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(tree)}
    env.setdefault("DAGSTER_HOME", str(ROOT / "data" / "dagster_home"))
    load = load_average()
    t0 = time.perf_counter()
    done = subprocess.run([PY, "-P", *python_args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds, done, load


def timed(args: list[str], timeout: float = 900, tree: Path = ROOT) -> tuple[float, subprocess.CompletedProcess,
                                                                           list[float]]:
    """One CLI command as a new process, with the code of `tree`."""
    return _timed(["-m", "causal_assets.cli", *args], f"causal-assets {' '.join(args)}", timeout, tree)


def timed_import(module: str, tree: Path = ROOT) -> tuple[float, subprocess.CompletedProcess, list[float]]:
    """`import module` in a new process, with the code of `tree`."""
    return _timed(["-c", f"import {module}"], f"import {module}", 300, tree)


def summary(runs: list) -> dict:
    secs = [round(s, 3) for s, _, _ in runs]
    return {"seconds": secs, "median_s": round(statistics.median(secs), 3), "load_average": [l for _, _, l in runs],
            "stderr_lines": len(runs[-1][1].stderr.strip().splitlines())}


def series(args: list[str], repeats: int, other: Path | None, run=timed) -> dict:
    """`repeats` runs of this checkout's CLI (or of `run`); with `other`, each followed by one of the other
    checkout's."""
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(run(args))
        if other is not None:
            theirs.append(run(args, tree=other))
    out = summary(ours)
    if other is not None:
        out["compared"] = {"tree": str(other), **summary(theirs),
                           "ratio_of_medians": round(out["median_s"] / statistics.median(s for s, _, _ in theirs), 3)}
    return out


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound loops to run beside the measurement")
    ap.add_argument("--compare-with", type=Path, help="another checkout whose CLI is timed alternately with this one")
    ap.add_argument("--no-ask", action="store_true", help="leave out `ask` (LLM server start and calls)")


def run(quick: bool, args: argparse.Namespace) -> tuple[list[Figure], dict]:
    with busy_loops(args.busy):
        figures, details = measure(quick, args)
    details["busy_loops"] = args.busy
    return figures, details


def measure(quick: bool, args: argparse.Namespace) -> tuple[list[Figure], dict]:
    n = 2 if quick else 5
    if quick:
        ENV["CAUSAL_ASSETS_BASE_PATH"] = str(quick_base({"default": 300}))
    other = args.compare_with.resolve() if args.compare_with else None
    search = ["search", "shortest path between two nodes", "--corpus", "default", "-k", "5"]
    details = {
        "help": series(["--help"], n, other),
        "search_bm25": series(search, n, other),
        "search_dense": series([*search, "--method", "dense"], max(2, n - 2), other),
        "code_location": series("causal_assets.definitions", n, other, run=timed_import),
    }
    figures = [
        Figure("causal-assets --help, median", details["help"]["median_s"], "s", HELP_TARGET_S, "<="),
        Figure("search bm25 (default corpus, end to end), median", details["search_bm25"]["median_s"], "s",
               BM25_TARGET_S, "<="),
        Figure("search dense (default corpus, end to end), median", details["search_dense"]["median_s"], "s"),
        Figure("import causal_assets.definitions (a new process), median", details["code_location"]["median_s"],
               "s"),
    ]
    for name in ("help", "search_bm25", "search_dense", "code_location") if other is not None else ():
        figures.append(Figure(f"{name}: this checkout / {other.name}, ratio of medians",
                              details[name]["compared"]["ratio_of_medians"], "x"))
    if args.no_ask or quick:
        return figures, details
    question = f"Which networkx function returns the shortest path between two nodes? ({uuid.uuid4().hex[:6]})"
    ask = ["ask", question, "--corpus", "default"]
    cold_s, cold, cold_load = timed(ask)
    warm_s, warm, warm_load = timed(ask)
    details["ask"] = {"question": question, "cold_s": round(cold_s, 1), "warm_s": round(warm_s, 1),
                      "load_average": {"cold": cold_load, "warm": warm_load}, "answer": cold.stdout[-1500:]}
    figures += [
        Figure("ask, cold (new question; server start + 2 LLM stages)", details["ask"]["cold_s"], "s"),
        Figure("ask, warm (same question; LLM calls from the cache)", details["ask"]["warm_s"], "s"),
    ]
    return figures, details


if __name__ == "__main__":
    run_script("cli_timings", run, __doc__, options)
