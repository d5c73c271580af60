"""The evaluation report asset, materialized for real on small real benchmark subsets."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from causal_assets.core.outputs.catalog import DuckDBCatalog
import pandas as pd
from dagster import materialize

from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.core.evaluation.failures import BUCKET_RULES


def _materialize_eval(resources, partition):
    assert materialize([corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary], resources=resources,
                       partition_key=partition).success
    result = materialize([evaluation_tables, corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary], resources=resources,
                         partition_key=partition, selection=[evaluation_tables])
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"metrics_in_unit_range", "runs_ranked", "answers_finite", "no_regression"}
    assert all(c.passed for c in checks.values()), {n: c.metadata for n, c in checks.items()}
    return result


@pytest.mark.slow
def test_evaluation_report_scifact_subset(resources):
    result = _materialize_eval(resources, "scifact")
    base = resources["storage"].base_path
    metrics = pd.read_parquet(f"{base}/evaluation_metrics/scifact.parquet")
    assert set(metrics["retriever"]) == {"bm25", "tfidf", "dense", "hybrid", "rrf", "cascade"}
    assert set(metrics["split"]) == {"test"}  # evaluated on the eval split only
    assert {"ndcg", "recall", "precision", "mrr", "map", "hit_rate"} <= set(metrics["metric"])
    assert metrics["value"].between(0, 1).all()
    ndcg = metrics[(metrics.metric == "ndcg") & (metrics.k == 10)].set_index("retriever")["value"]
    assert ndcg["bm25"] > 0.5 and ndcg["dense"] > 0.5  # a small corpus: easy, but not trivially perfect
    runs = pd.read_parquet(f"{base}/evaluation_runs/scifact.parquet")
    assert runs.groupby(["retriever", "query_id"])["rank"].min().eq(1).all()
    failures = pd.read_parquet(f"{base}/evaluation_failures/scifact.parquet")
    assert set(failures["bucket"]) <= set(BUCKET_RULES) - {"none"}
    mat = [e.materialization for e in result.get_asset_materialization_events()
           if e.materialization.asset_key.path[-1] == "evaluation_metrics"][0]
    report = mat.metadata["report"].value
    # Never tuned: the configured hybrid keeps the default weight and says why (parameters are chosen by tuning).
    assert "hybrid fusion weight 0.5 (dense share) (the default: no tuned hybrid" in report
    assert "data:image/png;base64," in report
    assert mat.metadata["fusion_weight"].value == 0.5 and mat.metadata["tuned_config_version"].value == ""
    assert (resources["storage"].reports_path / "scifact.md").exists()
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        rows = con.execute("select retriever, value from evaluation_metrics where benchmark = 'scifact' "
                           "and metric = 'ndcg' and k = 10").fetchall()
    assert len(rows) == 6


def configure(resources, benchmark: str, **fields) -> None:
    """Set `fields` of `benchmark`'s entry in the test registry (as a user edits theirs)."""
    path = Path(resources["benchmark_registry"].path)
    registry = yaml.safe_load(path.read_text())
    [entry] = [b for b in registry["benchmarks"] if b["name"] == benchmark]
    entry.update(fields)
    path.write_text(yaml.safe_dump(registry))


def test_evaluation_report_hotpotqa_ranks_each_questions_own_paragraphs(resources):
    _materialize_eval(resources, "hotpotqa")
    runs = pd.read_parquet(f"{resources['storage'].base_path}/evaluation_runs/hotpotqa.parquet")
    assert set(runs["retriever"]) == {"bm25", "dense", "hybrid", "cascade", "entity_first"}
    # Every retrieved paragraph belongs to the question that retrieved it, and each question ranks <= 10.
    assert (runs["chunk_id"].str.split("/").str[0] == runs["query_id"]).all()
    assert runs.groupby(["retriever", "query_id"]).size().le(10).all()


