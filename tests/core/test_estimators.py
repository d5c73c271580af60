import numpy as np
import pytest

from causal_assets.core.labeling.design import balanced_design, bernoulli_design, leave_one_out_design
from causal_assets.core.labeling.adaptive import AdaptiveLabeler
from causal_assets.core.labeling.estimators import NO, UNCERTAIN, YES, naive, regression
from causal_assets.core.labeling.simulation import Scenario, label_f1, run_adaptive, simulate


def test_designs_shapes_and_balance():
    rng = np.random.default_rng(0)
    x = bernoulli_design(12, 50, 0.5, rng)
    assert x.shape == (50, 12) and x.dtype == bool
    b = balanced_design(20, 64, rng)
    assert (b.sum(axis=0) == 32).all()
    z = 2.0 * b - 1
    assert np.allclose(z.T @ z, 64 * np.eye(20))          # pairs balanced: orthogonal columns
    odd = balanced_design(5, 21, rng)
    assert set(odd.sum(axis=0)) <= {10, 11}
    loo = leave_one_out_design(4)
    assert loo.shape == (5, 4) and loo[0].all() and (loo[1:].sum(axis=1) == 3).all()
    assert not loo[1:][np.arange(4), np.arange(4)].any()


def test_naive_recovers_single_strong_document():
    sc = Scenario(12, ((3,),), base_rate=0.1, noise=0.05)
    rng = np.random.default_rng(1)
    x = bernoulli_design(12, 200, 0.5, rng)
    y = sc.solve(x, rng)
    res = naive(x, y, threshold=0.1)
    assert 3 in res.yes()
    assert max(res.docs, key=lambda d: d.delta_p).doc == 3
    # the seed's point rule also lets noise through (SE of Delta P ~ 1/sqrt(N) = 0.07 here); the CI rule does not
    assert naive(x, y, threshold=0.1, rule="ci").yes() == [3]
    assert res.docs[3].delta_p > 0.6 and res.docs[3].ci_low > 0.1
    assert 0.0 <= res.base_success_rate <= 0.3


def test_regression_recovers_and_pair():
    sc = Scenario(15, ((2,), (7,)), kind="and", base_rate=0.05, noise=0.05)
    rng = np.random.default_rng(2)
    x = balanced_design(15, 256, rng)
    res = regression(x, sc.solve(x, rng), threshold=0.1)
    assert set(res.yes()) == {2, 7}
    # measured in the context where the partner is present, the effect is the full amplitude
    for d, partner in ((2, 7), (7, 2)):
        assert res.docs[d].ci_low > 0.1
        assert (partner, True) in res.docs[d].context


def test_regression_finds_redundant_or_pair_that_naive_underrates():
    sc = Scenario(10, ((1, 4),), kind="or", base_rate=0.1, noise=0.05)
    rng = np.random.default_rng(3)
    x = balanced_design(10, 256, rng)
    y = sc.solve(x, rng)
    res = regression(x, y, threshold=0.1)
    assert set(res.yes()) == {1, 4}
    assert all((p, False) in res.docs[d].context for d, p in ((1, 4), (4, 1)))
    assert res.docs[1].delta_p > naive(x, y).docs[1].delta_p + 0.2


@pytest.mark.parametrize("binary", [False, True])
def test_ci_coverage_in_known_linear_model(binary):
    rng = np.random.default_rng(4)
    beta = np.array([0.4, 0.2, 0.0, 0.0, -0.1, 0.0, 0.15, 0.0])
    covered = total = 0
    for _ in range(150):
        x = balanced_design(len(beta), 64, rng)
        mean = 0.2 + x @ beta
        y = (rng.random(64) < mean).astype(float) if binary else mean + rng.normal(0, 0.3, 64)
        res = regression(x, y, threshold=0.1, interactions=False)
        for d, b in zip(res.docs, beta):
            covered += d.ci_low <= b <= d.ci_high
            total += 1
    assert covered / total >= 0.90


def test_continuous_outcome():
    rng = np.random.default_rng(5)
    x = balanced_design(10, 64, rng)
    logp = -3.0 + 2.5 * x[:, 6] + rng.normal(0, 0.5, 64)      # log-probability of the gold answer
    res = regression(x, logp, threshold=0.5)
    assert res.yes() == [6]
    assert abs(res.docs[6].delta_p - 2.5) < 0.5
    assert not res.extra["binary"]


