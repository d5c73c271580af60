"""What causal retrieval returns and takes: the measured relevance of a document (information contribution,
counterfactual impact, causal chain), the ranked result and its explanation, the score's weights and the options."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from causal_assets.core.index.search import Hit
from causal_assets.core.text.answers import f1_precision_recall, normalize_answer

SIMILAR = 0.9          # answers with token F1 >= 0.9 are the same answer (similarity < 0.9 = a change)


@dataclass(frozen=True)
class InformationContribution:
    mutual_information: float
    information_gain: float
    redundancy: float
    unique_contribution: float
    entropy_reduction: float
    base_entropy: float = 0.0
    with_doc_entropy: float = 0.0
    with_all_entropy: float = 0.0
    with_doc_and_all_entropy: float = 0.0


@dataclass(frozen=True)
class CounterfactualImpact:
    would_change_answer: bool
    change_prob: float
    change_type: str       # complete_change | partial_change | confidence_change | no_change
    change_severity: str   # critical | significant | minor | negligible
    answer_with: str = ""
    answer_without: str = ""
    similarity: float = 1.0


@dataclass(frozen=True)
class CausalNode:
    type: str              # query | concept | entity | document
    id: str
    label: str


@dataclass(frozen=True)
class CausalChainLink:
    from_node: CausalNode
    to_node: CausalNode
    relationship: str
    strength: float
    evidence: str


@dataclass
class CausalRelevance:
    document: Hit
    information_contribution: InformationContribution
    counterfactual_impact: CounterfactualImpact
    causal_chain: list[CausalChainLink]
    chain_strength: float
    relevance_score: float
    confidence: float


@dataclass
class RankedCausalDocument:
    document: Hit
    relevance: CausalRelevance
    rank: int
    explanation: str | None = None


@dataclass
class CausalRetrievalResult:
    documents: list[RankedCausalDocument]
    total_considered: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.documents)


@dataclass
class RetrievalExplanation:
    query: str
    chunk_id: str
    was_retrieved: bool
    summary: str
    reasons: list[str]
    relevance: CausalRelevance | None = None


@dataclass(frozen=True)
class RelevanceWeights:
    information_contribution: float = 0.35
    counterfactual_impact: float = 0.4
    causal_chain_strength: float = 0.25
    # The shortlist's own order as a prior (1 for its first candidate down to 1/n for its last): 0 by default, so
    # the score is the measures alone; tuning may weigh it when the shortlist (e.g. the learned model) is strong.
    shortlist_prior: float = 0.0

    FIELDS = ("information_contribution", "counterfactual_impact", "causal_chain_strength", "shortlist_prior")

    @classmethod
    def from_mapping(cls, m: Mapping[str, float] | "RelevanceWeights" | None) -> "RelevanceWeights":
        if m is None:
            return cls()
        if isinstance(m, RelevanceWeights):
            return m
        alias = {"informationContribution": "information_contribution",
                 "counterfactualImpact": "counterfactual_impact", "causalChainStrength": "causal_chain_strength",
                 "shortlistPrior": "shortlist_prior"}
        kw = {alias.get(k, k): float(v) for k, v in m.items()}
        unknown = set(kw) - set(cls.FIELDS)
        if unknown:
            raise ValueError(f"unknown weight(s) {sorted(unknown)}")
        w = cls(**kw)
        values = [getattr(w, f) for f in cls.FIELDS]
        if min(values) < 0 or sum(values) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        return w


@dataclass(frozen=True)
class CausalRetrievalOptions:
    max_docs: int = 10
    min_relevance: float = 0.1
    weights: RelevanceWeights | Mapping[str, float] = field(default_factory=RelevanceWeights)
    include_explanations: bool = True
    mode: str = "balanced"               # balanced | precision | recall (docs/on-demand.md)
    shortlist_size: int = 8              # documents the shortlist gives to the answer model
    graph_candidates: int = 3            # graph neighbours of the shortlist added as candidates
    diversity_threshold: float = 0.01    # bits
    max_hops: int = 4
    hop_decay: float = 0.8

    def __post_init__(self):
        if self.mode not in ("balanced", "precision", "recall"):
            raise ValueError(f"mode must be balanced, precision or recall, got {self.mode!r}")
        if self.max_docs < 1 or self.shortlist_size < 1 or self.graph_candidates < 0:
            raise ValueError("max_docs and shortlist_size must be >= 1, graph_candidates >= 0")
        object.__setattr__(self, "weights", RelevanceWeights.from_mapping(self.weights))

    def effective(self) -> "CausalRetrievalOptions":
        """The options after the mode's adjustments (docs/on-demand.md, "The causal retriever")."""
        if self.mode == "precision":
            return replace(self, min_relevance=max(self.min_relevance, 0.3),
                           diversity_threshold=self.diversity_threshold * 5)
        if self.mode == "recall":
            return replace(self, min_relevance=self.min_relevance / 2, shortlist_size=self.shortlist_size * 2,
                           graph_candidates=self.graph_candidates * 2, diversity_threshold=1e-9)
        return self


def change_impact(change_prob: float, cur: str, alt: str, mode_sim: float) -> CounterfactualImpact:
    """Change type and severity (docs/on-demand.md) of an answer `cur` that becomes `alt` (token F1 `mode_sim`)."""
    would = mode_sim < SIMILAR
    if would:
        ctype = "complete_change" if mode_sim <= 0.2 else "partial_change"
    else:
        ctype = "confidence_change" if change_prob >= 0.1 else "no_change"
    sev = ("critical" if change_prob >= 0.75 else "significant" if change_prob >= 0.4
           else "minor" if change_prob >= 0.1 else "negligible")
    return CounterfactualImpact(would, change_prob, ctype, sev, cur, alt, float(mode_sim))


def answer_similarity(a: str, b: str) -> float:
    """Token F1 of two answers (two empty answers are the same answer): at `SIMILAR` or above, no change."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na and not nb:
        return 1.0
    if not na or not nb:
        return 0.0
    return float(f1_precision_recall(a, b)[0])
