"""The benchmark registry and benchmark loading: queries, graded relevance judgements (qrels) and, where the
setting demands it, the candidate set each query ranks (HotpotQA distractor: its own paragraphs)."""
from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from causal_assets.core.corpus.beir import (beir_chunk_ids, beir_splits, load_beir_answers, load_beir_qrels,
                                            load_beir_queries)
from causal_assets.core.corpus.chunk import chunks_to_frame
from causal_assets.core.corpus.hotpotqa import load_hotpotqa
from causal_assets.core.corpus.multihop import load_multihop
from causal_assets.core.corpus.questions import QuestionFile, load_questions
from causal_assets.core.registry.corpora import CorpusSpec, load_corpus, load_corpus_registry, resolve_registry_path
from causal_assets.core.registry.gold import GoldResolver
from causal_assets.core.llm.models import SOLVER_CONTEXT_TOKENS
from causal_assets.core.foundation.errors import ConfigError, CorpusError, RegistryWarning
from causal_assets.core.foundation.limits import (MAX_BUDGET, MAX_CONSECUTIVE_ERRORS, MAX_DOC_CHARS, MAX_K,
                                                 MAX_POOL_SIZE, MAX_QUESTIONS)
from causal_assets.core.measures.metrics import Qrels
from causal_assets.core.corpus.mining import mine_examples, mine_questions
from causal_assets.core.foundation.paths import DEFAULT_SHARED_DATA, REGISTRY_DIR
from causal_assets.core.registry.gate import GateSpec
from causal_assets.core.registry.retriever_params import check_retrievers
from causal_assets.core.registry.tuning import TuningSpec
from causal_assets.core.foundation.yaml_registry import load_entries


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


def _validated_section(name: str, model: type[BaseModel], value: dict[str, Any]) -> dict[str, Any]:
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
HASH_SPLITS = ("dev", "train", "test")   # every loader without splits of its own: all, and the stable hash halves
QUESTION_LOADERS = ("hotpotqa", "multihop", "questions")   # files whose records may carry their own `split`


def _resolve(path: str, info: ValidationInfo | None) -> Path:
    context = (info.context if info is not None else None) or {}
    return resolve_registry_path(path, context.get("shared_data") or DEFAULT_SHARED_DATA, context.get("registry_dir"))


def split_members(records: list[tuple[str, str | None]], split: str) -> list[str]:
    """The ids of `records` ((id, own split or None), in file order) that belong to `split`: where the records carry
    splits, theirs decide (`dev` is all of them unless some record says `dev`); else `dev` is all and `train` /
    `test` are the stable hash halves (`hash_half`)."""
    own = [s for _, s in records if s is not None]
    if own:
        if split == "dev" and "dev" not in own:
            return [q for q, _ in records]
        return [q for q, s in records if s == split]
    if split == "dev":
        return [q for q, _ in records]
    return [q for q, _ in records if hash_half(q) == split]


