"""Sparse indexes as term -> postings matrices: BM25 (weights from bm25s) and TF-IDF (scikit-learn).

Both are stored the same way, as a CSC matrix (chunks x terms) whose columns are postings lists, so
scoring a query is a sum of a few columns, exactly what bm25s does at query time. Persisting postings
as Parquet (term, chunk_idx, weight) keeps the index inspectable with SQL and storable on any fsspec path.
"""
from __future__ import annotations

from dataclasses import dataclass

import bm25s
import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

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
        """Column ids and query-side weights of the known terms of a query."""
        ids, counts = np.unique([self.vocab[t] for t in terms if t in self.vocab], return_counts=True)
        if self.method == "bm25":
            # Lucene BM25 sums a term's document weight once per query occurrence.
            return ids, counts.astype(np.float32)
        w = (1.0 + np.log(counts)) * self.idf[ids]  # sublinear tf * idf, as on the document side
        norm = np.linalg.norm(w)
        return ids, (w / norm if norm else w).astype(np.float32)

    def score(self, terms: list[str]) -> np.ndarray:
        scores = np.zeros(self.n_docs, dtype=np.float32)
        ids, weights = self.query_weights(terms)
        m = self.matrix
        for col, w in zip(ids, weights):
            lo, hi = m.indptr[col], m.indptr[col + 1]
            scores[m.indices[lo:hi]] += w * m.data[lo:hi]
        return scores

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


def build_bm25(tokens: list[list[str]], k1: float = BM25_K1, b: float = BM25_B) -> SparseIndex:
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(tokens, show_progress=False)
    s = model.scores
    matrix = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(s["num_docs"], len(s["indptr"]) - 1))
    vocab = {t: i for t, i in model.vocab_dict.items() if t != ""}  # bm25s adds an empty token for empty queries
    return SparseIndex("bm25", vocab, matrix.astype(np.float32))


def build_tfidf(tokens: list[list[str]]) -> SparseIndex:
    vec = TfidfVectorizer(analyzer=lambda toks: toks, sublinear_tf=True, norm="l2", dtype=np.float32)
    matrix = vec.fit_transform(tokens).tocsc()
    return SparseIndex("tfidf", dict(vec.vocabulary_), matrix, vec.idf_.astype(np.float32))
