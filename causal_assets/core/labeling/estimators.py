"""Estimators of a candidate document's causal effect on a blind solver's outcome.

Input is a design (boolean ``(n_trials, n_docs)``, see :mod:`.design`) and one outcome per trial: 1/0 pass/fail, or
any real number (the gold answer's log-probability) for :func:`regression` and :class:`AdaptiveLabeler`. Every
estimator returns a :class:`LabelingResult`: per document the effect (``delta_p``), a ``1 - alpha`` interval, the
trials used and a label: ``YES`` when the interval lies above ``threshold``, ``NO`` below it, ``UNCERTAIN`` when it
straddles it (:func:`naive` labels by the point estimate unless ``rule="ci"``). :func:`naive` is the classic Delta P,
:func:`regression` a joint fit with pairwise interactions (the context effect of redundant and multi-hop documents);
:class:`.adaptive.AdaptiveLabeler` is a sequential design around it. The estimands are explained in docs/concepts.md ("Effects and
intervals"). Nothing here knows about solvers.
"""
from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass, field, replace
from typing import Hashable, Sequence

import numpy as np
# The t and normal quantiles straight from scipy.special (what scipy.stats' t.ppf and norm.ppf compute, bit for bit):
# scipy.stats costs ~0.6 s more to import, in every process that loads the code location.
from scipy.special import ndtri, stdtrit

__all__ = [
    "YES", "NO", "UNCERTAIN", "DocEffect", "LabelingResult", "label_from_ci", "naive", "regression"]

YES, NO, UNCERTAIN = "YES", "NO", "UNCERTAIN"


@dataclass(frozen=True)
class DocEffect:
    doc: Hashable
    delta_p: float
    ci_low: float
    ci_high: float
    trials_used: int
    label: str
    marginal_delta_p: float = float("nan")
    marginal_ci_low: float = float("nan")   # the lower end of the average effect's interval
    # context the effect was measured in: ((doc, present), ...); () = averaged over all other documents
    context: tuple = ()
    # the YES documents beside which this one was decided (`conditional.with_partners`); () = on its own
    partners: tuple = ()
    # its effect in the trials holding every YES document, and the interval (nan: not measured)
    conditional_delta_p: float = float("nan")
    conditional_ci_low: float = float("nan")
    conditional_ci_high: float = float("nan")
    conditional_trials: int = 0


@dataclass(frozen=True)
class LabelingResult:
    method: str
    threshold: float
    docs: tuple[DocEffect, ...]
    n_trials: int
    success_rate: float
    # mean outcome over trials that contain no YES document (nan if every trial contains one)
    base_success_rate: float
    extra: dict = field(default_factory=dict)

    def labels(self) -> dict:
        return {d.doc: d.label for d in self.docs}

    def yes(self) -> list:
        return [d.doc for d in self.docs if d.label == YES]

    def uncertain(self) -> list:
        return [d.doc for d in self.docs if d.label == UNCERTAIN]


def label_from_ci(ci_low: float, ci_high: float, threshold: float) -> str:
    if ci_low > threshold:
        return YES
    if ci_high < threshold:
        return NO
    return UNCERTAIN


# ----------------------------------------------------------------------------------------------- helpers

def _arrays(subsets, outcomes) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(subsets, dtype=bool)
    y = np.asarray(outcomes, dtype=float)
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"need subsets (n_trials, n_docs) and outcomes (n_trials,), got {x.shape} and {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("outcomes must be finite")
    return x, y


def _is_binary(y: np.ndarray) -> bool:
    return bool(np.all((y == 0) | (y == 1)))


def _ids(chunk_ids, n_docs) -> list:
    ids = list(range(n_docs)) if chunk_ids is None else list(chunk_ids)
    if len(ids) != n_docs:
        raise ValueError(f"{len(ids)} chunk_ids for {n_docs} documents")
    return ids


def _clip(v: float, binary: bool) -> float:
    return float(min(1.0, max(-1.0, v))) if binary else float(v)


