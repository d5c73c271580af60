"""Query-side weights of a sparse query, one definition for both scoring paths: plain Python/NumPy for one query
(`SparseIndex.score`, `SparseIndex.top_k`) and compiled by numba inside the batch kernel (`postings_kernel`)."""
from __future__ import annotations

import numpy as np


def query_columns(raw: np.ndarray, idf: np.ndarray, tfidf: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct columns (ascending) of a query's term columns and their weights: BM25 the occurrence count (Lucene
    sums a term's document weight once per query occurrence); TF-IDF sublinear tf * idf, L2-normalised, as on the
    document side. Negative entries (terms outside the vocabulary) are skipped. Written in the subset of Python
    numba compiles, so the batch kernel weighs queries with this very function."""
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