def _file_splits(loader: str, path: Path) -> list[str] | None:
    """The splits a question file's records name themselves, or None (hash halves)."""
    if loader == "questions":
        return load_questions(path).own_splits
    if loader == "hotpotqa":
        named = [q.split for q in load_hotpotqa(path, "_")[1] if q.split]
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            named = [q.split for q in load_multihop(path, "_")[1].questions if q.split]
    return list(dict.fromkeys(named)) or None


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    loader: Literal["beir", "hotpotqa", "multihop", "python_package_api", "python_package_examples", "questions"]
    corpus: str
    path: str | None = None
    splits: list[str] = Field(min_length=1)
    eval_splits: list[str] = Field(min_length=1)
    tune_split: str | None = None
    validator: Literal["exact_match", "answer_f1", "answer_containment", "fqn_match", "pytest"] = "answer_containment"
    options: dict[str, Any] = Field(default_factory=dict)   # loader options, e.g. max_questions for mined benchmarks
    # Retrievers the evaluation report runs (name -> params); entity_first needs per-question candidate sets.
    retrievers: dict[str, dict[str, Any]] = Field(default_factory=lambda: {
        "bm25": {}, "tfidf": {}, "dense": {}, "hybrid": {}, "rrf": {}, "cascade": {}})
    pooling: dict[str, Any] = Field(default_factory=dict)
    monte_carlo: dict[str, Any] = Field(default_factory=dict)
    # tuned_retriever_configs: which retrievers to tune, the metric, search-space overrides (core/registry/tuning.py).
    tuning: dict[str, Any] = Field(default_factory=dict)
    # the evaluation's answer utility: ks, max_questions, enabled (AnswersSpec)
    answers: dict[str, Any] = Field(default_factory=dict)
    # the evaluation's regression gate against the accepted baseline (core/registry/gate.py)
    gate: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _question_file_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """A questions benchmark may leave out its splits: `dev` (every question, labelled) plus the file's own
        splits, or the stable hash halves `train` (tuned on) and `test` (evaluated on)."""
        if not isinstance(data, dict) or data.get("loader") != "questions" or not isinstance(data.get("path"), str):
            return data
        if "splits" in data and "eval_splits" in data:
            return data
        path = _resolve(data["path"], info)
        try:
            qfile = load_questions(path) if path.is_file() else None
        except CorpusError:
            qfile = None   # reported with its line by the file check below
        own = qfile.own_splits if qfile else None
        parts = [s for s in own if s != "dev"] if own else ["train", "test"]
        if qfile and not own:   # a half the hash leaves empty (a file of a few questions) is not a default split
            records = [(r.query_id, r.split) for r in qfile.records]
            parts = [s for s in parts if split_members(records, s)]
        data = dict(data)
        data.setdefault("splits", ["dev", *parts])
        if "eval_splits" not in data:
            data["eval_splits"] = ["test"] if "test" in data["splits"] else [data["splits"][-1]]
        if "tune_split" not in data and "train" in data["splits"] and "train" not in data["eval_splits"]:
            data["tune_split"] = "train"
        return data

    @field_validator("corpus")
    @classmethod
    def _corpus_registered(cls, v: str, info: ValidationInfo) -> str:
        # a benchmark on an unregistered corpus silently left the partitions before
        known = ((info.context or {}).get("corpus_names"))
        if known is not None and v not in known:
            raise ValueError(f"{v!r} is not a registered corpus (the corpus registry "
                             f"{(info.context or {}).get('corpora_path', '')} has: {', '.join(sorted(known))})")
        return v

    @field_validator("pooling")
    @classmethod
    def _pooling_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Kept a plain dict of the keys given (callers read it with .get), validated by the typed model.
        return _validated_section("pooling", PoolingSpec, v)

    @field_validator("monte_carlo")
    @classmethod
    def _monte_carlo_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _validated_section("monte_carlo", MonteCarloSpec, v)

    @field_validator("answers")
    @classmethod
    def _answers_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _validated_section("answers", AnswersSpec, v)

    @field_validator("gate")
    @classmethod
    def _gate_known(cls, v: dict[str, Any]) -> dict[str, Any]:
        _validated_section("gate", GateSpec, v)
        for metric in GateSpec.model_validate(v).metrics:
            GateSpec.model_validate(v).checked(metric.partition("@")[0])
        return v

    @property
    def gate_settings(self) -> GateSpec:
        """`gate:` with its defaults."""
        return GateSpec.model_validate(self.gate)

    @property
    def answer_settings(self) -> AnswersSpec:
        """`answers:` with its defaults."""
        return AnswersSpec.model_validate(self.answers)

    @property
    def label_split(self) -> str:
        """The split whose questions get Monte Carlo labels (`monte_carlo.split`, else the first split)."""
        return self.monte_carlo.get("split") or self.splits[0]

    @property
    def label_limit(self) -> int | None:
        """How many of the label split's questions are labelled (`monte_carlo.max_questions`): by default every
        answered question of a user's questions file, and the first 20 of the other loaders."""
        return self.monte_carlo.get("max_questions") or (None if self.loader == "questions" else 20)

    @property
    def pool_settings(self) -> dict[str, Any]:
        """`pooling:` with the loader's defaults (`QUESTION_POOLING` for a questions file)."""
        return {**(QUESTION_POOLING if self.loader == "questions" else {}), **self.pooling}

    @property
    def pool_size(self) -> int:
        return int(self.pool_settings.get("size") or PoolingSpec().size)

    @property
    def monte_carlo_settings(self) -> dict[str, Any]:
        """`monte_carlo:` with the loader's defaults (`QUESTION_MONTE_CARLO` for a questions file)."""
        return {**(QUESTION_MONTE_CARLO if self.loader == "questions" else {}), **self.monte_carlo}

    @property
    def budget(self) -> int:
        """Solver calls per question for this benchmark's pools (`monte_carlo.budget`, else the loader's or the
        labelling's default; `auto` derives it from the pool size)."""
        return budget_for(self.monte_carlo_settings.get("budget") or DEFAULT_BUDGET, self.pool_size)

    @property
    def estimator(self) -> str:
        return self.monte_carlo.get("estimator") or DEFAULT_ESTIMATOR

    @model_validator(mode="after")
    def _monte_carlo_split_known(self) -> "BenchmarkSpec":
        split = self.monte_carlo.get("split")
        if split is not None and split not in self.splits:
            raise ValueError(f"monte_carlo.split {split!r} is not one of splits {self.splits}")
        return self

    @model_validator(mode="after")
    def _budget_decides(self) -> "BenchmarkSpec":
        # Refused here, before any solver call: below this budget every label is UNCERTAIN with an infinite
        # interval (core/labeling/budget.py derives it from the estimators' intervals).
        problem = budget_problem(self.budget, self.pool_size, self.estimator)
        if problem:
            default = "" if self.monte_carlo.get("budget") else f" ({self.budget} is the default: set it higher)"
            raise ValueError(f"monte_carlo.budget: {problem}{default}")
        return self

    @model_validator(mode="after")
    def _tuning_valid(self) -> "BenchmarkSpec":
        _validated_section("tuning", TuningSpec, self.tuning)   # one line naming tuning.<key>
        check_retrievers(self.retrievers)   # one line naming retrievers.<name>.<param> and its value
        return self

    @model_validator(mode="after")
    def _splits_known(self) -> "BenchmarkSpec":
        for s in [*self.eval_splits, *([self.tune_split] if self.tune_split else [])]:
            if s not in self.splits:
                raise ValueError(f"split {s!r} is not one of splits {self.splits}")
        if self.tune_split and self.tune_split in self.eval_splits:
            raise ValueError(f"tune_split {self.tune_split!r} must not be an eval split (no tuning on the test set)")
        return self

    # Set by load_benchmark_registry: what `${SHARED_DATA}` in `path` stands for, the corpus registry that mined
    # benchmarks (python_package_*) and questions files read their corpus from (None: the shipped one), and the
    # directory a relative `path` is relative to (the registry file's).
    _shared_data: Path = PrivateAttr(default=DEFAULT_SHARED_DATA)
    _corpora: Path | None = PrivateAttr(default=None)
    _registry_dir: Path | None = PrivateAttr(default=None)

    @property
    def resolved_path(self) -> Path | None:
        return resolve_registry_path(self.path, self._shared_data, self._registry_dir) if self.path else None

    def available(self) -> bool:
        return self.path is None or self.resolved_path.exists()

    @model_validator(mode="after")
    def _validator_supported(self) -> "BenchmarkSpec":
        # Refused here, before any solver call: `pytest` grades code answers in the sandbox against examples,
        # which only the mined code benchmark provides.
        if self.validator == "pytest" and self.loader != "python_package_examples":
            raise ValueError(f"validator 'pytest' needs code examples to run the answer against; only loader "
                             f"'python_package_examples' provides them (this benchmark's loader is {self.loader!r})")
        if self.loader == "python_package_examples" and self.validator != "pytest":
            raise ValueError(f"loader 'python_package_examples' makes code questions: validator must be 'pytest', "
                             f"not {self.validator!r}")
        return self

    @model_validator(mode="after")
    def _path_needed(self) -> "BenchmarkSpec":
        if self.loader in ("beir", "hotpotqa", "multihop", "questions") and not self.path:
            raise ValueError(f"loader {self.loader} needs 'path'")
        return self

    @model_validator(mode="after")
    def _splits_exist(self, info: ValidationInfo) -> "BenchmarkSpec":
        """Every split the registry names holds questions (`splits: [train, holdout]` gave 0 questions for
        `holdout`, silently); checked from the file where that costs little."""
        path = _resolve(self.path, info) if self.path else None
        if self.loader == "questions":
            return self   # `_question_file_valid` counts every split's questions
        if self.loader == "beir":
            if path is not None and (path / "qrels").is_dir():
                halves = ("train", "test") if self.options.get("halves_of") else ()
                files = beir_splits(path)
                for s in self.splits:
                    if s not in files and s not in halves:
                        raise ValueError(f"splits: {s!r} has no judgements: {path / 'qrels'} has "
                                         f"{', '.join(files) or 'no split'}"
                                         + (" (and options.halves_of makes train and test)" if halves else ""))
            return self
        unknown = [s for s in self.splits if s not in HASH_SPLITS]
        if not unknown:
            return self
        own = None
        if self.loader in QUESTION_LOADERS and path is not None and path.is_file():
            try:
                own = _file_splits(self.loader, path)
            except CorpusError as e:
                raise ValueError(f"path: {e}") from None
        if own is None or unknown[0] not in own:
            have = (f"its records' splits are {', '.join(own)} (and dev, all of them)" if own else
                    "its splits are dev (every question) and the stable hash halves train and test")
            raise ValueError(f"splits: {unknown[0]!r} names no question: {have}")
        return self

    @model_validator(mode="after")
    def _answers_for_monte_carlo(self, info: ValidationInfo) -> "BenchmarkSpec":
        """`monte_carlo:` on questions that carry no answers is refused: the labels score the solver's likelihood
        of the answer (a BEIR benchmark failed deep inside the labelling with "no gold answer to score")."""
        if "monte_carlo" not in self.model_fields_set or self.loader != "beir" or not self.path:
            return self
        path = _resolve(self.path, info)
        if (path / "queries.jsonl").is_file():
            try:
                answers = load_beir_answers(path)
            except CorpusError as e:
                raise ValueError(f"path: {e}") from None
            if not answers:
                raise ValueError(f"monte_carlo: the queries of {path / 'queries.jsonl'} carry no answers "
                                 "(metadata.answer), and Monte Carlo labels score the solver's likelihood of a "
                                 "question's answer: add answers, or remove monte_carlo")
        return self

    @model_validator(mode="after")
    def _question_file_valid(self, info: ValidationInfo) -> "BenchmarkSpec":
        """A questions file is read and checked when the registry loads (its size is a user's questions)."""
        if self.loader != "questions" or not self.path:
            return self
        path = _resolve(self.path, info)
        if not path.exists():
            return self   # not available: left out of the partitions, as other loaders' missing sources
        try:
            qfile = load_questions(path)
        except CorpusError as e:
            raise ValueError(f"path: {e}") from None
        check_question_splits(self, qfile, explicit_monte_carlo="monte_carlo" in self.model_fields_set)
        return self


