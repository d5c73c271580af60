"""Agreement of Monte Carlo labels with a benchmark's gold, and of the "contains the answer" heuristic.

Input: one dict per labelled question with ``gold`` (positions of the gold candidates), ``effects`` (the effect size
each candidate is ranked by, `schemas.ranking_effect`) and ``labels``
(one per candidate, in pool order) and ``contains`` (whether each candidate contains an accepted answer).
Reported: precision / recall / F1 of the YES set (micro over all pairs), the UNCERTAIN share, and the ranking by
effect size -- top-2 precision, R-precision (top-|gold|) and per-question ROC AUC. Rankings with ties (the
heuristic is 0/1) are scored by their expectation over random tie-breaking, so ties earn nothing.
"""
from __future__ import annotations

import json
import math
from statistics import NormalDist
from typing import Container, Iterable, Sequence

import numpy as np
import pandas as pd

from causal_assets.core.labeling.validators import contains_answer
from causal_assets.core.foundation.schemas import ranking_effect

__all__ = ["label_quality_rows", "summarize", "expected_precision_at", "auc", "per_question_from_tables",
           "quality_table", "test_retest"]


def label_quality_rows(per_question: Iterable[dict]) -> list[dict]:
    rows = []
    for q in per_question:
        gold = set(q["gold"])
        for j, (effect, label) in enumerate(zip(q["effects"], q["labels"])):
            rows.append({"query_id": q["query_id"], "position": j, "gold": j in gold,
                         "effect": float(effect) if effect is not None and math.isfinite(effect) else float("nan"),
                         "label": label, "contains": bool(q["contains"][j]) if q.get("contains") else False})
    return rows


def expected_precision_at(scores: Sequence[float], gold: Sequence[bool], k: int) -> float:
    """Precision of the top ``k`` by score, in expectation over random order within tied scores (NaN lowest)."""
    s = np.array([v if math.isfinite(v) else -np.inf for v in scores], dtype=float)
    g = np.asarray(gold, dtype=float)
    k = min(k, len(s))
    if k == 0:
        return float("nan")
    hits, taken = 0.0, 0
    for v in sorted(set(s.tolist()), reverse=True):
        group = s == v
        n = int(group.sum())
        take = min(n, k - taken)
        hits += take * float(g[group].mean())
        taken += take
        if taken >= k:
            break
    return hits / k


def auc(scores: Sequence[float], gold: Sequence[bool]) -> float:
    """ROC AUC (ties count one half); NaN when a question has no gold or only gold."""
    s = np.array([v if math.isfinite(v) else -np.inf for v in scores], dtype=float)
    g = np.asarray(gold, dtype=bool)
    pos, neg = s[g], s[~g]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def _prf(pred: np.ndarray, gold: np.ndarray) -> dict:
    tp = int((pred & gold).sum())
    npred, ngold = int(pred.sum()), int(gold.sum())
    return {"precision": tp / npred if npred else float("nan"), "recall": tp / ngold if ngold else float("nan"),
            "f1": 2 * tp / (npred + ngold) if npred + ngold else float("nan"), "tp": tp, "predicted": npred,
            "gold": ngold}


def _ranking(rows: list[dict], col: str) -> dict:
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["query_id"], []).append(r)
    top2, rprec, aucs = [], [], []
    for items in by_q.values():
        items = sorted(items, key=lambda r: r["position"])
        scores = [float(r[col]) for r in items]
        gold = [r["gold"] for r in items]
        n_gold = sum(gold)
        if n_gold == 0:
            continue
        top2.append(expected_precision_at(scores, gold, 2))
        rprec.append(expected_precision_at(scores, gold, n_gold))
        a = auc(scores, gold)
        if math.isfinite(a):
            aucs.append(a)
    mean = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return {"top2_precision": mean(top2), "r_precision": mean(rprec), "auc": mean(aucs), "questions": len(top2)}


def summarize(rows: list[dict]) -> dict:
    """Label and ranking quality of the labels, and of the answer-containment heuristic on the same pairs."""
    if not rows:
        return {}
    gold = np.array([r["gold"] for r in rows], dtype=bool)
    labels = np.array([r["label"] for r in rows])
    contains = np.array([r["contains"] for r in rows], dtype=bool)
    return {"pairs": len(rows), "questions": len({r["query_id"] for r in rows}),
            "labels": {**_prf(labels == "YES", gold), "uncertain_share": float((labels == "UNCERTAIN").mean()),
                       "yes": int((labels == "YES").sum()), "no": int((labels == "NO").sum())},
            "ranking": _ranking(rows, "effect"),
            "containment": _prf(contains, gold),
            "containment_ranking": _ranking([{**r, "contains_score": float(r["contains"])} for r in rows],
                                            "contains_score")}