def _base_rate(x: np.ndarray, y: np.ndarray, yes_cols: list[int]) -> float:
    if len(y) == 0:
        return float("nan")
    mask = ~x[:, yes_cols].any(axis=1) if yes_cols else np.ones(len(y), dtype=bool)
    return float(y[mask].mean()) if mask.any() else float("nan")


@lru_cache(maxsize=4096)
def _tq(q: float, dof: int) -> float:
    return float(stdtrit(dof, q))


def _wilson(s: float, n: int, z: float) -> tuple[float, float]:
    p = s / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return mid - half, mid + half


# ----------------------------------------------------------------------------------------------- naive

def naive(subsets, outcomes, threshold: float = 0.1, alpha: float = 0.05, rule: str = "point",
          chunk_ids: Sequence | None = None) -> LabelingResult:
    """The classic rule: ``delta_p = mean(outcome | d in) - mean(outcome | d out)``; YES iff ``delta_p > threshold``
    (``rule="point"``) or iff the CI lies above it (``rule="ci"``)."""
    if rule not in ("point", "ci"):
        raise ValueError(f"rule must be 'point' or 'ci', got {rule!r}")
    x, y = _arrays(subsets, outcomes)
    n, n_docs = x.shape
    ids = _ids(chunk_ids, n_docs)
    binary = _is_binary(y)
    z = ndtri(1 - alpha / 2)
    out = []
    for j in range(n_docs):
        inc = x[:, j]
        n1 = int(inc.sum())
        n0 = n - n1
        if n1 == 0 or n0 == 0:
            lo, hi = (-1.0, 1.0) if binary else (-math.inf, math.inf)
            out.append(DocEffect(ids[j], float("nan"), lo, hi, n, UNCERTAIN))
            continue
        y1, y0 = y[inc], y[~inc]
        p1, p0 = float(y1.mean()), float(y0.mean())
        d = p1 - p0
        if binary:  # Newcombe hybrid score interval
            l1, u1 = _wilson(y1.sum(), n1, z)
            l0, u0 = _wilson(y0.sum(), n0, z)
            lo = d - math.sqrt((p1 - l1) ** 2 + (u0 - p0) ** 2)
            hi = d + math.sqrt((u1 - p1) ** 2 + (p0 - l0) ** 2)
        else:  # Welch
            v1 = y1.var(ddof=1) / n1 if n1 > 1 else math.inf
            v0 = y0.var(ddof=1) / n0 if n0 > 1 else math.inf
            se = math.sqrt(v1 + v0)
            if math.isfinite(se) and se > 0:
                df = (v1 + v0) ** 2 / ((v1 ** 2 / (n1 - 1)) + (v0 ** 2 / (n0 - 1)))
                tq = stdtrit(df, 1 - alpha / 2)
            else:
                tq = z
            lo, hi = d - tq * se, d + tq * se
        lo, hi = _clip(lo, binary), _clip(hi, binary)
        label = (YES if d > threshold else NO) if rule == "point" else label_from_ci(lo, hi, threshold)
        out.append(DocEffect(ids[j], d, lo, hi, n, label, marginal_delta_p=d))
    yes_cols = [j for j, e in enumerate(out) if e.label == YES]
    return LabelingResult(f"naive[{rule}]", threshold, tuple(out), n, float(y.mean()) if n else float("nan"),
                          _base_rate(x, y, yes_cols))


# ----------------------------------------------------------------------------------------------- regression

