"""The data-quality checks pass on tables built from real data and catch each kind of corruption."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from causal_assets.core.outputs.checks import (check_chunks, check_embeddings, check_graph, check_labels, check_metrics,
                                       check_pools, check_ranked_results, check_sparse, check_trials_from_ok_calls)
from causal_assets.core.corpus.beir import load_beir_corpus
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.graph.build import build_graph
from causal_assets.core.index.build import build_sparse, chunk_texts, sparse_frames
from causal_assets.core.index.dense import Embedder
from causal_assets.core.index.provenance import chunks_fingerprint


@pytest.fixture(scope="module")
def tables(scifact_small):
    chunks = chunks_to_frame(load_beir_corpus(scifact_small, "scifact"))
    chunks.insert(0, "chunk_idx", range(len(chunks)))
    postings, vocab = sparse_frames(build_sparse(chunks, False)[0], "scifact", chunks_fingerprint(chunks))
    vectors = Embedder().encode(chunk_texts(chunks))
    embeddings = pd.DataFrame({"chunk_id": chunks["chunk_id"], "content_hash": chunks["content_hash"],
                               "embedding": list(vectors)})
    nodes, edges = build_graph(chunks)
    return chunks, postings, vocab, embeddings, nodes, edges


def test_checks_pass_on_real_tables(tables):
    chunks, postings, vocab, embeddings, nodes, edges = tables
    for outcome in (check_chunks(chunks), check_sparse(postings, vocab, len(chunks)),
                    check_embeddings(embeddings, chunks), check_graph(nodes, edges, chunks["chunk_id"])):
        assert outcome.passed, outcome.metadata
        assert outcome.metadata["failing"] == "none"


def test_chunk_corruptions(tables):
    chunks = tables[0]
    dup = pd.concat([chunks, chunks.iloc[:1]], ignore_index=True).assign(chunk_idx=lambda f: range(len(f)))
    assert "bad_duplicate_ids" in check_chunks(dup).metadata["failing"]
    blank = chunks.copy()
    blank.loc[3, ["title", "text"]] = ["", "  "]
    assert check_chunks(blank).metadata["bad_blank_chunks"] == 1
    assert not check_chunks(chunks.iloc[1:]).passed  # chunk_idx no longer the row number
    assert not check_chunks(chunks.iloc[:0]).passed
    assert "missing_columns" in check_chunks(chunks.drop(columns=["content_hash"])).metadata


def test_embedding_corruptions(tables):
    chunks, embeddings = tables[0], tables[3]
    edited = chunks.copy()
    edited.loc[5, "content_hash"] = "changed"  # the chunk changed after it was embedded
    assert check_embeddings(embeddings, edited).metadata["bad_stale_vectors"] == 1
    nan = embeddings.copy()
    nan.at[0, "embedding"] = np.full(len(nan.at[0, "embedding"]), np.nan, dtype=np.float32)
    assert not check_embeddings(nan, chunks).passed
    scaled = embeddings.copy()
    scaled.at[1, "embedding"] = scaled.at[1, "embedding"] * 2
    assert check_embeddings(scaled, chunks).metadata["bad_not_unit_norm"] == 1
    assert not check_embeddings(embeddings.iloc[:-1], chunks).passed


def test_sparse_corruptions(tables):
    chunks, postings, vocab = tables[0], tables[1], tables[2]
    assert check_sparse(postings, vocab, len(chunks) - 1).metadata["bad_chunk_idx_out_of_range"] > 0
    bad = postings.copy()
    bad.loc[0, "weight"] = np.nan
    bad.loc[1, "weight"] = 0.0
    outcome = check_sparse(bad, vocab, len(chunks))
    assert outcome.metadata["bad_non_finite_weights"] == 1 and outcome.metadata["bad_non_positive_weights"] == 1
    assert check_sparse(postings.iloc[1:], vocab, len(chunks)).metadata["bad_df_mismatch"] == 1


def test_graph_pools_metrics_and_rankings(tables):
    chunks, nodes, edges = tables[0], tables[4], tables[5]
    dangling = pd.concat([edges, edges.iloc[:1].assign(target="nowhere")], ignore_index=True)
    assert check_graph(nodes, dangling, chunks["chunk_id"]).metadata["bad_dangling_edges"] == 1

    ids = chunks["chunk_id"].tolist()
    pools = pd.DataFrame({"query_id": ["q1"] * 3, "question": "What?", "answer": "x", "origin": ["seed", "random", "random"],
                          "chunk_id": ids[:3]})
    assert check_pools(pools, ids).passed
    assert check_pools(pools.assign(chunk_id=[ids[0], ids[0], "ghost"]), ids).metadata["failing"] == \
        "bad_unknown_docs, bad_duplicate_candidates"

    metrics = pd.DataFrame({"metric": ["ndcg", "recall"], "k": [10, 10], "value": [0.5, 1.0]})
    assert check_metrics(metrics).passed
    assert not check_metrics(metrics.assign(value=[1.2, np.nan])).passed

    runs = pd.DataFrame({"query_id": ["a", "a", "b"], "chunk_id": ["d1", "d2", "d1"], "rank": [1, 2, 1],
                         "score": [2.0, 1.0, 0.3]})
    assert check_ranked_results(runs, ["query_id"]).passed
    assert not check_ranked_results(runs.assign(rank=[1, 3, 1]), ["query_id"]).passed
    assert not check_ranked_results(runs.assign(chunk_id=["d1", "d1", "d1"]), ["query_id"]).passed


def test_tuning_trials_check():
    from causal_assets.core.outputs.checks import check_tuning_trials

    trials = pd.DataFrame({"split": ["train", "train"], "value": [0.7, 0.74]})
    assert check_tuning_trials(trials, ["test"]).passed
    leaked = check_tuning_trials(trials.assign(split=["train", "test"]), ["test"])
    assert not leaked.passed and leaked.metadata["bad_eval_split_tuned_on"] == "test"
    assert not check_tuning_trials(trials.assign(value=[0.7, np.nan]), ["test"]).passed


# ---- no_trial_from_errored_call and labels_sane fail on the faults they name ---------------------------------------


def _calls():
    return pd.DataFrame({"query_id": ["q1", "q1", "q1"], "status": ["ok", "ok", "error"],
                         "call_key": ["k1", "k2", None]})


def _trials(keys):
    return pd.DataFrame({"query_id": ["q1"] * len(keys), "call_key": keys, "success": [True] * len(keys)})


def _key_only_no_trial_from_errored_call(trials, calls) -> bool:
    """A check by the errored calls' keys alone: it lets a trial with an unknown key through."""
    errored = set(calls.loc[calls["status"] == "error", "call_key"].dropna())
    return int(trials["call_key"].isin(errored).sum() + trials["call_key"].isna().sum()) == 0


