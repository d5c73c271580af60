"""Planted-truth blind solvers for checking relevance estimators.

A :class:`Scenario` is a pool of ``n_docs`` candidates and a monotone success rule in conjunctive normal form:
``clauses`` is a tuple of clauses, each a tuple of documents, and the question is *answerable* from a subset iff
every clause has at least one of its documents present (single, AND for multi-hop, OR for redundant, or mixed).
The solver succeeds with probability ``top_rate`` when the question is answerable and ``base_rate`` otherwise, then
each outcome flips with probability ``noise``. A document is relevant iff it appears in some clause: some context of
the others makes it raise success by the full amplitude, which counts both members of a redundant pair although each
one's average marginal effect is half of it. See docs/concepts.md ("Checking the estimators").
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from .design import bernoulli_design
from .adaptive import AdaptiveLabeler
from .estimators import LabelingResult, naive, regression

__all__ = ["Scenario", "random_scenario", "random_scenarios", "likelihood_scenarios", "label_f1", "run_fixed", "run_adaptive",
           "simulate", "KINDS"]

KINDS = ("single", "and", "or", "mixed")


@dataclass(frozen=True)
class Scenario:
    n_docs: int
    clauses: tuple[tuple[int, ...], ...]
    kind: str = "custom"
    base_rate: float = 0.1
    noise: float = 0.1
    top_rate: float = 1.0
    # outcome "likelihood": a log-likelihood (nats) that rises by `gap_nats` when the question is answerable,
    # with Gaussian noise of `sd_nats` (the graded outcome of the real solver; see `likelihood_scenarios`)
    outcome: str = "success"
    gap_nats: float = 6.0
    sd_nats: float = 2.0

    @property
    def relevant(self) -> frozenset:
        return frozenset(d for c in self.clauses for d in c)

    @property
    def amplitude(self) -> float:
        return (1 - 2 * self.noise) * (self.top_rate - self.base_rate)

    def answerable(self, subsets) -> np.ndarray:
        x = np.atleast_2d(np.asarray(subsets, dtype=bool))
        ok = np.ones(len(x), dtype=bool)
        for clause in self.clauses:
            ok &= x[:, list(clause)].any(axis=1)
        return ok

    def success_prob(self, subsets) -> np.ndarray:
        p = np.where(self.answerable(subsets), self.top_rate, self.base_rate)
        return self.noise + (1 - 2 * self.noise) * p

    def solve(self, subsets, rng: np.random.Generator) -> np.ndarray:
        """One outcome per row of ``subsets`` (one solver call each): pass/fail, or a log-likelihood."""
        n = len(np.atleast_2d(subsets))
        if self.outcome == "likelihood":
            return -10.0 + self.gap_nats * self.answerable(subsets) + rng.normal(0.0, self.sd_nats, n)
        return (rng.random(n) < self.success_prob(subsets)).astype(float)


def random_scenario(rng: np.random.Generator, kind: str | None = None, pool: tuple[int, int] = (10, 30),
                    noise: tuple[float, float] = (0.05, 0.2), base: tuple[float, float] = (0.0, 0.3)) -> Scenario:
    """Pool size uniform in ``pool`` (inclusive), noise and base rate uniform in their ranges; ``kind`` one of
    :data:`KINDS` (uniform if None). AND and OR use 2 or 3 documents."""
    kind = kind or str(rng.choice(KINDS))
    n_docs = int(rng.integers(pool[0], pool[1] + 1))
    if kind == "single":
        k = 1
    elif kind in ("and", "or"):
        k = int(rng.integers(2, 4))
    elif kind == "mixed":
        k = 3
    else:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    docs = [int(d) for d in rng.choice(n_docs, size=k, replace=False)]
    if kind == "single":
        clauses = ((docs[0],),)
    elif kind == "and":
        clauses = tuple((d,) for d in docs)
    elif kind == "or":
        clauses = (tuple(docs),)
    else:
        clauses = ((docs[0],), (docs[1], docs[2]))
    return Scenario(n_docs, clauses, kind, float(rng.uniform(*base)), float(rng.uniform(*noise)))


def random_scenarios(n: int, seed: int = 0, **kw) -> list[Scenario]:
    rng = np.random.default_rng(seed)
    return [random_scenario(rng, **kw) for _ in range(n)]


def likelihood_scenarios(n: int, seed: int = 0, gap: tuple[float, float] = (4.0, 13.0),
                         sd: tuple[float, float] = (1.4, 3.2), **kw) -> list[Scenario]:
    """The same planted structures with a log-likelihood outcome. Ranges from real trials (20 HotpotQA train
    questions, Gemma-3-270M, question-and-answer likelihood): residual noise 1.4-3.2 nats around the main-effects
    fit (interquartile range); a gold paragraph's average effect 2.5-12.9 nats, of which the part above the 3-nat
    label threshold is kept (a planted effect below the threshold would not be "relevant" by the label's own
    definition)."""
    rng = np.random.default_rng([seed, 1])
    return [replace(sc, outcome="likelihood", gap_nats=float(rng.uniform(*gap)), sd_nats=float(rng.uniform(*sd)))
            for sc in random_scenarios(n, seed, **kw)]


def label_f1(yes: Iterable, truth: Iterable) -> float:
    """F1 of the YES set against the planted relevant set (1.0 when both are empty)."""
    yes, truth = set(yes), set(truth)
    if not yes and not truth:
        return 1.0
    return 2 * len(yes & truth) / (len(yes) + len(truth))


def run_fixed(scenario: Scenario, n_trials: int, estimator: Callable[..., LabelingResult],
              rng: np.random.Generator, threshold: float = 0.1, **kw) -> LabelingResult:
    """The classic protocol: ``n_trials`` Bernoulli(1/2) subsets, one solver call each, then ``estimator``."""
    x = bernoulli_design(scenario.n_docs, n_trials, 0.5, rng)
    return estimator(x, scenario.solve(x, rng), threshold=threshold, **kw)


def run_adaptive(scenario: Scenario, budget: int, rng: np.random.Generator, threshold: float = 0.1,
                 **kw) -> AdaptiveLabeler:
    lab = AdaptiveLabeler(scenario.n_docs, threshold=threshold, budget=budget, rng=rng, **kw)
    while not lab.done:
        x = lab.next_subsets()
        lab.record(x, scenario.solve(x, rng))
    return lab


def simulate(method: str, sizes: Sequence[int], scenarios: Sequence[Scenario], seed: int = 0,
             threshold: float = 0.1, **kw) -> list[dict]:
    """Mean label F1 (YES vs planted truth) against mean solver calls per question.

    ``method``: ``"naive"`` (the classic rule), ``"regression"`` (main effects only), ``"regression+interactions"``
    (context effects) -- each run once per scenario and per size with ``size`` Bernoulli(1/2) trials -- or
    ``"adaptive"``: one :class:`AdaptiveLabeler` run per scenario with budget ``max(sizes)``, read at each budget
    from its history. That equals separate runs with the smaller budgets as long as every size lies on the
    labeler's batch grid (``initial + k * batch``, e.g. multiples of 16 that are >= 32), because the labeler's
    decisions do not depend on the budget except for truncating the last batch."""
    rows = []
    if method == "adaptive":
        sizes = sorted(int(s) for s in sizes)
        f1 = np.zeros((len(scenarios), len(sizes)))
        calls = np.zeros_like(f1)
        for i, sc in enumerate(scenarios):
            lab = run_adaptive(sc, sizes[-1], np.random.default_rng([seed, i]), threshold, **kw)
            for k, b in enumerate(sizes):
                snap = [(c, r) for c, r in lab.history if c <= b]
                c, r = snap[-1] if snap else (0, lab.labels())
                calls[i, k] = c
                f1[i, k] = label_f1(r.yes(), sc.relevant)
        for k, b in enumerate(sizes):
            rows.append(dict(budget=b, mean_calls=float(calls[:, k].mean()), mean_f1=float(f1[:, k].mean()),
                             sem_f1=float(f1[:, k].std(ddof=1) / np.sqrt(len(scenarios))) if len(scenarios) > 1 else 0.0,
                             share_f1_1=float((f1[:, k] >= 1.0).mean())))
        return rows
    est = {"naive": lambda x, y, threshold: naive(x, y, threshold),
           "regression": lambda x, y, threshold: regression(x, y, threshold, interactions=False, **kw),
           "regression+interactions": lambda x, y, threshold: regression(x, y, threshold, interactions=True, **kw),
           }[method]
    for n in sizes:
        f1 = np.array([label_f1(run_fixed(sc, int(n), est, np.random.default_rng([seed, i, int(n)]),
                                          threshold).yes(), sc.relevant) for i, sc in enumerate(scenarios)])
        rows.append(dict(budget=int(n), mean_calls=float(n), mean_f1=float(f1.mean()),
                         sem_f1=float(f1.std(ddof=1) / np.sqrt(len(f1))) if len(f1) > 1 else 0.0,
                         share_f1_1=float((f1 >= 1.0).mean())))
    return rows
