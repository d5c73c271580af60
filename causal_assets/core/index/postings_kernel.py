"""The compiled batch path of BM25/TF-IDF top-k (`SparseIndex.top_k_many`): one numba loop accumulates the
postings of each query into a reused buffer and selects the top k among the chunks it touched, so its cost follows
the postings read, not the corpus size (it also returns the sum and sum of squares of all n scores, which z-score
fusion needs). Its own module because loading numba and the cached kernel takes ~0.7 s, which a process answering
one query (`causal-assets search`) must not pay: one query goes through `SparseIndex.top_k` in NumPy instead."""
from __future__ import annotations

import numba
import numpy as np

from causal_assets.core.index.query_weights import query_columns

_query_columns = numba.njit(cache=True)(query_columns)

SCAN_BLOCK = 64  # chunks whose maximum is checked at once when scanning the score buffer


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
def top_k_postings(indptr, indices, data, n_docs, q_offsets, q_terms, idf, tfidf, k, moments):
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
