"""Sparse indexes as term -> postings matrices: BM25 (weights from bm25s) and TF-IDF (scikit-learn).

Both are stored the same way, as a CSC matrix (chunks x terms) whose columns are postings lists, so
scoring a query is a sum of a few columns, exactly what bm25s does at query time. Persisting postings
as Parquet (term, chunk_idx, weight) keeps the index inspectable with SQL and storable on any fsspec path.

Two query-time paths with the same ranking (score descending, ties by chunk position): `top_k_many`, a compiled
loop for batches and services (`postings_kernel`, loaded on first use), and `top_k`, NumPy for one query in a
process that answers only that one (`causal-assets search`): loading numba and the kernel would double its time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from causal_assets.core.index.query_weights import query_columns

BM25_K1, BM25_B = 1.2, 0.75  # Lucene defaults; SciFact test nDCG@10 0.679 with them (shared/data README)


@dataclass
class SparseIndex:
    method: str                 # bm25 | tfidf
    vocab: dict[str, int]       # term -> column
    matrix: sp.csc_matrix       # chunks x terms, float32 weights
    idf: np.ndarray | None = None  # tf-idf only: the query side needs it

    @property
    def n_docs(self) -> int:
        return self.matrix.shape[0]

    def query_weights(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Column ids (ascending) and query-side weights of the known terms of a query."""
        return query_columns(np.array(self.term_ids(terms), dtype=np.int64), self._idf_or_empty(),
                              self.method == "tfidf")

    def term_ids(self, terms: list[str]) -> list[int]:
        """Columns of the known terms, in query order, repeats kept (they are the query term frequencies)."""
        return [c for c in map(self.vocab.get, terms) if c is not None]

    def _idf_or_empty(self) -> np.ndarray:
        return self.idf if self.idf is not None else np.zeros(0, np.float32)

    def score(self, terms: list[str]) -> np.ndarray:
        scores = np.zeros(self.n_docs, dtype=np.float32)
        ids, weights = self.query_weights(terms)
        m = self.matrix
        for col, w in zip(ids, weights):
            lo, hi = m.indptr[col], m.indptr[col + 1]
            scores[m.indices[lo:hi]] += w * m.data[lo:hi]
        return scores

    def score_positions(self, terms: list[str], positions: np.ndarray) -> np.ndarray:
        """`score(terms)[positions]` without scoring every chunk: each query column is searched for the positions
        (binary search in its sorted postings), so the cost follows the query's terms, not the corpus size."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.zeros(len(positions), dtype=np.float32)
        m = self.matrix
        if not m.has_sorted_indices:
            m.sort_indices()
        for col, w in zip(*self.query_weights(terms)):
            lo, hi = m.indptr[col], m.indptr[col + 1]
            postings = m.indices[lo:hi]
            j = np.minimum(np.searchsorted(postings, positions), max(hi - lo - 1, 0))
            found = (hi > lo) & (postings[j] == positions) if hi > lo else np.zeros(len(positions), bool)
            out[found] += w * m.data[lo + j[found]]
        return out

    def top_k(self, terms: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k chunk positions and scores of one query, in NumPy: the ranking of `top_k_many` (and of sorting
        `score(terms)`) without loading the compiled kernel."""
        k = min(k, self.n_docs)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = self.score(terms)
        matched = np.flatnonzero(scores > 0)
        if len(matched) > k:
            matched = matched[np.argpartition(-scores[matched], k - 1)[:k]]
            # the k-th score may be tied beyond the partition: take every chunk at it, then the lowest positions
            matched = np.union1d(matched, np.flatnonzero(scores == scores[matched].min()))
        best = matched[np.lexsort((matched, -scores[matched]))][:k]
        if len(best) < k:  # chunks sharing no term score 0 and follow in chunk order
            best = np.concatenate([best, np.flatnonzero(scores <= 0)[:k - len(best)]])
        return best, scores[best]

    def top_k_many(self, queries_terms: list[list[str]], k: int, moments: bool = False) -> "SparseTopK":
        """Top-k chunk positions and scores of every query, the same ranking as sorting `score(terms)` (score
        descending, ties by chunk position; chunks sharing no term score 0 and come last in chunk order).
        `moments`: also the sum and sum of squares of all scores (for `SparseTopK.mean_std`)."""
        # Imported here, not at the top: numba and the cached kernel take ~0.7 s to load, which `top_k` (one query
        # in a one-shot process) must not pay. postings_kernel imports nothing from this module.
        from causal_assets.core.index.postings_kernel import top_k_postings

        # One flat list of term columns, -1 for terms outside the vocabulary (skipped by the kernel): building it
        # is the only per-term Python work of a query, so it is kept to one dict lookup per term.
        get = self.vocab.get
        cols = [get(t, -1) for terms in queries_terms for t in terms]
        offsets = np.zeros(len(queries_terms) + 1, dtype=np.int64)
        np.cumsum([len(terms) for terms in queries_terms], out=offsets[1:])
        m = self.matrix  # its int32/int64 index arrays are passed as they are: no per-call copy of the postings
        positions, scores, sums, sumsqs = top_k_postings(
            m.indptr, m.indices, m.data.astype(np.float32, copy=False), self.n_docs, offsets,
            np.array(cols, dtype=np.int64), self._idf_or_empty(), self.method == "tfidf", min(k, self.n_docs), moments)
        return SparseTopK(positions, scores, sums, sumsqs, self.n_docs)

    def to_frames(self, corpus: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(postings, vocabulary) tables for Parquet."""
        terms = np.empty(len(self.vocab), dtype=object)
        for t, i in self.vocab.items():
            terms[i] = t
        m = self.matrix
        lengths = np.diff(m.indptr)
        postings = pd.DataFrame({
            "corpus": corpus, "method": self.method,
            "term_id": np.repeat(np.arange(len(terms), dtype=np.int32), lengths),
            "chunk_idx": m.indices.astype(np.int32), "weight": m.data.astype(np.float32),
        })
        vocab = pd.DataFrame({"corpus": corpus, "method": self.method, "term_id": np.arange(len(terms), dtype=np.int32),
                              "term": terms, "df": lengths.astype(np.int32),
                              "idf": self.idf.astype(np.float32) if self.idf is not None else np.nan})
        return postings, vocab

    @classmethod
    def from_frames(cls, method: str, postings: pd.DataFrame, vocab: pd.DataFrame, n_docs: int) -> "SparseIndex":
        p = postings[postings["method"] == method]
        v = vocab[vocab["method"] == method].sort_values("term_id")
        matrix = sp.csc_matrix((p["weight"].to_numpy(np.float32), (p["chunk_idx"].to_numpy(), p["term_id"].to_numpy())),
                               shape=(n_docs, len(v)))
        idf = v["idf"].to_numpy(np.float32) if method == "tfidf" else None
        return cls(method, dict(zip(v["term"], v["term_id"])), matrix, idf)


@dataclass
class SparseTopK:
    """Result of `SparseIndex.top_k_many`: rows are queries."""
    positions: np.ndarray   # (queries, k) chunk positions, best first
    scores: np.ndarray      # (queries, k) float32
    sums: np.ndarray        # (queries,) sum of all n_docs scores
    sumsqs: np.ndarray      # (queries,) sum of their squares
    n_docs: int

    def mean_std(self, q: int) -> tuple[float, float]:
        """Mean and (population) standard deviation of query q's scores over every chunk."""
        mean = self.sums[q] / self.n_docs
        return float(mean), float(np.sqrt(max(self.sumsqs[q] / self.n_docs - mean * mean, 0.0)))


def warm_up() -> None:
    """Compile or load the batch kernel of `top_k_many` on a toy index: numba caches it beside the code, ~4 s on 2
    cores the first time after an install, which `scripts/install` pays instead of the first batch search."""
    m = sp.csc_matrix(np.array([[1.0, 0.0], [0.5, 2.0]], dtype=np.float32))
    SparseIndex("bm25", {"a": 0, "b": 1}, m).top_k_many([["a", "b"], ["b"]], 1, moments=True)


def build_bm25(tokens: list[list[str]], k1: float = BM25_K1, b: float = BM25_B) -> SparseIndex:
    # Index build only: bm25s brings numba with it (~0.5 s to import), which a one-query search must not pay.
    import bm25s

    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(tokens, show_progress=False)
    s = model.scores
    matrix = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(s["num_docs"], len(s["indptr"]) - 1))
    # Columns in sorted term order: bm25s numbers terms in set order, which follows Python's per-process hash seed,
    # and a query's float32 sum runs over its columns in that order, so the same index scored a title 4.8e-7
    # differently from one process to the next, enough to reorder near-ties and move a tree model's splits.
    terms = sorted(t for t in model.vocab_dict if t != "")   # bm25s adds an empty token for empty queries
    matrix = matrix[:, [model.vocab_dict[t] for t in terms]]
    return SparseIndex("bm25", {t: i for i, t in enumerate(terms)}, matrix.astype(np.float32))


def build_tfidf(tokens: list[list[str]]) -> SparseIndex:
    # Index build only: scikit-learn takes ~1.5 s to import, which a query (`causal-assets search`) must not pay.
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer=lambda toks: toks, sublinear_tf=True, norm="l2", dtype=np.float32)
    matrix = vec.fit_transform(tokens).tocsc()
    return SparseIndex("tfidf", dict(vec.vocabulary_), matrix, vec.idf_.astype(np.float32))