def per_question_from_tables(labels: pd.DataFrame, pools: pd.DataFrame, qrels: dict[str, dict[str, float]],
                             estimator: str, file_level: Container[str] = (),
                             file_of: dict[str, str] | None = None) -> list[dict]:
    """The input of :func:`summarize` from the stored tables: one estimator's labels, the pools (for the order
    and the text the solver saw) and the benchmark's gold judgements (relevant = grade > 0). A question of
    `file_level` (its qrels name files: `registry.gold`) is judged per file of its pool: a file is YES where one of
    its chunks is, NO where all are, its effect its best chunk's, and it contains the answer where a chunk does."""
    rows = labels[labels["estimator"] == estimator]
    rows = rows.assign(_rank_effect=ranking_effect(rows))
    out = []
    for qid, pool in pools.groupby("query_id", sort=False):
        lab = rows[rows["query_id"] == qid].set_index("chunk_id")
        if not len(lab):
            continue
        pool = pool.sort_values("position")
        docs = pool["chunk_id"].tolist()
        gold = {d for d, g in qrels.get(qid, {}).items() if g > 0}
        answers = [pool.iloc[0]["answer"], *json.loads(pool.iloc[0]["aliases"] or "[]")] \
            if isinstance(pool.iloc[0]["aliases"], str) else [pool.iloc[0]["answer"]]
        effects = [float(lab["_rank_effect"].get(d, float("nan"))) for d in docs]
        verdicts = [str(lab["label"].get(d, "UNCERTAIN")) for d in docs]
        contains = [contains_answer(t, answers) for t in pool["text"]]
        if qid in file_level:
            units = [(file_of or {}).get(d, d) for d in docs]
            docs, effects, verdicts, contains = _by_file(units, effects, verdicts, contains)
        out.append({"query_id": qid, "gold": [i for i, d in enumerate(docs) if d in gold],
                    "effects": effects, "labels": verdicts, "contains": contains})
    return out


def _by_file(units: list[str], effects: list[float], verdicts: list[str], contains: list[bool]):
    """Per distinct file of `units` (first-seen order): its best effect, its label and whether it contains the
    answer (`per_question_from_tables`)."""
    files = list(dict.fromkeys(units))
    at = {f: [i for i, u in enumerate(units) if u == f] for f in files}
    best = [max((effects[i] for i in at[f] if math.isfinite(effects[i])), default=float("nan")) for f in files]
    labels = ["YES" if any(verdicts[i] == "YES" for i in at[f]) else
              "NO" if all(verdicts[i] == "NO" for i in at[f]) else "UNCERTAIN" for f in files]
    return files, best, labels, [any(contains[i] for i in at[f]) for f in files]


def quality_table(summary: dict) -> pd.DataFrame:
    """summarize()'s figures as (source, metric, value) rows: the labels, the ranking by effect and the
    containment heuristic."""
    rows = []
    for source, key in (("labels", "labels"), ("effect_ranking", "ranking"), ("containment", "containment"),
                        ("containment_ranking", "containment_ranking")):
        for metric, value in summary.get(key, {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((source, metric, float(value)))
    return pd.DataFrame(rows, columns=["source", "metric", "value"])


def test_retest(first: pd.DataFrame, second: pd.DataFrame, level: float = 0.8) -> dict:
    """How far two labellings of the same questions agree on the (question, document) pairs judged in both (one
    estimator's `mc_labels` rows each, e.g. two pool draws and Monte Carlo seeds): Cohen's kappa on the pairs decided
    (YES or NO) in both, the YES<->NO flips among all shared pairs, and how often the two intervals overlap. Also two
    solvers' labels of the same pools; with `average_effect` in both, the mean per-question rank correlation of the
    effects. With `effect` in both: whether the intervals (at `level`) cover the change between the two runs: the
    effects' difference over its standard error read from the two intervals, its standard deviation (1 when they do)
    and the share beyond ±1.645 (0.10 when they do)."""
    keys = ["query_id", "chunk_id"]
    cols = keys + ["label", "ci_low", "ci_high"] + [c for c in ("average_effect", "effect")
                                                    if c in first and c in second]
    both = first[cols].merge(second[cols], on=keys, suffixes=("_a", "_b"))
    decided = both[both["label_a"].isin(["YES", "NO"]) & both["label_b"].isin(["YES", "NO"])]
    a, b = (decided["label_a"] == "YES").to_numpy(), (decided["label_b"] == "YES").to_numpy()
    observed = float((a == b).mean()) if len(decided) else float("nan")
    chance = float(a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())) if len(decided) else float("nan")
    kappa = (observed - chance) / (1 - chance) if len(decided) and chance < 1 else float("nan")
    flips = int((a != b).sum())
    overlap = (both["ci_low_a"] <= both["ci_high_b"]) & (both["ci_low_b"] <= both["ci_high_a"])
    out = {"pairs": len(both), "decided_both": len(decided), "kappa": kappa, "agreement": observed,
           "flips": flips, "flip_share": flips / len(both) if len(both) else float("nan"),
           "overlap_share": float(overlap.mean()) if len(both) else float("nan")}
    if "effect_a" in both:
        out.update(interval_coverage(both, level))
    if "average_effect_a" in both:   # the effects' order within each question (Spearman), averaged over questions
        rho = [g["average_effect_a"].rank().corr(g["average_effect_b"].rank())
               for _, g in both.dropna(subset=["average_effect_a", "average_effect_b"]).groupby("query_id")
               if len(g) > 2]
        rho = [r for r in rho if np.isfinite(r)]
        out["effect_rank_correlation"] = float(np.mean(rho)) if rho else float("nan")
    return out


def interval_coverage(both: pd.DataFrame, level: float) -> dict:
    """`test_retest`'s check of the intervals on pairs judged twice (`effect_a`/`_b`, `ci_low_a`/`_b`, ...): z of
    each pair's change of effect, its standard error from the two intervals' half-widths at `level`."""
    half = NormalDist().inv_cdf(0.5 + level / 2)
    se = np.sqrt(((both["ci_high_a"] - both["ci_low_a"]) / (2 * half)) ** 2
                 + ((both["ci_high_b"] - both["ci_low_b"]) / (2 * half)) ** 2)
    z = ((both["effect_a"] - both["effect_b"]) / se).to_numpy(dtype=float)
    z = z[np.isfinite(z)]
    return {"change_z_sd": float(z.std()) if len(z) > 1 else float("nan"),
            "change_beyond_90": float((np.abs(z) > NormalDist().inv_cdf(0.95)).mean()) if len(z) else float("nan")}
