"""What a benchmark's `tuning:` section may say (the search spaces it overrides are the retriever kinds' own,
`registry.retrievers`). Pure data and validation, so the benchmark registry can check a `tuning:` section without
loading the search."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from causal_assets.core.foundation.limits import MAX_BATCH, MAX_K, MAX_QUESTIONS, MAX_REPEATS, MAX_THREADS, MAX_TOKENS
from causal_assets.core.registry.retrievers import KINDS, SCORING, TUNABLE

ORDER = {name: i for i, name in enumerate(TUNABLE)}   # the table's order: each after what it may be built on
ROBUST_DEFAULT = "learned"   # TuningSpec.robust_default (its measurement: docs, "Choosing a retriever on few questions")


class EncoderSpec(BaseModel):
    """`tuning.encoder`: fine-tune the dense encoder on the tune split (`core/tuning/encoder.py`); absent: not tuned."""
    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(1, ge=1, le=MAX_REPEATS, strict=True)
    lr: float = Field(2e-5, gt=0)
    batch_size: int = Field(32, ge=2, le=MAX_BATCH, strict=True)
    held_out: float = Field(0.2, gt=0, lt=1)    # share of the judged tune queries the decision is made on
    weights: list[float] = Field(default_factory=lambda: [0.5, 0.65, 0.8])   # hybrid dense shares compared
    # adopted only if the best held-out figure gains more than min_gain + standard_errors x the standard error of
    # the paired per-query difference (negative min_gain: unless it loses more than that; standard_errors 0: any gain)
    min_gain: float = Field(0.0, ge=-1, le=1)
    standard_errors: float = Field(1.0, ge=0)
    threads: int = Field(0, ge=0, le=MAX_THREADS, strict=True)   # torch intra-op threads while fitting; 0: the free cores


class RerankerSpec(BaseModel):
    """`tuning.reranker`: fit a cross-encoder on the tune split and rerank the selected retriever with it where it
    wins on held-out tune queries (`core/tuning/reranker.py`, the `tuned_reranker` asset); absent: no reranker."""
    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(3, ge=1, le=MAX_REPEATS, strict=True)
    lr: float = Field(5e-5, gt=0)
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, strict=True)   # relevant pairs per step, each with its `negatives`
    # cross-encoders fitted alike from the seeds seed, seed + 1, ...; their logits averaged: one fit's seed moves its
    # held-out gain by as much as the gain
    members: int = Field(1, ge=1, le=MAX_REPEATS, strict=True)
    # hard negatives per relevant pair, drawn from the hybrid's top `pool`
    negatives: int = Field(3, ge=1, le=MAX_K, strict=True)
    pool: int = Field(30, ge=2, le=MAX_K, strict=True)
    # tokens per (query, document) pair: SciFact's claims + ~130 of abstract
    max_length: int = Field(160, ge=8, le=MAX_TOKENS, strict=True)
    depth: int = Field(20, ge=2, le=MAX_K, strict=True)   # the base's hits that are reranked
    held_out: float = Field(0.2, gt=0, lt=1)    # share of the judged tune queries the decision is made on
    # the reranked hybrid's dense share is chosen among these on the held-out queries; then the cross-encoder's
    # weight among `mix` (0: the hybrid alone)
    weights: list[float] = Field(default_factory=lambda: [0.5, 0.65, 0.8])
    mix: list[float] = Field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0, 1.5, 2.0])
    min_gain: float = Field(0.0, ge=-1, le=1)   # adopted beyond min_gain + standard_errors x 1 SE (as the encoder)
    standard_errors: float = Field(1.0, ge=0)
    # torch intra-op threads while fitting and scoring; 0: the free cores
    threads: int = Field(0, ge=0, le=MAX_THREADS, strict=True)
    # once adopted, fit the members again on every judged tune query (the held-out share too) and rerank with those
    # (`core/tuning/reranker.py`): the decision stays the held-out share's; the fit learns from a fifth more queries
    refit_on_tune_split: bool = False


class TuningSpec(BaseModel):
    """A benchmark's `tuning:` section (registry), validated; every field has a default."""
    model_config = ConfigDict(extra="forbid")

    retrievers: list[str] | None = None          # default: the tunable ones of the benchmark's list, + learned
    metric: str = "ndcg@10"
    passes: int = Field(2, ge=1, le=MAX_REPEATS, strict=True)      # coordinate-search passes
    cv_folds: int = Field(5, ge=2, le=MAX_REPEATS, strict=True)    # learned: grouped folds
    # Repeated CV: the folds are drawn this many times (fold seeds seed, seed + 1, ...) and every nested figure, the
    # learned model's CV and a combination's train figure are averaged over the splits, so the selection among
    # retrievers that differ by about one standard error is the data's, not one fold split's (HotpotQA's 91 train
    # questions chose learned, fusion or pairwise with fold seeds 0, 1 and 2: docs/decisions.md).
    # Costs the learned model's CV and every trial of a combination with a learned member once per split.
    cv_repeats: int = Field(1, ge=1, le=MAX_REPEATS, strict=True)
    # What a CV fold keeps together (learned.retriever.query_folds), for every nested figure: queries that share a
    # relevant document (the estimate for questions about documents the training never saw relevant), or each query
    # alone (rewards remembering which documents were relevant: right only where new questions keep returning to
    # the same documents; on SciFact it chose the learned model over the hybrid on memory alone, docs/decisions.md).
    cv_groups: Literal["shared_documents", "queries"] = "shared_documents"
    learned_targets: list[str] = Field(default_factory=lambda: ["qrels", "delta_p"])  # delta_p only with MC labels
    # delta_p is tried only with this many labelled train questions
    min_mc_questions: int = Field(10, ge=2, le=MAX_QUESTIONS, strict=True)
    # per retriever, seeded sample
    max_queries: dict[str, Annotated[int, Field(ge=1, le=MAX_QUESTIONS, strict=True)]] = Field(
        default_factory=lambda: {"causal": 150})
    spaces: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)       # overrides a kind's `space` entries
    fusion_members: list[str] = Field(default_factory=lambda: ["learned", "entity_first"])  # fused at their tuned params
    # learned: the tune splits of these other benchmarks (their own indexes) join the training rows; the CV folds and
    # the figure stay on this benchmark's own tune split, the extra questions are in every training fold.
    learned_extra: list[str] = Field(default_factory=list)
    # learned: the solver's likelihood of the question after each candidate may be a feature (one LLM scoring per
    # candidate, through the call cache); the CV tries every point with and without it and keeps the better, so a
    # benchmark where it does not help pays the scorings once and not at query time. Needs the `llm` scorer.
    learned_question_likelihood: bool = False
    pairwise_base: list[str] = Field(default_factory=lambda: ["fusion", "learned", "entity_first"])  # first tuned one
    query_likelihood_base: list[str] = Field(default_factory=lambda: ["fusion", "learned", "hybrid"])  # first tuned
    # The retriever selected unless the best nested train figure beats it by more than one standard error of their
    # paired difference (`search.compare_nested`): on a few train questions the winner by a hair is the noise's
    # choice. Chosen on the shipped benchmarks' small train samples (docs: "Choosing a retriever on few
    # questions"); null: the best nested figure, however small its margin.
    robust_default: str | None = ROBUST_DEFAULT
    # Which truth picks the selected retriever among the tuned ones: the judgements (the nested figure above), the
    # Monte Carlo labels, or the answer gain at `answer_k` (the solver's answer given the top k; needs a scorer and
    # train questions with answers). Every truth's choice is recorded and evaluated either way.
    select_by: Literal["qrels", "mc_labels", "answers"] = "qrels"
    answer_k: int = Field(3, ge=1, le=MAX_K, strict=True)
    encoder: EncoderSpec | None = None           # fine-tune the dense encoder first (tuned_encoder asset)
    reranker: RerankerSpec | None = None         # a cross-encoder over the selected retriever (tuned_reranker asset)
    seed: int = Field(0, strict=True)

    @field_validator("robust_default")
    @classmethod
    def _default_tunable(cls, v: str | None) -> str | None:
        if v is not None and v not in TUNABLE:
            raise ValueError(f"robust_default {v!r} is not a tunable retriever ({', '.join(TUNABLE)})")
        return v

    def resolved_retrievers(self, listed: list[str], has_within: bool) -> list[str]:
        names = self.retrievers if self.retrievers is not None else \
            [n for n in listed if n in TUNABLE] + ["learned"]
        unknown = [n for n in names if n not in TUNABLE]
        if unknown:
            raise ValueError(f"tuning: cannot tune {unknown}; tunable: {', '.join(TUNABLE)}")
        names = [n for n in dict.fromkeys(names) if has_within or "within" not in KINDS[n].needs]
        return sorted(names, key=ORDER.__getitem__)

    def may_score(self, resolved: list[str]) -> bool:
        """Whether tuning `resolved` may measure with the LLM's log-probability scorer: a kind that scores by its own
        choice (`kinds.SCORING`), or a learned model offered the question-likelihood feature."""
        return bool(set(SCORING) & set(resolved)) or (self.learned_question_likelihood and self.trains_model(resolved))

    @staticmethod
    def trains_model(resolved: list[str]) -> bool:
        """Whether a kind of `resolved` fits a model on the tune split (its `learned_*` settings apply)."""
        return any(KINDS[n].tuning == "fit" for n in resolved)

    def fold_seeds(self) -> list[int]:
        """The seeds of the `cv_repeats` fold splits: seed, seed + 1, ..."""
        return [self.seed + r for r in range(self.cv_repeats)]

    def space(self, name: str, has_within: bool = True) -> dict[str, list[Any]]:
        """The search space of a retriever; `within_stats` only where queries rank their own candidate sets."""
        space = {**KINDS[name].space, **self.spaces.get(name, {})}
        return space if has_within else {k: v for k, v in space.items() if k != "within_stats"}
