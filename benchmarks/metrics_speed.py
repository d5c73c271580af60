"""Evaluation speed: `evaluate()` (every default metric and cutoff) on 10,000 queries x 100 results.

    python benchmarks/metrics_speed.py [--quick]

The run and qrels are synthetic but shaped like real ones: doc ids drawn from a 1M-document collection (so the id
vocabulary is large, the expensive case), scores descending with ties in a tenth of the queries (the tie-break by
doc id must run), 1-5 judged documents per query with graded labels, some of them retrieved. Timed after one
warm-up (numba kernels load from their cache), median of repeats. Writes data/benchmarks/metrics_speed.json.
"""
from __future__ import annotations


import numpy as np
from common import Figure, repeat_wall_cpu, run_script

from causal_assets.core.measures.metrics import DEFAULT_KS, evaluate

TARGET_S = 1.0
COLLECTION = 1_000_000


def synthetic_case(n_queries: int, depth: int, seed: int = 0) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    run, qrels = {}, {}
    for q in range(n_queries):
        docs = rng.choice(COLLECTION, depth, replace=False)
        scores = np.sort(rng.random(depth))[::-1]
        if q % 10 == 0:
            scores = np.round(scores, 1)  # ties
        run[f"q{q}"] = {f"doc{d}": float(s) for d, s in zip(docs, scores)}
        judged = rng.integers(1, 6)
        hits = rng.choice(docs, min(judged, rng.integers(0, judged + 1)), replace=False)
        misses = rng.choice(COLLECTION, judged - len(hits), replace=False)
        qrels[f"q{q}"] = {f"doc{d}": float(rng.integers(1, 4)) for d in (*hits, *misses)}
    return qrels, run


def run(quick: bool) -> tuple[list[Figure], dict]:
    n_queries, depth, repeats = 10_000, 100, (2 if quick else 7)  # the full size is cheap: quick only repeats less
    qrels, run_ = synthetic_case(n_queries, depth)
    seconds, cpu = repeat_wall_cpu(lambda: evaluate(qrels, run_), repeats, warmup=1)
    median, cpu_median = float(np.median(seconds)), float(np.median(cpu))
    details = {"queries": n_queries, "results_per_query": depth, "ks": list(DEFAULT_KS), "repeats": repeats,
               "seconds": [round(s, 4) for s in seconds], "cpu_seconds": [round(s, 4) for s in cpu],
               "collection": COLLECTION}
    figures = [Figure(f"evaluate {n_queries:,} queries x {depth} results (all default metrics)", round(median, 3),
                      "s", TARGET_S, "<=", f"wall time; CPU time of the process {cpu_median:.3f} s")]
    return figures, details


def main() -> None:
    run_script("metrics_speed", run, __doc__)


if __name__ == "__main__":
    main()
