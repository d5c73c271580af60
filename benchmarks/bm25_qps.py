"""BM25 queries per second on SciFact (5,183 chunks, all 1,109 queries), the project's index vs the bm25s library.

    python benchmarks/bm25_qps.py [--quick] [--out DIR]

Like for like: query text in, top-10 chunk positions and scores out, tokenisation included on both sides, one
thread each. bm25s runs its fastest configuration (numba backend for scoring and selection, `n_threads=0`, i.e.
one thread), indexed with the same Lucene BM25 parameters; ours is `SparseIndex.top_k_many` over the analyzer's
terms. The two are timed alternately (the order flipped every round), round after round, and the figure is the median of the per-round ratios,
so a change in machine load hits both. Also reported: the public API (`CorpusIndex.search_many`, which adds `Hit`
objects with ids and titles) and how far the two top 10s agree (their analyzers differ slightly).
`--quick`: the first 1,000 abstracts indexed in a temporary directory, 200 queries, 7 rounds. Writes
data/benchmarks/bm25_qps[_quick].json.
"""
from __future__ import annotations

import time

import bm25s
import numpy as np
import Stemmer
from common import PARQUET, Figure, quick_base, run_script

from causal_assets.core.registry.benchmarks import load_benchmark_registry
from causal_assets.core.corpus.beir import load_beir_queries
from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.index.sparse import BM25_B, BM25_K1
from causal_assets.settings import Settings

SETTINGS = Settings.from_env()  # the variables the code location reads (causal_assets/settings.py)

TARGET_RATIO = 1.0


def run(quick: bool) -> tuple[list[Figure], dict]:
    spec = load_benchmark_registry(SETTINGS.benchmarks, SETTINGS.shared_data, SETTINGS.corpora)["scifact"]
    queries = list(load_beir_queries(spec.resolved_path).values())[: 200 if quick else None]
    rounds = 7 if quick else 21  # one round is ~0.1 s per side: many short rounds ride out load changes
    index = CorpusIndex.load(quick_base({"scifact": 1000}, dense=False) if quick else PARQUET, "scifact", dense=False)
    ours = index.sparse["bm25"]
    stemmer = Stemmer.Stemmer("english")
    reference = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene", backend="numba")
    reference.index(bm25s.tokenize(chunk_texts(index.chunks), stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)

    def run_ours():
        return ours.top_k_many([index.terms(q) for q in queries], 10)

    def run_bm25s():
        tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
        return reference.retrieve(tokens, k=10, show_progress=False, backend_selection="numba", n_threads=0)

    def run_api():
        return index.search_many(queries, 10, "bm25")

    timings: dict[str, list[float]] = {"ours": [], "bm25s": [], "api": []}
    for fn in (run_ours, run_bm25s, run_api):  # warm-up: numba compilation, caches
        fn()
    sides = (("ours", run_ours), ("bm25s", run_bm25s), ("api", run_api))
    for i in range(rounds):
        for name, fn in sides if i % 2 == 0 else sides[::-1]:  # alternate who goes first
            t0 = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - t0)
    qps = {name: [len(queries) / t for t in ts] for name, ts in timings.items()}
    ratios = [o / r for o, r in zip(qps["ours"], qps["bm25s"])]
    api_ratios = [o / r for o, r in zip(qps["api"], qps["bm25s"])]

    ours_top = run_ours().positions
    ref_top = run_bm25s()[0]
    overlap = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ours_top, ref_top)]))
    details = {"queries": len(queries), "chunks": len(index.ids), "rounds": rounds, "k": 10,
               "median_qps": {n: round(float(np.median(v)), 1) for n, v in qps.items()},
               "qps_by_round": {n: [round(x, 1) for x in v] for n, v in qps.items()},
               "ratio_by_round": [round(r, 3) for r in ratios],
               "api_ratio_by_round": [round(r, 3) for r in api_ratios],
               "top10_overlap_with_bm25s": round(overlap, 4),
               "bm25s_config": "backend=numba, backend_selection=numba, n_threads=0 (one thread)"}
    figures = [
        Figure("BM25 queries/s vs bm25s on SciFact (text -> top-10 positions and scores)",
               round(float(np.median(ratios)), 3), "x", TARGET_RATIO, ">=",
               f"ours {details['median_qps']['ours']:.0f} q/s, bm25s {details['median_qps']['bm25s']:.0f} q/s; "
               f"top-10 overlap {overlap:.3f}"),
        Figure("BM25 public API (CorpusIndex.search_many, Hit objects) vs bm25s", round(float(np.median(api_ratios)), 3),
               "x", note=f"{details['median_qps']['api']:.0f} q/s; the difference to the line above is building "
                         "Hit objects (id, title, kind), which bm25s does not do"),
    ]
    return figures, details


def main() -> None:
    run_script("bm25_qps", run, __doc__)


if __name__ == "__main__":
    main()
