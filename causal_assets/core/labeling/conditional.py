"""Effects beside the documents that help on their own: how a bridge document is found.

A document that helps the solver only *together with* another one (the first hop of a two-hop question: it names the
bridge entity, its partner holds the answer) has an average effect over balanced random subsets of about half its
effect beside the partner, since the partner is absent from half of them. The additive fit then leaves it inside the
noise. Here the partner set is the question's ``YES`` documents (the documents decided helpful on their own):

* :func:`second_block` holds them in and balances every other document over the rows a labeller runs after its first
  orthogonal block, where a label is still undecided, so each other document's effect beside them is measured in as
  many rows as it was averaged over before;
* :func:`with_partners` fits the main-effects regression on the trials that contain the whole ``YES`` set (the first
  block's share of them and the second block) and labels a document ``YES`` when this conditional effect is decided
  above the threshold, naming the partners. Without trials beside a ``YES`` set nothing changes, so the estimate is a
  pure function of the trials, whatever design produced them.

Decisions come from the conditional interval only upward (``UNCERTAIN``/``NO`` → ``YES``) and, with
``decide_no``, from ``UNCERTAIN`` to ``NO`` when the document does not help beside the ``YES`` set either.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .design import balanced_design
from .estimators import NO, UNCERTAIN, YES, LabelingResult, regression

__all__ = ["partner_set", "second_block", "with_partners"]


def held_in(e, threshold: float) -> tuple:
    """The documents present in the context a ``YES`` was decided in (the regression's AND-type interactions, or
    the ``YES`` set it was measured beside); () when the average effect alone decides it."""
    if e.partners or e.marginal_ci_low > threshold:
        return e.partners
    return tuple(d for d, present in e.context if present)


def partner_set(result: LabelingResult) -> list[int]:
    """Column indices of the documents labelled ``YES`` on their own (not beside a partner)."""
    return [j for j, e in enumerate(result.docs) if e.label == YES and not held_in(e, result.threshold)]


def second_block(result: LabelingResult, n_trials: int, rng) -> np.ndarray | None:
    """``n_trials`` rows holding ``result``'s ``YES`` set in and every other document balanced, or None when there is
    no ``YES`` set (or nothing besides it) to condition on: the labeller then runs its balanced rows instead."""
    partners = partner_set(result)
    others = [j for j in range(len(result.docs)) if j not in partners]
    if not partners or not others or n_trials < 2:
        return None
    rows = np.zeros((int(n_trials), len(result.docs)), dtype=bool)
    rows[:, partners] = True
    rows[:, others] = balanced_design(len(others), int(n_trials), rng)
    return rows


def with_partners(result: LabelingResult, subsets, outcomes, alpha: float, decide_no: bool = False,
                  min_rows: int = 4) -> LabelingResult:
    """``result`` (the regression on every trial) with each other document's effect beside the ``YES`` set.

    Every document outside the ``YES`` set gets ``conditional_*`` fields when the trials holding the whole set let
    the regression give it a finite interval; a document whose conditional interval lies above the threshold is
    ``YES`` with the set as its ``partners`` (its ``delta_p`` and interval then are the conditional ones)."""
    # a YES decided in an interaction's context (partner present) already names its partners
    result = replace(result, docs=tuple(replace(e, partners=held_in(e, result.threshold)) if e.label == YES else e
                                        for e in result.docs))
    partners = partner_set(result)
    x = np.asarray(subsets, dtype=bool)
    y = np.asarray(outcomes, dtype=float)
    if not partners or not len(y):
        return result
    rows = x[:, partners].all(axis=1)
    if int(rows.sum()) < min_rows:
        return result
    ids = [e.doc for e in result.docs]
    beside = regression(x[rows], y[rows], result.threshold, alpha, interactions=False, chunk_ids=ids)
    names = tuple(ids[j] for j in partners)
    docs = []
    for j, (e, c) in enumerate(zip(result.docs, beside.docs)):
        if j in partners or not (math.isfinite(c.ci_low) and math.isfinite(c.ci_high)):
            docs.append(e)
            continue
        e = replace(e, conditional_delta_p=c.delta_p, conditional_ci_low=c.ci_low, conditional_ci_high=c.ci_high,
                    conditional_trials=int(rows.sum()))
        if c.label == YES and e.label != YES:
            e = replace(e, label=YES, delta_p=c.delta_p, ci_low=c.ci_low, ci_high=c.ci_high, partners=names,
                        context=tuple((p, True) for p in names))
        elif decide_no and c.label == NO and e.label == UNCERTAIN:
            e = replace(e, label=NO)
        docs.append(e)
    return replace(result, docs=tuple(docs), extra={**result.extra, "partners": list(names)})