def test_labels_and_cis_within_unit_interval():
    sc = Scenario(10, ((0,), (5,)), base_rate=0.0, noise=0.05)
    rng = np.random.default_rng(6)
    for n in (12, 40, 200):
        x = bernoulli_design(10, n, 0.5, rng)
        y = sc.solve(x, rng)
        for res in (naive(x, y), naive(x, y, rule="ci"), regression(x, y), regression(x, y, interactions=False)):
            for d in res.docs:
                assert -1.0 <= d.ci_low <= d.ci_high <= 1.0
                if np.isfinite(d.delta_p):
                    assert -1.0 <= d.delta_p <= 1.0
                assert d.label in (YES, NO, UNCERTAIN)


def test_uncertain_when_too_few_trials():
    sc = Scenario(10, ((2,),), base_rate=0.1, noise=0.1)
    rng = np.random.default_rng(7)
    x = bernoulli_design(10, 8, 0.5, rng)
    y = sc.solve(x, rng)
    assert all(d.label == UNCERTAIN for d in regression(x, y).docs)    # fewer trials than parameters
    x = bernoulli_design(10, 16, 0.5, rng)
    assert UNCERTAIN in naive(x, sc.solve(x, rng), rule="ci").labels().values()
    # all failures: the variance floor keeps the interval from collapsing
    xb = balanced_design(6, 16, rng)
    res = regression(xb, np.zeros(16), interactions=False)
    assert all(d.label == UNCERTAIN for d in res.docs)


def test_adaptive_respects_budget():
    sc = Scenario(20, ((3, 9),), kind="or", base_rate=0.2, noise=0.15)
    for budget in (40, 100, 173):
        lab = run_adaptive(sc, budget, np.random.default_rng(budget))
        assert lab.calls <= budget
        assert lab.done and len(lab.next_subsets()) == 0
    lab = AdaptiveLabeler(10, budget=20)
    x = lab.next_subsets()
    assert len(x) == 16
    lab.record(x, np.ones(16))
    with pytest.raises(ValueError):
        lab.record(np.ones((5, 10), dtype=bool), np.ones(5))


def test_adaptive_stops_early_when_settled():
    sc = Scenario(10, ((4,),), base_rate=0.0, noise=0.05)
    # strict stop (no screening): every label settled by its 95% CI
    lab = run_adaptive(sc, 3000, np.random.default_rng(8), screen_alpha=None)
    res = lab.labels()
    assert lab.calls < 3000
    assert not res.uncertain()
    assert res.yes() == [4]
    assert len(lab.history) >= 2
    # default: stops once a YES exists and every undecided document is screened out (loose CI below threshold)
    lab = run_adaptive(sc, 3000, np.random.default_rng(8))
    res = lab.labels()
    assert lab.done and lab.calls < 3000 and res.yes() == [4]
    assert all(d.delta_p < 0.1 for d in res.docs if d.label == UNCERTAIN)


def test_simulate_curves_improve_with_calls():
    scen = [Scenario(12, ((1,),), base_rate=0.1, noise=0.05), Scenario(12, ((0,), (7,)), base_rate=0.1, noise=0.05)]
    rows = simulate("adaptive", [32, 160], scen, seed=0)
    assert rows[0]["mean_calls"] <= 32 and rows[1]["mean_calls"] <= 160
    assert rows[1]["mean_f1"] >= rows[0]["mean_f1"]
    assert label_f1([1, 2], [1]) == pytest.approx(2 / 3)


def test_mixed_design_levels():
    from causal_assets.core.labeling.design import mixed_design
    rng = np.random.default_rng(9)
    x = mixed_design(30, 400, (0.25, 0.75), rng)
    assert x.shape == (400, 30) and x.dtype == bool
    share = x.mean(axis=1)
    assert (share > 0.5).sum() == pytest.approx(200, abs=20)        # half the rows high-inclusion
    assert abs(x.mean() - 0.5) < 0.03
    with pytest.raises(ValueError):
        mixed_design(3, 4, (1.5,), rng)