DEFAULT_ESTIMATOR = "regression"


def check_question_splits(spec: BenchmarkSpec, qfile: QuestionFile, explicit_monte_carlo: bool = True) -> None:
    """ValueError (one line) when `spec` cannot work on `qfile`: a split without questions, Monte Carlo labels
    asked of questions without answers, or an eval split with neither gold documents nor questions to label."""
    records = [(r.query_id, r.split) for r in qfile.records]
    by_id = {r.query_id: r for r in qfile.records}
    members = {s: split_members(records, s) for s in spec.splits}
    for s, ids in members.items():
        if not ids:
            own = qfile.own_splits
            have = (f"the questions' own splits are {', '.join(own)}" if own else
                    f"the stable hash halves put {len(split_members(records, 'train'))} of the {len(records)} "
                    f"questions in train and {len(split_members(records, 'test'))} in test (give the questions a "
                    f"'split' field to choose)")
            raise ValueError(f"splits: {s!r} has no question in {qfile.path}: {have}")
    labelled = [q for q in members[spec.label_split] if by_id[q].answers]
    if explicit_monte_carlo and spec.monte_carlo and not qfile.with_answers:
        raise ValueError(f"monte_carlo: no question of {qfile.path} has an 'answer', and Monte Carlo labels score "
                         "the solver's likelihood of the answer: add answers, or remove monte_carlo")
    for s in spec.eval_splits:
        gold = [q for q in members[s] if by_id[q].gold]
        if not gold and not set(members[s]) & set(labelled):
            raise ValueError(f"eval_splits: {s!r} cannot be evaluated: none of its {len(members[s])} questions has "
                             f"'gold' documents, and none of them is labelled (labels are made on split "
                             f"{spec.label_split!r}, for questions with an 'answer')")


