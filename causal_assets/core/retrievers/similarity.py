"""Similarity baselines: BM25, TF-IDF, dense, and hybrids of sparse and dense scores.

Hybrid fusion (`HybridRetriever`): each method's scores over the candidate set are z-normalised
(mean 0, std 1), then combined as `weight * dense + (1 - weight) * sparse`. z-scores, unlike min-max, are
not dominated by a single outlier score. RRF (`RRFRetriever`) fuses ranks instead: sum of 1 / (c + rank).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from causal_assets.core.index.search import CorpusIndex, Hit


def zscore(x: np.ndarray) -> np.ndarray:
    std = x.std()
    return (x - x.mean()) / std if std > 0 else np.zeros_like(x)


@dataclass
class SimilarityRetriever:
    index: CorpusIndex
    method: str = "bm25"  # bm25 | tfidf | dense

    @property
    def name(self) -> str:
        return self.method

    def retrieve_many(self, queries, k, within=None):
        return self.index.search_many(queries, k, self.method, within)


def candidate_scores(index: CorpusIndex, query: str, qv: np.ndarray, sparse: str,
                      within: list[str] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidate positions, sparse scores, dense scores) over `within` (None: the whole corpus)."""
    cand = np.arange(len(index.ids)) if within is None else np.array([index.position[c] for c in within])
    return cand, index.scores(query, sparse)[cand], index.scores(query, "dense", qv)[cand]


def _fuse_many(index: CorpusIndex, queries, k, within, sparse: str, fuse) -> list[list[Hit]]:
    """Top-k per query of `fuse(sparse_scores, dense_scores)` over each query's candidates."""
    vectors = index.embedder.encode_queries(queries)
    out = []
    for i, (q, qv) in enumerate(zip(queries, vectors)):
        cand, s, d = candidate_scores(index, q, qv, sparse, within[i] if within else None)
        out.append(_hits(index, cand, fuse(s, d), k))
    return out


def _hits(index: CorpusIndex, cand: np.ndarray, fused: np.ndarray, k: int) -> list[Hit]:
    full = np.full(len(index.ids), -np.inf, dtype=np.float64)
    full[cand] = fused
    return index.top_k(full, k, [index.ids[i] for i in cand] if len(cand) < len(index.ids) else None)


@dataclass
class HybridRetriever:
    index: CorpusIndex
    weight: float = 0.5     # share of the dense score; chosen on a train split by the evaluation/tuning stages
    sparse: str = "bm25"

    @property
    def name(self) -> str:
        return "hybrid"

    def retrieve_many(self, queries, k, within=None):
        return _fuse_many(self.index, queries, k, within, self.sparse,
                          lambda s, d: self.weight * zscore(d) + (1 - self.weight) * zscore(s))


@dataclass
class RRFRetriever:
    index: CorpusIndex
    c: int = 60             # the constant of Cormack et al. (2009)
    depth: int = 100        # how many of each ranking take part
    sparse: str = "bm25"

    @property
    def name(self) -> str:
        return "rrf"

    def retrieve_many(self, queries, k, within=None):
        return _fuse_many(self.index, queries, k, within, self.sparse, self._fuse)

    def _fuse(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        fused = np.zeros(len(s))
        for scores in (s, d):
            top = np.argsort(-scores, kind="stable")[: self.depth]
            fused[top] += 1.0 / (self.c + np.arange(1, len(top) + 1))
        return fused


def fusion_weight_grid(step: float = 0.05) -> list[float]:
    return [round(w, 4) for w in np.arange(0.0, 1.0 + 1e-9, step)]
