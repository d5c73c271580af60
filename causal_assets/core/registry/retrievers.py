"""Every retriever kind in one table: what the factory builds, what a run must load for it, how the tuner searches
it and how the report draws it. The factory, the tuner, the evaluation and the CLI read this table instead of
comparing names. Pure data (the builders are named, imported on first build), so `causal-assets --help` and the
benchmark registry's validation import nothing heavy."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from causal_assets.core.foundation.limits import MAX_DEPTH, MAX_DOC_CHARS, MAX_K, MAX_REPEATS, MAX_TOKENS
from causal_assets.core.registry.bounds import HOPS, SHARE, WEIGHT, Bound, count

# What a kind may need besides the chunks and the sparse index:
# embeddings: the chunks' and queries' dense vectors | neighbors: the entity graph's chunk neighbourhoods
# | graph: the graph frames (nodes, edges) | within: a fixed candidate set per query (HotpotQA's own paragraphs).
NEEDS = ("embeddings", "neighbors", "graph", "within")
# What a combination is built over, read from its params: `members` {name: params} | `base` {one name: params}
# | `shortlist` (a name, its params under `shortlist_params`: the causal retriever re-ranks its candidates).
INGREDIENTS = ("members", "base", "shortlist")
# When a kind measures with the LLM's log-probability scorer: always | answer_model (where its answer model is the
# likelihood, `factory.causal_answer_model`) | feature (where its model reads the question-likelihood feature).
SCORES = ("always", "answer_model", "feature")
# How the tuner searches a kind (`core/tuning/strategies`): sweep (a weight over precomputed scores) | fit (a
# model fitted by grouped CV) | coordinate (coordinate ascent over its space) | combination (coordinate ascent over
# tuned ingredients, nested with them) | causal (coordinate ascent, in two stages with the LLM's likelihood).
TUNINGS = ("sweep", "fit", "coordinate", "combination", "causal")
# The kind whose tuned dense share and BM25 statistics the learned model's first stage and the configured baselines
# take (`TuningSpec`, `evaluation.suite.plan_evaluation`).
FIRST_STAGE = "hybrid"

_CAUSAL_WEIGHTS = [
    {"information_contribution": 0.35, "counterfactual_impact": 0.4, "causal_chain_strength": 0.25},
    {"information_contribution": 1.0, "counterfactual_impact": 0.0, "causal_chain_strength": 0.0},
    {"information_contribution": 0.0, "counterfactual_impact": 1.0, "causal_chain_strength": 0.0},
    {"information_contribution": 0.0, "counterfactual_impact": 0.0, "causal_chain_strength": 1.0},
    {"information_contribution": 0.5, "counterfactual_impact": 0.5, "causal_chain_strength": 0.0},
    {"information_contribution": 0.2, "counterfactual_impact": 0.2, "causal_chain_strength": 0.6},
    # pairs of measures, and each beside the shortlist's own order (`shortlist_prior`: how much of the ranking the
    # tuning leaves to the retriever that proposed the candidates; alone = that order)
    *[dict(zip(("information_contribution", "counterfactual_impact", "causal_chain_strength", "shortlist_prior"), w))
      for w in ((0.5, 0.0, 0.5, 0.0), (0.0, 0.5, 0.5, 0.0), (0.4, 0.4, 0.2, 0.0), (0.0, 0.0, 0.0, 1.0),
                (0.5, 0.0, 0.0, 0.5), (0.0, 0.5, 0.0, 0.5), (0.25, 0.25, 0.0, 0.5), (0.2, 0.2, 0.0, 0.6),
                (0.0, 0.0, 0.5, 0.5), (0.2, 0.2, 0.2, 0.4), (0.1, 0.1, 0.0, 0.8))],
]


@dataclass(frozen=True)
class Kind:
    """One retriever kind. `space`: parameter (dotted path into its params) -> values searched; `start`: the point
    the search starts from (its defaults; the first value of a space is not special)."""
    name: str
    help: str                          # one line for `causal-assets search --help`
    builder: str                       # "module:function(index, params, context)", imported on first build
    family: str = "other"              # the report's line style: lexical | dense | fusion | graph | causal | learned
    baseline: bool = False             # a baseline the report tests significance against
    needs: frozenset[str] = frozenset()   # of NEEDS
    ingredients: str | None = None     # of INGREDIENTS
    shortlist: bool = False            # may propose the causal retriever's candidates
    scores: str | None = None          # of SCORES
    takes_tuned: tuple[str, ...] = ()  # configured: these params of the tuned FIRST_STAGE (weight, within_stats)
    progress: bool = False             # slow per query (an answer model per candidate): runs report progress
    tuning: str | None = None          # of TUNINGS; None: not tunable
    space: dict[str, list[Any]] = field(default_factory=dict)
    start: dict[str, Any] = field(default_factory=dict)
    # param (dotted path; `name.*`: every value of the mapping `name`) -> its `Bound`, checked when params are read
    # (`registry.retriever_params`)
    bounds: dict[str, Bound] = field(default_factory=dict)

    @property
    def combination(self) -> bool:
        """Built over other retrievers named in its params (`members` or `base`)."""
        return self.ingredients in ("members", "base")

    def builder_function(self) -> Callable:
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)

    def inner(self, params: dict[str, Any]) -> dict[str, Any]:
        """{retriever name: its params} of what `params` build this kind over (empty for a plain retriever)."""
        if self.ingredients == "shortlist":
            shortlist = params.get("shortlist")
            return {shortlist: params.get("shortlist_params") or {}} if isinstance(shortlist, str) else {}
        return dict(params.get(self.ingredients) or {}) if self.ingredients else {}


_FACTORY = "causal_assets.core.retrievers.factory"
_ALL_NEEDS = frozenset({"embeddings", "neighbors", "graph"})

# In tuning order: each kind after those it may be built on (hybrid first: the learned model's first stage takes its
# weight; the causal retriever last: its shortlist may be the learned model).
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("bm25", "default", f"{_FACTORY}:build_bm25", "lexical", baseline=True, shortlist=True,
         takes_tuned=("within_stats",)),
    Kind("tfidf", "", f"{_FACTORY}:build_tfidf", "lexical", baseline=True),
    Kind("dense", "MiniLM", f"{_FACTORY}:build_dense", "dense", baseline=True, needs=frozenset({"embeddings"})),
    Kind("hybrid", "BM25 + dense", f"{_FACTORY}:build_hybrid", "fusion", baseline=True, needs=frozenset({"embeddings"}),
         shortlist=True, takes_tuned=("weight", "within_stats"), tuning="sweep",
         bounds={"weight": SHARE}),
    Kind("rrf", "reciprocal rank fusion", f"{_FACTORY}:build_rrf", "fusion", baseline=True,
         needs=frozenset({"embeddings"}), takes_tuned=("within_stats",), tuning="coordinate",
         space={"c": [5, 10, 20, 40, 60, 100], "within_stats": ["corpus", "candidates"]},
         start={"c": 60, "within_stats": "corpus"},
         bounds={"c": Bound(0, MAX_DEPTH), "depth": count(1, MAX_DEPTH)}),
    Kind("cascade", "sparse -> dense -> graph", f"{_FACTORY}:build_cascade", "graph",
         needs=frozenset({"embeddings", "neighbors"}), shortlist=True, tuning="coordinate",
         space={"tfidf.initial_k": [50, 100, 200, 400], "embedding.similarity_top_k": [10, 20, 50, 100],
                "embedding.similarity_cutoff": [None, 0.2, 0.4, 0.6], "graph.max_hops": [0, 1, 2],
                "graph.min_edge_weight": [0.1, 0.3, 0.6], "graph.score_decay_factor": [0.5, 0.8]},
         start={"tfidf.initial_k": 100, "embedding.similarity_top_k": 20, "embedding.similarity_cutoff": 0.6,
                "graph.max_hops": 2, "graph.min_edge_weight": 0.3, "graph.score_decay_factor": 0.8},
         bounds={"tfidf.initial_k": count(1, MAX_DEPTH), "embedding.similarity_top_k": count(1, MAX_DEPTH),
                 "embedding.similarity_cutoff": Bound(-1, 1, optional=True), "graph.max_hops": HOPS,
                 "graph.max_nodes": count(0, MAX_DEPTH), "graph.min_edge_weight": WEIGHT,
                 "graph.score_decay_factor": SHARE, "entropy.threshold": WEIGHT,
                 "entropy.max_iterations": count(1, MAX_REPEATS), "entropy.min_documents": count(0, MAX_DEPTH),
                 "entropy.max_documents": count(1, MAX_DEPTH), "entropy.window_size": count(1, MAX_REPEATS)}),
    # Every heuristic of the entity-first retriever (retrievers/entity_first/retriever.py) is searched: none is
    # hand-set on an evaluation split. Tuned only where queries rank their own candidate sets (`within`).
    Kind("entity_first", "entity coverage", f"{_FACTORY}:build_entity_first", "graph",
         needs=frozenset({"embeddings", "neighbors", "within"}), tuning="coordinate",
         space={"dense_weight": [0.3, 0.5, 0.7], "within_stats": ["corpus", "candidates"],
                "title_weight": [0.0, 1.0, 2.0, 3.0],
                "title_match": [{}, {"entity": 0.6, "words": 0.3}, {"entity": 1.0, "words": 0.7},
                                {"lowercase": 1.0, "nested": 1.0}],
                "strong_title": [0.3, 0.5, 0.7], "bridge": [True, False], "bridge_weight": [0.0, 0.3, 0.6],
                "max_repairs": [0, 1, 3]},
         start={"dense_weight": 0.5, "within_stats": "corpus", "title_weight": 2.0, "title_match": {},
                "strong_title": 0.5, "bridge": True, "bridge_weight": 0.3, "max_repairs": 3},
         bounds={"k": count(1, MAX_K), "max_repairs": count(0, MAX_REPEATS), "shortlist": count(1, MAX_DEPTH),
                 "dense_weight": SHARE, "strong_title": SHARE, "title_match.*": SHARE, "title_weight": WEIGHT,
                 "bridge_weight": WEIGHT}),
    Kind("learned", "the tuned causal-relevance model", f"{_FACTORY}:build_learned_kind", "learned",
         needs=frozenset({"embeddings", "neighbors", "graph"}), shortlist=True, scores="feature", tuning="fit",
         bounds={"depth": count(1, MAX_DEPTH, optional=True)}),
    # RRF of the other tuned retrievers (`fusion_members`, each at its tuned params): the constant and the weight of
    # the learned model's ranking (the others weigh 1).
    Kind("fusion", "weighted RRF of retrievers named in --params", f"{_FACTORY}:build_fusion", "fusion",
         ingredients="members", tuning="combination",
         space={"c": [1, 2, 5, 10, 20, 60], "weights.learned": [0.5, 1.0, 1.5, 2.0]},
         start={"c": 60, "weights.learned": 1.0},
         bounds={"c": Bound(0, MAX_DEPTH), "depth": count(1, MAX_DEPTH), "weights.*": WEIGHT}),
    # The top 2 re-selected as a pair over a tuned base (`pairwise_base`); 0/0 weights are the base itself.
    Kind("pairwise", "the best top-2 pair of a base retriever named in --params", f"{_FACTORY}:build_pairwise",
         "graph", ingredients="base", tuning="combination",
         space={"pool": [3, 4, 5], "coverage_weight": [0.0, 0.5, 1.0, 2.0], "link_weight": [0.0, 0.5, 1.0],
                "use_ranks": [False, True]},
         start={"pool": 4, "coverage_weight": 0.0, "link_weight": 0.0, "use_ranks": False},
         bounds={"pool": count(2, MAX_K), "coverage_weight": WEIGHT, "link_weight": WEIGHT}),
    # The top `depth` of a tuned base (`query_likelihood_base`) reranked by the solver's likelihood of the query;
    # weight 0 is the base itself. A benchmark may fix its `prompt` here (a one-value space).
    Kind("query_likelihood", "a base retriever named in --params, its top reranked by the local solver's "
         "likelihood of the query", f"{_FACTORY}:build_query_likelihood", "causal", ingredients="base",
         scores="always", tuning="combination",
         space={"weight": [0.0, 0.25, 0.5, 0.75, 1.0], "depth": [10, 20]}, start={"weight": 0.0, "depth": 20},
         bounds={"depth": count(2, MAX_DEPTH), "weight": WEIGHT, "max_doc_chars": count(1, MAX_DOC_CHARS)}),
    Kind("causal", "LLM-scored contribution", f"{_FACTORY}:build_causal_kind", "causal",
         needs=frozenset({"embeddings", "neighbors", "graph"}), ingredients="shortlist", scores="answer_model",
         progress=True, tuning="causal",
         space={"shortlist": ["hybrid", "learned"], "shortlist_size": [5, 8, 10], "graph_candidates": [0, 3],
                "weights": _CAUSAL_WEIGHTS, "max_hops": [2, 4], "hop_decay": [0.5, 0.8], "min_relevance": [0.0, 0.1]},
         start={"shortlist": "hybrid", "shortlist_size": 8, "graph_candidates": 3, "weights": _CAUSAL_WEIGHTS[0],
                "max_hops": 4, "hop_decay": 0.8, "min_relevance": 0.1},
         bounds={"shortlist_size": count(1, MAX_K), "graph_candidates": count(0, MAX_K), "max_docs": count(1, MAX_K),
                 "weights.*": SHARE, "max_hops": HOPS, "hop_decay": SHARE, "min_relevance": SHARE,
                 "diversity_threshold": WEIGHT}),
    Kind("cross_encoder", "a base retriever named in --params, its top reranked by a fitted cross-encoder: "
         "model_path, e.g. tuned_reranker's", f"{_FACTORY}:build_cross_encoder", ingredients="base",
         bounds={"depth": count(2, MAX_DEPTH), "weight": WEIGHT, "max_length": count(8, MAX_TOKENS)}),
)}

RETRIEVERS = tuple(KINDS)
BASELINES = tuple(n for n, k in KINDS.items() if k.baseline)
SHORTLISTS = tuple(n for n, k in KINDS.items() if k.shortlist)
COMBINATIONS = tuple(n for n, k in KINDS.items() if k.combination)
# Kinds that may measure with the LLM's log-probability scorer by their own choice (`factory.uses_scorer`): the
# Dagster layer starts the `llm` resource's scorer only for a plan that holds one of them.
SCORING = tuple(n for n, k in KINDS.items() if k.scores in ("always", "answer_model"))
TUNABLE = tuple(n for n, k in KINDS.items() if k.tuning)


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise ValueError(f"unknown retriever {name!r}; known: {', '.join(RETRIEVERS)}")
    return KINDS[name]


def may_need(name: str) -> frozenset[str]:
    """What a `name` run may have to load: its own needs, and for a combination whatever any member may need (its
    members are named only in its params)."""
    k = kind(name)
    return k.needs | (_ALL_NEEDS if k.combination else frozenset())


def ingredients(name: str, params: dict[str, Any]) -> list[str]:
    """The retrievers a `name` retriever with `params` builds on (fusion's members, a base, the causal shortlist)."""
    return list(KINDS[name].inner(params)) if name in KINDS else []


def cli_help() -> str:
    """The `search --method` help: every kind with its one line."""
    return " | ".join(f"{n} ({k.help})" if k.help else n for n, k in KINDS.items())
