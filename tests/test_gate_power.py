"""Gate-1b pass power (rlexp.stats.gate_1b_pass_probability) against the published simulation figures and against
rlexp.protocol.calibrate's own simulation of the gates."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.stats import gate_1b_effect_for_power, gate_1b_pass_probability


def test_the_figures_of_the_independent_check():
    # an independent simulation: a true +3pp passes Gate-1b 52% of the time at N=1000 (12% discordance);
    # the effect that passes with 80% is 3.87pp at N=1000 and 7.07pp at N=200
    assert gate_1b_pass_probability(3.0, 1000, 0.12) == pytest.approx(0.52, abs=0.01)
    assert gate_1b_effect_for_power(1000, 0.12) == pytest.approx(3.87, abs=0.02)
    assert gate_1b_effect_for_power(200, 0.12) == pytest.approx(7.07, abs=0.03)


def test_against_the_calibration_simulation():
    from rlexp.protocol.calibrate import CalibrationSettings, IntervalTable, judge, simulate_counts
    from rlexp.spec.sop import load_sop

    sop = load_sop()
    settings = CalibrationSettings(n=200, k=1, sims=3000)
    rng = np.random.default_rng(11)
    counts = simulate_counts(settings, 6.0, 0.6, rng, settings.sims)
    verdicts = judge(counts["b"], counts["c"], counts["right"], settings.n, sop, IntervalTable(sop, settings.n))
    simulated = float(verdicts["gate_1b"][:, 0].mean())  # the first seed's checkpoint, CI clause included
    analytic = gate_1b_pass_probability(6.0, 200, 0.12, min_delta_pp=sop.gate_1b.min_delta_pp,
                                        max_mcnemar_p=sop.gate_1b.max_mcnemar_p)
    assert abs(simulated - analytic) < 3 * np.sqrt(analytic * (1 - analytic) / settings.sims) + 0.01


def test_bounds():
    assert gate_1b_pass_probability(0.0, 1000, 0.12) < 0.01
    assert gate_1b_effect_for_power(30, 0.05) is None  # 30 problems, 5% discordance: no effect can pass
    with pytest.raises(ValueError):
        gate_1b_pass_probability(20.0, 1000, 0.12)


@pytest.mark.parametrize(("delta_pp", "n", "d"), [(3.0, 1000, 0.12), (6.0, 200, 0.12), (4.0, 5000, 0.2),
                                                  (-2.0, 500, 0.1), (1.0, 100, 0.3)])
def test_equals_the_sum_over_scipy_binomials(delta_pp, n, d):
    from scipy.stats import binom

    sd = np.sqrt(n * d * (1 - d))
    m = np.arange(max(1, int(n * d - 12 * sd)), min(n, int(n * d + 12 * sd)) + 1)
    c_test = binom.isf(0.025, m, 0.5) + 1  # fewest wins with 2 P(X >= c) <= 0.05 ...
    c_test = np.where(2 * binom.sf(c_test - 1, m, 0.5) >= 0.05, c_test + 1, c_test)  # ... and strictly below
    c_need = np.maximum(c_test, np.ceil((m + n * 0.03) / 2 - 1e-9))
    reference = float(np.sum(binom.pmf(m, n, d) * binom.sf(c_need - 1, m, (d + delta_pp / 100) / (2 * d))))
    assert gate_1b_pass_probability(delta_pp, n, d) == pytest.approx(reference, rel=1e-9, abs=1e-12)


def exact_mcnemar_power_by_loop(delta_pp: float, n: int, d: float, alpha: float = 0.05) -> float:
    """Independent reference: sum over M ~ Bin(n, d) and C | M ~ Bin(M, (d + Δ)/(2d)) of the tables the
    exact two-sided McNemar test rejects (p = min(1, 2 min(P(X <= k), P(X >= k))), X ~ Bin(m, 1/2): scipy's
    binomtest p for a symmetric null, checked against it at one m)."""
    from scipy.stats import binom, binomtest

    win = (d + delta_pp / 100) / (2 * d)
    total = 0.0
    for m in range(1, n + 1):
        pm = binom.pmf(m, n, d)
        if pm < 1e-13:
            continue
        k = np.arange(m + 1)
        p = np.minimum(1.0, 2 * np.minimum(binom.cdf(k, m, 0.5), binom.sf(k - 1, m, 0.5)))
        total += pm * float(binom.pmf(k[p < alpha], m, win).sum())
    assert [binomtest(int(k), 30, 0.5).pvalue for k in range(31)] == pytest.approx(
        list(np.minimum(1.0, 2 * np.minimum(binom.cdf(range(31), 30, 0.5), binom.sf(np.arange(31) - 1, 30, 0.5)))))
    return total


@pytest.mark.parametrize(("delta_pp", "n", "d"), [(3.0, 1000, 0.12), (3.04, 1000, 0.118), (-2.0, 400, 0.2)])
def test_exact_mcnemar_power_equals_the_loop(delta_pp, n, d):
    from rlexp.stats import mcnemar_power

    assert mcnemar_power(delta_pp, n, d) == pytest.approx(exact_mcnemar_power_by_loop(delta_pp, n, d), abs=1e-9)


def test_exact_mde_and_the_z_approximation():
    from rlexp.stats import mcnemar_mde, mcnemar_power, mde_pp

    # at Miller's z MDE the exact test has 77.8-78.4% power, not 80% (N = 1000, 12-20% discordance)
    for d in (0.118, 0.12, 0.15, 0.2):
        z = mde_pp(1000, d)
        assert 0.775 < exact_mcnemar_power_by_loop(z, 1000, d) < 0.79
        exact = mcnemar_mde(1000, d)
        assert exact > z and mcnemar_power(exact, 1000, d) == pytest.approx(0.8, abs=1e-4)
    assert mcnemar_mde(20, 0.2) is None  # no effect within the discordance reaches 80%


def test_best_of_k_gate_pass_rate_by_simulation():
    import math

    from rlexp.protocol.calibrate import gate_1b_best_of_k

    sims = 10_000
    one = gate_1b_pass_probability(3.0, 1000, 0.12)
    (single,) = gate_1b_best_of_k(3.0, 1000, 0.12, k=1, correlations=(0.6,), sims=sims, seed=4)
    assert abs(single - one) < 3 * math.sqrt(one * (1 - one) / sims)  # K = 1: the exact per-checkpoint sum
    rates = gate_1b_best_of_k(3.0, 1000, 0.12, sims=sims, seed=4)
    assert rates[0] > rates[1] > rates[2] > one  # the best of 3 passes more often; less so when correlated
    assert rates[2] > 0.65 and rates[0] < 0.86  # about 70-82% against 52% for one checkpoint
    (identical,) = gate_1b_best_of_k(3.0, 1000, 0.12, correlations=(1.0,), sims=sims, seed=4)
    assert abs(identical - one) < 3 * math.sqrt(one * (1 - one) / sims)  # ρ = 1: three copies of one
    assert gate_1b_best_of_k(20.0, 1000, 0.12) is None


@pytest.mark.parametrize("d", [0.12, 0.2])
def test_the_standard_library_best_of_k_against_the_simulation(d):
    from rlexp.protocol.calibrate import gate_1b_best_of_k
    from rlexp.stats import DELTA_CORRELATION_OF_RHO, gate_1b_best_of_k_normal

    simulated = gate_1b_best_of_k(3.0, 1000, d, sims=10_000, seed=6)  # MC error < 0.5 points
    for rho, sim in zip(DELTA_CORRELATION_OF_RHO, simulated, strict=True):
        approx = gate_1b_best_of_k_normal(3.0, 1000, d, delta_correlation=DELTA_CORRELATION_OF_RHO[rho])
        assert approx == pytest.approx(sim, abs=0.03)
    one = gate_1b_pass_probability(3.0, 1000, d)
    assert gate_1b_best_of_k_normal(3.0, 1000, d, k=1, delta_correlation=0.5) == one
    assert gate_1b_best_of_k_normal(3.0, 1000, d, delta_correlation=0.0) == pytest.approx(1 - (1 - one) ** 3)
    assert gate_1b_best_of_k_normal(3.0, 1000, d, delta_correlation=1.0) == one


@pytest.mark.parametrize("m", [1, 2, 5, 6, 17, 100, 1074, 1075, 3000, 20000])
def test_mcnemar_critical_wins_against_scipy(m):
    """The fewest wins that reject, from scipy's binomial tail: the pmf-ratio sum must hold beyond
    m = 1074, where 2^-m underflows."""
    from scipy.stats import binom

    from rlexp.stats._gate_power import _mcnemar_critical_wins

    rejecting = [c for c in range(m + 1) if 2 * binom.sf(c - 1, m, 0.5) < 0.05 - 1e-9]
    assert _mcnemar_critical_wins(m, 0.05) == (min(rejecting) if rejecting else m + 1)


@pytest.mark.parametrize("r", [0.29, 0.46, 0.73])
def test_best_of_k_integral_equals_the_one_written_with_normaldist(r):
    """The copula integral with φ and Φ written out equals the same trapezoid sum over
    statistics.NormalDist's pdf and cdf (the reference: the library's own normal distribution)."""
    import math
    from statistics import NormalDist

    from rlexp.stats._gate_power import gate_1b_best_of_k_normal

    one = gate_1b_pass_probability(3.0, 1000, 0.118)
    z_dist = NormalDist()
    t = z_dist.inv_cdf(1.0 - one)
    total = 0.0
    for i in range(1701):
        z = -8.5 + i * 0.01
        weight = 0.5 if i in (0, 1700) else 1.0
        total += weight * z_dist.pdf(z) * z_dist.cdf((t - math.sqrt(r) * z) / math.sqrt(1.0 - r)) ** 3
    reference = min(1.0, max(0.0, 1.0 - total * 0.01))
    assert gate_1b_best_of_k_normal(3.0, 1000, 0.118, k=3, delta_correlation=r) == pytest.approx(reference, rel=1e-12)


@pytest.mark.parametrize(("first", "last", "alpha"), [(1, 2500, 0.05), (119_500, 120_500, 0.05), (4000, 4600, 0.01)])
def test_carried_critical_wins_equal_scipys_at_every_m(first, last, alpha):
    """The critical counts carried from one m to the next (compare at 10^6 items) are scipy's at every m of
    the window: the smallest c with 2 P(X >= c) below the limit, X ~ Bin(m, 1/2)."""
    from scipy.stats import binom

    from rlexp.stats._gate_power import _critical_wins_run

    ms = np.arange(first, last + 1)
    carried = np.array(_critical_wins_run(first, last, alpha))
    # the reference: for each m, the c next to the carried one on either side, decided by scipy's tail
    below = 2 * binom.sf(carried - 2, ms, 0.5) >= alpha - 1e-9  # c - 1 must not reject
    at = 2 * binom.sf(carried - 1, ms, 0.5) < alpha - 1e-9  # c must reject (or be m + 1: none does)
    assert below.all()
    assert (at | (carried == ms + 1)).all()


@pytest.mark.parametrize("n", [50_000, 400_000])
def test_carried_tails_equal_the_summed_ones(n):
    """Above CARRY_ABOVE discordant counts the tails are carried; the probability equals scipy's sum over
    the same model (Σ P(M = m) P(C ≥ c_m)) to 1e-9."""
    from scipy.stats import binom

    from rlexp.stats._gate_power import CARRY_ABOVE, _thresholds

    d, delta = 0.12, 0.035
    table = _thresholds(n, d, 3.0, 0.05)
    assert len(table) > CARRY_ABOVE
    m, pm, c = (np.array(col) for col in zip(*table, strict=True))
    reference = float(np.sum(pm * binom.sf(c - 1, m, (d + delta) / (2 * d))))
    assert gate_1b_pass_probability(100 * delta, n, d) == pytest.approx(reference, abs=1e-9)


@pytest.mark.parametrize(("n", "discordance"), [(1000, 0.12), (500, 0.12)])
def test_claim_probability_for_plan_agrees_with_the_simulated_rule(n, discordance):
    # plan's standard-library STOP-1 probability against rlexp sop calibrate's simulation of the whole
    # rule (judge: Gate-1b on the best of 3 of the first seed, Gate-2 over both seeds), 20,000 studies
    from rlexp.protocol.calibrate import claim_probability
    from rlexp.spec.sop import load_sop
    from rlexp.stats._gate_power import DELTA_CORRELATION_OF_RHO, claim_probability_normal

    sop = load_sop()
    sim = claim_probability(sop, 3.0, n, discordance, sims=20_000)
    for r, rate, se in zip(DELTA_CORRELATION_OF_RHO.values(), sim["rates"], sim["mc_se"], strict=True):
        approx = claim_probability_normal(3.0, n, discordance, k=3, delta_correlation=r,
                                          min_each_delta_pp=sop.gate_2.min_each_delta_pp,
                                          min_mean_delta_pp=sop.gate_2.min_mean_delta_pp)
        assert abs(approx - rate) < 0.02 + 3 * se
    # below the bar the claim is rarer than Gate-1b alone would suggest, but not zero (the winner's curse)
    assert 0.1 < claim_probability_normal(2.0, n, discordance, delta_correlation=0.46) < 0.4