def test_regression_prefer_puts_documents_into_candidates():
    sc = Scenario(12, ((2,), (5,), (8,)), kind="and", base_rate=0.05, noise=0.05)
    rng = np.random.default_rng(10)
    x = balanced_design(12, 64, rng)
    y = sc.solve(x, rng)
    res = regression(x, y, threshold=0.1, max_candidates=3, prefer=[11, 8])
    assert res.extra["candidates"][:2] == [11, 8]
    assert regression(x, y, threshold=0.1).labels() == regression(x, y, threshold=0.1, prefer=()).labels()


def test_adaptive_beats_naive_at_equal_budget_on_and_pair():
    """Fixed seeds: a two-hop question (both documents needed) in a pool of 20, budget 128; the seed's naive
    rule gets exactly as many solver calls as the adaptive labeler used."""
    sc = Scenario(20, ((3,), (11,)), kind="and", base_rate=0.2, noise=0.15)
    f_ad, f_nv = [], []
    for rep in range(6):
        lab = run_adaptive(sc, 128, np.random.default_rng([11, rep]))
        f_ad.append(label_f1(lab.labels().yes(), sc.relevant))
        rng = np.random.default_rng([12, rep])
        x = bernoulli_design(20, lab.calls, 0.5, rng)
        f_nv.append(label_f1(naive(x, sc.solve(x, rng)).yes(), sc.relevant))
    assert np.mean(f_ad) >= np.mean(f_nv) + 0.2
    assert np.mean(f_ad) >= 0.9


def test_adaptive_screening_stop_needs_a_yes():
    # pure noise: nothing is relevant, so the screening stop never fires and the labeler spends its budget
    sc = Scenario(12, (), base_rate=0.3, noise=0.0)
    lab = run_adaptive(sc, 160, np.random.default_rng(13))
    assert lab.calls == 160 or not lab.labels().uncertain()
    # a settled YES lets the loose screen stop the labeler before the strict CIs exclude the rest
    sc = Scenario(20, ((7,),), base_rate=0.0, noise=0.05)
    lab = run_adaptive(sc, 2000, np.random.default_rng(14))
    assert lab.labels().yes() == [7] and lab.calls < 400
    strict = run_adaptive(sc, 2000, np.random.default_rng(14), screen_alpha=None)
    assert strict.calls >= lab.calls


def test_interaction_z_or_governs_only_partner_absent_contexts():
    rng = np.random.default_rng(3)
    or_sc = Scenario(10, ((1, 4),), kind="or", base_rate=0.1, noise=0.05)
    x = balanced_design(10, 256, rng)
    y = or_sc.solve(x, rng)
    assert (4, False) in regression(x, y, threshold=0.1).docs[1].context
    strict = regression(x, y, threshold=0.1, interaction_z_or=1e6)
    assert strict.docs[1].context == () and strict.docs[4].context == ()
    # a positive (AND-type) interaction is still selected at interaction_z
    and_sc = Scenario(15, ((2,), (7,)), kind="and", base_rate=0.05, noise=0.05)
    x = balanced_design(15, 256, rng)
    res = regression(x, and_sc.solve(x, rng), threshold=0.1, interaction_z_or=1e6)
    assert (7, True) in res.docs[2].context and set(res.yes()) == {2, 7}



def test_no_documents_are_frozen_out_only_once_a_yes_exists():
    # nothing relevant: documents reach NO on their average effect, but stay in the design (a NO before any YES
    # can be a member of a multi-hop triple whose average effect is a quarter of its amplitude)
    sc = Scenario(12, (), base_rate=0.3, noise=0.0)
    lab = run_adaptive(sc, 400, np.random.default_rng(21))
    assert NO in lab.labels().labels().values() and not lab._frozen
    assert run_adaptive(sc, 400, np.random.default_rng(21), freeze_needs_yes=False)._frozen
    # once a document is YES, NO documents are frozen out as before
    sc = Scenario(12, ((3,),), base_rate=0.0, noise=0.05)
    lab = run_adaptive(sc, 400, np.random.default_rng(22), screen_alpha=None)
    assert lab.labels().yes() == [3] and lab._frozen and 3 not in lab._frozen
