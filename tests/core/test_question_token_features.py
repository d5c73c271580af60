"""The learned model's token-level question-likelihood features (`question_token_features`) and the per-token
log-probabilities they are read from: journalled by the scorer with each continuation's sum, so one evaluation per
candidate serves the question's total likelihood and its parts."""
from __future__ import annotations

import numpy as np
import pytest

from causal_assets.core.retrievers.learned.features import QUESTION_LIKELIHOOD, question_token_features
from causal_assets.core.llm.scoring import ScoreRequest
from causal_assets.core.retrievers.similarity import zscore


def test_a_candidate_that_explains_the_part_the_likeliest_one_does_not_is_lifted():
    # three candidates x three question tokens: A explains the first two (the question's named entity), B the
    # third (the relation asked about), C nothing in particular
    tokens = np.array([[-1.0, -1.0, -5.0],    # A, total -7: the likeliest, the anchor
                       [-5.0, -5.0, -1.0],    # B, total -11: the least likely of all
                       [-2.0, -2.0, -6.0]])   # C, total -10
    got = question_token_features(tokens, tokens.sum(axis=1))
    assert set(got) == set(QUESTION_LIKELIHOOD[1:])
    # gains over the per-token median (-2, -2, -5): A 1 + 1, B 4, C none
    assert np.allclose(got["token_gain_z"], zscore(np.array([2.0, 4.0, 0.0])))
    # best pair with one of the three likeliest: A+B explains every token (-1 each), C's best pair is with B
    assert np.allclose(got["pair_coverage_z"], zscore(np.array([-3.0, -3.0, -5.0])))
    # what each adds to the anchor A (B: 4 on the third token); A's own value is its gain over C, the second
    assert np.allclose(got["anchor_complement_z"], zscore(np.array([3.0, 4.0, 0.0])))
    assert got["token_gain_z"].argmax() == got["anchor_complement_z"].argmax() == 1   # B, last by total


def test_one_candidate_or_no_question_tokens_give_zeros():
    one = question_token_features(np.array([[-1.0, -2.0]]), np.array([-3.0]))
    assert all(v.shape == (1,) and not v.any() for v in one.values())
    blank = question_token_features(np.zeros((3, 0)), np.zeros(3))
    assert all(v.shape == (3,) and not v.any() for v in blank.values())


@pytest.mark.llm
def test_per_token_values_are_journalled_and_an_older_entry_is_scored_again_when_they_are_asked_for(scorer):
    cache = scorer.cache
    req = ScoreRequest("Rush is a Canadian rock band.\n\nQuestion:", (" Which band is Canadian?",))
    first = scorer.score_many([req])[0]
    (values,) = first.token_logprobs
    assert len(values) == first.n_tokens[0] > 3 and sum(values) == first.best
    # from the cache, with them (and whether the caller asks for them does not change the key)
    again = scorer.score_many([ScoreRequest(req.prompt, req.continuations, token_logprobs=True)])[0]
    assert again.cached and again.token_logprobs == first.token_logprobs
    # an entry journalled before per-token values were kept: served as it is when they are not needed,
    # scored again (and journalled anew) when they are
    old = dict(cache.get(first.key).response)
    del old["token_logprobs"]
    cache.put(first.key, scorer.model_id, {"kind": "score"}, old, f"{old['logprobs'][0]:.6f}", 0, 0, 0.0)
    plain = scorer.score_many([req])[0]
    assert plain.cached and plain.token_logprobs == () and plain.best == first.best
    asked = scorer.score_many([ScoreRequest(req.prompt, req.continuations, token_logprobs=True)])[0]
    # scored again after its own prompt, whose KV prefix it reuses: the tail runs in a batch of another shape, and
    # llama.cpp's quantized kernels differ in the last digits across shapes (measured: up to 0.12 nats a token
    # on this 16-token request; README, the in-process scorer)
    assert not asked.cached and asked.token_logprobs[0] == pytest.approx(values, abs=0.25)
    assert scorer.score_many([req])[0].token_logprobs == asked.token_logprobs   # the newest entry wins
