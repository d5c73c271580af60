"""Subset designs for Monte Carlo relevance verification.

A design is a boolean matrix ``(n_trials, n_docs)``: row ``i`` is the context shown to the blind solver in trial
``i``, column ``j`` says whether candidate document ``j`` is included. :func:`bernoulli_design` includes every
document independently with probability ``p``. :func:`balanced_design` includes every document in exactly half the
trials and, over whole blocks of a randomised Sylvester-Hadamard matrix, every pair in each in/out combination
equally often, so a regression's main effects are estimated independently of each other (rows beyond the last
whole block are random balanced columns). :func:`leave_one_out_design` is the full set plus each document removed.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import hadamard

__all__ = ["bernoulli_design", "balanced_design", "balanced_stages", "leave_one_out_design", "balanced_columns",
           "mixed_design"]


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def bernoulli_design(n_docs: int, n_trials: int, p: float = 0.5, rng=None) -> np.ndarray:
    """Each document independently included with probability ``p`` (the classic Monte Carlo design)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return _rng(rng).random((int(n_trials), int(n_docs))) < p


def balanced_columns(n_docs: int, n_trials: int, rng=None) -> np.ndarray:
    """Each column an independent random permutation of exactly ``n_trials // 2`` (or the ceiling) Trues."""
    rng = _rng(rng)
    out = np.zeros((int(n_trials), int(n_docs)), dtype=bool)
    for j in range(int(n_docs)):
        k = n_trials // 2 + (int(rng.integers(2)) if n_trials % 2 else 0)
        out[rng.permutation(n_trials)[:k], j] = True
    return out


def _hadamard_block(n_docs: int, order: int, rng: np.random.Generator) -> np.ndarray:
    h = hadamard(order)[:, 1:]                      # drop the all-ones column: every column is balanced
    cols = rng.choice(order - 1, size=n_docs, replace=False)
    signs = rng.choice([-1, 1], size=n_docs)
    block = h[:, cols] * signs
    return block[rng.permutation(order)] > 0


def balanced_design(n_docs: int, n_trials: int, rng=None) -> np.ndarray:
    """Every document in exactly half the trials; pairs balanced (orthogonal) within each Hadamard block.

    The Hadamard order is the smallest power of two > ``n_docs`` (so there are enough balanced orthogonal
    columns). Complete blocks are independently randomised (column choice, sign flips, row order);
    remaining rows use :func:`balanced_columns`."""
    return balanced_stages(n_docs, n_trials, rng)[0]


def balanced_stages(n_docs: int, n_trials: int, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`balanced_design`'s rows (the same rows for the same ``rng``) and each row's block: 0 for the first
    whole Hadamard block, 1, 2, ... for the blocks after it and the balanced rest.

    Block 0 alone is an orthogonal design of every main effect, so a labeller can fit after it and run the rest
    only where a label is still undecided; where it runs them all, it has exactly the rows it always had."""
    rng = _rng(rng)
    n_docs, n_trials = int(n_docs), int(n_trials)
    if n_docs == 0 or n_trials == 0:
        return np.zeros((n_trials, n_docs), dtype=bool), np.zeros(n_trials, dtype=int)
    order = 1 << int(np.ceil(np.log2(n_docs + 1)))
    order = max(order, 2)
    blocks = [_hadamard_block(n_docs, order, rng) for _ in range(n_trials // order)]
    rest = n_trials % order
    if rest:
        blocks.append(balanced_columns(n_docs, rest, rng))
    out = np.vstack(blocks)
    stage = np.concatenate([np.full(len(b), i) for i, b in enumerate(blocks)])
    if len(blocks) > 1:
        perm = rng.permutation(n_trials)
        return out[perm], stage[perm]
    return out, stage


def leave_one_out_design(n_docs: int) -> np.ndarray:
    """Row 0: every document; row ``j + 1``: every document except ``j``."""
    out = np.ones((int(n_docs) + 1, int(n_docs)), dtype=bool)
    out[np.arange(1, n_docs + 1), np.arange(n_docs)] = False
    return out


def mixed_design(n_docs: int, n_trials: int, levels=(0.25, 0.75), rng=None) -> np.ndarray:
    """Rows cycle through the inclusion probabilities ``levels`` (row ``i`` uses ``levels[i % len(levels)]``, row
    order then shuffled); within a row every document is included independently with that probability.

    High-inclusion rows make multi-hop (AND) sets complete often, low-inclusion rows leave redundant (OR)
    partners absent often, so both kinds of context effect become visible earlier than under p = 1/2. With
    ``levels=(0.5,)`` this is :func:`bernoulli_design`."""
    rng = _rng(rng)
    n_docs, n_trials = int(n_docs), int(n_trials)
    levels = np.asarray(levels, dtype=float)
    if levels.size == 0 or (levels < 0).any() or (levels > 1).any():
        raise ValueError(f"levels must be probabilities, got {levels}")
    p = levels[np.arange(n_trials) % levels.size][rng.permutation(n_trials)] if n_trials else levels[:0]
    return rng.random((n_trials, n_docs)) < p[:, None]
