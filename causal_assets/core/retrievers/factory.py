"""Build any configured retriever by name over a loaded corpus index."""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.llm.scoring import Scorer
from causal_assets.core.retrievers.base import Retriever
from causal_assets.core.retrievers.cascade import CascadeRetriever, RetrievalConfig
from causal_assets.core.retrievers.causal.answer_model import LexicalAnswerModel, LLMAnswerModel
from causal_assets.core.retrievers.causal.likelihood_model import LikelihoodAnswerModel
from causal_assets.core.retrievers.causal.retriever import CausalRetrievalOptions, CausalRetriever
from causal_assets.core.retrievers.cross_encoder import CrossEncoderReranker
from causal_assets.core.retrievers.entity_first.llm_entities import LLMEntityExtractor
from causal_assets.core.retrievers.entity_first.retriever import EntityFirstRetriever
from causal_assets.core.retrievers.fusion import FusionRetriever, PairwiseTop2
from causal_assets.core.retrievers.learned.retriever import CausalRelevanceModel, LearnedRetriever
from causal_assets.core.retrievers.query_likelihood import QueryLikelihoodReranker
from causal_assets.core.retrievers.similarity import HybridRetriever, RRFRetriever, SimilarityRetriever

BASELINES = ("bm25", "tfidf", "dense", "hybrid", "rrf")
RETRIEVERS = (*BASELINES, "cascade", "entity_first", "causal", "learned", "fusion", "pairwise", "query_likelihood",
              "cross_encoder")
SHORTLISTS = ("hybrid", "cascade", "bm25", "learned")
# Retrievers built over other retrievers named in their params (`members` or `base`).
COMBINATIONS = ("fusion", "pairwise", "query_likelihood", "cross_encoder")
# Retrievers that may measure with the LLM's log-probability scorer (`uses_scorer`): the Dagster layer starts the
# `llm` resource's scorer only for a plan that holds one of them.
SCORING = ("causal", "query_likelihood")

Neighbors = Callable[[str], list[tuple[str, str, float]]]
Graph = tuple[pd.DataFrame, pd.DataFrame]


def build_retriever(name: str, index: CorpusIndex, params: dict[str, Any] | None = None,
                    neighbors: Neighbors | None = None, llm_client=None, graph: Graph | None = None,
                    scorer: Scorer | None = None) -> Retriever:
    """`params`: the retriever's own settings (hybrid: weight; cascade: a RetrievalConfig dict; entity_first:
    EntityFirstRetriever keyword arguments, plus `llm_entities: true` for the LLM-backed query entity extractor;
    learned: `model_path` (or a fitted `model`) and optional `depth`; causal: see `build_causal`; fusion:
    `members` {name: params}, `c`, `weights` {name: weight}, `depth` (weighted RRF of the members' rankings);
    pairwise: `base` {name: params}, `pool`, `coverage_weight`, `link_weight`, `use_ranks` (top-2 as a pair);
    query_likelihood: `base` {name: params}, `depth`, `weight`, `prompt`, `max_doc_chars` (the base's top reranked
    by the language model's likelihood of the query); cross_encoder: `base` {name: params}, `model_path` (a fitted
    cross-encoder, e.g. from tuned_reranker), `weight`, `depth`, `max_length` (the base's top reranked by it).
    `neighbors`: the entity graph's chunk neighbourhood, for graph stages. `graph`: the (graph_nodes,
    graph_edges) frames, for the causal chains and the learned model's graph feature. `llm_client`: an
    LLMClient, needed only by LLM-backed options; `scorer`: a log-probability `Scorer`, needed by the causal
    retriever's `answer_model: likelihood` and by query_likelihood."""
    params = dict(params or {})
    if name in ("bm25", "tfidf", "dense"):
        return SimilarityRetriever(index, name, **params)   # params: within_stats (bm25 inside `within`)
    if name == "hybrid":
        return HybridRetriever(index, **params)
    if name == "rrf":
        return RRFRetriever(index, **params)
    if name == "cascade":
        # the embedding stage embeds with the index's own model unless the params name one (then it must match)
        embedding = {"embedding_model": index.embedder.model_name, **params.get("embedding", {})}
        return CascadeRetriever(index, RetrievalConfig.model_validate({**params, "embedding": embedding}),
                                neighbors)
    if name == "entity_first":
        if params.pop("llm_entities", False):
            if llm_client is None:
                raise ValueError("entity_first with llm_entities: true needs an LLM client")
            params["entity_extractor"] = LLMEntityExtractor(llm_client)
        return EntityFirstRetriever(index, **params)
    if name == "learned":
        return build_learned(index, params, graph, scorer)
    if name == "causal":
        return build_causal(index, params, neighbors, llm_client, graph, scorer)
    if name == "fusion":
        members = params.pop("members", None) or {}
        if not isinstance(members, dict) or not members:
            raise ValueError("fusion needs members: {retriever name: its params}")
        built = [(m, build_retriever(m, index, p, neighbors, llm_client, graph, scorer)) for m, p in members.items()]
        return FusionRetriever(index, built, **params)
    if name == "cross_encoder":
        b, p = _one_base(name, params)
        if not params.get("model_path"):
            raise ValueError("cross_encoder needs model_path (a fitted cross-encoder, e.g. from tuned_reranker)")
        base = build_retriever(b, index, p, neighbors, llm_client, graph, scorer)
        return CrossEncoderReranker(index, base, params.pop("model_path"), **params)
    if name in ("pairwise", "query_likelihood"):
        b, p = _one_base(name, params)
        if name == "query_likelihood" and scorer is None:
            raise ValueError("query_likelihood needs a log-probability scorer (the `llm` resource's)")
        base = build_retriever(b, index, p, neighbors, llm_client, graph, scorer)
        return PairwiseTop2(index, base, **params) if name == "pairwise" else \
            QueryLikelihoodReranker(index, base, scorer, **params)
    raise ValueError(f"unknown retriever {name!r}; known: {', '.join(RETRIEVERS)}")


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


def uses_scorer(kind: str, params: dict[str, Any], scorer_configured: bool) -> bool:
    """Whether a `kind` retriever with `params` measures with the log-probability scorer: query_likelihood always,
    causal where its answer model is the likelihood (`causal_answer_model`), a learned model that reads the
    question-likelihood feature, and a retriever built over one of these (members, base, the causal shortlist)."""
    if kind == "query_likelihood" or (kind == "causal" and causal_answer_model(params, scorer_configured) == "likelihood"):
        return True
    if kind == "learned":
        return learned_uses_scorer(params)
    inner = {**(params.get("members") or {}), **(params.get("base") or {})}
    if kind == "causal" and params.get("shortlist") == "learned":
        inner["learned"] = params.get("shortlist_params") or {}
    return any(uses_scorer(k, p or {}, scorer_configured) for k, p in inner.items() if isinstance(p, dict))


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
    if kind == "bm25":
        shortlist = None  # CausalRetriever's own: BM25 hits with a positive score
    elif kind == "cascade":
        shortlist = build_retriever("cascade", index, shortlist_params, neighbors)
    else:
        first = build_retriever(kind, index, shortlist_params, neighbors, llm_client, graph, scorer)

        def shortlist(query, n, within):
            return first.retrieve_many([query], n, [list(within)] if within is not None else None)[0]
    return CausalRetriever(index, answer_model, graph, shortlist, CausalRetrievalOptions(**params))
