"""core/evaluation/runner.py: a retriever run over a benchmark as a ranked frame and a ranx run, and its metrics."""
from __future__ import annotations

import pytest

from causal_assets.core.measures.metrics import evaluate
from causal_assets.core.evaluation.runner import metric_value, run_benchmark, score_run
from causal_assets.core.retrievers.factory import build_retriever
from tests.core.tiny_corpus import QUESTIONS, tiny_benchmark, tiny_index


def test_run_keeps_the_retrievers_ranking_per_judged_query():
    index = tiny_index()
    bench = tiny_benchmark()
    bench.queries["unjudged"] = "a question without judgements"
    retriever = build_retriever("dense", index, {})
    rr = run_benchmark(retriever, bench, depth=5)
    assert rr.retriever == "dense" and rr.seconds >= 0
    assert sorted(rr.run) == sorted(QUESTIONS)          # judged queries only
    expected = retriever.retrieve_many([bench.queries[q] for q in bench.query_ids()], 5)
    for q, hits in zip(bench.query_ids(), expected):
        rows = rr.frame[rr.frame["query_id"] == q]
        assert rows["chunk_id"].tolist() == [h.chunk_id for h in hits]
        assert rows["rank"].tolist() == list(range(1, 6))
        # ranx scores derived from the rank: the order is the retriever's, never re-sorted by raw score ties
        assert sorted(rr.run[q], key=rr.run[q].get, reverse=True) == [h.chunk_id for h in hits]
        assert rr.run[q][hits[0].chunk_id] == 5.0 and rr.run[q][hits[-1].chunk_id] == 1.0


def test_within_restricts_each_query_to_its_candidates_and_the_name_can_be_given():
    index = tiny_index()
    within = {q: list(dict.fromkeys(["seine", "thames", "danube", doc])) for q, (_, doc) in QUESTIONS.items()}
    rr = run_benchmark(build_retriever("bm25", index, {}), tiny_benchmark(within=within), depth=10, name="bm25_within")
    assert rr.retriever == "bm25_within"
    for q, docs in rr.frame.groupby("query_id")["chunk_id"]:
        assert sorted(docs) == sorted(within[q])


def test_score_run_matches_the_metrics_of_its_run():
    index = tiny_index()
    bench = tiny_benchmark()
    rr = run_benchmark(build_retriever("dense", index, {}), bench)
    metrics = score_run(bench, rr, ks=(1, 10))
    assert set(metrics["retriever"]) == {"dense"}
    top1 = rr.frame[rr.frame["rank"] == 1].set_index("query_id")["chunk_id"]
    # precision@1 is the share of questions whose first hit is their relevant paragraph (the dense model puts
    # the Eiffel Tower above its engineer for q2: below 1, above 0)
    hit_rate = sum(top1[q] == doc for q, (_, doc) in QUESTIONS.items()) / len(QUESTIONS)
    assert metric_value(metrics, "precision", 1) == pytest.approx(hit_rate)
    assert 0 < hit_rate < 1
    # one relevant document per question: recall@10 is 1 when it is in the top 10 of a 12-paragraph corpus
    assert metric_value(metrics, "recall", 10) == 1.0
    same = evaluate(bench.qrels, rr.run, ks=(1, 10))
    assert metrics.drop(columns="retriever").reset_index(drop=True).equals(same.reset_index(drop=True))
