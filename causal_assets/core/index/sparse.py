"""Sparse indexes as term -> postings matrices: BM25 (weights from bm25s) and TF-IDF (scikit-learn).

Both are stored the same way, as a CSC matrix (chunks x terms) whose columns are postings lists, so
scoring a query is a sum of a few columns, exactly what bm25s does at query time. Persisting postings
as Parquet (term, chunk_idx, weight) keeps the index inspectable with SQL and storable on any fsspec path.

`top_k_many` is the query-time fast path: one compiled loop accumulates the postings of each query into a reused
buffer and selects the top k among the chunks it touched, so its cost follows the postings read, not the corpus
size (it also returns the sum and sum of squares of all n scores, which z-score fusion needs).
"""
from __future__ import annotations

from dataclasses import dataclass

import bm25s
import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

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
        return _query_columns(np.array(self.term_ids(terms), dtype=np.int64), self._idf_or_empty(),
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

    def top_k_many(self, queries_terms: list[list[str]], k: int, moments: bool = False) -> "SparseTopK":
        """Top-k chunk positions and scores of every query, the same ranking as sorting `score(terms)` (score
        descending, ties by chunk position; chunks sharing no term score 0 and come last in chunk order).
        `moments`: also the sum and sum of squares of all scores (for `SparseTopK.mean_std`)."""
        # One flat list of term columns, -1 for terms outside the vocabulary (skipped by the kernel): building it
        # is the only per-term Python work of a query, so it is kept to one dict lookup per term.
        get = self.vocab.get
        cols = [get(t, -1) for terms in queries_terms for t in terms]
        offsets = np.zeros(len(queries_terms) + 1, dtype=np.int64)
        np.cumsum([len(terms) for terms in queries_terms], out=offsets[1:])
        m = self.matrix  # its int32/int64 index arrays are passed as they are: no per-call copy of the postings
        positions, scores, sums, sumsqs = _top_k_postings(
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


SCAN_BLOCK = 64  # chunks whose maximum is checked at once when scanning the score buffer


@numba.njit(cache=True)
def _query_columns(raw: np.ndarray, idf: np.ndarray, tfidf: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct columns (ascending) of a query's term columns and their weights: BM25 the occurrence count (Lucene
    sums a term's document weight once per query occurrence); TF-IDF sublinear tf * idf, L2-normalised, as on the
    document side. Negative entries (terms outside the vocabulary) are skipped."""
    cols = np.sort(raw)
    start = 0
    while start < len(cols) and cols[start] < 0:
        start += 1
    cols = cols[start:]
    n = 0
    for i in range(len(cols)):
        if i == 0 or cols[i] != cols[i - 1]:
            n += 1
    unique = np.empty(n, np.int64)
    weights = np.zeros(n, np.float64)
    j = -1
    for i in range(len(cols)):
        if i == 0 or cols[i] != cols[i - 1]:
            j += 1
            unique[j] = cols[i]
        weights[j] += 1.0
    if tfidf:
        norm = 0.0
        for j in range(n):
            weights[j] = (1.0 + np.log(weights[j])) * idf[unique[j]]
            norm += weights[j] * weights[j]
        if norm > 0:
            weights /= np.sqrt(norm)
    return unique, weights.astype(np.float32)


@numba.njit(cache=True, fastmath=True)
def _block_max(values, start, end):
    # fastmath lets LLVM vectorise the reduction; a maximum does not depend on the order it is taken in.
    best = values[start]
    for i in range(start + 1, end):
        best = max(best, values[i])
    return best


@numba.njit(cache=True)
def _sum_and_sumsq(values):
    total, total_sq = 0.0, 0.0
    for v in values:
        total += v
        total_sq += v * v
    return total, total_sq


@numba.njit(cache=True, inline="always")
def _worse(v1, d1, v2, d2):
    """Ranking order: higher score first, ties by lower chunk position."""
    return v1 < v2 or (v1 == v2 and d1 > d2)


@numba.njit(cache=True)
def _sift_down(heap_v, heap_d, i, size):
    while True:
        low, left, right = i, 2 * i + 1, 2 * i + 2
        if left < size and _worse(heap_v[left], heap_d[left], heap_v[low], heap_d[low]):
            low = left
        if right < size and _worse(heap_v[right], heap_d[right], heap_v[low], heap_d[low]):
            low = right
        if low == i:
            return
        heap_v[i], heap_v[low] = heap_v[low], heap_v[i]
        heap_d[i], heap_d[low] = heap_d[low], heap_d[i]
        i = low


@numba.njit(cache=True, inline="always")
def _offer(v, d, heap_v, heap_d, size, k):
    """Put a chunk that beats the worst kept (or fills a free slot) into the size-k heap; returns the new size."""
    if size < k:                                               # push, sift up
        c = size
        heap_v[c], heap_d[c] = v, d
        while c > 0:
            parent = (c - 1) // 2
            if not _worse(heap_v[c], heap_d[c], heap_v[parent], heap_d[parent]):
                break
            heap_v[c], heap_v[parent] = heap_v[parent], heap_v[c]
            heap_d[c], heap_d[parent] = heap_d[parent], heap_d[c]
            c = parent
        return size + 1
    heap_v[0], heap_d[0] = v, d                                # replace the root (the worst kept)
    _sift_down(heap_v, heap_d, 0, size)
    return size


@numba.njit(cache=True)
def _top_k_postings(indptr, indices, data, n_docs, q_offsets, q_terms, idf, tfidf, k, moments):
    """Top k of each query (`q_terms[q_offsets[q]:q_offsets[q + 1]]`: term columns, repeats kept).

    Per query: weigh the columns as `query_weights` does, accumulate weight * postings into a zeroed buffer, offer
    each touched chunk to a size-k heap whose root is the worst kept, and reset the buffer. With few postings
    relative to the corpus, the touched chunks are found by a second pass over the postings (cost follows the
    postings read, not the corpus size); otherwise by a scan of the buffer that looks only into blocks whose
    maximum can reach the top k. Fewer than k chunks with a positive score: the rest follow with score 0 in chunk order.
    Accumulation order and float32 arithmetic are those of `SparseIndex.score`, so scores are identical; weights
    are non-negative (BM25, TF-IDF). `moments`: also the sum and sum of squares of all scores (z-score fusion)."""
    nq = len(q_offsets) - 1
    out_pos = np.zeros((nq, k), np.int64)
    out_score = np.zeros((nq, k), np.float32)
    sums = np.zeros(nq, np.float64)
    sumsqs = np.zeros(nq, np.float64)
    scores = np.zeros(n_docs, np.float32)
    heap_v = np.empty(k, np.float32)
    heap_d = np.empty(k, np.int64)
    n_blocks = (n_docs + SCAN_BLOCK - 1) // SCAN_BLOCK
    block_max = np.empty(n_blocks, np.float32)
    for q in range(nq):
        cols, weights = _query_columns(q_terms[q_offsets[q]:q_offsets[q + 1]], idf, tfidf)
        read = 0
        for j in range(len(cols)):
            col, w = cols[j], weights[j]
            read += indptr[col + 1] - indptr[col]
            for p in range(indptr[col], indptr[col + 1]):
                scores[indices[p]] += w * data[p]
        size, total, total_sq = 0, 0.0, 0.0
        if read > n_docs // 4:
            # Many postings: scan the buffer in chunk order instead of a second random-access pass. Zero scores
            # enter the heap too, which ranks them in chunk order exactly as the padding below would.
            if moments:
                total, total_sq = _sum_and_sumsq(scores)
            # The k-th largest block maximum bounds the k-th largest score from below (k blocks each hold a score
            # at least that high), so only blocks whose maximum reaches it need an element-wise look.
            for b in range(n_blocks):
                block_max[b] = _block_max(scores, b * SCAN_BLOCK, min((b + 1) * SCAN_BLOCK, n_docs))
                if size < k or block_max[b] > heap_v[0]:
                    size = _offer(block_max[b], b, heap_v, heap_d, size, k)
            bound = heap_v[0] if size == k else -np.inf
            size = 0
            for b in range(n_blocks):
                if block_max[b] < bound:
                    continue
                for d in range(b * SCAN_BLOCK, min((b + 1) * SCAN_BLOCK, n_docs)):
                    v = scores[d]
                    if size < k or v > heap_v[0]:        # in chunk order a tie never beats the kept one
                        size = _offer(v, d, heap_v, heap_d, size, k)
            scores[:] = 0.0
        else:
            for j in range(len(cols)):
                col = cols[j]
                for p in range(indptr[col], indptr[col + 1]):
                    d = indices[p]
                    v = scores[d]
                    if v != 0.0:                         # zero: visited already, or a zero score (ranks as untouched)
                        scores[d] = 0.0                  # marks it visited and resets the buffer
                        total += v
                        total_sq += v * v
                        if size < k or _worse(heap_v[0], heap_d[0], v, d):
                            size = _offer(v, d, heap_v, heap_d, size, k)
        sums[q], sumsqs[q] = total, total_sq
        n = size
        while size > 0:                                  # pop worst first into the back of the row
            size -= 1
            out_pos[q, size], out_score[q, size] = heap_d[0], heap_v[0]
            heap_v[0], heap_d[0] = heap_v[size], heap_d[size]
            _sift_down(heap_v, heap_d, 0, size)
        d = 0
        while n < k:                                     # pad with the other chunks, score 0, in chunk order
            taken = False
            for r in range(n):
                if out_pos[q, r] == d:
                    taken = True
            if not taken:
                out_pos[q, n] = d
                n += 1
            d += 1
    return out_pos, out_score, sums, sumsqs


def build_bm25(tokens: list[list[str]], k1: float = BM25_K1, b: float = BM25_B) -> SparseIndex:
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(tokens, show_progress=False)
    s = model.scores
    matrix = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(s["num_docs"], len(s["indptr"]) - 1))
    vocab = {t: i for t, i in model.vocab_dict.items() if t != ""}  # bm25s adds an empty token for empty queries
    return SparseIndex("bm25", vocab, matrix.astype(np.float32))


def build_tfidf(tokens: list[list[str]]) -> SparseIndex:
    # Index build only: scikit-learn takes ~1.5 s to import, which a query (`causal-assets search`) must not pay.
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer=lambda toks: toks, sublinear_tf=True, norm="l2", dtype=np.float32)
    matrix = vec.fit_transform(tokens).tocsc()
    return SparseIndex("tfidf", dict(vec.vocabulary_), matrix, vec.idf_.astype(np.float32))
