"""Candidate pools and Monte Carlo labels end to end with the real local solver (Gemma-3-270M scoring the gold
answer in-process, through the call cache)."""
from __future__ import annotations

from pathlib import Path


from causal_assets.core.outputs.catalog import DuckDBCatalog
import pandas as pd
import pytest
import yaml
from dagster import MultiPartitionKey, materialize

from causal_assets.core.labeling.shards import shard_questions

from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary
from causal_assets.defs.graph import graph_nodes_and_edges
from causal_assets.defs.scale_out import LABEL_SHARDS, mc_trial_shards
from causal_assets.defs.evaluation import evaluation_tables
from causal_assets.defs.labels import candidate_pools, label_quality, mc_labels, mc_trials
from causal_assets.resources import LLM

RUN_CONFIG = {"ops": {
    "candidate_pools": {"config": {"max_questions": 2, "size": 4}},
    "mc_trials": {"config": {"budget": 12}},
    "mc_labels": {"config": {"budget": 12}},
}}


@pytest.mark.slow
def test_labels_end_to_end_with_local_solver(resources, tmp_path, models_dir):
    resources = {**resources, "llm": LLM(cache_path=str(tmp_path / "calls.sqlite"), models_dir=str(models_dir))}
    # The solver on the shipped default threads (the cores other processes leave free). Pools of 4 and 150
    # characters of each paragraph (the registry's pooling.max_doc_chars; 600 by default): the same calls and
    # checks on fewer, shorter prompts (4 tenths fewer tokens than pools of 6 at 300 characters), since the
    # solver's calls are most of this test's time
    registry_path = Path(resources["benchmark_registry"].path)
    registry = yaml.safe_load(registry_path.read_text())
    [hotpotqa] = [b for b in registry["benchmarks"] if b["name"] == "hotpotqa"]
    hotpotqa["pooling"] = {"max_doc_chars": 150}
    registry_path.write_text(yaml.safe_dump(registry))
    upstream = [corpus_chunks, corpus_embeddings, sparse_postings_and_vocabulary, graph_nodes_and_edges]
    assert materialize(upstream, resources=resources, partition_key="hotpotqa").success
    stage = [candidate_pools, mc_trials, mc_labels]
    result = materialize(upstream + stage, resources=resources, partition_key="hotpotqa",
                         selection=["candidate_pools", "mc_trials", "solver_calls", "mc_labels"], run_config=RUN_CONFIG)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {"pools_valid", "no_trial_from_errored_call", "labels_sane",
                                                 "labels_decided"}
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]
    base = resources["storage"].base_path
    pools = pd.read_parquet(f"{base}/candidate_pools/hotpotqa.parquet")
    assert pools.groupby("query_id").size().eq(4).all()
    assert pools["text"].str.len().le(150).all() and pools["text"].str.len().eq(150).any()   # the registry's cut
    assert (pools["chunk_id"].str.split("/").str[0] == pools["query_id"]).all()  # own paragraphs only
    trials = pd.read_parquet(f"{base}/mc_trials/hotpotqa.parquet")
    calls = pd.read_parquet(f"{base}/solver_calls/hotpotqa.parquet")
    assert 0 < len(trials) <= 2 * 12 and len(calls) >= len(trials)
    labels = pd.read_parquet(f"{base}/mc_labels/hotpotqa.parquet")
    assert set(labels["estimator"]) == {"regression", "naive"}
    assert labels["label"].isin(["YES", "NO", "UNCERTAIN"]).all()
    assert (labels["outcome"] == "qa_likelihood").all() and labels["delta_p"].isna().all()   # no pass/fail trials
    decided = labels[labels["label"] != "UNCERTAIN"]
    assert decided["effect"].notna().all()
    assert (decided["ci_low"] <= decided["effect"]).all() and (decided["effect"] <= decided["ci_high"]).all()
    assert trials["loglik"].notna().all() and (trials["loglik"] < 0).all() and trials["loglik_question"].notna().all()
    dataset = yaml.safe_load((resources["storage"].reports_path.parent / "datasets" / "retrieval_dataset_hotpotqa.yaml").read_text())
    assert len(dataset["pairs"]) == 2 and "empirical_relevance" in dataset["pairs"][0]["candidates"][0]

    # The labels are ground truth for the evaluation (truth = mc_labels beside the benchmark's qrels) and are
    # compared with the benchmark's gold by label_quality.
    evaluated = materialize(upstream + stage + [evaluation_tables, label_quality], resources=resources,
                            partition_key="hotpotqa", selection=["evaluation_metrics", "evaluation_runs",
                                                                 "evaluation_failures", "evaluation_queries",
                                                                 "evaluation_qrels", "evaluation_answers",
                                                                 "evaluation_per_query", "label_quality"],
                            run_config={"ops": {"evaluation_tables": {"config": {"retrievers": ["bm25", "dense"]}}}})
    assert evaluated.success
    with DuckDBCatalog(resources["storage"].catalog_path).connect() as con:
        truths = con.execute("select distinct truth from evaluation_metrics where benchmark = 'hotpotqa'").fetchall()
        quality = con.execute("select count(*) from label_quality where source = 'labels'").fetchone()[0]
    yes_questions = labels[(labels.label == "YES") & (labels.estimator == "regression")]["query_id"].nunique()
    assert {t for (t,) in truths} == ({"qrels", "mc_labels"} if yes_questions else {"qrels"})
    assert quality > 0

    # A re-run pays nothing twice: every call is a cache hit.
    again = materialize(upstream + stage, resources=resources, partition_key="hotpotqa",
                        selection=["mc_trials", "solver_calls"], run_config={"ops": {"mc_trials": RUN_CONFIG["ops"]["mc_trials"]}})
    assert again.success
    calls2 = pd.read_parquet(f"{base}/solver_calls/hotpotqa.parquet")
    assert calls2["cached"].all() and len(calls2) == len(calls)

    # Question-range shards (a backfill over benchmark x shard) pay the calls; mc_trials then assembles the same
    # trials from the call cache without a single new call.
    sharded = {**resources, "llm": LLM(cache_path=str(tmp_path / "sharded_calls.sqlite"),
                                       models_dir=str(models_dir))}
    # The solver is deterministic (temperature 0), so a subset drawn twice for one question is one call: the
    # shards must pay exactly the calls the unsharded run paid, and see exactly its within-run repeats as hits.
    paid, hits = 0, 0
    for shard in range(LABEL_SHARDS):
        key = MultiPartitionKey({"benchmark": "hotpotqa", "shard": str(shard)})
        run = materialize([mc_trial_shards, candidate_pools], resources=sharded, partition_key=key,
                          selection=["mc_trial_shards"], run_config={"ops": {"mc_trial_shards": RUN_CONFIG["ops"]["mc_trials"]}})
        assert run.success
        meta = run.get_asset_materialization_events()[0].materialization.metadata
        paid += meta["calls"].value - meta["cache_hits"].value
        hits += meta["cache_hits"].value
    assert paid == int((~calls["cached"]).sum()) and paid + hits == len(calls)
    assembled = materialize(upstream + stage, resources=sharded, partition_key="hotpotqa",
                            selection=["mc_trials", "solver_calls"],
                            run_config={"ops": {"mc_trials": RUN_CONFIG["ops"]["mc_trials"]}})
    assert assembled.success
    calls3 = pd.read_parquet(f"{base}/solver_calls/hotpotqa.parquet")
    assert calls3["cached"].all() and len(calls3) == len(calls)
    trials3 = pd.read_parquet(f"{base}/mc_trials/hotpotqa.parquet")
    assert trials3["subset"].map(tuple).tolist() == trials["subset"].map(tuple).tolist()


def test_question_shards_cover_every_question_once():
    ids = [f"q{i}" for i in range(10)]
    for shards in (1, 3, 4, 10, 12):
        parts = [shard_questions(ids, s, shards) for s in range(shards)]
        assert sum(parts, []) == ids
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
