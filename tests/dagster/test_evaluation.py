"""The evaluation report asset, materialized for real on small real benchmark subsets."""
from __future__ import annotations

import duckdb

from causal_assets.core.catalog import DuckDBCatalog
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
    assert set(checks) == {"metrics_in_unit_range", "runs_ranked"}
    assert all(c.passed for c in checks.values()), {n: c.metadata for n, c in checks.items()}
    return result


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


def test_evaluation_report_hotpotqa_ranks_each_questions_own_paragraphs(resources):
    _materialize_eval(resources, "hotpotqa")
    runs = pd.read_parquet(f"{resources['storage'].base_path}/evaluation_runs/hotpotqa.parquet")
    assert set(runs["retriever"]) == {"bm25", "dense", "hybrid", "cascade", "entity_first"}
    # Every retrieved paragraph belongs to the question that retrieved it, and each question ranks <= 10.
    assert (runs["doc_id"].str.split("/").str[0] == runs["query_id"]).all()
    assert runs.groupby(["retriever", "query_id"]).size().le(10).all()
