"""A benchmark entry's labelling sections, `pooling:` and `monte_carlo:`, and its `answers:` section: their schemas
(unknown keys refused), what a questions file gets unless it says otherwise, and the Monte Carlo budget rules the
registry checks when it loads, before any LLM time is spent."""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from causal_assets.core.llm.models import SOLVER_CONTEXT_TOKENS
from causal_assets.core.foundation.limits import (MAX_BUDGET, MAX_CONSECUTIVE_ERRORS, MAX_DOC_CHARS, MAX_K,
                                                 MAX_POOL_SIZE, MAX_QUESTIONS)

# ------------------------------------------------------------------------------------------ the smallest budget
# The smallest Monte Carlo budget (solver calls per question) that can decide a label, derived from the
# estimators' intervals (`labeling.estimators`). Here, below the labelling code, so that the registry can refuse a
# budget that cannot work when it loads, before any LLM time is spent.
#
# A label is decided when a document's confidence interval lies wholly above (YES) or below (NO) the threshold; an
# infinite interval decides nothing, so every label of such a question is UNCERTAIN whatever the solver says.
#
# * `regression` and `adaptive` fit one ordinary-least-squares model per question: an intercept plus one effect per
#   pool document (`estimators.regression`, main effects). Its interval is `estimate +- t(1 - alpha/2, dof) * se`
#   with `dof = trials - (pool size + 1)`; with `dof <= 0` the residual variance, and with it the interval, is
#   undefined and the estimator returns (-inf, inf). The smallest budget with a finite interval is therefore
#   **pool size + 2** (one residual degree of freedom). `adaptive` stops at its budget, so the same bound holds.
# * `naive` compares the mean outcome with a document against the mean without it (Welch's interval for a graded
#   outcome), which needs two trials on each side: **4**. Its subsets are drawn at random, so 4 only makes a
#   decision possible; the balanced estimators guarantee theirs.
#
# This is the floor, not a recommendation: at the floor the t quantile of one degree of freedom (3.08 for 80%
# intervals) leaves most labels UNCERTAIN.
#
# `budget: auto` (the default) is the regression's first orthogonal block, the Hadamard order (the smallest power of
# two above the pool size: every main effect estimated independently), and half a block more, run only where a label
# is still undecided after it: 24 calls for pools of 8 to 15 documents, the budget measured on HotpotQA's 10, and 48
# for MuSiQue's 20, where 16 decided nothing and 32 left 6% UNCERTAIN (docs/decisions.md, "Labels"). Always at
# least the floor above (1.5 x the order >= pool size + 2).

BUDGET_ESTIMATORS = ("adaptive", "regression", "naive")
# `monte_carlo.budget` when a benchmark names none (`runner.LabelingParams.budget`).
DEFAULT_BUDGET = "auto"
NAIVE_MIN_TRIALS = 4   # two trials with the document and two without, for a finite Welch interval


def first_block(pool_size: int) -> int:
    """Rows of the balanced design's first orthogonal block: the smallest power of two above the pool size."""
    return max(2, 1 << int(math.ceil(math.log2(int(pool_size) + 1))))


def auto_budget(pool_size: int) -> int:
    """`budget: auto` for a pool of `pool_size` documents (the derivation above)."""
    order = first_block(pool_size)
    return order + order // 2


def budget_line(pool_size: int) -> str:
    """What `budget: auto` chose for pools of up to `pool_size` documents, and why (said before the first call)."""
    order, total = first_block(pool_size), auto_budget(pool_size)
    return (f"budget auto: {total} solver calls a question for pools of up to {pool_size} documents: a first "
            f"orthogonal block of {order}, then {total - order} more only where a label is still undecided (set "
            f"monte_carlo.budget to choose another)")


def budget_for(budget: int | str, pool_size: int) -> int:
    """A budget setting (a whole number, or "auto") as solver calls per question for a pool of this size."""
    return auto_budget(pool_size) if budget == "auto" else int(budget)


