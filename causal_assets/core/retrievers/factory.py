"""Build any configured retriever by name over a loaded corpus index: one builder per kind (`kinds.KINDS`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.llm.scoring import Scorer
from causal_assets.core.retrievers.base import Retriever
from causal_assets.core.retrievers.cascade import CascadeRetriever
from causal_assets.core.retrievers.cascade_config import RetrievalConfig
from causal_assets.core.retrievers.causal.answer_model import LexicalAnswerModel, LLMAnswerModel
from causal_assets.core.retrievers.causal.likelihood_model import LikelihoodAnswerModel
from causal_assets.core.retrievers.causal.retriever import CausalRetriever
from causal_assets.core.retrievers.causal.results import CausalRetrievalOptions
from causal_assets.core.retrievers.cross_encoder import CrossEncoderReranker
from causal_assets.core.retrievers.entity_first.llm_entities import LLMEntityExtractor
from causal_assets.core.retrievers.entity_first.retriever import EntityFirstRetriever
from causal_assets.core.retrievers.fusion import FusionRetriever, PairwiseTop2
from causal_assets.core.retrievers.learned.retriever import CausalRelevanceModel, LearnedRetriever
from causal_assets.core.registry.retrievers import SHORTLISTS, kind
from causal_assets.core.retrievers.query_likelihood import QueryLikelihoodReranker
from causal_assets.core.retrievers.similarity import HybridRetriever, RRFRetriever, SimilarityRetriever

Neighbors = Callable[[str], list[tuple[str, str, float]]]
Graph = tuple[pd.DataFrame, pd.DataFrame]


@dataclass(frozen=True)
class BuildContext:
    """What a builder may hand its retriever besides the index and its params (`build_retriever`)."""
    neighbors: Neighbors | None = None
    llm_client: Any = None
    graph: Graph | None = None
    scorer: Scorer | None = None

    def build(self, name: str, index: CorpusIndex, params: dict[str, Any] | None) -> Retriever:
        return build_retriever(name, index, params, self.neighbors, self.llm_client, self.graph, self.scorer)


def build_retriever(name: str, index: CorpusIndex, params: dict[str, Any] | None = None,
                    neighbors: Neighbors | None = None, llm_client=None, graph: Graph | None = None,
                    scorer: Scorer | None = None) -> Retriever:
    """The `name` retriever (a kind of `kinds.KINDS`, whose builder this calls) over `index`. `params`: the
    retriever's own settings (each builder below says which). `neighbors`: the entity graph's chunk neighbourhood,
    for graph stages. `graph`: the (graph_nodes, graph_edges) frames, for the causal chains and the learned model's
    graph feature. `llm_client`: an LLMClient, needed only by LLM-backed options; `scorer`: a log-probability
    `Scorer`, needed by the causal retriever's `answer_model: likelihood` and by query_likelihood."""
    return kind(name).builder_function()(index, dict(params or {}), BuildContext(neighbors, llm_client, graph, scorer))


