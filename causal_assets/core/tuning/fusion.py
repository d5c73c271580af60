"""Parameter search on a train split. Here: the hybrid fusion weight, swept over precomputed score vectors
so each weight costs one top-k selection per query, not a new retrieval."""
from __future__ import annotations

import numpy as np
import pandas as pd

from causal_assets.core.registry.benchmarks import Benchmark
from causal_assets.core.measures.metrics import named_metric_per_query
from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.similarity import candidate_scores, fusion_weight_grid, zscore


def sweep_fusion_weight(index: CorpusIndex, bench: Benchmark, grid: list[float] | None = None,
                        metric: str = "ndcg", k: int = 10, sparse: str = "bm25", depth: int = 100,
                        within_stats: str = "corpus") -> pd.DataFrame:
    """nDCG@10 (or `metric@k`) of `weight * z(dense) + (1 - weight) * z(sparse)` for each weight in `grid`
    (`within_stats`: BM25 statistics inside each query's candidate set, `similarity.py`); `per_query`: the
    metric of each judged query."""
    grid = grid or fusion_weight_grid()
    qids = bench.query_ids()
    vectors = index.embedder.encode_queries([bench.queries[q] for q in qids])
    parts = []
    for q, qv in zip(qids, vectors):
        cand, s, d = candidate_scores(index, bench.queries[q], qv, sparse, bench.within[q] if bench.within else None,
                                      within_stats)
        parts.append((cand, zscore(s), zscore(d)))
    rows = []
    for w in grid:
        run = {}
        for q, (cand, s, d) in zip(qids, parts):
            fused = w * d + (1 - w) * s
            top = np.argsort(-fused, kind="stable")[:depth]
            run[q] = {str(index.ids[cand[i]]): float(depth - r) for r, i in enumerate(top)}
        per_query = named_metric_per_query(bench.qrels, run, f"{metric}@{k}")
        rows.append({"weight": w, "value": float(np.mean(list(per_query.values()))) if per_query else float("nan"),
                     "per_query": per_query})
    return pd.DataFrame(rows).assign(metric=f"{metric}@{k}", split=bench.split, within_stats=within_stats)


def best_weight(sweep: pd.DataFrame) -> float:
    # Ties go to the weight closest to 0.5: the least extreme choice.
    best = sweep["value"].max()
    tied = sweep[np.isclose(sweep["value"], best)]
    return float(tied.iloc[(tied["weight"] - 0.5).abs().argsort().iloc[0]]["weight"])

