import numpy as np
import pytest
import pytrec_eval
import ranx

from causal_assets.core.measures.metrics import evaluate, evaluate_per_query

KS = (1, 3, 5, 10, 100)
# our (metric, k) -> trec_eval measure name
TREC_NAMES = {"recall": "recall_{}", "precision": "P_{}", "ndcg": "ndcg_cut_{}",
              "map": "map_cut_{}", "hit_rate": "success_{}"}


def trec_name(metric, k):
    if k == 0:  # whole ranked list
        return {"mrr": "recip_rank", "ndcg": "ndcg"}[metric]
    if metric == "mrr":
        return None  # trec_eval's recip_rank has no cutoff
    return TREC_NAMES[metric].format(k)


def random_case(ties: bool, seed=7, n_queries=60, n_docs=200):
    rng = np.random.default_rng(seed)
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 4)) for j in rng.choice(n_docs, 10, replace=False)}
             for i in range(n_queries)}
    run = {}
    for i in range(n_queries):
        docs = rng.choice(n_docs, 120, replace=False)
        # distinct scores, or 6-way ties so the tie-break decides the order
        scores = rng.permutation(120) // (6 if ties else 1)
        run[f"q{i}"] = {f"d{j}": float(s) for j, s in zip(docs, scores)}
    return qrels, run


@pytest.mark.parametrize("ties", [False, True])
def test_matches_trec_eval(ties):
    qrels, run = random_case(ties)
    qrels["q_zero"] = {"d1": 0, "d2": 0}  # no relevant doc: dropped
    run["q_zero"] = {"d1": 1.0}
    measures = {f"{m}.{','.join(map(str, KS))}" for m in ("recall", "P", "ndcg_cut", "success")}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures | {"map_cut.10", "recip_rank", "ndcg"}).evaluate(run)

    ours = evaluate_per_query(qrels, run, KS)
    assert ours.attrs["n_queries"] == 60 and ours.attrs["dropped_query_ids"] == ["q_zero"]
    assert set(ours["query_id"]) == set(trec) - {"q_zero"}
    compared = set()
    for row in ours.itertuples():
        name = trec_name(row.metric, row.k)
        if name is None:
            continue
        assert row.value == pytest.approx(trec[row.query_id][name], abs=1e-6), (row, name)
        compared.add((row.metric, row.k))
    expected = {(m, k) for m in ("recall", "precision", "ndcg", "hit_rate") for k in KS}
    assert compared == expected | {("map", 10), ("mrr", 0), ("ndcg", 0)}


def test_mean_equals_mean_of_per_query():
    qrels, run = random_case(ties=False, seed=3)
    per_query = evaluate_per_query(qrels, run).groupby(["metric", "k"])["value"].mean()
    means = evaluate(qrels, run).set_index(["metric", "k"])["value"]
    assert set(means.index) == set(per_query.index)
    for key, value in means.items():
        assert value == pytest.approx(per_query[key], abs=1e-12)


def test_ties_are_broken_by_chunk_id_descending_like_trec_eval():
    df = evaluate({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}}, ks=(1,))
    assert value(df, "mrr", 0) == 0.5  # "b" > "a", so "b" is ranked first


def test_ranx_itself_drops_fractional_labels():
    # the behaviour the module works around; if ranx changes, revisit metrics.py
    assert ranx.evaluate({"q": {"a": 0.4}}, {"q": {"a": 1.0}}, "ndcg@10") == 0.0


def test_fractional_labels_are_not_dropped():
    df = evaluate({"q": {"a": 0.4, "c": 0.2}}, {"q": {"a": 0.9, "b": 0.5}}, ks=(1, 10))
    assert value(df, "ndcg", 1) == 1.0
    assert value(df, "ndcg", 10) > 0
    assert value(df, "recall", 1) == 0.5  # both labels > 0 count as relevant by default
    assert value(df, "mrr", 0) == 1.0


