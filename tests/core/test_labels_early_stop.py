"""The regression labeller runs its design's first orthogonal block alone and the rest of the budget only where a
label is still UNCERTAIN after it (`monte_carlo.stop_when_decided`), against a real HTTP server on 127.0.0.1 that
echoes its prompt: a planted-truth solver, "correct" exactly when a document holding the answer is in the subset."""
from __future__ import annotations

import numpy as np
import pytest

from causal_assets.core.labeling.design import balanced_design, balanced_stages
from causal_assets.core.labeling.runner import LabelingParams, estimate, label_question
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.core.llm.cache import CallCache
from causal_assets.core.llm.client import LLMClient
from tests.helpers.endpoint import FakeOpenAI

QUESTION = "Which island did the expedition finally reach?"
NOTES = [(f"d{i}", f"Doc {i}", f"An unrelated note number {i} about weather.") for i in range(9)]
GOLD = ("gold", "Log", "The expedition finally reached Zanzibar after ninety days.")
# a pass/fail effect of 0.2: 16 trials bound a document that changes nothing within it (their interval +-0.17)
THRESHOLD = 0.2


@pytest.mark.parametrize("n_docs,n_trials,first", [(10, 24, 16), (10, 16, 16), (8, 40, 16), (5, 12, 8), (10, 12, 12)])
def test_the_stages_are_the_balanced_design_and_the_first_block_is_orthogonal(n_docs, n_trials, first):
    x, stage = balanced_stages(n_docs, n_trials, np.random.default_rng(7))
    assert (x == balanced_design(n_docs, n_trials, np.random.default_rng(7))).all()
    block = x[stage == 0]
    assert len(block) == first
    if first & (first - 1) == 0:   # a whole Hadamard block: balanced columns, orthogonal pairs
        z = 2.0 * block - 1.0
        assert (z.T @ z == first * np.eye(n_docs)).all()


def _label(url, cache_path, pool, **params):
    client = LLMClient(url, "fake-model", cache=CallCache(cache_path), backoff_s=0.01, max_backoff_s=0.05)
    config = LabelingParams(estimator="regression", outcome="success", budget=24, threshold=THRESHOLD, **params)
    return label_question("q1", QUESTION, "Zanzibar", pool, BlindSolver(client, "answer_containment"), config)


def test_a_first_block_that_decides_every_label_ends_the_question(tmp_path):
    pool = [*NOTES, GOLD]
    with FakeOpenAI() as server:
        early = _label(server.url, tmp_path / "c.db", pool)
        whole = _label(server.url, tmp_path / "c.db", pool, stop_when_decided=False)
    assert len(early.trials) == 16 and len(whole.trials) == 24
    for out in (early, whole):
        labels = out.result.labels()
        assert labels["gold"] == "YES" and all(labels[d] == "NO" for d, _, _ in NOTES)
    # the first block is part of the whole design, and its calls were paid once
    assert {tuple(t["subset"]) for t in early.trials} <= {tuple(t["subset"]) for t in whole.trials}
    assert sum(not c["cached"] for c in whole.calls) == 8


def test_a_label_still_uncertain_after_the_first_block_gets_the_rest_of_the_budget(tmp_path):
    # three documents each hold the answer: the solver fails only without all three, an interaction the first
    # block's main effects cannot resolve, so their labels stay UNCERTAIN after 16 trials
    holders = [(f"h{i}", f"Log {i}", "The expedition finally reached Zanzibar.") for i in range(3)]
    pool = [*NOTES[:7], *holders]
    with FakeOpenAI() as server:
        out = _label(server.url, tmp_path / "c.db", pool)
    first = estimate(out.trials[:16], [d for d, _, _ in pool], LabelingParams(estimator="regression",
                                                                                outcome="success", threshold=THRESHOLD))
    assert any(e.label == "UNCERTAIN" for e in first.docs)
    assert len(out.trials) == 24