def test_trial_from_an_errored_call_fails_the_check():
    assert check_trials_from_ok_calls(_trials(["k1", "k2"]), _calls()).passed
    corrupt = _trials(["k1", "k2", "k3"])          # a trial scored from the errored call (its key is no ok call's)
    assert _key_only_no_trial_from_errored_call(corrupt, _calls())
    outcome = check_trials_from_ok_calls(corrupt, _calls())
    assert not outcome.passed
    assert outcome.metadata["bad_trials_not_from_an_ok_call"] == 1
    assert outcome.metadata["bad_questions_with_more_trials_than_ok_calls"] == 1
    other_question = pd.DataFrame({"query_id": ["q2"], "call_key": ["k1"], "success": [True]})
    assert not check_trials_from_ok_calls(other_question, _calls()).passed


def _labels(**change):
    frame = pd.DataFrame({"query_id": ["q1", "q1"], "chunk_id": ["a", "b"], "label": ["YES", "NO"],
                          "delta_p": [0.4, -0.1], "ci_low": [0.2, -0.3], "ci_high": [0.6, 0.1],
                          "base_success_rate": [0.3, 0.3], "success_rate": [0.5, 0.5]})
    return frame.assign(**change)


def _range_only_labels_sane(labels) -> bool:
    """A check by value ranges and a missing success rate alone: it lets each corruption below through."""
    in_range = bool(labels[["delta_p", "ci_low", "ci_high"]].abs().le(1).all().all())
    no_base = int(labels.groupby("query_id")["success_rate"].apply(lambda x: x.isna().all()).sum())
    return in_range and no_base == 0


def test_labels_without_a_base_rate_fail_labels_sane():
    assert check_labels(_labels()).passed
    for corrupt, figure in ((_labels(base_success_rate=[np.nan, np.nan]), "bad_questions_without_base_rate"),
                            (_labels(base_success_rate=[1.5, 1.5]), "bad_questions_without_base_rate"),
                            (_labels(ci_low=[0.7, -0.3]), "bad_ci_inverted"),
                            (_labels(label=["MAYBE", "NO"]), "bad_unknown_labels")):
        assert _range_only_labels_sane(corrupt)    # a range check lets each of these through
        outcome = check_labels(corrupt)
        assert not outcome.passed and outcome.metadata[figure] >= 1, outcome.metadata
    nan_dp = _labels(delta_p=[np.nan, -0.1])
    assert not check_labels(nan_dp).passed and check_labels(nan_dp).metadata["bad_non_finite"] == 1


def test_empty_outputs_pass_and_missing_columns_fail():
    assert check_labels(pd.DataFrame([]).assign(benchmark="b")).passed
    assert not check_labels(pd.DataFrame({"query_id": ["q"]})).passed
    empty_trials = pd.DataFrame(columns=["query_id", "call_key"])
    assert check_trials_from_ok_calls(empty_trials, _calls()).passed
