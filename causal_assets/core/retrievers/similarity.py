"""Similarity baselines: BM25, TF-IDF, dense, and hybrids of sparse and dense scores.

`HybridRetriever` z-normalises each method's scores over the candidate set (unlike min-max, not dominated by one
outlier) and combines them as `weight * dense + (1 - weight) * sparse`; `RRFRetriever` fuses ranks instead,
sum of 1 / (c + rank). At ANN scale the candidates are the union of each method's shortlist, with corpus-wide
z-statistics computed without scoring every chunk. Inside a query's own candidates (`within`), BM25 takes its
statistics from the corpus or from the candidates alone (`within_stats`), chosen on a tune split. See
docs/pipeline.md ("Retrievers").
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from causal_assets.core.index.build import chunk_texts
from causal_assets.core.index.search import CorpusIndex, Hit
from causal_assets.core.index.sparse import BM25_B, BM25_K1, SparseTopK
from causal_assets.core.text.analyzer import analyze

WITHIN_STATS = ("corpus", "candidates")


def _check_within_stats(value: str) -> None:
    if value not in WITHIN_STATS:
        raise ValueError(f"within_stats must be one of {WITHIN_STATS}, got {value!r}")


def _doc_terms(index: CorpusIndex, positions: np.ndarray) -> list[Counter]:
    """Term counts of chunks (the analyzer and text the index was built with), memoised on the index."""
    memo = index.__dict__.setdefault("_candidate_terms", {})
    missing = [int(p) for p in positions if int(p) not in memo]
    if missing:
        texts = chunk_texts(index.chunks.iloc[missing])
        for p, t in zip(missing, texts):
            memo[p] = Counter(analyze(t, index.split_identifiers))
    return [memo[int(p)] for p in positions]


def candidate_bm25(index: CorpusIndex, query: str, positions: np.ndarray, k1: float = BM25_K1,
                   b: float = BM25_B) -> np.ndarray:
    """BM25 of `query` over the chunks at `positions` with statistics from those chunks alone (a small index of
    the candidates): the Lucene variant bm25s builds the corpus index with, idf = ln(1 + (N - df + .5) / (df + .5)),
    tf part = tf / (tf + k1 (1 - b + b dl / avgdl)); a repeated query term counts once per occurrence."""
    docs = _doc_terms(index, np.asarray(positions))
    n = len(docs)
    out = np.zeros(n, dtype=np.float32)
    if not n:
        return out
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    avgdl = lengths.mean() or 1.0
    norm = k1 * (1 - b + b * lengths / avgdl)
    for term, qtf in Counter(index.terms(query)).items():
        tf = np.array([d.get(term, 0) for d in docs], dtype=np.float64)
        df = int((tf > 0).sum())
        if df:
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            out += (qtf * idf * tf / (tf + norm)).astype(np.float32)
    return out


def sparse_scores(index: CorpusIndex, query: str, sparse: str, positions: np.ndarray,
                  within_stats: str = "corpus") -> np.ndarray:
    """Sparse scores of the chunks at `positions`: BM25 with `candidates` statistics computes them over those
    chunks alone (module docstring); anything else reads the corpus index."""
    if within_stats == "candidates" and sparse == "bm25":
        return candidate_bm25(index, query, positions)
    return index.scores(query, sparse)[positions]


def zscore(x: np.ndarray) -> np.ndarray:
    std = x.std()
    return (x - x.mean()) / std if std > 0 else np.zeros_like(x)


def rerank_head(hits: list[Hit], mixed: np.ndarray, k: int) -> list[Hit]:
    """`hits` with its first `len(mixed)` reordered by `mixed` (higher first; ties keep the given order) and the rest
    after them in their own order, scored below every reranked one: a reranker's output, ranks 1..k."""
    order = np.argsort(-mixed, kind="stable")
    tail = hits[len(mixed):]
    scores = [float(mixed[i]) for i in order] + [float(mixed.min()) - 1.0 - r for r in range(len(tail))]
    ranked = [hits[i] for i in order] + tail
    return [Hit(h.chunk_id, scores[r], r + 1, h.title, h.kind) for r, h in enumerate(ranked[:k])]


@dataclass
class SimilarityRetriever:
    index: CorpusIndex
    method: str = "bm25"  # bm25 | tfidf | dense
    within_stats: str = "corpus"   # BM25 inside `within`: corpus or candidates statistics (module docstring)

    def __post_init__(self) -> None:
        _check_within_stats(self.within_stats)

    @property
    def name(self) -> str:
        return self.method

    def retrieve_many(self, queries, k, within=None):
        if within is None or self.within_stats == "corpus" or self.method != "bm25":
            return self.index.search_many(queries, k, self.method, within)
        out = []
        for q, w in zip(queries, within):
            cand = np.array([self.index.position[c] for c in dict.fromkeys(w) if c in self.index.position],
                            dtype=np.int64)
            out.append(_top_hits(self.index, cand, candidate_bm25(self.index, q, cand).astype(np.float64), k))
        return out


def candidate_scores(index: CorpusIndex, query: str, qv: np.ndarray, sparse: str,
                     within: list[str] | None, within_stats: str = "corpus") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidate positions, sparse scores, dense scores) over `within` (None: the whole corpus, where
    `within_stats` has no effect)."""
    if within is None:
        cand = np.arange(len(index.ids))
        return cand, index.scores(query, sparse), index.scores(query, "dense", qv)
    cand = np.array([index.position[c] for c in within])
    return cand, sparse_scores(index, query, sparse, cand, within_stats), index.scores(query, "dense", qv)[cand]


def _fuse_many(index: CorpusIndex, queries, k, within, sparse: str, fuse, within_stats: str = "corpus") -> list[list[Hit]]:
    """Top-k per query of `fuse(sparse_scores, dense_scores)` over each query's candidates."""
    vectors = index.embedder.encode_queries(queries)
    out = []
    for i, (q, qv) in enumerate(zip(queries, vectors)):
        cand, s, d = candidate_scores(index, q, qv, sparse, within[i] if within else None, within_stats)
        out.append(_hits(index, cand, fuse(s, d), k))
    return out


