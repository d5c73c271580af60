"""A bridge document, one that raises the answer only together with another, is labelled YES with that partner
(`core/labeling/conditional.py`); an additive pool is labelled as before. The solver here is simulated: the answer's
log-likelihood is a planted function of which documents the prompt holds, plus seeded noise."""
from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from causal_assets.core.labeling.conditional import second_block, with_partners
from causal_assets.core.labeling.estimators import NO, YES, regression
from causal_assets.core.labeling.runner import LabelingParams, label_question, label_table
from causal_assets.core.labeling.solver import LikelihoodSolver
from causal_assets.core.llm.scoring import ScoreResult

pytestmark = pytest.mark.unit

QUESTION = "What is the capital of the country where Zorblat was born?"
BRIDGE = ("a", "Zorblat", "Zorblat was born in Veltria.")               # names the bridge entity
ANSWER = ("b", "Veltria", "The capital of Veltria is Quenmore.")        # holds the answer
NOTES = [(f"n{i}", f"Note {i}", f"Weather note number {i}: mild and dry.") for i in range(10)]
POOL = [BRIDGE, *NOTES[:5], ANSWER, *NOTES[5:]]   # 12 documents, as a questions file pools


class PlantedScorer:
    """The answer's log-likelihood: -8, +3 with the answer's document, +`together` more with both documents, +`alone`
    with the bridge document alone, and Gaussian noise (sd `noise`) seeded by the prompt (the same prompt, the same
    score, as a deterministic model gives)."""

    encodes_separately = False

    def __init__(self, together: float, alone: float = 0.0, noise: float = 0.5):
        self.together, self.alone, self.noise, self.calls = together, alone, noise, 0

    def score_many(self, requests):
        out = []
        for r in requests:
            self.calls += 1
            a, b = BRIDGE[2] in r.prompt, ANSWER[2] in r.prompt
            noise = np.random.default_rng(int(hashlib.sha256(r.prompt.encode()).hexdigest()[:8], 16)).normal(0, self.noise)
            value = -8.0 + 3.0 * b + self.together * (a and b) + self.alone * a + noise
            out.append(ScoreResult((value,), (3,), 100, 100, 0.0, False, hashlib.sha1(r.prompt.encode()).hexdigest()))
        return out


CONFIG = LabelingParams(outcome="likelihood", threshold_nats=2.0, second_block="beside_yes", beside_yes=True)
BEFORE = LabelingParams(outcome="likelihood", threshold_nats=2.0)   # the defaults: balanced rows, no effect beside


def _label(scorer: PlantedScorer, config: LabelingParams = CONFIG):
    return label_question("q1", QUESTION, "Quenmore", POOL, LikelihoodSolver(scorer, "answer_containment"), config)


def test_a_document_that_helps_only_beside_its_partner_is_yes_with_that_partner():
    # together +4 nats, alone 0: averaged over the balanced subsets (the partner in half of them) the bridge's
    # effect is 2 nats, the threshold itself; a pool of 12 leaves the first block no room for interaction terms
    out = _label(PlantedScorer(together=4.0))
    labels = {e.doc: e for e in out.result.docs}
    assert labels["b"].label == YES and labels["b"].partners == ()
    bridge = labels["a"]
    assert bridge.label == YES and bridge.partners == ("b",)
    assert bridge.conditional_ci_low > 2.0 and bridge.conditional_delta_p == pytest.approx(4.0, abs=0.5)
    assert bridge.marginal_ci_low < 2.0 < bridge.ci_low
    assert all(labels[d].label == NO for d, _, _ in NOTES)
    # `budget: auto` for 12 documents: the first block of 16, then 8 rows holding the YES document in
    assert len(out.trials) == 24 and all("b" in t["subset"] for t in out.trials[16:])


def test_the_label_table_says_with_whom_a_bridge_document_helps():
    import pandas as pd

    out = _label(PlantedScorer(together=4.0))
    pools = pd.DataFrame([dict(query_id="q1", chunk_id=d, title=t, text=x, position=i, origin="seed",
                               question=QUESTION, answer="Quenmore", aliases="[]")
                          for i, (d, t, x) in enumerate(POOL)])
    labels, pairs = label_table(pools, pd.DataFrame(out.trials), CONFIG)
    row = labels[(labels["chunk_id"] == "a") & (labels["estimator"] == "regression")].iloc[0]
    assert row["label"] == YES and row["partners"] == '["b"]' and row["beside_yes_ci_low"] > 2.0
    bridge = next(c for c in pairs[0]["candidates"] if c["fqn"] == "a")
    assert bridge["helps_with"] == ["b"] and "helps together with b" in bridge["why"]


def test_an_additive_pool_is_labelled_as_before():
    # the bridge document adds 1 nat on its own and nothing with its partner: below the threshold either way
    now = _label(PlantedScorer(together=0.0, alone=1.0))
    before = _label(PlantedScorer(together=0.0, alone=1.0), BEFORE)
    assert now.result.labels() == before.result.labels()
    assert now.result.labels()["a"] == NO and now.result.labels()["b"] == YES
    assert all(e.partners == () for e in now.result.docs)


def test_nothing_changes_without_a_yes_document_or_without_trials_beside_it():
    rng = np.random.default_rng(0)
    x = rng.random((24, 6)) < 0.5
    y = rng.normal(0, 0.3, 24)
    result = regression(x, y, 2.0, 0.2, interactions=False)
    assert not result.yes()
    assert with_partners(result, x, y, 0.2) == result
    assert second_block(result, 8, rng) is None
    # a YES document present in fewer than four trials: no effect beside it is measured
    y2 = y + 6.0 * x[:, 0]
    found = regression(x, y2, 2.0, 0.2, interactions=False)
    assert found.yes() == [0]
    few = x.copy()
    few[:, 0] = False
    few[:3, 0] = True
    assert with_partners(replace(found), few, y2, 0.2).docs == found.docs


def test_the_second_block_holds_the_yes_set_in_and_balances_the_others():
    rng = np.random.default_rng(1)
    x = rng.random((16, 5)) < 0.5
    y = 5.0 * x[:, 2] + rng.normal(0, 0.2, 16)
    result = regression(x, y, 2.0, 0.2, interactions=False)
    rows = second_block(result, 8, np.random.default_rng(2))
    assert rows[:, 2].all()
    others = np.delete(rows, 2, axis=1)
    assert (others.sum(axis=0) == 4).all()
