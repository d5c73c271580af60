"""Candidate pools and Monte Carlo labels end to end with the real local llama.cpp server (SmolLM2-135M)."""
from __future__ import annotations

import pandas as pd
import yaml
from dagster import materialize

from causal_assets.defs.corpus import corpus_chunks, corpus_embeddings, sparse_index
from causal_assets.defs.graph import entity_graph
from causal_assets.defs.labels import candidate_pools, mc_labels, mc_trials
from causal_assets.resources import LLM

RUN_CONFIG = {"ops": {
    "candidate_pools": {"config": {"max_questions": 2, "size": 6}},
    "mc_trials": {"config": {"budget": 12}},
    "mc_labels": {"config": {"budget": 12}},
}}


def test_labels_end_to_end_with_local_server(resources, tmp_path):
    resources = {**resources, "llm": LLM(cache_path=str(tmp_path / "calls.sqlite"), n_threads=1)}
    upstream = [corpus_chunks, corpus_embeddings, sparse_index, entity_graph]
    assert materialize(upstream, resources=resources, partition_key="hotpotqa").success
    stage = [candidate_pools, mc_trials, mc_labels]
    result = materialize(upstream + stage, resources=resources, partition_key="hotpotqa",
                         selection=["candidate_pools", "mc_trials", "solver_calls", "mc_labels"], run_config=RUN_CONFIG)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 2 and all(c.passed for c in checks)
    base = resources["storage"].base_path
    pools = pd.read_parquet(f"{base}/candidate_pools/hotpotqa.parquet")
    assert pools.groupby("question_id").size().eq(6).all()
    assert (pools["doc_id"].str.split("/").str[0] == pools["question_id"]).all()  # own paragraphs only
    trials = pd.read_parquet(f"{base}/mc_trials/hotpotqa.parquet")
    calls = pd.read_parquet(f"{base}/solver_calls/hotpotqa.parquet")
    assert 0 < len(trials) <= 2 * 12 and len(calls) >= len(trials)
    labels = pd.read_parquet(f"{base}/mc_labels/hotpotqa.parquet")
    assert set(labels["estimator"]) == {"adaptive", "naive"}
    assert labels["label"].isin(["YES", "NO", "UNCERTAIN"]).all()
    assert labels[["delta_p", "ci_low", "ci_high"]].abs().le(1).all().all()
    dataset = yaml.safe_load((resources["storage"].reports_path.parent / "datasets" / "retrieval_dataset_hotpotqa.yaml").read_text())
    assert len(dataset["pairs"]) == 2 and "empirical_relevance" in dataset["pairs"][0]["candidates"][0]

    # A re-run pays nothing twice: every call is a cache hit.
    again = materialize(upstream + stage, resources=resources, partition_key="hotpotqa",
                        selection=["mc_trials", "solver_calls"], run_config={"ops": {"mc_trials": RUN_CONFIG["ops"]["mc_trials"]}})
    assert again.success
    calls2 = pd.read_parquet(f"{base}/solver_calls/hotpotqa.parquet")
    assert calls2["cached"].all() and len(calls2) == len(calls)