@pytest.mark.slow
def test_answer_utility_rows_metrics_and_report_section(resources):
    """HotpotQA questions carry answers: with a scorer-capable LLM (the packaged local model) the evaluation scores
    the gold answer given each retriever's top k and the references, one row per (split, retriever, k, question),
    and the mean gains as `answer_gain` rows of truth `answers`. Small: 2 questions, k = 1, 2, short documents."""
    configure(resources, "hotpotqa", retrievers={"bm25": {}, "dense": {}}, pooling={"max_doc_chars": 200},
              answers={"ks": [1, 2], "max_questions": 2, "enabled": True})
    result = _materialize_eval(resources, "hotpotqa")
    base = resources["storage"].base_path
    answers = pd.read_parquet(f"{base}/evaluation_answers/hotpotqa.parquet")
    assert set(answers["retriever"]) == {"bm25", "dense", "@gold", "@random"}   # no labels: no @labels
    assert answers["query_id"].nunique() == 2 and set(answers["k"]) == {1, 2}
    assert len(answers) == 2 * 4 * 2 and answers.groupby("query_id")["loglik_no_context"].nunique().eq(1).all()
    assert (answers["answer_gain"] == answers["loglik"] - answers["loglik_no_context"]).all()
    metrics = pd.read_parquet(f"{base}/evaluation_metrics/hotpotqa.parquet")
    gains = metrics[metrics["truth"] == "answers"]
    assert set(gains["metric"]) == {"answer_gain"} and len(gains) == 4 * 2
    assert (metrics[metrics["truth"] != "answers"]["value"].between(0, 1)).all()
    [mat] = [e.materialization for e in result.get_asset_materialization_events()
             if e.materialization.asset_key.path[-1] == "evaluation_metrics"]
    report = mat.metadata["report"].value
    assert "## Answer utility" in report and "`dev`: 2 questions with an answer" in report
    assert "| @gold " in report and "best retriever" in report
    # the cost ledger counts what the call cache journalled: every paid scoring is a journalled ok call
    from causal_assets.core.llm import ledger
    from causal_assets.core.llm.cache import CallCache

    costs = ledger.read_ledger(resources["storage"].base, "hotpotqa")
    journal = CallCache(resources["llm"].cache_path).stats()
    assert costs["calls_paid"].sum() == journal["ok"] > 0 and costs["calls_errored"].sum() == journal["errors"]
    assert costs["prompt_tokens"].sum() == journal["prompt_tokens"]
    assert mat.metadata["cost"].value["calls_paid"] == journal["ok"]
    assert "## Cost" in report
    assert (resources["storage"].reports_path / "hotpotqa_dev_answers.png").exists()
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        comment = con.execute("select comment from duckdb_columns() where table_name = 'evaluation_answers' "
                              "and column_name = 'answer_gain'").fetchone()[0]
    assert "nats" in comment


@pytest.mark.slow
def test_a_failed_evaluation_writes_nothing(resources):
    """Non-finite scores (here the stored BM25 weights of the index are infinite, as a file written by other means
    may be; a hybrid `weight: 1e308` is refused when the registry loads) failed the blocking checks
    only after all six evaluation tables and the report were written. The checks now run on the tables in memory
    first: the step fails naming them and nothing is written. A NaN in run config stops the step as it starts."""
    base, reports = resources["storage"].base, resources["storage"].reports_path
    assert materialize([corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary], resources=resources,
                       partition_key="hotpotqa").success
    postings_path = base / "sparse_postings" / "hotpotqa.parquet"
    postings = pd.read_parquet(postings_path)
    postings.loc[postings["method"] == "bm25", "weight"] = np.float32(np.inf)
    postings.to_parquet(postings_path)
    before = sorted(p.relative_to(base) for p in base.rglob("*.parquet"))

    def evaluate(**config):
        result = materialize([evaluation_tables, corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary],
                             resources=resources, partition_key="hotpotqa", selection=[evaluation_tables],
                             raise_on_error=False, run_config={"ops": {"evaluation_tables": {"config": config}}})
        assert not result.success
        [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        error = failure.step_failure_data.error
        while error.cause:
            error = error.cause
        assert sorted(p.relative_to(base) for p in base.rglob("*.parquet")) == before
        assert not reports.exists() or not list(reports.rglob("hotpotqa*"))
        assert result.get_asset_check_evaluations() == []
        return error.message

    configure(resources, "hotpotqa", retrievers={"bm25": {}, "hybrid": {}})
    message = evaluate(tuned=False)
    assert "evaluation of 'hotpotqa': check evaluation_runs runs_ranked: bad_non_finite_scores" in message, message
    assert "nothing was written" in message
    configure(resources, "hotpotqa", retrievers={"bm25": {}, "hybrid": {}})
    message = evaluate(fusion_weight=float("nan"))
    assert "fusion_weight" in message and "finite number" in message, message
