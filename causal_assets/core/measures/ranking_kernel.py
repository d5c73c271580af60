"""ranx's array input, built with numba: per query an (n, 2) array [doc code, value], best first, in a typed list
(`typed_lists`). Its own module, loaded by `metrics` when it scores, because importing numba (and scipy with it)
costs ~0.35 s, which every process that loads the code location would pay without evaluating anything."""
from __future__ import annotations

from itertools import chain, count

import numba
import numpy as np
from numba.typed import List as TypedList

NUMBA_THREADS = numba.config.NUMBA_NUM_THREADS   # what ranx is asked for: it pins tiny inputs to one thread


def typed_lists(runs, binary, graded):
    """ranx's array input: per query an (n, 2) array [doc code, value], best first.

    Doc ids only need to match within a query, so each query numbers its own: judged documents 0..n-1, then each
    retrieved document not judged n + its position (exact dict matching, no hashing of ids into numbers). This is
    several times cheaper than one vocabulary over all queries (for 10k queries x 100 results, factorising a
    million ids dominated the evaluation). Doc ids also order equal values within a query (trec_eval breaks ties
    by doc id descending): only the ids that take part in a tie are sorted, into a tie-break rank.
    """
    codes: tuple[list[int], list[int], list[int]] = ([], [], [])
    for run_q, binary_q, graded_q in zip(runs, binary, graded):  # binary labels are a subset of graded ones
        judged = {d: i for i, d in enumerate(graded_q)}
        n = len(judged)
        codes[0].extend(map(judged.get, run_q, count(n)))  # judged code, else n + position (a C-level loop)
        codes[1].extend([judged[d] for d in binary_q])
        codes[2].extend(range(n))
    out = []
    for part, code in zip((runs, binary, graded), codes):
        offsets = np.zeros(len(part) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, part), np.int64, len(part)), out=offsets[1:])
        values = np.fromiter(chain.from_iterable(x.values() for x in part), np.float64, offsets[-1])
        order, tied = _by_value(values, offsets)
        tie_rank = np.zeros(len(values))
        if tied.any():
            ids = np.fromiter(chain.from_iterable(part), dtype=object, count=offsets[-1])
            # sorted rank of each tied id; equal ids (the same document in run and qrels) share it
            tie_rank[tied] = np.unique(ids[tied].astype(str), return_inverse=True)[1] + 1
        out.append(_best_first(np.asarray(code, dtype=np.float64), tie_rank, values, offsets, order))
    return out


@numba.njit(cache=True)
def _by_value(value, offsets):
    """Per query, row order by value descending (stable), and the mask of rows whose value another row of the
    same query shares (their order is still to be decided by doc id)."""
    order = np.empty(len(value), dtype=np.int64)
    tied = np.zeros(len(value), dtype=np.bool_)
    for q in range(len(offsets) - 1):
        lo, hi = offsets[q], offsets[q + 1]
        local = np.argsort(-value[lo:hi], kind="mergesort") + lo
        order[lo:hi] = local
        for i in range(1, len(local)):
            if value[local[i]] == value[local[i - 1]]:
                tied[local[i]] = True
                tied[local[i - 1]] = True
    return order, tied


@numba.njit(cache=True)
def _best_first(code, tie_rank, value, offsets, order):
    """Per query, rows [code, value] in `order` (value descending), each run of equal values re-ordered by
    tie-break rank descending (doc id descending).

    Done in numba because a global np.lexsort plus np.split and boxing 10k arrays into a typed
    list costs several times more.
    """
    out = TypedList()
    for q in range(len(offsets) - 1):
        lo, hi = offsets[q], offsets[q + 1]
        rows = np.empty((hi - lo, 2))
        i = lo
        while i < hi:
            j = i + 1
            while j < hi and value[order[j]] == value[order[i]]:
                j += 1
            run = order[i:j]
            if j - i > 1:
                run = run[np.argsort(-tie_rank[run], kind="mergesort")]
            for r in range(j - i):
                rows[i - lo + r, 0] = code[run[r]]
                rows[i - lo + r, 1] = value[run[r]]
            i = j
        out.append(rows)
    return out