def _hits(index: CorpusIndex, cand: np.ndarray, fused: np.ndarray, k: int) -> list[Hit]:
    full = np.full(len(index.ids), -np.inf, dtype=np.float64)
    full[cand] = fused
    return index.top_k(full, k, [index.ids[i] for i in cand] if len(cand) < len(index.ids) else None)


def _top_hits(index: CorpusIndex, cand: np.ndarray, fused: np.ndarray, k: int) -> list[Hit]:
    """The k best candidates by fused score, ties by chunk position (as `CorpusIndex.top_k`)."""
    order = np.lexsort((cand, -fused))[:k]
    return index.hits(cand[order], fused[order])


@dataclass
class Shortlists:
    """Each method's whole-corpus top n per query: what fusion looks at when dense search is approximate."""
    vectors: np.ndarray          # query vectors
    sparse: SparseTopK
    dense_positions: np.ndarray  # (queries, n); -1 where the ANN index found fewer
    dense_scores: np.ndarray

    def candidates(self, q: int) -> np.ndarray:
        dense = self.dense_positions[q]
        return np.union1d(self.sparse.positions[q], dense[dense >= 0])


def shortlists(index: CorpusIndex, queries: list[str], sparse: str, n: int) -> Shortlists:
    vectors = index.embedder.encode_queries(queries)
    top = index.sparse[sparse].top_k_many([index.terms(q) for q in queries], n, moments=True)
    positions, scores = index.dense_top_k(vectors, n)
    return Shortlists(vectors, top, positions, scores)


def at_scale(index: CorpusIndex, within) -> bool:
    """Whole-corpus search on an index whose dense search is approximate: fuse shortlists, not score vectors."""
    return within is None and index.ann is not None


@dataclass
class HybridRetriever:
    index: CorpusIndex
    weight: float = 0.5     # share of the dense score; chosen on a train split by the evaluation/tuning stages
    sparse: str = "bm25"
    shortlist: int = 100    # per method, at ANN scale only (see the module docstring)
    within_stats: str = "corpus"

    def __post_init__(self) -> None:
        _check_within_stats(self.within_stats)

    @property
    def name(self) -> str:
        return "hybrid"

    def retrieve_many(self, queries, k, within=None):
        if at_scale(self.index, within):
            return self._retrieve_at_scale(queries, k)
        return _fuse_many(self.index, queries, k, within, self.sparse,
                          lambda s, d: self.weight * zscore(d) + (1 - self.weight) * zscore(s), self.within_stats)

    def _retrieve_at_scale(self, queries: list[str], k: int) -> list[list[Hit]]:
        index = self.index
        lists = shortlists(index, queries, self.sparse, max(self.shortlist, k))
        mean_vec, second = index.dense_moments()
        out = []
        for i, (q, qv) in enumerate(zip(queries, lists.vectors)):
            cand = lists.candidates(i)
            s = index.sparse[self.sparse].score_positions(index.terms(q), cand).astype(np.float64)
            d = (index.embeddings[cand] @ qv).astype(np.float64)
            s_mean, s_std = lists.sparse.mean_std(i)
            d_mean = float(mean_vec @ qv)
            d_std = float(np.sqrt(max(qv @ second @ qv - d_mean * d_mean, 0.0)))
            fused = self.weight * _z(d, d_mean, d_std) + (1 - self.weight) * _z(s, s_mean, s_std)
            out.append(_top_hits(index, cand, fused, k))
        return out


def _z(x: np.ndarray, mean: float, std: float) -> np.ndarray:
    return (x - mean) / std if std > 0 else np.zeros_like(x)


@dataclass
class RRFRetriever:
    index: CorpusIndex
    c: int = 60             # the constant of Cormack et al. (2009)
    depth: int = 100        # how many of each ranking take part
    sparse: str = "bm25"
    within_stats: str = "corpus"

    def __post_init__(self) -> None:
        _check_within_stats(self.within_stats)

    @property
    def name(self) -> str:
        return "rrf"

    def retrieve_many(self, queries, k, within=None):
        if at_scale(self.index, within):
            return self._retrieve_at_scale(queries, k)
        return _fuse_many(self.index, queries, k, within, self.sparse, self._fuse, self.within_stats)

    def _retrieve_at_scale(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Both top-`depth` lists come straight from the whole-corpus searches: the same fusion, no score vectors."""
        lists = shortlists(self.index, queries, self.sparse, self.depth)
        out = []
        for i in range(len(queries)):
            ranked = [lists.sparse.positions[i], lists.dense_positions[i][lists.dense_positions[i] >= 0]]
            cand = np.union1d(*ranked)
            fused = np.zeros(len(cand))
            for positions in ranked:
                fused[np.searchsorted(cand, positions)] += 1.0 / (self.c + np.arange(1, len(positions) + 1))
            out.append(_top_hits(self.index, cand, fused, k))
        return out

    def _fuse(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        fused = np.zeros(len(s))
        for scores in (s, d):
            top = np.argsort(-scores, kind="stable")[: self.depth]
            fused[top] += 1.0 / (self.c + np.arange(1, len(top) + 1))
        return fused


def fusion_weight_grid(step: float = 0.05) -> list[float]:
    return [round(w, 4) for w in np.arange(0.0, 1.0 + 1e-9, step)]
