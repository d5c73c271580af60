"""How far two labellings of the same pools agree (`labeling.quality.test_retest`): two pool draws, or two solvers."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from causal_assets.core.labeling.quality import test_retest as agreement

pytestmark = pytest.mark.unit


def _labels(rows):
    return pd.DataFrame(rows, columns=["query_id", "chunk_id", "label", "ci_low", "ci_high", "average_effect"])


def test_kappa_flips_overlap_and_rank_correlation_on_a_worked_example():
    a = _labels([("q1", "a", "YES", 3, 6, 4.0), ("q1", "b", "NO", -2, 1, -1.0), ("q1", "c", "NO", -1, 1.5, 0.0),
                 ("q1", "d", "UNCERTAIN", 1, 3, 2.0), ("q2", "a", "YES", 2.5, 5, 3.0), ("q2", "b", "NO", -3, 0, -2.0),
                 ("q2", "c", "YES", 2.2, 4, 3.5), ("q3", "x", "NO", -1, 1, 0.0)])
    b = _labels([("q1", "a", "YES", 4, 7, 5.0), ("q1", "b", "NO", -1, 1, 0.0), ("q1", "c", "YES", 2.1, 3, 2.5),
                 ("q1", "d", "NO", -1, 1.9, 0.5), ("q2", "a", "YES", 2.1, 4, 3.0), ("q2", "b", "NO", -2, 1, -1.0),
                 ("q2", "c", "YES", 3, 5, 4.0), ("q4", "x", "NO", -1, 1, 0.0)])
    out = agreement(a, b)
    assert out["pairs"] == 7                     # q3 and q4 are judged in one run only
    assert out["decided_both"] == 6              # q1/d is UNCERTAIN in the first
    # decided: YES/YES, NO/NO, NO/YES, YES/YES, NO/NO, YES/YES: 5 of 6 agree; P(YES) 1/2 and 2/3
    chance = 0.5 * 2 / 3 + 0.5 * 1 / 3
    assert out["agreement"] == pytest.approx(5 / 6)
    assert out["kappa"] == pytest.approx((5 / 6 - chance) / (1 - chance))
    assert out["flips"] == 1 and out["flip_share"] == pytest.approx(1 / 7)
    assert out["overlap_share"] == pytest.approx(6 / 7)   # only q1/c's intervals [-1, 1.5] and [2.1, 3] are apart
    # ranks within q1: a > d > c > b against a > c > d > b (rho 0.8); within q2: c > a > b alike (rho 1.0)
    assert out["effect_rank_correlation"] == pytest.approx((0.8 + 1.0) / 2)


def test_without_effects_or_shared_pairs_the_figures_say_so():
    a = _labels([("q1", "a", "YES", 3, 6, 4.0)]).drop(columns="average_effect")
    out = agreement(a, a)
    assert "effect_rank_correlation" not in out
    assert out["agreement"] == 1.0 and math.isnan(out["kappa"])   # every label alike by chance: kappa undefined
    none = agreement(_labels([("q1", "a", "YES", 3, 6, 4.0)]), _labels([("q2", "a", "YES", 3, 6, 4.0)]))
    assert none["pairs"] == 0 and math.isnan(none["kappa"]) and math.isnan(none["overlap_share"])


def test_the_intervals_are_checked_against_the_change_between_the_runs():
    """Intervals of one standard error each (80%: half-width 1.2816 se) make the standard error of a difference √2:
    effects moving by ±√2 give z ±1 (sd 1, none beyond 1.645); a pair that moved by 4√2 is beyond."""
    half = 1.2815515655446004   # the 90th percentile: an 80% interval's half-width in standard errors
    rows = lambda effects: pd.DataFrame(   # noqa: E731
        [("q1", f"d{i}", "NO", e - half, e + half, e) for i, e in enumerate(effects)],
        columns=["query_id", "chunk_id", "label", "ci_low", "ci_high", "effect"])
    r2 = math.sqrt(2)
    out = agreement(rows([r2, 0.0, r2, 0.0]), rows([0.0, r2, 0.0, r2]))
    assert out["change_z_sd"] == pytest.approx(1.0) and out["change_beyond_90"] == 0.0
    moved = agreement(rows([4 * r2, 0.0]), rows([0.0, 0.0]))
    assert moved["change_beyond_90"] == 0.5