@dataclass
class Benchmark:
    name: str
    split: str
    queries: dict[str, str]
    qrels: Qrels
    within: dict[str, list[str]] | None = None   # query id -> the chunk ids it ranks (None: the whole corpus)
    answers: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # accepted alternative answers (FQN re-exports)
    # A questions file's gold files (`registry.gold`): per question, the files its gold names (the pools rank their
    # chunks); the questions judged at file level (their qrels are keyed by file, and a ranking is scored by each
    # file's best chunk); and each chunk's file.
    gold_files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    file_level: frozenset[str] = frozenset()
    file_of: dict[str, str] = field(default_factory=dict)

    def query_ids(self) -> list[str]:
        """Judged queries, in a stable order."""
        return [q for q in self.queries if q in self.qrels]

    def labelable_ids(self) -> list[str]:
        """The questions Monte Carlo labels can be made for: those with an answer to score, in a stable order (a
        question of a questions file without an answer is evaluated only)."""
        return [q for q in self.queries if self.answers.get(q)]


def restrict(bench: Benchmark, ids: list[str]) -> Benchmark:
    """`bench` with only the queries `ids`."""
    return Benchmark(bench.name, bench.split, {q: bench.queries[q] for q in ids}, {q: bench.qrels[q] for q in ids},
                     {q: bench.within[q] for q in ids} if bench.within else None,
                     {q: bench.answers[q] for q in ids if q in bench.answers},
                     {q: bench.aliases[q] for q in ids if q in bench.aliases},
                     {q: bench.gold_files[q] for q in ids if q in bench.gold_files},
                     frozenset(q for q in ids if q in bench.file_level), bench.file_of)


