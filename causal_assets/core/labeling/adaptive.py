"""The sequential labeller: solver calls allocated where a label is still undecided, labels from
:func:`.estimators.regression` on every trial so far."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
from scipy.special import ndtri

from .design import balanced_design, mixed_design
from .estimators import NO, UNCERTAIN, YES, LabelingResult, DocEffect, _arrays, _ids, _is_binary, regression

__all__ = ["AdaptiveLabeler"]


class AdaptiveLabeler:
    """Sequential allocation of solver calls for one question.

    >>> lab = AdaptiveLabeler(pool_size=20, threshold=0.1, budget=256)
    >>> while not lab.done:
    ...     subsets = lab.next_subsets()
    ...     lab.record(subsets, [solve(s) for s in subsets])   # doctest: +SKIP
    >>> lab.labels()                                          # doctest: +SKIP

    The first batch (``initial`` trials, default the Hadamard order for the pool, at least ``batch``) is a
    balanced design over all documents; until the main-effects regression has ``min_dof`` residual degrees of
    freedom further batches are balanced too. Afterwards each batch fixes ``NO`` documents out, includes
    ``YES`` documents with probability ``p_yes`` and randomises the ``UNCERTAIN`` ones (balanced). Labels come
    from :func:`regression` (context effects) on every trial so far. Never proposes more than ``budget``
    trials in total.

    Screen-then-confirm (defaults tuned on the planted-truth benchmark, ``benchmarks/mc_simulation.py``):

    * interaction candidates (``max_candidates``, default 4) are the current ``YES`` documents first, then the
      documents with the largest effect in the trials where every ``YES`` document is present or one is absent
      (``prefer_context``/``prefer_z``): that is where a multi-hop or redundant partner of a found document shows
      its full effect. An interaction puts a partner into a document's labelled context at
      ``|t| > interaction_z`` (1.5) when it is positive (AND-type: partner present) but only at
      ``|t| > interaction_z_or`` (2.5) when it is negative (OR-type: partner absent). The context is chosen on
      the same data the effect is then measured on; on the planted-truth benchmark most false ``YES`` labels
      were an irrelevant document measured in a spurious "partner absent" context, while a stricter AND
      selection loses two-hop pairs. The targeted design rows still use every estimated interaction;
    * ``NO`` documents are frozen out of the design only once some document is ``YES``
      (``freeze_needs_yes``): before that a ``NO`` rests on the average effect alone, which for a member of a
      multi-hop triple with a high base rate is below the threshold (a quarter of the amplitude), and freezing
      it made the triple unfindable. Unfrozen ``NO`` documents keep being randomised and can change label;
    * stopping: besides "nothing ``UNCERTAIN``", the labeler stops once some document is ``YES`` and every
      remaining ``UNCERTAIN`` document's interval at the looser ``screen_alpha`` (0.95, i.e. a 5% interval: in
      effect "the point estimate is below the threshold") lies below the threshold, from ``screen_after`` (32)
      calls on (``screen_alpha=None`` disables this). Such documents stay ``UNCERTAIN`` in :meth:`labels`
      (never ``YES``); ``NO`` still needs the full ``1 - alpha`` interval. The two changes above raise the F1
      plateau enough (fewer false ``YES``, no lost triples) to afford this early stop;
    * ``p_levels`` / ``search_levels``: optional mixed inclusion probabilities (see :func:`.design.mixed_design`)
      for all randomised documents / for the undecided ones while nothing is ``YES``; off by default (they did
      not help on the benchmark).
    """

    def __init__(self, pool_size: int, threshold: float = 0.1, budget: int = 256, batch: int = 16,
                 initial: int | None = None, alpha: float = 0.05, p_yes: float = 0.75, max_candidates: int = 4,
                 interaction_z: float = 1.5, min_dof: int = 8, p_context: float = 0.8, rng=None,
                 chunk_ids: Sequence | None = None, p_levels: Sequence[float] = (0.5,),
                 screen_alpha: float | None = 0.95, screen_after: int = 32, prefer_context: bool = True,
                 prefer_z: float = 2.0, search_levels: Sequence[float] = (), freeze_after: int = 0,
                 interaction_z_or: float | None = 2.5, freeze_needs_yes: bool = True):
        if pool_size < 1 or budget < 1 or batch < 1:
            raise ValueError("pool_size, budget and batch must be positive")
        self.pool_size, self.threshold, self.budget, self.batch = int(pool_size), threshold, int(budget), int(batch)
        order = 1 << int(math.ceil(math.log2(pool_size + 1)))
        self.initial = int(initial) if initial else max(self.batch, order)
        self.alpha, self.p_yes, self.max_candidates = alpha, p_yes, max_candidates
        self.interaction_z, self.min_dof, self.p_context = interaction_z, min_dof, p_context
        self.interaction_z_or = interaction_z_or
        self.p_levels = tuple(float(p) for p in p_levels)
        self.screen_alpha, self.screen_after = screen_alpha, int(screen_after)
        self.prefer_context, self.prefer_z = bool(prefer_context), float(prefer_z)
        self.search_levels = tuple(float(p) for p in search_levels)
        self.freeze_after = int(freeze_after)
        self.freeze_needs_yes = bool(freeze_needs_yes)
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.chunk_ids = _ids(chunk_ids, self.pool_size)
        self._x: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self._frozen: set[int] = set()
        self._result: LabelingResult | None = None
        self._screened: set[int] = set()
        self.history: list[tuple[int, LabelingResult]] = []

    @property
    def calls(self) -> int:
        return int(sum(len(v) for v in self._y))

    @property
    def done(self) -> bool:
        if self.calls >= self.budget:
            return True
        if self._result is None:
            return False
        unc = [j for j, e in enumerate(self._result.docs) if e.label == UNCERTAIN]
        return not unc or set(unc) <= self._screened

    def next_subsets(self) -> np.ndarray:
        if self.done:
            return np.zeros((0, self.pool_size), dtype=bool)
        remaining = self.budget - self.calls
        if self._result is None:
            return self._randomise(self.pool_size, min(self.initial, remaining))
        k = min(self.batch, remaining)
        free = [j for j in range(self.pool_size) if j not in self._frozen]
        if self.calls - 1 - len(free) < self.min_dof:  # main-effects model not identified yet
            out = np.zeros((k, self.pool_size), dtype=bool)
            out[:, free] = self._randomise(len(free), k)
            return out
        labels = [e.label for e in self._result.docs]
        out = np.zeros((k, self.pool_size), dtype=bool)
        yes = [j for j in free if labels[j] == YES]
        # NO documents not frozen yet stay randomised with the undecided ones
        unc = [j for j in free if labels[j] != YES]
        if yes:
            out[:, yes] = self.rng.random((k, len(yes))) < self.p_yes
        if unc:
            if not yes and self.search_levels:
                # nothing found yet: alternate high- and low-inclusion rows so that a multi-hop set is complete
                # (or a redundant set empty) more often than under p = 1/2
                out[:, unc] = mixed_design(len(unc), k, self.search_levels, self.rng)
            else:
                out[:, unc] = self._randomise(len(unc), k)
        # targeted part: split the batch among uncertain candidates; in a target's rows every other candidate
        # is set (with probability `p_context`) to the state its estimated interaction with the target favours
        # (present for a positive = AND-type interaction, absent for a negative = OR-type one)
        pos = {d: j for j, d in enumerate(self.chunk_ids)}
        cand = [pos[d] for d in self._result.extra.get("candidates", [])]
        inter = self._result.extra.get("interactions", {})
        targets = [j for j in cand if labels[j] == UNCERTAIN and j not in self._frozen]
        if targets and self.p_context > 0:
            groups = np.array_split(self.rng.permutation(k), len(targets))
            for t, rows in zip(targets, groups):
                for j in cand:
                    if j == t or j in self._frozen:
                        continue
                    a, b = self.chunk_ids[t], self.chunk_ids[j]
                    est = inter.get((a, b), inter.get((b, a)))
                    if est is None or est == 0:
                        continue
                    fix = self.rng.random(len(rows)) < self.p_context
                    out[rows[fix], j] = est > 0
        return out

    def _randomise(self, n_docs: int, n_trials: int) -> np.ndarray:
        if self.p_levels == (0.5,):
            return balanced_design(n_docs, n_trials, self.rng)
        return mixed_design(n_docs, n_trials, self.p_levels, self.rng)

    def _prefer(self, x: np.ndarray, y: np.ndarray) -> list[int]:
        """Current ``YES`` documents, then the others ranked by their largest difference of means (t-statistic)
        in the trials that contain every ``YES`` document or lack one of them: a multi-hop partner of the ``YES``
        documents shows its full effect in the former, the redundant partner of one in the latter, while the
        average effect over all trials is diluted."""
        if not self.prefer_context or self._result is None:
            return []
        yes = [j for j, e in enumerate(self._result.docs) if e.label == YES]
        if not yes:
            return []
        contexts = [x[:, yes].all(axis=1)] + [~x[:, y] for y in yes]
        binary = _is_binary(y)
        best: dict[int, float] = {}
        for rows in contexts:
            xs, ys = x[rows], y[rows]
            n = len(ys)
            if n < 8:
                continue
            for j in range(self.pool_size):
                if j in yes or j in self._frozen:
                    continue
                inc = xs[:, j]
                n1 = int(inc.sum())
                if n1 < 2 or n - n1 < 2:
                    continue
                p1, p0 = ys[inc].mean(), ys[~inc].mean()
                if binary:  # one pseudo-event each side, so 0/n or n/n do not give a zero variance
                    q1, q0 = (ys[inc].sum() + 1) / (n1 + 2), (ys[~inc].sum() + 1) / (n - n1 + 2)
                    var = q1 * (1 - q1) / n1 + q0 * (1 - q0) / (n - n1)
                else:       # Welch
                    var = ys[inc].var(ddof=1) / n1 + ys[~inc].var(ddof=1) / (n - n1)
                if var <= 0:
                    continue
                t = (p1 - p0) / math.sqrt(var)
                best[j] = max(best.get(j, -math.inf), t)
        scored = [(t, j) for j, t in best.items() if t > self.prefer_z]
        return list(yes) + [j for _, j in sorted(scored, reverse=True)]

    def _screened_out(self, res: LabelingResult) -> set[int]:
        """UNCERTAIN documents whose interval at the looser ``screen_alpha`` already lies below the threshold."""
        if self.screen_alpha is None or self.calls < self.screen_after:
            return set()
        ratio = ndtri(1 - self.screen_alpha / 2) / ndtri(1 - self.alpha / 2)
        out = set()
        for j, e in enumerate(res.docs):
            if e.label == UNCERTAIN and math.isfinite(e.delta_p) and math.isfinite(e.ci_high):
                if e.delta_p + ratio * (e.ci_high - e.delta_p) < self.threshold:
                    out.add(j)
        return out

    def record(self, subsets, outcomes) -> LabelingResult:
        x, y = _arrays(subsets, outcomes)
        if x.shape[1] != self.pool_size:
            raise ValueError(f"subsets have {x.shape[1]} columns, pool has {self.pool_size}")
        if self.calls + len(y) > self.budget:
            raise ValueError(f"recording {len(y)} trials would exceed the budget of {self.budget}")
        self._x.append(x)
        self._y.append(y)
        xa, ya = np.vstack(self._x), np.concatenate(self._y)
        res = regression(xa, ya, self.threshold, self.alpha,
                         interactions=True, max_candidates=self.max_candidates,
                         interaction_z=self.interaction_z, interaction_z_or=self.interaction_z_or,
                         chunk_ids=self.chunk_ids, frozen_no=sorted(self._frozen),
                         prefer=self._prefer(xa, ya))
        if self.calls >= self.freeze_after and (res.yes() or not self.freeze_needs_yes):
            self._frozen |= {j for j, e in enumerate(res.docs) if e.label == NO}
        self._screened = self._screened_out(res) if res.yes() else set()
        self._result = replace(res, method="adaptive")
        self.history.append((self.calls, self._result))
        return self._result

    def labels(self) -> LabelingResult:
        if self._result is None:
            lo, hi = -1.0, 1.0
            docs = tuple(DocEffect(i, float("nan"), lo, hi, 0, UNCERTAIN) for i in self.chunk_ids)
            return LabelingResult("adaptive", self.threshold, docs, 0, float("nan"), float("nan"))
        return self._result