class _Fit:
    """OLS (optionally ridge) with HC2 sandwich and classical covariances; ``se(L)`` takes the larger."""

    def __init__(self, f: np.ndarray, y: np.ndarray, binary: bool, ridge: float = 0.0):
        n, p = f.shape
        gram = f.T @ f
        if ridge > 0:
            pen = np.full(p, ridge)
            pen[0] = 0.0
            gram = gram + np.diag(pen)
        inv = np.linalg.pinv(gram)
        self.beta = inv @ (f.T @ y)
        resid = y - f @ self.beta
        self.dof = n - p if ridge > 0 or np.linalg.cond(gram) < 1e10 else n - np.linalg.matrix_rank(f)
        lev = np.einsum("ij,jk,ik->i", f, inv, f)
        w = resid ** 2 / np.clip(1 - lev, 1e-3, None)
        self.v_hc = inv @ (f.T * w) @ f @ inv
        if self.dof > 0:
            s2 = float(resid @ resid) / self.dof
            if binary:
                q = 1.0 / (n + 2)
                s2 = max(s2, q * (1 - q))
            self.v_cl = s2 * (inv @ gram @ inv if ridge > 0 else inv)
        else:
            self.v_cl = None

    def est_se(self, lin: np.ndarray) -> tuple[float, float]:
        est = float(lin @ self.beta)
        if self.v_cl is None:
            return est, math.inf
        v = max(float(lin @ self.v_hc @ lin), float(lin @ self.v_cl @ lin))
        return est, math.sqrt(max(v, 0.0))