DEFAULT_REGISTRY = REGISTRY_DIR / "benchmarks.yaml"


def load_benchmark_registry(path: str | Path | None = None, shared_data: str | Path | None = None,
                            corpora: str | Path | None = None) -> dict[str, BenchmarkSpec]:
    """The registry at `path` (default: the shipped one); `${SHARED_DATA}` in its paths stands for `shared_data`
    (default: ../shared/data beside the checkout) and mined benchmarks find their corpus in the corpus registry
    `corpora` (default: the shipped one). The configured ones come from `causal_assets.settings`."""
    path = Path(path) if path else DEFAULT_REGISTRY
    shared = Path(shared_data) if shared_data else DEFAULT_SHARED_DATA
    corpora_path = Path(corpora) if corpora else None
    try:
        corpus_names = set(load_corpus_registry(corpora_path, shared))
    except ConfigError as e:   # the corpus registry's own error, named as such
        raise ConfigError(f"{path}: its benchmarks' corpora cannot be checked: {e}") from None
    # The shipped benchmarks are over the shipped corpora: with a corpus registry of the user's own, those whose
    # corpus it leaves out go with it. A registry of the user's own benchmarks is held to its corpora strictly.
    shipped_over_own = path.resolve() == DEFAULT_REGISTRY.resolve() and corpora_path is not None
    context = {"registry_dir": path.resolve().parent, "shared_data": shared,
               "corpus_names": None if shipped_over_own else corpus_names,
               "corpora_path": str(corpora_path or "causal_assets/registry/corpora.yaml")}
    specs = load_entries(path, "benchmarks", BenchmarkSpec, context=context)
    if shipped_over_own:
        specs = {name: spec for name, spec in specs.items() if spec.corpus in corpus_names}
    for spec in specs.values():
        spec._shared_data = shared
        spec._corpora = corpora_path
        spec._registry_dir = context["registry_dir"]
    warn_short_cuts(path, specs, load_corpus_registry(corpora_path, shared))
    return specs


def warn_short_cuts(path: Path, specs: dict[str, "BenchmarkSpec"], corpora: dict[str, CorpusSpec]) -> None:
    """A `RegistryWarning` for each benchmark whose solver reads fewer characters of a document than its corpus's
    chunks hold: every longer chunk is then shortened (to the lines that best match the question)."""
    for spec in specs.values():
        corpus = corpora.get(spec.corpus)
        chunk = corpus.chunk_chars if corpus is not None else None
        settings = spec.pool_settings
        cut = document_chars(spec.pool_size, settings.get("context_tokens") or SOLVER_CONTEXT_TOKENS,
                             settings.get("max_doc_chars"))
        if chunk and cut < chunk:
            why = ("pooling.max_doc_chars" if settings.get("max_doc_chars") else
                   f"the share of {settings.get('context_tokens') or SOLVER_CONTEXT_TOKENS} context tokens for "
                   f"{spec.pool_size} documents")
            warnings.warn(f"{path}: benchmark {spec.name!r}: the solver reads {cut} characters of each document "
                          f"({why}), fewer than corpus {spec.corpus!r}'s chunks of up to {chunk}: longer chunks are "
                          f"shortened to their lines that best match the question", RegistryWarning, stacklevel=2)


