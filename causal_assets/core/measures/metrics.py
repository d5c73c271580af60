"""Retrieval metrics (nDCG, MAP, MRR, recall, precision, hit rate at k) computed by ranx, with graded and fractional
labels (the benchmark's judgements or the Monte Carlo effect sizes) kept.

ranx counts a document as relevant only at label >= 1, so a delta-P label of 0.35 would silently be non-relevant.
So ranx gets two prepared label sets: for the binary metrics a document is relevant (1) when its label is > 0 and
>= `relevance_threshold`; for nDCG every positive label is divided by the smallest one, which leaves nDCG with
linear gains unchanged. The ranking is fixed first (score, then doc id descending: trec_eval's tie-break), so
results are deterministic and match trec_eval. Query-set rules and cutoffs: docs/pipeline.md ("Evaluation").
"""
from __future__ import annotations

import logging
from typing import Iterable

import numpy as np
import pandas as pd

Qrels = dict[str, dict[str, float]]  # query_id -> chunk_id -> relevance label (graded or fractional)
Run = dict[str, dict[str, float]]  # query_id -> chunk_id -> retrieval score

DEFAULT_KS = (1, 3, 5, 10, 100)
BINARY_METRICS = ("recall", "hit_rate", "precision", "mrr")
NO_CUTOFF = 0

log = logging.getLogger(__name__)


def is_relevant(label: float, relevance_threshold: float = 0.0) -> bool:
    """Binary relevance used by every binary metric and by the failure analysis."""
    return label > 0 and label >= relevance_threshold


def ranked(docs: dict[str, float]) -> list[str]:
    """Doc ids best first: score descending, ties broken by doc id descending (as trec_eval)."""
    return [d for d, _ in sorted(docs.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def evaluate_per_query(
    qrels: Qrels,
    run: Run,
    ks: Iterable[int] = DEFAULT_KS,
    relevance_threshold: float = 0.0,
    map_k: int = 10,
) -> pd.DataFrame:
    """One row per (query_id, metric, k). See the module docstring for conventions and `attrs`."""
    qids, scores, attrs = _score(qrels, run, ks, relevance_threshold, map_k)
    n = len(qids)
    df = pd.DataFrame({
        "query_id": np.tile(np.asarray(qids, dtype=object), len(scores)),
        "metric": np.repeat([m for m, _ in scores], n),
        "k": np.repeat([k for _, k in scores], n).astype(int),
        "value": np.concatenate(list(scores.values())) if scores else np.array([]),
    })
    df.attrs.update(attrs)
    return df


def evaluate(
    qrels: Qrels,
    run: Run,
    ks: Iterable[int] = DEFAULT_KS,
    relevance_threshold: float = 0.0,
    map_k: int = 10,
) -> pd.DataFrame:
    """Mean over evaluated queries, one row per (metric, k); `attrs` as in `evaluate_per_query`."""
    _, scores, attrs = _score(qrels, run, ks, relevance_threshold, map_k)
    df = pd.DataFrame(
        [(m, k, float(v.mean()) if len(v) else float("nan")) for (m, k), v in scores.items()],
        columns=["metric", "k", "value"],
    )
    df["k"] = df["k"].astype(int)
    df.attrs.update(attrs)
    return df


def warm_up() -> None:
    """Compile or load ranx's numba kernels once, so the first real evaluation is not slowed (numba caches them
    beside the code: ~20 s on 2 cores the first time after an install, which `scripts/install` pays)."""
    evaluate({"q": {"a": 1.0, "b": 0.5}}, {"q": {"a": 1.0, "c": 0.5}})


def _score(qrels, run, ks, relevance_threshold, map_k):
    """Per-query score arrays keyed by (metric, k), aligned with the returned query ids."""
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1 or map_k < 1:
        raise ValueError(f"cutoffs must be positive integers, got ks={ks}, map_k={map_k}")

    binary, graded, qids, dropped = [], [], [], []
    for qid, labels in qrels.items():
        rel = {d: 1.0 for d, v in labels.items() if is_relevant(v, relevance_threshold)}
        if not rel:
            dropped.append(qid)
            continue
        qids.append(qid)
        binary.append(rel)
        graded.append({d: float(v) for d, v in labels.items() if v > 0})
    attrs = {
        "n_queries": len(qids),
        "n_dropped_no_relevant": len(dropped),
        "dropped_query_ids": dropped,
        "n_missing_from_run": sum(q not in run for q in qids),
        "relevance_threshold": relevance_threshold,
    }
    if dropped:
        log.warning("dropped %d of %d qrels queries with no relevant document",
                    len(dropped), len(qrels))

    binary_metrics = [f"{m}@{k}" for m in BINARY_METRICS for k in ks] + ["mrr", f"map@{map_k}"]
    # full-list ndcg also keeps this list at >= 2 metrics: ranx.evaluate(return_mean=False) raises
    # KeyError for a single metric (ranx 0.3.21)
    ndcg_metrics = [f"ndcg@{k}" for k in ks] + ["ndcg"]
    if not qids:
        return qids, {_key(m): np.array([]) for m in binary_metrics + ndcg_metrics}, attrs

    min_gain = min(v for g in graded for v in g.values())
    graded = [{d: v / min_gain for d, v in g.items()} for g in graded]
    # Imported here: ranx loads scipy.stats and matplotlib (~1.7 s) and the ranking kernel numba (~0.35 s), which
    # every Dagster step process would pay on loading the code location, most of them without evaluating anything.
    import ranx

    from causal_assets.core.measures.ranking_kernel import NUMBA_THREADS, typed_lists

    runs = [run.get(q, {}) for q in qids]
    run_l, qrels_b, qrels_g = typed_lists(runs, binary, graded)

    scores = {}
    for metrics, labels in ((binary_metrics, qrels_b), (ndcg_metrics, qrels_g)):
        # ranx pins numba to one thread for tiny inputs and never resets it; ask for all threads.
        out = ranx.evaluate(labels, run_l, metrics, return_mean=False,
                            threads=NUMBA_THREADS)
        scores.update({_key(m): np.asarray(v, dtype=float) for m, v in out.items()})
    return qids, scores, attrs


def _key(ranx_metric: str) -> tuple[str, int]:
    name, _, k = ranx_metric.partition("@")
    return name, int(k) if k else NO_CUTOFF


def parse_metric(name: str) -> tuple[str, int]:
    """'ndcg@10' -> ('ndcg', 10)."""
    metric, _, k = name.partition("@")
    if not metric or not k.isdigit():
        raise ValueError(f"metric {name!r}: expected name@k, e.g. ndcg@10 or map@10")
    return metric, int(k)


def named_metric(qrels, run, name: str) -> float:
    """One metric of a run, by name ('ndcg@10', 'map@10', ...), averaged over the judged queries."""
    metric, k = parse_metric(name)
    m = evaluate(qrels, run, ks=(k,), map_k=k)
    return float(m[(m.metric == metric) & (m.k == k)]["value"].iloc[0])


def named_metric_per_query(qrels, run, name: str) -> dict[str, float]:
    """One metric of a run, by name, per judged query (their mean is `named_metric`)."""
    metric, k = parse_metric(name)
    m = evaluate_per_query(qrels, run, ks=(k,), map_k=k)
    m = m[(m.metric == metric) & (m.k == k)]
    return dict(zip(m["query_id"].astype(str), m["value"].astype(float)))
