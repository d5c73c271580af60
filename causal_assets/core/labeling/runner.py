"""The Monte Carlo labelling loop for one question: propose subsets, run the blind solver, record.

Outcomes (``LabelingParams.outcome``): ``likelihood`` (the gold answer's log-probability given the subset, by teacher
forcing: graded, one prompt evaluation per trial), ``success`` (greedy answer validated pass/fail) or ``both``
(labels from the likelihood, the classic ΔP from the pass/fail trials reported beside them).

Estimators: ``adaptive`` (balanced first batch, then trials only where a document's interval still straddles the
threshold, labels from the joint regression), ``regression`` (a balanced design of ``budget`` trials, then
the joint regression with interactions; with ``stop_when_decided``, its first orthogonal block is run alone and the
rest only where a label is still UNCERTAIN after it) and ``naive`` (the classic protocol: Bernoulli(0.5) subsets, ΔP = mean outcome in -
out). Infrastructure failures (timeouts, 429/5xx, malformed output) are journalled as errored calls and never
become trials; after ``max_consecutive_errors`` failed batches the step fails, and a re-run resumes for free from
the call cache (the subsets are seeded by question id, so the same calls are asked again).
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from causal_assets.core.foundation.limits import MAX_BUDGET, MAX_CONSECUTIVE_ERRORS
from causal_assets.core.registry.sections import DEFAULT_BUDGET, budget_for, budget_problem
from causal_assets.core.labeling.conditional import second_block, with_partners
from causal_assets.core.labeling.design import balanced_stages, bernoulli_design
from causal_assets.core.labeling.adaptive import AdaptiveLabeler
from causal_assets.core.labeling.estimators import UNCERTAIN, LabelingResult, naive, regression
from causal_assets.core.labeling.solver import BlindSolver, LikelihoodSolver, answer_continuations
from causal_assets.core.labeling.validators import contains_answer, validate
from causal_assets.core.llm.errors import BudgetExceeded, LLMInfrastructureError

OUTCOMES = ("likelihood", "qa_likelihood", "success", "both")
ESTIMATORS = ("adaptive", "regression", "naive")
DOCUMENT_ENCODINGS = ("auto", "joint", "separate")
SECOND_BLOCKS = ("beside_yes", "balanced")
DOCUMENT_ORDERS = ("pool", "shuffled")


@dataclass(frozen=True)
class LabelingParams:
    """The Monte Carlo labelling's parameters: a benchmark's `monte_carlo:` section, overridden per run."""

    # Defaults chosen by measurement (benchmarks/label_quality.py, Gemma-3-270M, HotpotQA *train* half only):
    # the answer's likelihood alone ranks gold paragraphs at ROC AUC 0.74 (64 train questions); adding the
    # question's own likelihood given the subset finds the first-hop paragraphs that do not hold the answer
    # (AUC 0.93-0.94). Weighting the question's part by 0.5 (its log-probability spans ~10x more tokens than the
    # answer's) gave top-2 precision 0.81 against 0.78 at weight 1; at 16 trials, 80% intervals and a 2-nat
    # threshold, YES labels F1 0.75 with 20% UNCERTAIN (grid of weight x threshold x interval on train questions).
    estimator: str = "regression"  # adaptive | regression | naive
    outcome: str = "qa_likelihood"  # likelihood | qa_likelihood | success | both
    threshold: float = 0.1         # ΔP above which a document is relevant (pass/fail outcomes)
    threshold_nats: float = 2.0    # effect on the (question-and-)answer log-likelihood above which it is relevant
    question_weight: float = 0.5   # weight of the question's own log-likelihood in the qa_likelihood outcome
    # trials per question (adaptive: at most; otherwise exactly); "auto": derived from each pool's size
    budget: int | str = DEFAULT_BUDGET
    batch: int = 8
    alpha: float = 0.2             # 80% intervals
    seed: int = 0
    # regression: run the design's first orthogonal block (16 trials for 8-15 documents), and the rest of the
    # budget only where a label is still UNCERTAIN after it. Chosen on HotpotQA's train half (docs/decisions.md).
    stop_when_decided: bool = True
    # regression: the rows run after the first block where a label is undecided. "balanced" runs the design's own
    # rows; "beside_yes" holds the documents already YES in and balances the others (a bridge document's effect
    # beside its partner; with no YES document yet, the balanced rows). `beside_yes`: also label a document YES when
    # its effect in the trials holding every YES document is decided above the threshold (core/labeling/
    # conditional.py). Both off by default: with Gemma-3-270M they found no bridge document on HotpotQA's train
    # half and cost precision (docs/decisions.md, "Labels"); they are for a solver that composes two hops.
    second_block: str = "balanced"
    beside_yes: bool = False
    max_consecutive_errors: int = 3
    # scoring outcomes: "joint" (the solver reads the documents together, as a generating solver does),
    # "separate" (each document encoded once per question on its own, and only the question and the answer read
    # them all: core/llm/separate.py; in-process llama.cpp only) or "auto" (separate where the scorer can)
    document_encoding: str = "auto"
    # the order a trial shows its documents in: "pool" (the pool's one shuffled order in every trial) or "shuffled"
    # (each subset in its own seeded order, so a document's effect is averaged over the positions it is read at and
    # does not change with where one pool draw put it). "shuffled" is a questions file's default (the registry's
    # QUESTION_MONTE_CARLO: on the man pages the labels of two pool draws agreed at kappa 0.97 instead of 0.83); on
    # HotpotQA's train half it left 16% UNCERTAIN instead of 11%, so the benchmarks keep the pool's order.
    document_order: str = "pool"

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"monte_carlo.outcome must be one of {OUTCOMES}, got {self.outcome!r}")
        if self.document_encoding not in DOCUMENT_ENCODINGS:
            raise ValueError(f"monte_carlo.document_encoding must be one of {DOCUMENT_ENCODINGS}, "
                             f"got {self.document_encoding!r}")
        if self.second_block not in SECOND_BLOCKS:
            raise ValueError(f"monte_carlo.second_block must be one of {SECOND_BLOCKS}, got {self.second_block!r}")
        if self.document_order not in DOCUMENT_ORDERS:
            raise ValueError(f"monte_carlo.document_order must be one of {DOCUMENT_ORDERS}, "
                             f"got {self.document_order!r}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"monte_carlo.estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        # The registry refuses these when it loads; run config overrides (MonteCarloConfig) come through here,
        # before any trial: a NaN threshold made every label UNCERTAIN, an infinite weight failed after the trials.
        for name, low, high, high_open in (("threshold", 0.0, 1.0, True), ("threshold_nats", 0.0, math.inf, False),
                                           ("question_weight", 0.0, math.inf, False), ("alpha", 0.0, 1.0, True)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or value < low or (value >= high if high_open else value > high) or (name == "alpha" and value <= 0):
                bounds = {"threshold": "in [0, 1)", "alpha": "in (0, 1)"}.get(name, "finite and at least 0")
                raise ValueError(f"monte_carlo.{name} must be {bounds}, got {value!r}")
        for name, most in ((("budget", MAX_BUDGET),) if self.budget != "auto" else ()) + (("batch", MAX_BUDGET),
                           ("max_consecutive_errors", MAX_CONSECUTIVE_ERRORS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= most:
                also = ' or "auto"' if name == "budget" else ""
                raise ValueError(f"monte_carlo.{name} must be a whole number from 1 to {most:,}{also}, got {value!r}")

    @classmethod
    def from_settings(cls, settings: dict, **overrides) -> "LabelingParams":
        """A benchmark's `monte_carlo` settings (the keys that are not labelling parameters, such as `solver` and
        `split`, left out), then the `overrides` that are not None."""
        given = {k: v for k, v in settings.items() if k in cls.__dataclass_fields__}
        return cls(**{**given, **{k: v for k, v in overrides.items() if v is not None}})

    def budget_for(self, pool_size: int) -> int:
        """Solver calls per question for a pool of `pool_size` documents (`budget: auto` derives them)."""
        return budget_for(self.budget, pool_size)

    def separate_documents(self, scorer) -> bool:
        """Whether likelihood trials encode the documents separately with this scorer (``document_encoding``);
        ValueError, before any call, for ``separate`` with a scorer that reads whole prompts only."""
        can = bool(getattr(scorer, "encodes_separately", False))
        if self.document_encoding == "separate" and not can:
            raise ValueError("monte_carlo.document_encoding: separate needs the in-process llama.cpp scorer (a "
                             f"local solver model); {type(scorer).__name__} scores whole prompts only")
        return can and self.document_encoding != "joint"

    def check_budget(self, pool_size: int) -> None:
        """ValueError when this budget cannot decide a label of a `pool_size`-document pool (`labeling.budget`)."""
        problem = budget_problem(self.budget_for(pool_size), pool_size, self.estimator)
        if problem:
            raise ValueError(f"monte_carlo.budget: {problem}")

    @property
    def label_outcome(self) -> str:
        """The outcome labels are estimated from: the likelihood whenever it is measured."""
        return {"success": "success", "qa_likelihood": "qa_likelihood"}.get(self.outcome, "likelihood")

    @property
    def scores(self) -> bool:
        return self.outcome != "success"

    @property
    def generates(self) -> bool:
        return self.outcome in ("success", "both")

    @property
    def label_threshold(self) -> float:
        return self.threshold if self.label_outcome == "success" else self.threshold_nats


@dataclass
class QuestionOutcome:
    trials: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    result: LabelingResult | None = None
    stopped: str = ""              # "" | "budget_exceeded"


def question_rng(query_id: str, seed: int | str, salt: bytes = b"") -> np.random.Generator:
    """A generator seeded by the question (and `salt`, e.g. a subset's members): the same draws in every run."""
    key = hashlib.sha256(f"{seed}:{query_id}".encode() + salt).hexdigest()[:16]
    return np.random.default_rng(int(key, 16))


def _error_call(query_id: str, members: list[str], res: BaseException, kind: str) -> dict:
    return dict(query_id=query_id, kind=kind, status="error", error=type(res).__name__,
                detail=str(res)[:300], subset=members, cached=False, latency_s=None, prompt_tokens=None,
                completion_tokens=None, call_key=None)


def presented(row: np.ndarray, query_id: str, config: LabelingParams) -> np.ndarray:
    """The pool positions of a subset's documents in the order its trial shows them (``document_order``): the
    pool's order, or one seeded by the question and the subset itself, so that the same subset is always asked the
    same way (a resumed run hits the call cache) and a document is read at every position across the trials."""
    members = np.flatnonzero(row)
    if config.document_order == "pool" or len(members) < 2:
        return members
    return question_rng(query_id, config.seed, b":" + np.packbits(row).tobytes()).permutation(members)


def label_question(query_id: str, question: str, gold: str | list[str], pool: list[tuple[str, str, str]],
                   solver: BlindSolver | LikelihoodSolver | None, config: LabelingParams,
                   aliases: list[str] | None = None, scorer: LikelihoodSolver | None = None) -> QuestionOutcome:
    """pool: [(chunk_id, title, text)]. Returns the trials, every call (ok or errored) and the labels.

    ``solver`` generates answers (pass/fail outcomes), ``scorer`` scores the gold answer (likelihood outcomes);
    a :class:`LikelihoodSolver` passed as ``solver`` is taken as the scorer. ``config.outcome`` says which are
    needed."""
    if isinstance(solver, LikelihoodSolver):
        solver, scorer = None, solver
    if config.generates and solver is None:
        raise ValueError(f"outcome {config.outcome!r} needs a generating BlindSolver")
    if config.scores and scorer is None:
        raise ValueError(f"outcome {config.outcome!r} needs a LikelihoodSolver (a log-probability scorer)")
    validator = (solver or scorer).validator
    chunk_ids = [d for d, _, _ in pool]
    rng = question_rng(query_id, config.seed)
    out = QuestionOutcome()
    threshold = config.label_threshold
    budget = config.budget_for(len(pool))
    labeler = AdaptiveLabeler(len(pool), threshold, budget, config.batch, rng=rng, chunk_ids=chunk_ids) \
        if config.estimator == "adaptive" else None
    later = np.zeros((0, len(pool)), dtype=bool)   # the regression's rows after its first block, where needed
    if config.estimator == "regression":
        pending, stage = balanced_stages(len(pool), budget, rng)
        if config.stop_when_decided:
            pending, later = pending[stage == 0], pending[stage != 0]
    elif config.estimator == "naive":
        pending = bernoulli_design(len(pool), budget, 0.5, rng)
    kw = {"aliases": aliases or ()} if validator == "fqn_match" else {}
    continuations = answer_continuations(gold, aliases or ()) if scorer is not None else ()
    errors_in_a_row = 0
    last_error: BaseException | None = None
    while True:
        if labeler is None and not len(pending) and len(later):
            so_far = estimate(out.trials, chunk_ids, config)
            if any(e.label == UNCERTAIN for e in so_far.docs):
                beside = second_block(so_far, len(later), rng) if config.second_block == "beside_yes" else None
                pending = later if beside is None else beside
            later = later[:0]
        subsets = labeler.next_subsets() if labeler else pending
        pending = np.zeros((0, len(pool)), dtype=bool)
        if len(subsets) == 0:
            break
        shown = [presented(row, query_id, config) for row in subsets]
        docs = [[(pool[j][1], pool[j][2]) for j in order] for order in shown]
        try:
            scored = scorer.score_many(question, continuations, docs, config.outcome == "qa_likelihood") \
                if config.scores else [None] * len(docs)
            answered = solver.attempt_many(question, docs) if config.generates else [None] * len(docs)
        except BudgetExceeded:
            out.stopped = "budget_exceeded"
            break
        ok_rows, outcomes, failed_rows = [], [], []
        for row, order, sc, res in zip(subsets, shown, scored, answered):
            members = [chunk_ids[j] for j in order]   # in the order the solver read them
            bad = [(r, k) for r, k in ((sc, "score"), (res, "generate")) if isinstance(r, BaseException)]
            for r, k in bad:
                if isinstance(r, BudgetExceeded):
                    out.stopped = "budget_exceeded"
                out.calls.append(_error_call(query_id, members, r, k))
                if isinstance(r, LLMInfrastructureError) and r.final:
                    raise r   # a bad key or URL, or an endpoint past its give-up bound: no other call can succeed
                last_error = r
            if bad:
                failed_rows.append(row)
                continue
            trial = dict(query_id=query_id, trial=len(out.trials), subset=members, n_docs=len(members),
                         success=None, score=None, answer=None, loglik=None, loglik_question=None, call_key=None,
                         cached=True)
            if sc is not None:
                # one prompt evaluation: the answer's log-probability, and the question's for qa_likelihood
                out.calls.append(dict(query_id=query_id, kind="score", status="ok", error="", detail="",
                                      subset=members, cached=sc.cached, latency_s=sc.latency_s,
                                      prompt_tokens=sc.prompt_tokens, completion_tokens=None, call_key=sc.key))
                trial.update(loglik=float(sc.best), call_key=sc.key, cached=sc.cached,
                             loglik_question=None if sc.span_logprob is None else float(sc.span_logprob))
            if res is not None:
                verdict = validate(validator, res.text, gold, **kw)
                out.calls.append(dict(query_id=query_id, kind="generate", status="ok", error="", detail="",
                                      subset=members, cached=res.cached, latency_s=res.latency_s,
                                      prompt_tokens=res.prompt_tokens, completion_tokens=res.completion_tokens,
                                      call_key=res.key))
                trial.update(success=bool(verdict.passed), score=float(verdict.score), answer=res.text[:500],
                             cached=bool(trial["cached"] and res.cached))
                trial["call_key"] = trial["call_key"] or res.key
            out.trials.append(trial)
            ok_rows.append(row)
            outcomes.append(trial_outcome(trial, config.label_outcome, config.question_weight))
        if ok_rows and labeler:
            labeler.record(np.array(ok_rows), np.array(outcomes))
        errors_in_a_row = errors_in_a_row + 1 if failed_rows else 0
        if out.stopped:
            break
        if errors_in_a_row >= config.max_consecutive_errors:
            # an outage, not the question's failure: the step retries it (retries.py)
            raise LLMInfrastructureError(f"question {query_id}: {errors_in_a_row} batches in a row had "
                                         f"infrastructure errors (the last: {str(last_error)[:500]}); completed "
                                         "calls are cached, re-run to resume", kind="outage")
        if labeler is None:
            # fixed designs: retry only the errored subsets, once per batch
            pending = np.array(failed_rows, dtype=bool).reshape(-1, len(pool))
    # The online labeler's own final labels (its interaction candidates follow what it has found so far).
    out.result = labeler.labels() if labeler else estimate(out.trials, chunk_ids, config)
    return out


def trial_outcome(trial: dict, outcome: str, question_weight: float = LabelingParams.question_weight) -> float:
    """A trial's outcome: pass/fail, the answer's log-likelihood, or that plus the weighted question's."""
    if outcome == "success":
        return float(trial["success"])
    if outcome == "qa_likelihood":
        return float(trial["loglik"]) + question_weight * float(trial["loglik_question"])
    return float(trial["loglik"])


def outcome_vector(trials: list[dict], outcome: str,
                   question_weight: float = LabelingParams.question_weight) -> np.ndarray:
    return np.array([trial_outcome(t, outcome, question_weight) for t in trials], dtype=float)


def estimate(trials: list[dict], chunk_ids: list[str], config: LabelingParams, estimator: str | None = None,
             outcome: str | None = None) -> LabelingResult:
    """Labels from recorded trials (no LLM): the same function the mc_labels asset re-applies.

    ``outcome`` (default: the config's label outcome) picks the trial column; ``naive`` on ``success`` is the
    classic ΔP rule."""
    outcome = outcome or config.label_outcome
    threshold = config.threshold if outcome == "success" else config.threshold_nats
    x = np.array([[d in set(t["subset"]) for d in chunk_ids] for t in trials], dtype=bool).reshape(-1, len(chunk_ids))
    y = outcome_vector(trials, outcome, config.question_weight)
    if (estimator or config.estimator) == "naive":
        return naive(x, y, threshold, config.alpha, chunk_ids=chunk_ids)
    # Same model as AdaptiveLabeler's defaults, re-fitted on all trials (labels can differ slightly from the
    # online labeler's last batch, which also prefers documents it had already found).
    result = regression(x, y, threshold, config.alpha, interactions=True, max_candidates=4, interaction_z=1.5,
                        interaction_z_or=2.5, chunk_ids=chunk_ids)
    return with_partners(result, x, y, config.alpha) if config.beside_yes else result


def decided(trials: list[dict], chunk_ids: list[str], config: LabelingParams) -> bool:
    """Whether the labels of these trials leave nothing UNCERTAIN: where the regression's first block stops."""
    return not any(e.label == UNCERTAIN for e in estimate(trials, chunk_ids, config).docs)


LABEL_COLUMNS = ["query_id", "chunk_id", "label", "effect", "ci_low", "ci_high", "average_effect", "outcome",
                 "delta_p", "trials_used", "estimator", "base_outcome", "mean_outcome", "partners",
                 "effect_beside_yes", "beside_yes_ci_low", "beside_yes_ci_high"]


def _rows(result: LabelingResult, qid: str, estimator: str, outcome: str, delta_p: dict) -> list[dict]:
    return [dict(query_id=qid, chunk_id=e.doc, label=e.label, effect=float(e.delta_p), ci_low=float(e.ci_low),
                 ci_high=float(e.ci_high), average_effect=float(e.marginal_delta_p), outcome=outcome,
                 delta_p=delta_p.get(e.doc, float("nan")), trials_used=int(e.trials_used), estimator=estimator,
                 base_outcome=float(result.base_success_rate), mean_outcome=float(result.success_rate),
                 partners=json.dumps(list(e.partners)), effect_beside_yes=float(e.conditional_delta_p),
                 beside_yes_ci_low=float(e.conditional_ci_low), beside_yes_ci_high=float(e.conditional_ci_high))
            for e in result.docs]


def answer_holders(pool: pd.DataFrame) -> list[str]:
    """The documents of one question's pool whose text holds an accepted answer: where several do, each one's label
    depends on the others being in the pool (a second copy of the answer takes part of its effect)."""
    if "answer" not in pool or "text" not in pool:
        return []
    first = pool.iloc[0]
    aliases = first["aliases"] if "aliases" in pool else "[]"
    answers = [first["answer"], *(json.loads(aliases) if isinstance(aliases, str) else list(aliases or []))]
    return [d for d, t in zip(pool["chunk_id"], pool["text"]) if contains_answer(str(t), answers)]


def label_table(pools: pd.DataFrame, trials: pd.DataFrame, config: LabelingParams) -> tuple[pd.DataFrame, list[dict]]:
    """The labels of every question with trials (no LLM call), as rows and as the retrieval dataset's pairs.

    Rows for the configured estimator, plus the classic naive rule on the same trials for comparison. ``effect``
    is in the label outcome's units (nats of answer log-likelihood, or success probability), measured in the
    document's context (with the partners an interaction showed) and decides the label with its interval;
    ``average_effect`` is the same outcome's effect averaged over the random subsets of the other documents, the
    effect size documents are ranked by (`schemas.ranking_effect`); ``delta_p`` is the classic ΔP where
    pass/fail trials exist (outcome ``success`` or ``both``), else NaN."""
    rows, pairs = [], []
    outcome = config.label_outcome
    for qid, pool in pools.groupby("query_id", sort=False):
        pool = pool.sort_values("position")
        q_trials = trials[trials["query_id"] == qid]
        if not len(q_trials):
            continue
        records = q_trials.to_dict("records")
        chunk_ids = pool["chunk_id"].tolist()
        delta_p = {}
        if "success" in q_trials and q_trials["success"].notna().all():
            delta_p = {e.doc: float(e.delta_p) for e in estimate(records, chunk_ids, config, "naive", "success").docs}
        main = estimate(records, chunk_ids, config)
        main_rows = _rows(main, qid, config.estimator, outcome, delta_p)
        rows += main_rows
        if config.estimator != "naive":
            rows += _rows(estimate(records, chunk_ids, config, "naive"), qid, "naive", outcome, delta_p)
        origin = dict(zip(pool["chunk_id"], pool["origin"]))
        texts = dict(zip(pool["chunk_id"], pool["text"]))
        answering = answer_holders(pool)
        # the document's title, and its file where the corpus has files (a folder's pages): read beside the id
        where = {d: {**({"title": str(t)} if isinstance(t, str) else {}),
                     **({"path": str(p)} if isinstance(p, str) and p else {})}
                 for d, t, p in zip(pool["chunk_id"], pool["title"] if "title" in pool else [None] * len(pool),
                                    pool["path"] if "path" in pool else [None] * len(pool))}
        pairs.append({"id": qid, "query": pool.iloc[0]["question"], "candidates": [
            {"fqn": r["chunk_id"], **where[r["chunk_id"]], "text": texts[r["chunk_id"]],
             "empirical_relevance": r["label"],
             "effect": round(r["effect"], 4), "ci": [round(r["ci_low"], 4), round(r["ci_high"], 4)],
             "average_effect": round(r["average_effect"], 4),
             **({"delta_p": round(r["delta_p"], 4)} if delta_p else {}),
             "trials_used": r["trials_used"], "origin": origin[r["chunk_id"]],
             **({"effect_beside_yes": round(r["effect_beside_yes"], 4),
                 "ci_beside_yes": [round(r["beside_yes_ci_low"], 4), round(r["beside_yes_ci_high"], 4)]}
                if math.isfinite(r["effect_beside_yes"]) else {}),
             **({"helps_with": json.loads(r["partners"]),
                 "why": f"helps together with {', '.join(json.loads(r['partners']))}: decided by its effect in the "
                        f"trials that hold them"} if r["partners"] != "[]" else {}),
             **({"note": f"the answer is also in {', '.join(d for d in answering if d != r['chunk_id'])} of this pool: "
                         f"its effect is measured beside them, and would be larger without them"}
                if r["chunk_id"] in answering and len(answering) > 1 else {})} for r in main_rows],
            "metadata": {"trials": len(records), "outcome": outcome, "threshold": config.label_threshold,
                         "base_outcome": main.base_success_rate, "mean_outcome": main.success_rate,
                         "estimator": config.estimator}})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    labels = labels.merge(pools[["query_id", "chunk_id", "origin"]], on=["query_id", "chunk_id"], how="left")
    return labels, pairs