def hash_half(key: str) -> str:
    """Stable train/test assignment for benchmarks without official splits."""
    return "train" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 2 == 0 else "test"


def load_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """`spec`'s queries, judgements and candidate sets of `split`. `chunks`: the corpus's materialized chunk table
    (`corpus_chunks`), which benchmarks mined from the corpus read; without it they chunk the corpus's source."""
    if split not in spec.splits:
        raise CorpusError(f"benchmark {spec.name!r}: unknown split {split!r} (splits: {spec.splits})")
    if spec.loader == "beir":
        queries = load_beir_queries(spec.resolved_path)
        # a judgement of a document the corpus lacks can never be retrieved: it would lower recall unseen
        chunk_ids = set(chunks["chunk_id"]) if chunks is not None else beir_chunk_ids(spec.resolved_path)
        # `options.halves_of: dev`: a benchmark with a single judged split (CoSQA's dev) gets `train`/`test` as the
        # stable hash halves of that split's queries, so something can be tuned on one half and reported on the other.
        source = spec.options.get("halves_of")
        if source and split in ("train", "test"):
            qrels = {q: r for q, r in load_beir_qrels(spec.resolved_path, source, chunk_ids, set(queries)).items()
                     if hash_half(q) == split}
        else:
            qrels = load_beir_qrels(spec.resolved_path, split, chunk_ids, set(queries))
        # accepted answers in the queries' metadata (`metadata.answer`) make the queries labellable
        answers = load_beir_answers(spec.resolved_path)
        return Benchmark(spec.name, split, {q: queries[q] for q in qrels}, qrels,
                         answers={q: a[0] for q, a in answers.items() if q in qrels},
                         aliases={q: list(a[1:]) for q, a in answers.items() if q in qrels and len(a) > 1})
    if spec.loader == "questions":
        return questions_benchmark(spec, split, chunks)
    if spec.loader == "hotpotqa":
        chunks, questions = load_hotpotqa(spec.resolved_path, spec.corpus)
        keep = set(split_members([(q.query_id, q.split) for q in questions], split))
        questions = [q for q in questions if q.query_id in keep]
        qrels, _ = _gold_by_question([q.query_id for q in questions], chunks)
        return Benchmark(spec.name, split, {q.query_id: q.question for q in questions}, qrels,
                         {q.query_id: list(q.paragraph_ids) for q in questions},
                         {q.query_id: q.answer for q in questions})
    if spec.loader == "multihop":
        return multihop_benchmark(spec, split)
    if spec.loader == "python_package_api":
        return mined_benchmark(spec, split, chunks)
    if spec.loader == "python_package_examples":
        return mined_examples_benchmark(spec, split, chunks)
    raise CorpusError(f"benchmark {spec.name!r}: unknown loader {spec.loader!r}")


def _chunk_table(corpus: CorpusSpec, chunks: pd.DataFrame | None) -> pd.DataFrame:
    """The corpus's chunk table: the materialized one when given, else its source chunked here (scripts and tests
    that have no index)."""
    return chunks if chunks is not None else chunks_to_frame(load_corpus(corpus)[0])


def mined_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """Questions mined from the corpus's package; gold = the target chunk (graded 1.0)."""
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    questions = mine_questions(_chunk_table(corpus, chunks), corpus.package, spec.options.get("max_questions"))
    if split != "dev":
        questions = [q for q in questions if hash_half(q.query_id) == split]
    return Benchmark(spec.name, split, {q.query_id: q.question for q in questions},
                     {q.query_id: {q.target_chunk_id: 1.0} for q in questions},
                     answers={q.query_id: q.gold_fqn for q in questions},
                     aliases={q.query_id: list(q.aliases) for q in questions})


