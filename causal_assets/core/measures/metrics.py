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
from itertools import chain, count
from typing import Iterable

import numba
import numpy as np
import pandas as pd
from numba.typed import List as TypedList

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
    runs = [run.get(q, {}) for q in qids]
    run_l, qrels_b, qrels_g = _typed_lists(runs, binary, graded)

    # Imported here: ranx loads scipy.stats and matplotlib (~1.7 s), which every Dagster step process would pay on
    # loading the code location, most of them without evaluating anything.
    import ranx

    scores = {}
    for metrics, labels in ((binary_metrics, qrels_b), (ndcg_metrics, qrels_g)):
        # ranx pins numba to one thread for tiny inputs and never resets it; ask for all threads.
        out = ranx.evaluate(labels, run_l, metrics, return_mean=False,
                            threads=numba.config.NUMBA_NUM_THREADS)
        scores.update({_key(m): np.asarray(v, dtype=float) for m, v in out.items()})
    return qids, scores, attrs


def _key(ranx_metric: str) -> tuple[str, int]:
    name, _, k = ranx_metric.partition("@")
    return name, int(k) if k else NO_CUTOFF


def _typed_lists(runs, binary, graded):
    """ranx's array input: per query an (n, 2) array [doc code, value], best first.

    Doc ids only need to match within a query, so each query numbers its own: judged documents 0..n-1, then each
    retrieved document not judged n + its position (exact dict matching, no hashing of ids into numbers). This is
    several times cheaper than one vocabulary over all queries (for 10k queries x 100 results, factorising a
    million ids dominated the evaluation). Doc ids also order equal values within a query (trec_eval breaks ties
    by doc id descending): only the ids that take part in a tie are sorted, into a tie-break rank.
    """
    codes: tuple[list[int], list[int], list[int]] = ([], [], [])
    for run_q, binary_q, graded_q in zip(runs, binary, graded):  # binary labels are a subset of graded ones
        judged = {d: i for i, d in enumerate(graded_q)}
        n = len(judged)
        codes[0].extend(map(judged.get, run_q, count(n)))  # judged code, else n + position (a C-level loop)
        codes[1].extend([judged[d] for d in binary_q])
        codes[2].extend(range(n))
    out = []
    for part, code in zip((runs, binary, graded), codes):
        offsets = np.zeros(len(part) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, part), np.int64, len(part)), out=offsets[1:])
        values = np.fromiter(chain.from_iterable(x.values() for x in part), np.float64, offsets[-1])
        order, tied = _by_value(values, offsets)
        tie_rank = np.zeros(len(values))
        if tied.any():
            ids = np.fromiter(chain.from_iterable(part), dtype=object, count=offsets[-1])
            # sorted rank of each tied id; equal ids (the same document in run and qrels) share it
            tie_rank[tied] = np.unique(ids[tied].astype(str), return_inverse=True)[1] + 1
        out.append(_best_first(np.asarray(code, dtype=np.float64), tie_rank, values, offsets, order))
    return out


@numba.njit(cache=True)
def _by_value(value, offsets):
    """Per query, row order by value descending (stable), and the mask of rows whose value another row of the
    same query shares (their order is still to be decided by doc id)."""
    order = np.empty(len(value), dtype=np.int64)
    tied = np.zeros(len(value), dtype=np.bool_)
    for q in range(len(offsets) - 1):
        lo, hi = offsets[q], offsets[q + 1]
        local = np.argsort(-value[lo:hi], kind="mergesort") + lo
        order[lo:hi] = local
        for i in range(1, len(local)):
            if value[local[i]] == value[local[i - 1]]:
                tied[local[i]] = True
                tied[local[i - 1]] = True
    return order, tied


@numba.njit(cache=True)
def _best_first(code, tie_rank, value, offsets, order):
    """Per query, rows [code, value] in `order` (value descending), each run of equal values re-ordered by
    tie-break rank descending (doc id descending).

    Done in numba because a global np.lexsort plus np.split and boxing 10k arrays into a typed
    list costs several times more.
    """
    out = TypedList()
    for q in range(len(offsets) - 1):
        lo, hi = offsets[q], offsets[q + 1]
        rows = np.empty((hi - lo, 2))
        i = lo
        while i < hi:
            j = i + 1
            while j < hi and value[order[j]] == value[order[i]]:
                j += 1
            run = order[i:j]
            if j - i > 1:
                run = run[np.argsort(-tie_rank[run], kind="mergesort")]
            for r in range(j - i):
                rows[i - lo + r, 0] = code[run[r]]
                rows[i - lo + r, 1] = value[run[r]]
            i = j
        out.append(rows)
    return out


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
