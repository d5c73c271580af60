"""core/tuning/encoder: the dense encoder fine-tuned on a tune split's judged pairs, and its held-out decision
(the real packaged MiniLM, fitted for a few steps on the tiny corpus)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from causal_assets.core.measures.metrics import named_metric
from causal_assets.core.evaluation.runner import run_benchmark
from causal_assets.core.index.dense import Embedder, load_model
from causal_assets.core.retrievers.similarity import HybridRetriever
from causal_assets.core.index.build import chunk_texts
from causal_assets.core.tuning import encoder
from causal_assets.core.tuning.encoder import (encoder_version, held_out_split, means, paired_gain, training_pairs,
                                               tune_encoder)
from causal_assets.core.registry.tuning import EncoderSpec, TuningSpec
from tests.core.tiny_corpus import QUESTIONS, tiny_benchmark, tiny_index

pytestmark = pytest.mark.usefixtures("torch_on_free_cores")


def test_training_pairs_hold_the_judged_document_and_unjudged_hard_negatives():
    index, bench = tiny_index(), tiny_benchmark()
    pairs = training_pairs(index, bench, ["q1", "q2"])
    assert [(q, str(index.ids[p])) for q, p, _ in pairs] == [(QUESTIONS["q1"][0], "seine"),
                                                             (QUESTIONS["q2"][0], "gustave_eiffel")]
    for (_, gold, negatives), q in zip(pairs, ["q1", "q2"]):
        assert negatives and gold not in negatives
        assert not {str(index.ids[n]) for n in negatives} & set(bench.qrels[q])


def test_held_out_split_is_seeded_and_disjoint():
    qids = [f"q{i}" for i in range(10)]
    fit, held = held_out_split(qids, 0.2, seed=0)
    assert len(held) == 2 and len(fit) == 8 and not set(fit) & set(held) and set(fit) | set(held) == set(qids)
    assert held_out_split(list(reversed(qids)), 0.2, seed=0) == (fit, held)   # the order given does not matter
    assert held_out_split(qids, 0.2, seed=1) != (fit, held)


def test_the_encoder_version_changes_with_what_decides_the_fit(monkeypatch):
    """The asset keeps the last fit of the same version: the version must move with the data, the spec, the seed,
    the vectors it is compared with and the fitting code, and with nothing else."""
    index, bench = tiny_index(), tiny_benchmark()
    spec = EncoderSpec()
    version = encoder_version(index, bench, spec, 0)
    assert encoder_version(tiny_index(), tiny_benchmark(), EncoderSpec(), 0) == version
    other_backend = replace(index, embedder=Embedder(index.embedder.model_name, backend="torch")) \
        if index.embedder.backend != "torch" else replace(index, embedder=Embedder(backend="onnx"))
    fewer = tiny_benchmark(list(bench.queries)[:-1])
    assert len({version, encoder_version(index, bench, spec.model_copy(update={"lr": 1e-5}), 0),
                encoder_version(index, bench, spec, 1), encoder_version(other_backend, bench, spec, 0),
                encoder_version(index, fewer, spec, 0)}) == 5
    monkeypatch.setattr(encoder, "recipe", lambda: "other code")
    assert encoder_version(index, bench, spec, 0) != version


@pytest.mark.slow
def test_tune_encoder_fits_on_the_rest_and_decides_on_the_held_out_queries(tmp_path):
    index, bench = tiny_index(), tiny_benchmark()
    spec = EncoderSpec(held_out=0.25, batch_size=6, epochs=2, lr=5e-5)   # the 6 fit pairs: one step an epoch
    result = tune_encoder(index, bench, spec, "ndcg@10", tmp_path / "fit", seed=0)
    fit, held = held_out_split(list(bench.queries), 0.25, 0)
    assert (result.fit_queries, result.held_out_queries, result.pairs) == (len(fit), len(held), len(fit)) == (6, 2, 6)
    assert set(result.base) == set(result.tuned) == {0.5, 0.65, 0.8}
    # the gain is the paired per-query difference of the best weights, adopted beyond one standard error of it
    assert result.gain == pytest.approx(max(result.tuned.values()) - max(result.base.values()), abs=1e-3)
    assert result.gain_se >= 0
    assert result.adopted == (result.gain > result.gain_se)
    assert result.embeddings.shape == index.embeddings.shape
    assert np.allclose(np.linalg.norm(result.embeddings, axis=1), 1.0, atol=1e-4)
    # the saved model is the one whose vectors were compared, and it moved away from the packaged encoder
    texts = chunk_texts(index.chunks)
    saved = Embedder(str(tmp_path / "fit"), backend="torch")
    assert np.allclose(saved.encode(texts), result.embeddings, atol=1e-5)
    assert not np.allclose(result.embeddings, load_model().encode(texts, normalize_embeddings=True), atol=1e-4)
    # the held-out figures are the tuned hybrid's own (HybridRetriever through run_benchmark) on those vectors
    held_bench = tiny_benchmark(held)
    tuned_index = replace(index, embeddings=result.embeddings, embedder=saved)
    for w, figure in result.tuned.items():
        run = run_benchmark(HybridRetriever(tuned_index, w), held_bench).run
        assert figure == round(named_metric(held_bench.qrels, run, "ndcg@10"), 4)
    # the same fit under a threshold it cannot pass is not adopted, with the same figures
    strict = tune_encoder(index, bench, spec.model_copy(update={"min_gain": 1.0}), "ndcg@10", tmp_path / "strict",
                          seed=0)
    assert not strict.adopted and strict.tuned == result.tuned and strict.base == result.base


def test_the_encoder_gain_is_paired_per_query_between_the_best_weights():
    base = {0.5: {"a": 0.2, "b": 0.4, "c": 0.6}, 0.8: {"a": 0.5, "b": 0.5, "c": 0.5}}
    tuned = {0.5: {"a": 0.9, "b": 0.1, "c": 0.7}, 0.8: {"a": 0.6, "b": 0.7, "c": 0.5}}
    gain, se = paired_gain(base, tuned)       # tuned at 0.8 (mean 0.6) against base at 0.5 or 0.8 (0.4 and 0.5)
    d = np.array([0.1, 0.2, 0.0])
    assert gain == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert means(tuned) == {0.5: 0.5667, 0.8: 0.6}
    assert paired_gain({0.5: {"a": 0.1}}, {0.5: {"a": 0.3}})[1] == float("inf")   # one query: no error estimate


def test_tune_encoder_refuses_candidate_sets_and_too_few_queries(tmp_path):
    index = tiny_index()
    with pytest.raises(ValueError, match="ranks each question's own candidates"):
        tune_encoder(index, tiny_benchmark(within={q: ["seine", "danube"] for q in QUESTIONS}), EncoderSpec(),
                     "ndcg@10", tmp_path)
    with pytest.raises(ValueError, match="none left to fit on"):
        tune_encoder(index, tiny_benchmark(["q1"]), EncoderSpec(), "ndcg@10", tmp_path)


def test_encoder_spec_is_validated_in_the_tuning_section():
    assert TuningSpec.model_validate({}).encoder is None
    assert TuningSpec.model_validate({"encoder": {}}).encoder == EncoderSpec()
    with pytest.raises(ValueError, match="held_out"):
        TuningSpec.model_validate({"encoder": {"held_out": 1.5}})
    with pytest.raises(ValueError, match="epoch"):
        TuningSpec.model_validate({"encoder": {"epoch": 2}})   # a misspelt key is an error, not ignored