def mined_examples_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """Code questions mined from the docstring examples of the corpus's package: the solver writes the call, the
    `pytest` validator runs it in the sandbox after the example's setup and compares the output with the
    example's; gold document = the function's chunk."""
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    if corpus.loader != "python_package":
        raise CorpusError(f"benchmark {spec.name!r}: loader python_package_examples needs a python_package corpus, "
                          f"corpus {spec.corpus!r} is {corpus.loader!r}")
    examples = mine_examples(_chunk_table(corpus, chunks), corpus.package, spec.options.get("max_questions"),
                             alias=spec.options.get("alias", "nx"))
    if split != "dev":
        examples = [q for q in examples if hash_half(q.query_id) == split]
    return Benchmark(spec.name, split, {q.query_id: q.question for q in examples},
                     {q.query_id: {q.target_chunk_id: 1.0} for q in examples},
                     answers={q.query_id: q.gold for q in examples})


def _gold_by_question(query_ids: list[str], chunks) -> tuple[Qrels, dict[str, list[str]]]:
    """Per question of `query_ids`, in their order: its supporting paragraphs (gold, graded 1.0) and all its
    paragraphs, from the chunks' `query_id` and `supporting` metadata (the HotpotQA and multi-hop loaders). Keyed
    in the file's question order, never a set's: the order reaches every mean the tuner takes, and a set's changes
    with each process's string hashing (it changed the tuner's choices from run to run)."""
    qrels: Qrels = {q: {} for q in query_ids}
    within: dict[str, list[str]] = {q: [] for q in query_ids}
    for c in chunks:
        qid = c.metadata["query_id"]
        if qid in qrels:
            within[qid].append(c.chunk_id)
            if c.metadata["supporting"]:
                qrels[qid][c.chunk_id] = 1.0
    return qrels, within


def multihop_benchmark(spec: BenchmarkSpec, split: str) -> Benchmark:
    """HotpotQA / 2Wiki / MuSiQue questions, each ranking its own paragraphs (`load_multihop`, the same ids as the
    corpus loader's); gold = the reader's supporting paragraphs (MuSiQue: `is_supporting`, never the title).
    `train`/`test` halve the questions by a stable hash of their id; `dev` is all of them."""
    with warnings.catch_warnings():   # the corpus asset reports skipped records; the benchmark does not repeat it
        warnings.simplefilter("ignore")
        chunks, data, _ = load_multihop(spec.resolved_path, spec.corpus, strict=bool(spec.options.get("strict", False)))
    keep = set(split_members([(q.query_id, q.split) for q in data.questions], split))
    questions = [q for q in data.questions if q.query_id in keep]
    qrels, within = _gold_by_question([q.query_id for q in questions], chunks)
    return Benchmark(spec.name, split, {q.query_id: q.question for q in questions}, qrels, within,
                     {q.query_id: q.answer for q in questions},
                     {q.query_id: list(q.aliases) for q in questions if q.aliases})


def questions_benchmark(spec: BenchmarkSpec, split: str, chunks: pd.DataFrame | None = None) -> Benchmark:
    """A user's questions file over any registered corpus (`core/corpus/questions.py`): every question of `split`
    ranks the whole corpus; its gold, where given, at the grain it can be judged (`registry.gold`: document ids,
    the chunks that hold its evidence, or its files). Questions without gold are not in `qrels`: the Monte Carlo
    labels are their only truth."""
    qfile = load_questions(spec.resolved_path)
    keep = set(split_members([(r.query_id, r.split) for r in qfile.records], split))
    records = [r for r in qfile.records if r.query_id in keep]
    corpus = load_corpus_registry(spec._corpora, spec._shared_data)[spec.corpus]
    qrels: Qrels = {}
    files: dict[str, tuple[str, ...]] = {}
    file_level: set[str] = set()
    resolver = None
    if any(r.gold for r in records):
        resolver = GoldResolver(_chunk_table(corpus, chunks), corpus.name, corpus.loader)
        for r in records:
            if r.gold:
                gold = resolver.resolve(r.gold, r.where, dict(r.evidence))
                qrels[r.query_id] = gold.qrels
                if gold.files:
                    files[r.query_id] = gold.files
                if gold.file_level:
                    file_level.add(r.query_id)
    return Benchmark(spec.name, split, {r.query_id: r.question for r in records}, qrels,
                     answers={r.query_id: r.answer for r in records if r.answers},
                     aliases={r.query_id: list(r.aliases) for r in records if r.aliases},
                     gold_files=files, file_level=frozenset(file_level),
                     file_of=resolver.file_of if resolver else {})
