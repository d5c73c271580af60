"""The learned model's optional question-likelihood feature (`question_likelihood_z`): the real local model's
log-probability of the question after each candidate (Gemma-3-270M in-process, through the call cache), z-scored
over the question's candidates; the tuner's CV tries every learned point with and without it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from causal_assets.core.retrievers.factory import build_retriever, uses_scorer
from causal_assets.core.retrievers.learned.features import FEATURES, QUESTION_LIKELIHOOD, FeatureExtractor
from causal_assets.core.retrievers.learned.retriever import CausalRelevanceModel, attach_target, candidate_table, fit_model
from causal_assets.core.tuning.search import tune
from causal_assets.core.registry.tuning import TuningSpec
from tests.core.tiny_corpus import QUESTIONS, tiny_benchmark, tiny_index

pytestmark = pytest.mark.llm

PARAMS = {"learning_rate": 0.2, "max_leaf_nodes": 4, "min_samples_leaf": 2, "max_iter": 40}


def _table(extractor, ids):
    queries = {q: QUESTIONS[q][0] for q in ids}
    return candidate_table(extractor, queries, extractor.index.embedder.encode_queries(list(queries.values())))


@pytest.mark.slow
def test_the_question_is_likelier_after_the_paragraph_that_answers_it(scorer):
    index = tiny_index()
    extractor = FeatureExtractor(index, depth=12, question_likelihood=True, scorer=scorer)
    assert extractor.features == (*FEATURES, *QUESTION_LIKELIHOOD) and extractor.settings()["question_likelihood"]
    table = _table(extractor, list(QUESTIONS))
    assert list(table.columns[3:]) == list(extractor.features)
    z = table.set_index(["query_id", "chunk_id"])["question_likelihood_z"]
    # z-scored per question: mean 0 over its candidates
    assert np.allclose(table.groupby("query_id")["question_likelihood_z"].mean(), 0.0)
    above = [z[(q, doc)] > 0 for q, (_, doc) in QUESTIONS.items()]
    first = [z.loc[q].idxmax() == doc for q, (_, doc) in QUESTIONS.items()]
    assert all(above) and sum(first) >= 6, (above, first)


def test_without_a_scorer_the_feature_is_refused_not_left_empty():
    with pytest.raises(ValueError, match="need a log-probability scorer"):
        FeatureExtractor(tiny_index(), question_likelihood=True)
    assert "question_likelihood_z" not in FeatureExtractor(tiny_index()).features


def test_a_model_that_reads_the_feature_is_rebuilt_only_with_a_scorer(scorer, tmp_path):
    index = tiny_index()
    extractor = FeatureExtractor(index, depth=12, question_likelihood=True, scorer=scorer)
    table = attach_target(_table(extractor, list(QUESTIONS)), "qrels", tiny_benchmark().qrels)
    model = fit_model(table, "qrels", PARAMS, extractor.settings())
    assert model.features[-1] == "question_likelihood_z" and model.extractor_settings["question_likelihood"]
    with pytest.raises(ValueError, match="disagree"):   # settings that say otherwise than the table
        fit_model(table, "qrels", PARAMS, {**extractor.settings(), "question_likelihood": False})
    without = fit_model(table.drop(columns=list(QUESTION_LIKELIHOOD)), "qrels", PARAMS,
                        {**extractor.settings(), "question_likelihood": False})
    assert without.features == FEATURES
    path = str(model.save(tmp_path / "learned.joblib"))
    assert uses_scorer("learned", {"model_path": path}, False)
    assert uses_scorer("fusion", {"members": {"learned": {"model_path": path}, "hybrid": {}}}, False)
    assert not uses_scorer("learned", {"model": without}, True)
    with pytest.raises(ValueError, match="question-likelihood feature"):
        build_retriever("learned", index, {"model_path": path})
    learned = build_retriever("learned", index, {"model_path": path}, scorer=scorer)
    hits = learned.retrieve_many([QUESTIONS[q][0] for q in QUESTIONS], 3)
    assert sum(h[0].chunk_id == doc for h, (_, doc) in zip(hits, QUESTIONS.values())) >= 7
    assert np.allclose(CausalRelevanceModel.load(path).predict(table), model.predict(table))


def test_the_tuner_tries_every_learned_point_with_and_without_the_feature(scorer):
    index, bench = tiny_index(), tiny_benchmark()
    spec = TuningSpec(retrievers=["hybrid", "learned"], metric="mrr@10", cv_folds=2, learned_question_likelihood=True)
    logged = []
    result = tune(index, bench, spec, {}, log=logged.append, scorer=lambda: scorer)
    trials = result.trials[result.trials["retriever"] == "learned"]
    used = [bool(json.loads(p).get("question_likelihood")) for p in trials["params"]]
    assert used.count(True) == used.count(False) == len(used) // 2 > 0
    model = result.models["learned"]
    assert model.extractor_settings["question_likelihood"] == (model.features[-1] == "question_likelihood_z")
    assert any("question likelihood scored" in m for m in logged)
    # no scorer configured: tuned without the feature, and the log says so
    logged.clear()
    plain = tune(index, bench, spec, {}, log=logged.append)
    assert plain.models["learned"].features == FEATURES
    assert any("no log-probability scorer configured" in m for m in logged)
