"""The order a trial shows its documents in (`monte_carlo.document_order`): each subset in its own seeded order, so
that a document's effect does not depend on where the pool's one shuffle happened to put it. The solver here is
simulated: it reads the last documents of a prompt best, as small models do."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from causal_assets.core.labeling.design import balanced_stages
from causal_assets.core.labeling.runner import LabelingParams, label_question, presented
from causal_assets.core.labeling.solver import LikelihoodSolver
from causal_assets.core.llm.scoring import ScoreResult

pytestmark = pytest.mark.unit

QUESTION = "Which option sets the retry delay?"
ANSWER = ("ans", "retry", "Use --retry-delay SECONDS to wait between retries.")
NOTES = [(f"n{i}", f"Note {i}", f"Weather note number {i}: mild and dry.") for i in range(11)]


class RecencyScorer:
    """The answer's log-likelihood: -8, +4 when the answer's document is among the last three documents of the
    prompt and +1 elsewhere, and Gaussian noise (sd 0.3) seeded by the prompt."""

    encodes_separately = False

    def score_many(self, requests):
        out = []
        for r in requests:
            starts = sorted(r.prompt.find(text) for _, _, text in [ANSWER, *NOTES] if text in r.prompt)
            at = r.prompt.find(ANSWER[2])
            gain = 0.0 if at < 0 else (4.0 if at in starts[-3:] else 1.0)
            noise = np.random.default_rng(int(hashlib.sha256(r.prompt.encode()).hexdigest()[:8], 16)).normal(0, 0.3)
            out.append(ScoreResult((-8.0 + gain + noise,), (3,), 100, 100, 0.0, False,
                                   hashlib.sha1(r.prompt.encode()).hexdigest()))
        return out


def _effect(order: str, answer_at: int) -> tuple[float, float, float]:
    pool = [*NOTES]
    pool.insert(answer_at, ANSWER)
    config = LabelingParams(outcome="likelihood", threshold_nats=2.0, document_order=order, budget=32)
    out = label_question("q1", QUESTION, "--retry-delay", pool, LikelihoodSolver(RecencyScorer(), "answer_f1"), config)
    e = next(d for d in out.result.docs if d.doc == "ans")
    return e.delta_p, e.ci_low, e.ci_high


def test_the_pool_order_makes_the_effect_depend_on_the_pool_position_and_shuffled_trials_do_not():
    first, last = _effect("pool", 0), _effect("pool", 11)
    assert first[0] < 1.5 and last[0] > 3.5          # read first in every trial, or last in every trial
    a, b = _effect("shuffled", 0), _effect("shuffled", 11)
    assert abs(a[0] - b[0]) < 0.6, (a, b)              # the same document, wherever the pool put it
    assert a[1] < b[2] and b[1] < a[2]                 # the intervals overlap
    assert 1.5 < a[0] < 3.0                            # the average over the positions it is read at


def test_a_subset_is_always_shown_in_the_same_order_and_every_document_moves_across_trials():
    config = LabelingParams(document_order="shuffled")
    rows, _ = balanced_stages(12, 32, np.random.default_rng(0))
    orders = [presented(row, "q1", config) for row in rows]
    assert all(sorted(o) == list(np.flatnonzero(r)) for o, r in zip(orders, rows))   # the subset's own members
    # seeded: a re-run asks the same
    assert all(np.array_equal(o, presented(r, "q1", config)) for o, r in zip(orders, rows))
    assert not np.array_equal(orders[0], presented(rows[0], "q2", config))   # another question, another order
    places = {j: {list(o).index(j) / max(1, len(o) - 1) for o in orders if j in o} for j in range(12)}
    assert all(min(p) < 0.35 and max(p) > 0.65 for p in places.values())   # read early in some trials, late in others
    pool = LabelingParams(document_order="pool")
    assert all(np.array_equal(presented(r, "q1", pool), np.flatnonzero(r)) for r in rows)


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="document_order"):
        LabelingParams(document_order="random")


def test_a_questions_file_shuffles_each_trial_and_a_benchmark_keeps_the_pool_order(tmp_path):
    from causal_assets.core.registry.benchmarks import load_benchmark_registry

    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "What?", "answer": "x"}\n')
    (tmp_path / "corpora.yaml").write_text("corpora:\n  - {name: default, loader: python_package, package: networkx}\n"
                                           "  - {name: docs, loader: folder, path: .}\n")
    (tmp_path / "benchmarks.yaml").write_text(
        "benchmarks:\n  - {name: mine, loader: questions, corpus: docs, path: q.jsonl}\n"
        "  - {name: pinned, loader: questions, corpus: docs, path: q.jsonl, monte_carlo: {document_order: pool}}\n")
    registry = load_benchmark_registry(tmp_path / "benchmarks.yaml", tmp_path, tmp_path / "corpora.yaml")
    assert LabelingParams.from_settings(registry["mine"].monte_carlo_settings).document_order == "shuffled"
    assert LabelingParams.from_settings(registry["pinned"].monte_carlo_settings).document_order == "pool"
    assert LabelingParams().document_order == "pool"
