"""The evaluation report a retrieval engineer can trust: n per split, metric columns that fit the
benchmark, intervals and paired significance against the best baseline, failure examples, label summary, plain
table rows, one style per retriever family."""
from __future__ import annotations

import numpy as np
import pandas as pd

from causal_assets.core.measures.metrics import evaluate, evaluate_per_query
from causal_assets.core.evaluation.report import FAMILY_STYLE, family, headline_columns, headline_table, write_report
from causal_assets.core.measures.significance import bootstrap_ci, compare_to_baseline, randomization_p
from causal_assets.core.registry.retrievers import BASELINES


def synthetic(n_queries=40, n_cand=10, seed=0):
    """Each query ranks its own 10 candidates, 2 of them gold; `good` ranks gold higher than `bm25` does."""
    rng = np.random.default_rng(seed)
    qrels, runs = {}, {"bm25": {}, "dense": {}, "learned": {}}
    for q in range(n_queries):
        docs = [f"q{q}d{i}" for i in range(n_cand)]
        qrels[f"q{q}"] = {docs[0]: 1, docs[1]: 1}
        for name, boost in (("bm25", 0.3), ("dense", 0.2), ("learned", 0.6)):
            scores = rng.random(n_cand) + boost * np.array([1, 1] + [0] * (n_cand - 2))
            runs[name][f"q{q}"] = {d: float(s) for d, s in zip(docs, scores)}
    return qrels, runs


def test_significance_finds_a_real_gain_and_not_a_null_one():
    qrels, runs = synthetic()
    pq = pd.concat([evaluate_per_query(qrels, r, ks=(10,)).assign(retriever=n) for n, r in runs.items()])
    pq = pq[(pq.metric == "ndcg") & (pq.k == 10)]
    table = compare_to_baseline(pq, BASELINES).set_index("retriever")
    assert table.loc["learned", "baseline"] == "bm25" or table.loc["learned", "baseline"] == "dense"
    assert table.loc["learned", "significant"] and table.loc["learned", "delta_low"] > 0
    assert table.loc["learned", "n"] == 40 and table.loc["learned", "ci_low"] < table.loc["learned", "mean"]
    same = np.linspace(0, 1, 30)
    assert randomization_p(same, same) == 1.0
    lo, hi = bootstrap_ci(np.ones(20))
    assert lo == hi == 1.0


def test_report_has_n_fitting_columns_intervals_examples_and_labels(tmp_path):
    qrels, runs = synthetic()
    metrics = pd.concat([evaluate(qrels, r, ks=(1, 2, 3, 5, 10, 20, 100)).assign(retriever=n, split="test",
                                                                                truth="qrels")
                         for n, r in runs.items()])
    pq = pd.concat([evaluate_per_query(qrels, r, ks=(10,)).assign(retriever=n, split="test")
                    for n, r in runs.items()])
    pq = pq[(pq.metric == "ndcg") & (pq.k == 10)]
    failures = pd.DataFrame([{"split": "test", "retriever": "learned", "query_id": "q3", "bucket": "vocabulary_mismatch",
                              "rule": "r", "detail": "gold shares 0 of 3 query terms"}])
    labels = pd.DataFrame({"query_id": ["q1", "q1", "q2"], "chunk_id": ["a", "b", "c"],
                           "label": ["YES", "NO", "UNCERTAIN"], "estimator": "regression", "trials_used": 16,
                           "origin": ["seed", "random", "seed"]})
    queries = {"test": {f"q{i}": f"question number {i}" for i in range(40)}}
    md, path = write_report("toy", metrics, failures, ["note"], tmp_path, per_query=pq, queries=queries,
                            n_candidates=10, labels=labels)
    text = path.read_text()
    assert "`test` 40" in text                                   # n per split
    assert "recall@10" not in text and "recall@100" not in text  # saturated at 10 candidates
    assert "ndcg@10" in text and "recall@5" in text
    assert "('test'" not in text                                 # rows are columns, not tuples
    assert "95% interval" in text and "p (randomization)" in text and "*" in text
    assert "“question number 3”" in text and "gold shares 0 of 3" in text
    assert "## Monte Carlo labels" in text and "YES 1 (33%)" in text
    assert "data:image/png;base64" in md and (tmp_path / "toy_test_curves.png").exists()


def test_headline_columns_and_families():
    assert ("recall", 100) in headline_columns(None)
    assert headline_columns(10) == [("ndcg", 10), ("mrr", 10), ("map", 10), ("recall", 2), ("recall", 5),
                                    ("hit_rate", 1), ("hit_rate", 5), ("precision", 2)]
    assert family("learned_tuned") == "learned" and family("rrf") == "fusion"
    assert len({FAMILY_STYLE[f] for f in ("lexical", "dense", "fusion", "graph", "causal", "learned")}) == 6
    table = headline_table(pd.DataFrame({"split": "s", "retriever": "bm25", "metric": "ndcg", "k": 10, "value": 0.5,
                                         "truth": "qrels"}, index=[0]), n_queries={"s": 3})
    assert list(table.columns) == ["split", "retriever", "n", "ndcg@10"]


def test_a_selected_retriever_below_bm25_is_said_with_its_difference():
    from causal_assets.core.evaluation.report import below_bm25

    rng = np.random.default_rng(0)
    bm25 = rng.uniform(0.5, 1.0, 40)
    rows = [("bm25", f"q{i}", v) for i, v in enumerate(bm25)]
    worse = pd.DataFrame(rows + [("learned_tuned", f"q{i}", v - 0.2) for i, v in enumerate(bm25)],
                         columns=["retriever", "query_id", "value"])
    [line, _] = below_bm25(worse, "learned", "ndcg@10")
    assert line.startswith("**The selected retriever `learned_tuned` scores below bm25 here**: ndcg@10 Δ -0.200")
    assert "p = 0.00" in line
    better = worse.assign(value=[v if r == "bm25" else v + 0.4 for r, v in zip(worse["retriever"], worse["value"])])
    assert below_bm25(better, "learned", "ndcg@10") == [] and below_bm25(worse, None, "ndcg@10") == []


def test_the_randomization_test_is_exact_enough_and_gives_the_same_p_every_time():
    """On 10 queries every one of the 1,024 sign patterns can be enumerated: the seeded draws agree with the exact
    p within sampling error, and the same scores give the same p on every call (the gate's verdict must not move
    between two evaluations of the same run)."""
    import itertools

    rng = np.random.default_rng(7)
    control = rng.uniform(0.2, 0.8, 10)
    treatment = control + rng.normal(0.05, 0.08, 10)
    diff = treatment - control
    exact = np.mean([abs(np.dot(s, diff)) >= abs(diff.sum()) * (1 - 1e-12)
                     for s in itertools.product((-1, 1), repeat=10)])
    p = randomization_p(control, treatment)
    assert abs(p - exact) < 0.015, (p, exact)
    assert randomization_p(control, treatment) == p == randomization_p(treatment, control)
    assert randomization_p(control, control + 1.0) < 0.01   # every query better: only 2 of 1,024 patterns as far
