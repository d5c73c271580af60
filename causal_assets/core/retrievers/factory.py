"""Build any configured retriever by name over a loaded corpus index."""
from __future__ import annotations

from typing import Any, Callable

from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.base import Retriever
from causal_assets.core.retrievers.similarity import HybridRetriever, RRFRetriever, SimilarityRetriever

BASELINES = ("bm25", "tfidf", "dense", "hybrid", "rrf")
RETRIEVERS = (*BASELINES, "cascade", "entity_first")

Neighbors = Callable[[str], list[tuple[str, str, float]]]


def build_retriever(name: str, index: CorpusIndex, params: dict[str, Any] | None = None,
                    neighbors: Neighbors | None = None, llm_client=None) -> Retriever:
    """`params`: the retriever's own settings (hybrid: weight; cascade: a RetrievalConfig dict; entity_first:
    SealRetriever keyword arguments, plus `llm_entities: true` for the LLM-backed query entity extractor).
    `neighbors`: the entity graph's chunk neighbourhood, for graph stages. `llm_client`: an LLMClient, needed
    only by LLM-backed options."""
    params = dict(params or {})
    if name in ("bm25", "tfidf", "dense"):
        return SimilarityRetriever(index, name)
    if name == "hybrid":
        return HybridRetriever(index, **params)
    if name == "rrf":
        return RRFRetriever(index, **params)
    if name == "cascade":
        from causal_assets.core.retrievers.cascade import CascadeRetriever, RetrievalConfig

        return CascadeRetriever(index, RetrievalConfig.model_validate(params), neighbors)
    if name == "entity_first":
        from causal_assets.core.retrievers.seal import SealRetriever

        if params.pop("llm_entities", False):
            from causal_assets.core.retrievers.llm_entities import LLMEntityExtractor

            if llm_client is None:
                raise ValueError("entity_first with llm_entities: true needs an LLM client")
            params["entity_extractor"] = LLMEntityExtractor(llm_client)
        return SealRetriever(index, **params)
    raise ValueError(f"unknown retriever {name!r}; known: {', '.join(RETRIEVERS)}")