def test_fractional_ndcg_equals_scaled_integer_ndcg():
    run = {"q": {"a": 0.1, "b": 0.9, "c": 0.5, "x": 0.7, "d": 0.3}}
    fractional = {"q": {"a": 0.4, "b": 0.05, "c": 0.2, "d": 0.35}}
    integer = {"q": {"a": 8, "b": 1, "c": 4, "d": 7}}  # same labels x 20
    trec = pytrec_eval.RelevanceEvaluator(integer, {"ndcg_cut.1,3,5"}).evaluate(run)["q"]
    for k in (1, 3, 5):
        got = value(evaluate(fractional, run, ks=(k,)), "ndcg", k)
        assert got == pytest.approx(trec[f"ndcg_cut_{k}"], abs=1e-12)
        assert got == pytest.approx(value(evaluate(integer, run, ks=(k,)), "ndcg", k), abs=1e-12)
    # linear gains: rank 1 holds "b" (gain 1 of an ideal 8) -> nDCG@1 = 1/8
    assert value(evaluate(fractional, run, ks=(1,)), "ndcg", 1) == pytest.approx(1 / 8)


def test_hit_rate_is_seed_recall_and_differs_from_standard_recall():
    qrels = {
        "q1": {"g": 1},                    # gold at rank 2
        "q2": {"g": 1},                    # gold at rank 5
        "q3": {"g1": 1, "g2": 1, "g3": 1},  # golds at ranks 1, 3 and 6
    }
    run = {
        "q1": ranks(["x", "g", "y", "z", "w"]),
        "q2": ranks(["x", "y", "z", "w", "g"]),
        "q3": ranks(["g1", "x", "g2", "y", "z", "g3"]),
    }
    df = evaluate(qrels, run, ks=(1, 3, 5))
    # seed 001 §5.1: 1 if any gold in top K, averaged over queries
    assert value(df, "hit_rate", 1) == pytest.approx(1 / 3)
    assert value(df, "hit_rate", 3) == pytest.approx(2 / 3)
    assert value(df, "hit_rate", 5) == pytest.approx(1.0)
    # standard recall: q3 finds 2 of its 3 golds in the top 3
    assert value(df, "recall", 3) == pytest.approx((1 + 0 + 2 / 3) / 3)
    assert value(df, "precision", 3) == pytest.approx((1 + 0 + 2) / 3 / 3)
    assert value(df, "mrr", 0) == pytest.approx((1 / 2 + 1 / 5 + 1) / 3)
    assert value(df, "mrr", 3) == pytest.approx((1 / 2 + 0 + 1) / 3)


def test_query_sets_and_threshold():
    qrels = {
        "kept": {"a": 0.6, "b": 0.3},
        "no_relevant": {"a": 0.2},       # nothing reaches the threshold
        "missing_from_run": {"a": 1.0},  # scores zero
    }
    run = {"kept": ranks(["b", "a"]), "not_in_qrels": ranks(["a"])}
    df = evaluate_per_query(qrels, run, ks=(1, 2), relevance_threshold=0.5)
    assert df.attrs["dropped_query_ids"] == ["no_relevant"]
    assert df.attrs["n_dropped_no_relevant"] == 1 and df.attrs["n_missing_from_run"] == 1
    assert set(df["query_id"]) == {"kept", "missing_from_run"}
    assert (df.loc[df["query_id"] == "missing_from_run", "value"] == 0).all()
    kept = df[df["query_id"] == "kept"].set_index(["metric", "k"])["value"]
    assert kept[("recall", 1)] == 0.0 and kept[("recall", 2)] == 1.0  # "b" (0.3) is below 0.5
    assert 0 < kept[("ndcg", 1)] < 1  # but nDCG still gives "b" its graded gain
    assert kept[("ndcg", 1)] == pytest.approx(0.3 / 0.6)


def test_k_column_is_int_and_rejects_bad_cutoffs():
    df = evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}})
    assert df["k"].dtype.kind == "i"
    with pytest.raises(ValueError):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ks=(0, 5))


def ranks(chunk_ids):
    """A run giving the listed docs descending scores, first is best."""
    return {d: float(len(chunk_ids) - i) for i, d in enumerate(chunk_ids)}


def value(df, metric, k):
    match = df[(df["metric"] == metric) & (df["k"] == k)]["value"]
    assert len(match) == 1, (metric, k)
    return float(match.iloc[0])