def regression(subsets, outcomes, threshold: float = 0.1, alpha: float = 0.05, interactions: bool = True,
               max_candidates: int = 6, interaction_z: float = 2.5, min_dof: int = 4, ridge: float = 0.0,
               chunk_ids: Sequence | None = None, frozen_no: Sequence[int] = (), triples: bool = False,
               prefer: Sequence[int] = (), interaction_z_or: float | None = None) -> LabelingResult:
    """Joint regression of the outcome on all inclusion indicators (see the module docstring).

    ``interaction_z``: |t| above which an interaction puts the partner into a document's context;
    ``interaction_z_or`` (default: the same) applies to negative (OR-type, "partner absent") interactions only.

    ``frozen_no``: column indices whose label is forced to ``NO`` (used by :class:`AdaptiveLabeler` for
    documents it has stopped varying). ``prefer``: column indices screened into the interaction candidates
    before the others (in this order; :class:`AdaptiveLabeler` passes its ``YES`` documents and the documents
    with the largest effect in the trials where every ``YES`` document is present). ``triples``: also fit three-way interactions among the candidates for
    a document with two or more significant partners (its context effect then includes the three-way term)."""
    x, y = _arrays(subsets, outcomes)
    n, n_docs = x.shape
    ids = _ids(chunk_ids, n_docs)
    binary = _is_binary(y)
    frozen = set(int(j) for j in frozen_no)
    varying = [j for j in range(n_docs) if 0 < x[:, j].sum() < n]
    z = 2.0 * x.astype(float) - 1.0
    wide = (-1.0, 1.0) if binary else (-math.inf, math.inf)
    effects: dict[int, DocEffect] = {}

    def ci(est, se, dof):
        if not math.isfinite(se) or dof <= 0:
            return wide
        tq = _tq(1 - alpha / 2, dof)
        return _clip(est - tq * se, binary), _clip(est + tq * se, binary)

    f_main = np.column_stack([np.ones(n), z[:, varying]]) if n else np.zeros((0, 1 + len(varying)))
    marg: dict[int, tuple[float, float, float]] = {}
    if n > 0:
        fit = _Fit(f_main, y, binary, ridge)
        for k, j in enumerate(varying):
            lin = np.zeros(f_main.shape[1])
            lin[1 + k] = 2.0
            est, se = fit.est_se(lin)
            lo, hi = ci(est, se, fit.dof)
            tstat = est / se if se > 0 and math.isfinite(se) else 0.0
            effects[j] = DocEffect(ids[j], _clip(est, binary), lo, hi, n, label_from_ci(lo, hi, threshold),
                                   marginal_delta_p=_clip(est, binary), marginal_ci_low=lo)
            marg[j] = (est, tstat, hi)
        main_dof = fit.dof
    else:
        main_dof = 0

    n_pairs_used = 0
    inter: dict = {}
    cand: list[int] = []
    if interactions and n > 0 and main_dof >= min_dof:
        first = [j for j in dict.fromkeys(int(j) for j in prefer) if j in marg and j not in frozen]
        pool = [j for j in varying if j not in frozen and j not in first and marg[j][2] >= threshold]
        pool.sort(key=lambda j: -marg[j][1])
        cand = (first + pool)[:max_candidates]
        while len(cand) >= 2 and main_dof - len(cand) * (len(cand) - 1) // 2 < min_dof:
            cand = cand[:-1]
        if len(cand) >= 2:
            pairs = [(a, b) for i, a in enumerate(cand) for b in cand[i + 1:]]
            f_int = np.column_stack([f_main] + [z[:, a] * z[:, b] for a, b in pairs])
            fit2 = _Fit(f_int, y, binary, ridge)
            if fit2.dof >= min_dof:
                n_pairs_used = len(pairs)
                col = {j: 1 + k for k, j in enumerate(varying)}
                pcol = {frozenset(pr): f_main.shape[1] + k for k, pr in enumerate(pairs)}
                sig: dict[int, list[tuple[int, float]]] = {j: [] for j in cand}
                inter = {}
                for pr in pairs:
                    c = pcol[frozenset(pr)]
                    lin = np.zeros(f_int.shape[1])
                    lin[c] = 1.0
                    est, se = fit2.est_se(lin)
                    inter[(ids[pr[0]], ids[pr[1]])] = est
                    z_sel = interaction_z if est > 0 or interaction_z_or is None else interaction_z_or
                    if math.isfinite(se) and se > 0 and abs(est) / se > z_sel:
                        sig[pr[0]].append((pr[1], math.copysign(1.0, est)))
                        sig[pr[1]].append((pr[0], math.copysign(1.0, est)))
                # three-way terms for documents with two or more selected partners (an AND or OR triple's
                # context effect is not a sum of pairwise terms)
                trip = sorted({tuple(sorted((d, a, b))) for d in cand for i, (a, _) in enumerate(sig[d])
                               for b, _ in sig[d][i + 1:]}) if triples else []
                fit3 = None
                if trip:
                    f3 = np.column_stack([f_int] + [z[:, a] * z[:, b] * z[:, c] for a, b, c in trip])
                    fit3 = _Fit(f3, y, binary, ridge)
                    if fit3.dof < min_dof:
                        fit3, trip = None, []
                tcol = {frozenset(t): f_int.shape[1] + k for k, t in enumerate(trip)}
                for d in cand:
                    use3 = fit3 is not None and len(sig[d]) >= 2
                    fit_d = fit3 if use3 else fit2
                    lin = np.zeros(f3.shape[1] if use3 else f_int.shape[1])
                    lin[col[d]] = 2.0
                    for k, s in sig[d]:
                        lin[pcol[frozenset((d, k))]] = 2.0 * s
                    if use3:
                        for i, (a, sa) in enumerate(sig[d]):
                            for b, sb in sig[d][i + 1:]:
                                lin[tcol[frozenset((d, a, b))]] = 2.0 * sa * sb
                    est, se = fit_d.est_se(lin)
                    lo, hi = ci(est, se, fit_d.dof)
                    ctx = tuple((ids[k], s > 0) for k, s in sorted(sig[d]))
                    effects[d] = DocEffect(ids[d], _clip(est, binary), lo, hi, n, label_from_ci(lo, hi, threshold),
                                           marginal_delta_p=effects[d].marginal_delta_p,
                                           marginal_ci_low=effects[d].marginal_ci_low, context=ctx)

    out = []
    for j in range(n_docs):
        e = effects.get(j) or DocEffect(ids[j], float("nan"), *wide, n, UNCERTAIN)
        if j in frozen:
            e = replace(e, label=NO)
        out.append(e)
    yes_cols = [j for j, e in enumerate(out) if e.label == YES]
    method = "regression+interactions" if interactions else "regression"
    return LabelingResult(method, threshold, tuple(out), n, float(y.mean()) if n else float("nan"),
                          _base_rate(x, y, yes_cols), extra={"interaction_terms": n_pairs_used,
                                                             "binary": binary, "candidates": [ids[j] for j in cand],
                                                             "interactions": inter})