def min_budget(pool_size: int, estimator: str = "regression") -> int:
    """The fewest trials per question at which `estimator` can give a pool of `pool_size` documents a finite
    interval (the derivation above)."""
    if estimator not in BUDGET_ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; expected one of {', '.join(BUDGET_ESTIMATORS)}")
    if pool_size < 1:
        raise ValueError(f"pool size must be at least 1, got {pool_size}")
    return NAIVE_MIN_TRIALS if estimator == "naive" else pool_size + 2


def budget_problem(budget: int, pool_size: int, estimator: str = "regression") -> str | None:
    """Why `budget` cannot decide a label of a `pool_size`-document pool, or None when it can."""
    need = min_budget(pool_size, estimator)
    if budget >= need:
        return None
    if estimator == "naive":
        return (f"budget {budget} cannot decide a label: the naive estimator needs at least {need} trials per "
                f"question (two with a document and two without it, for a finite interval)")
    return (f"budget {budget} cannot decide a label of a pool of {pool_size} documents: the {estimator} estimator "
            f"fits an intercept and one effect per document, and its interval needs one residual degree of "
            f"freedom, so the budget must be at least pool size + 2 = {need} (or make the pool smaller with "
            f"pooling.size)")


# What a document's share of the solver's context assumes: a reserve for the instructions, the question and the
# answer, and few enough characters per token for code and man-page text (English prose runs to ~4 a token, symbols
# and short tokens to ~2.5). Every document of a pool fits at once: a trial may show them all.
RESERVED_TOKENS = 512
CHARS_PER_TOKEN = 2.5


def document_chars(size: int, context_tokens: int = SOLVER_CONTEXT_TOKENS, max_doc_chars: int | None = None) -> int:
    """Characters of each pooled document the solver reads: `max_doc_chars`, else its share of the context."""
    if max_doc_chars:
        return int(max_doc_chars)
    return max(200, int((context_tokens - RESERVED_TOKENS) / size * CHARS_PER_TOKEN))


class PoolingSpec(BaseModel):
    """`pooling:` of a benchmark (the fields of `labeling.pools.PoolParams`); unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # questions files: 12 unless given (`BenchmarkSpec.pool_settings`)
    size: int = Field(default=10, ge=1, le=MAX_POOL_SIZE, strict=True)
    max_seed_neighbors: int = Field(default=2, ge=0, le=MAX_POOL_SIZE, strict=True)
    hard_negatives: int = Field(default=4, ge=0, le=MAX_POOL_SIZE, strict=True)
    # characters of each document the solver reads; unset: the pool's share of `context_tokens` (document_chars)
    max_doc_chars: int | None = Field(default=None, ge=1, le=MAX_DOC_CHARS, strict=True)
    context_tokens: int = Field(default=SOLVER_CONTEXT_TOKENS, ge=1024, le=1_048_576, strict=True)
    seed: int = Field(default=0, strict=True)
    # questions files: 4 unless given (`BenchmarkSpec.pool_settings`)
    top_candidates: int = Field(default=0, ge=0, le=MAX_POOL_SIZE, strict=True)
    gold_share: float = Field(default=0.5, gt=0, le=1)
    per_file: int = Field(default=4, ge=1, le=MAX_POOL_SIZE, strict=True)


class MonteCarloSpec(BaseModel):
    """`monte_carlo:` of a benchmark; unknown keys (a typo such as `budjet`) are refused instead of silently
    running the defaults. Fields the labelling code reads; types and ranges are checked where they are fixed, counts
    are whole numbers as written (`"16"` and `true` are not 16 and 1) below the bounds of `foundation.limits`, and
    no number may be NaN or infinite (a NaN threshold made every label UNCERTAIN; an infinite question weight
    failed the labels only after every trial was paid; a budget of 10**30 looped forever)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    estimator: Literal["adaptive", "regression", "naive"] | None = None
    threshold: float | None = Field(default=None, ge=0, lt=1)   # ΔP of a success probability
    budget: int | str | None = None   # solver calls per question, or "auto" (`budget_for`)
    batch: int | None = Field(default=None, ge=1, le=MAX_BUDGET, strict=True)
    alpha: float | None = Field(default=None, gt=0, lt=1)
    seed: int | None = Field(default=None, strict=True)
    max_consecutive_errors: int | None = Field(default=None, ge=1, le=MAX_CONSECUTIVE_ERRORS, strict=True)
    split: str | None = None
    max_questions: int | None = Field(default=None, ge=1, le=MAX_QUESTIONS, strict=True)
    outcome: Literal["qa_likelihood", "likelihood", "success", "both"] | None = None
    solver: Literal["gemma3-270m", "smollm2-135m"] | None = None   # a packaged local model (core/llm/models.py)
    threshold_nats: float | None = Field(default=None, ge=0)      # nats of log-likelihood
    question_weight: float | None = Field(default=None, ge=0)
    stop_when_decided: bool | None = None   # regression: the rest of the budget only where a label is undecided
    document_encoding: Literal["auto", "joint", "separate"] | None = None   # scoring outcomes (LabelingParams)
    second_block: Literal["beside_yes", "balanced"] | None = None   # regression: rows run where a label is undecided
    beside_yes: bool | None = None   # YES also from the effect beside the documents already YES
    document_order: Literal["shuffled", "pool"] | None = None   # the order a trial shows its documents in


    @field_validator("budget", mode="before")
    @classmethod
    def _budget_known(cls, value):
        if value is None or value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BUDGET:
            raise ValueError(f'must be a whole number from 1 to {MAX_BUDGET:,} or "auto", got {value!r}')
        return value


