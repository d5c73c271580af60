"""The Monte Carlo labelling loop for one question: propose subsets, ask the blind solver, validate, record.

Estimators: `adaptive` (balanced first batch, then trials only where a document's interval still straddles the
threshold, labels from the joint regression) and `naive` (seed 001: N Bernoulli(0.5) subsets, ΔP = mean success
in - out). Infrastructure failures (timeouts, 429/5xx, malformed output) are journalled as errored calls and
never become trials; after `max_consecutive_errors` failed batches the step fails, and a re-run resumes for
free from the call cache (the subsets are seeded by question id, so the same calls are asked again).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from causal_assets.core.labeling.design import bernoulli_design
from causal_assets.core.labeling.estimators import AdaptiveLabeler, LabelingResult, naive, regression
from causal_assets.core.labeling.solver import BlindSolver
from causal_assets.core.labeling.validators import validate
from causal_assets.core.llm.errors import BudgetExceeded, LLMError


@dataclass(frozen=True)
class MCConfig:
    estimator: str = "adaptive"    # adaptive | naive
    threshold: float = 0.1         # ΔP above which a document is relevant
    budget: int = 48               # solver calls per question (adaptive: at most; naive: exactly)
    batch: int = 8
    alpha: float = 0.05            # 95% intervals
    seed: int = 0
    max_consecutive_errors: int = 3


@dataclass
class QuestionOutcome:
    trials: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    result: LabelingResult | None = None
    stopped: str = ""              # "" | "budget_exceeded"


def question_rng(question_id: str, seed: int) -> np.random.Generator:
    return np.random.default_rng(int(hashlib.sha256(f"{seed}:{question_id}".encode()).hexdigest()[:16], 16))


def label_question(question_id: str, question: str, gold: str | list[str], pool: list[tuple[str, str, str]],
                   solver: BlindSolver, config: MCConfig, aliases: list[str] | None = None) -> QuestionOutcome:
    """pool: [(doc_id, title, text)]. Returns the trials, every call (ok or errored) and the labels."""
    doc_ids = [d for d, _, _ in pool]
    rng = question_rng(question_id, config.seed)
    out = QuestionOutcome()
    labeler = AdaptiveLabeler(len(pool), config.threshold, config.budget, config.batch, rng=rng, doc_ids=doc_ids) \
        if config.estimator == "adaptive" else None
    pending = None if labeler else bernoulli_design(len(pool), config.budget, 0.5, rng)
    kw = {"aliases": aliases or ()} if solver.validator == "fqn_match" else {}
    errors_in_a_row = 0
    while True:
        subsets = labeler.next_subsets() if labeler else pending
        pending = np.zeros((0, len(pool)), dtype=bool)
        if len(subsets) == 0:
            break
        try:
            results = solver.attempt_many(question, [[(pool[j][1], pool[j][2]) for j in np.flatnonzero(row)]
                                                     for row in subsets])
        except BudgetExceeded:
            out.stopped = "budget_exceeded"
            break
        ok_rows, outcomes = [], []
        for row, res in zip(subsets, results):
            members = [doc_ids[j] for j in np.flatnonzero(row)]
            if isinstance(res, BaseException):
                if isinstance(res, BudgetExceeded):
                    out.stopped = "budget_exceeded"
                out.calls.append(dict(question_id=question_id, status="error", error=type(res).__name__,
                                      detail=str(res)[:300], subset=members, cached=False, latency_s=None,
                                      prompt_tokens=None, completion_tokens=None, call_key=None))
                continue
            verdict = validate(solver.validator, res.text, gold, **kw)
            out.calls.append(dict(question_id=question_id, status="ok", error="", detail="", subset=members,
                                  cached=res.cached, latency_s=res.latency_s, prompt_tokens=res.prompt_tokens,
                                  completion_tokens=res.completion_tokens, call_key=res.key))
            out.trials.append(dict(question_id=question_id, trial=len(out.trials), subset=members,
                                   n_docs=len(members), success=bool(verdict.passed), score=float(verdict.score),
                                   answer=res.text[:500], call_key=res.key, cached=res.cached))
            ok_rows.append(row)
            outcomes.append(float(verdict.passed))
        if ok_rows and labeler:
            labeler.record(np.array(ok_rows), np.array(outcomes))
        errors_in_a_row = errors_in_a_row + 1 if len(ok_rows) < len(subsets) else 0
        if out.stopped:
            break
        if errors_in_a_row >= config.max_consecutive_errors:
            raise LLMError(f"question {question_id}: {errors_in_a_row} batches in a row had infrastructure "
                           "errors; completed calls are cached, re-run to resume")
        if labeler is None:
            # naive: retry only the errored subsets, once per batch
            failed = [row for row, res in zip(subsets, results) if isinstance(res, BaseException)]
            pending = np.array(failed, dtype=bool).reshape(-1, len(pool))
    # The online labeler's own final labels (its interaction candidates follow what it has found so far).
    out.result = labeler.labels() if labeler else estimate(out.trials, doc_ids, config)
    return out


def estimate(trials: list[dict], doc_ids: list[str], config: MCConfig, estimator: str | None = None) -> LabelingResult:
    """Labels from recorded trials (no LLM): the same function the mc_labels asset re-applies."""
    x = np.array([[d in set(t["subset"]) for d in doc_ids] for t in trials], dtype=bool).reshape(-1, len(doc_ids))
    y = np.array([float(t["success"]) for t in trials])
    if (estimator or config.estimator) == "naive":
        return naive(x, y, config.threshold, config.alpha, doc_ids=doc_ids)
    # Same model as AdaptiveLabeler's defaults, re-fitted on all trials (labels can differ slightly from the
    # online labeler's last batch, which also prefers documents it had already found).
    return regression(x, y, config.threshold, config.alpha, interactions=True, max_candidates=4, interaction_z=1.5,
                      interaction_z_or=2.5,
                      doc_ids=doc_ids)