def build_bm25(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """The index's own search; params: within_stats (BM25 statistics inside `within`)."""
    return SimilarityRetriever(index, "bm25", **params)


def build_tfidf(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    return SimilarityRetriever(index, "tfidf", **params)


def build_dense(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    return SimilarityRetriever(index, "dense", **params)


def build_hybrid(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: weight (the dense share), within_stats."""
    return HybridRetriever(index, **params)


def build_rrf(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    return RRFRetriever(index, **params)


def build_cascade(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: a RetrievalConfig dict. The embedding stage embeds with the index's own model unless the params name
    one (then it must match)."""
    embedding = {"embedding_model": index.embedder.model_name, **params.get("embedding", {})}
    return CascadeRetriever(index, RetrievalConfig.model_validate({**params, "embedding": embedding}),
                            context.neighbors)


def build_entity_first(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: EntityFirstRetriever keyword arguments, plus `llm_entities: true` for the LLM-backed query entity
    extractor."""
    if params.pop("llm_entities", False):
        if context.llm_client is None:
            raise ValueError("entity_first with llm_entities: true needs an LLM client")
        params["entity_extractor"] = LLMEntityExtractor(context.llm_client)
    return EntityFirstRetriever(index, **params)


def build_learned_kind(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: `model_path` (or a fitted `model`) and optional `depth` (`build_learned`)."""
    return build_learned(index, params, context.graph, context.scorer)


def build_causal_kind(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: see `build_causal`."""
    return build_causal(index, params, context.neighbors, context.llm_client, context.graph, context.scorer)


def build_fusion(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: `members` {name: params}, `c`, `weights` {name: weight}, `depth` (weighted RRF of the members'
    rankings)."""
    members = params.pop("members", None) or {}
    if not isinstance(members, dict) or not members:
        raise ValueError("fusion needs members: {retriever name: its params}")
    return FusionRetriever(index, [(m, context.build(m, index, p)) for m, p in members.items()], **params)


def build_cross_encoder(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: `base` {name: params}, `model_path` (a fitted cross-encoder, e.g. from tuned_reranker), `weight`,
    `depth`, `max_length` (the base's top reranked by it)."""
    b, p = _one_base("cross_encoder", params)
    if not params.get("model_path"):
        raise ValueError("cross_encoder needs model_path (a fitted cross-encoder, e.g. from tuned_reranker)")
    base = context.build(b, index, p)
    return CrossEncoderReranker(index, base, params.pop("model_path"), **params)


def build_pairwise(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: `base` {name: params}, `pool`, `coverage_weight`, `link_weight`, `use_ranks` (top-2 as a pair)."""
    b, p = _one_base("pairwise", params)
    return PairwiseTop2(index, context.build(b, index, p), **params)


def build_query_likelihood(index: CorpusIndex, params: dict[str, Any], context: BuildContext) -> Retriever:
    """params: `base` {name: params}, `depth`, `weight`, `prompt`, `max_doc_chars` (the base's top reranked by the
    language model's likelihood of the query)."""
    b, p = _one_base("query_likelihood", params)
    if context.scorer is None:
        raise ValueError("query_likelihood needs a log-probability scorer (the `llm` resource's)")
    return QueryLikelihoodReranker(index, context.build(b, index, p), context.scorer, **params)


def _one_base(name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Pops a combination's `base` ({one retriever name: its params}) from `params`."""
    base = params.pop("base", None) or {}
    if not isinstance(base, dict) or len(base) != 1:
        raise ValueError(f"{name} needs base: {{one retriever name: its params}}")
    (b, p), = base.items()
    return b, p


def build_learned(index: CorpusIndex, params: dict[str, Any], graph: Graph | None = None,
                  scorer: Scorer | None = None):
    params = dict(params)
    if params.get("retriever") is not None:   # a ready retriever (the tuner's out-of-fold stand-in)
        return params["retriever"]
    model = params.pop("model", None)
    path = params.pop("model_path", None)
    if model is None and path is None:
        raise ValueError("learned needs model_path (a trained CausalRelevanceModel, e.g. from tuned_retriever_configs)")
    model = model if model is not None else CausalRelevanceModel.load(path)
    if model.extractor_settings.get("question_likelihood") and scorer is None:
        raise ValueError("this learned model uses the question-likelihood feature: it needs a log-probability "
                         "scorer (the `llm` resource's)")
    return LearnedRetriever(index, model, graph, scorer=scorer, **params)


def learned_uses_scorer(params: dict[str, Any]) -> bool:
    """Whether the learned model `params` name reads the question-likelihood feature (its extractor settings)."""
    if params.get("retriever") is not None:
        return False   # a ready retriever holds its own scorer
    model = params.get("model")
    if model is None and params.get("model_path") and params["model_path"] != "@learned":
        model = CausalRelevanceModel.load(params["model_path"])
    return bool(model is not None and model.extractor_settings.get("question_likelihood"))


def causal_answer_model(params: dict[str, Any], scorer_configured: bool) -> str:
    """The causal retriever's answer model: the one `params` name, else the LLM's answer likelihood wherever a
    log-probability scorer is configured (the default local model included: the ranking is then measured), else
    the lexical stand-in (offline, no LLM: a labelled fallback). Tuning, evaluation and the factory all ask here."""
    return params.get("answer_model") or ("likelihood" if scorer_configured else "lexical")


def uses_scorer(name: str, params: dict[str, Any], scorer_configured: bool) -> bool:
    """Whether a `name` retriever with `params` measures with the log-probability scorer (its kind's `scores`):
    always, where its answer model is the likelihood (`causal_answer_model`), where its learned model reads the
    question-likelihood feature, or where what it is built over does (members, base, the causal shortlist)."""
    k = kind(name)
    if k.scores == "always" or (k.scores == "answer_model"
                                and causal_answer_model(params, scorer_configured) == "likelihood"):
        return True
    if k.scores == "feature":
        return learned_uses_scorer(params)
    return any(uses_scorer(n, p or {}, scorer_configured) for n, p in k.inner(params).items() if isinstance(p, dict))


def build_causal(index: CorpusIndex, params: dict[str, Any], neighbors: Neighbors | None = None, llm_client=None,
                 graph: Graph | None = None, scorer: Scorer | None = None):
    """The causal retriever (documents ranked by how much they change the answer, `retrievers.causal`). params:
    - `shortlist`: hybrid (default) | cascade | bm25 | learned - which retriever proposes the candidates the
      answer model judges; `shortlist_params`: that retriever's params (learned: its `model_path`);
    - `answer_model`: likelihood (the LLM's log-probabilities through `scorer`: question surprisal and answer
      probability, `LikelihoodAnswerModel`; the default when a scorer is given) | lexical (the offline extractive
      stand-in, no LLM; the default without a scorer) | llm (sampled answers from the cached LLM client);
      `answer_model_params`: that model's keyword arguments (`causal_answer_model`);
    - every other key is a `CausalRetrievalOptions` field (shortlist_size, graph_candidates, weights, mode,
      max_hops, hop_decay, min_relevance, diversity_threshold, include_explanations)."""
    params = dict(params)
    kind = params.pop("shortlist", "hybrid")
    shortlist_params = dict(params.pop("shortlist_params", None) or {})
    model_kind = causal_answer_model(params, scorer is not None)
    params.pop("answer_model", None)
    model_params = dict(params.pop("answer_model_params", None) or {})
    if model_kind == "llm":
        if llm_client is None:
            raise ValueError("causal with answer_model: llm needs an LLM client")
        answer_model = LLMAnswerModel(llm_client, **model_params)
    elif model_kind == "likelihood":
        if scorer is None:
            raise ValueError("causal with answer_model: likelihood needs a log-probability scorer")
        answer_model = LikelihoodAnswerModel(scorer, **model_params)
    elif model_kind == "lexical":
        answer_model = LexicalAnswerModel(**model_params)
    else:
        raise ValueError(f"causal: unknown answer_model {model_kind!r} (lexical | llm | likelihood)")
    if kind not in SHORTLISTS:
        raise ValueError(f"causal: unknown shortlist {kind!r}; known: {', '.join(SHORTLISTS)}")
    # bm25: CausalRetriever's own shortlist (BM25 hits with a positive score); another: that retriever's top
    shortlist = None if kind == "bm25" else \
        build_retriever(kind, index, shortlist_params, neighbors, llm_client, graph, scorer)
    return CausalRetriever(index, answer_model, graph, shortlist, CausalRetrievalOptions(**params))