class AnswersSpec(BaseModel):
    """`answers:` of a benchmark: the evaluation's answer utility (`core/evaluation/answers.py`), the solver's
    log-likelihood of the gold answer given each retriever's top k, and the answer gain as a truth the tuner
    selects by (`core/tuning/truths.py`). On wherever questions have answers and the LLM scores prompts; its cost,
    about questions x (retrievers + 3) x k scorings per eval split, is bounded by `max_questions` and `ks`."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ks: list[Annotated[int, Field(ge=1, le=MAX_K, strict=True)]] = Field(default=[1, 3], min_length=1, max_length=100)
    max_questions: int = Field(default=10, ge=1, le=MAX_QUESTIONS, strict=True)   # per eval split, and on the tune split
    enabled: bool = True
    # The validator's verdict on the solver's greedy answer given the top k (one generation per distinct prompt,
    # through the chat endpoint); None: where the labels' solver generates (`monte_carlo.outcome` success or both).
    verdicts: bool | None = None

    def generates(self, outcome: str | None) -> bool:
        return self.verdicts if self.verdicts is not None else outcome in ("success", "both")


def validated_section(name: str, model: type[BaseModel], value: dict[str, Any]) -> dict[str, Any]:
    """`value` unchanged if `model` accepts it, else a one-line ValueError naming the key (and the known keys)."""
    try:
        model.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ValueError(f"{name}.{key}: unknown key; known keys: {', '.join(model.model_fields)}") from None
        raise ValueError(f"{name}.{key}: {err['msg']}") from None
    return value


# A questions file's pools: the retrievers' top 4 candidates beside the gold (its questions may have no gold), and
# 12 documents, room for two gold files' best chunks beside them and the negatives (docs/decisions.md).
QUESTION_POOLING = {"top_candidates": 4, "size": 12}
# ... and 32 solver calls a question: two orthogonal blocks of 16 for 12 documents, the second only where a label is
# still undecided after the first (`stop_when_decided`). On the man pages 16 left the evidence chunk UNCERTAIN for a
# third of the pairs. Each trial shows its documents in its own order: a label then does not follow where one pool
# draw put its chunk (two draws' labels agreed at kappa 0.97, not 0.83; docs/decisions.md).
QUESTION_MONTE_CARLO = {"budget": 32, "document_order": "shuffled"}

