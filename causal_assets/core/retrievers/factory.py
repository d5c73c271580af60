"""Build any configured retriever by name over a loaded corpus index."""
from __future__ import annotations

from typing import Any

from causal_assets.core.index.search import CorpusIndex
from causal_assets.core.retrievers.base import Retriever
from causal_assets.core.retrievers.similarity import HybridRetriever, RRFRetriever, SimilarityRetriever

BASELINES = ("bm25", "tfidf", "dense", "hybrid", "rrf")


def build_retriever(name: str, index: CorpusIndex, params: dict[str, Any] | None = None) -> Retriever:
    params = dict(params or {})
    if name in ("bm25", "tfidf", "dense"):
        return SimilarityRetriever(index, name)
    if name == "hybrid":
        return HybridRetriever(index, **params)
    if name == "rrf":
        return RRFRetriever(index, **params)
    raise ValueError(f"unknown retriever {name!r}; known: {', '.join(BASELINES)}")
