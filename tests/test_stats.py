"""rlexp.stats against reference implementations (scipy, statsmodels) and the seed's §11.26 numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from rlexp import stats


def outcomes(n11: int, b: int, c: int, n00: int) -> tuple[list[int], list[int]]:
    base = [1] * n11 + [1] * b + [0] * c + [0] * n00
    new = [1] * n11 + [0] * b + [1] * c + [0] * n00
    return base, new


# --------------------------------------------------------------------------- seed §11.26 reference values


def test_seed_ood1000_s0_vs_sota():
    # S0 738/1000, SOTA 734/1000, b=61, c=57 (seed §11.26)
    base, new = outcomes(738 - 61, 61, 57, 1000 - 738 - 57)
    cmp = stats.paired_comparison(base, new, resamples=10_000, seed=0)
    assert (cmp.n, cmp.b, cmp.c) == (1000, 61, 57)
    assert cmp.acc_base == pytest.approx(0.738) and cmp.acc_new == pytest.approx(0.734)
    assert cmp.delta_pp == pytest.approx(-0.40)
    assert round(cmp.mcnemar_p, 4) == 0.7826
    assert cmp.ci_pp[0] == pytest.approx(-2.5, abs=0.15)
    assert cmp.ci_pp[1] == pytest.approx(1.7, abs=0.15)
    # DESIGN.md: SE 0.01086 = sqrt(((b+c)/N - delta^2)/N)
    assert cmp.se_pp == pytest.approx(1.086, abs=0.001)


def test_seed_id200_s0_vs_sota():
    base, new = outcomes(103 - 11, 11, 10, 200 - 103 - 10)
    cmp = stats.paired_comparison(base, new, seed=0)
    assert cmp.delta_pp == pytest.approx(-0.5)
    assert cmp.mcnemar_p == pytest.approx(1.0)
    assert cmp.ci_pp[0] == pytest.approx(-5.0, abs=0.3)
    assert cmp.ci_pp[1] == pytest.approx(4.0, abs=0.3)


def test_design_b44_c74():
    assert round(stats.mcnemar_exact_p(44, 74), 4) == 0.0073


# --------------------------------------------------------------------------- McNemar


@settings(max_examples=60, deadline=None)
@given(b=st.integers(0, 300), c=st.integers(0, 300))
def test_mcnemar_exact_equals_binomtest_and_statsmodels(b, c):
    from statsmodels.stats.contingency_tables import mcnemar

    p = stats.mcnemar_exact_p(b, c)
    if b + c == 0:
        assert p == 1.0
        return
    assert p == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue, rel=1e-9, abs=1e-12)
    assert p == pytest.approx(mcnemar([[17, b], [c, 5]], exact=True).pvalue, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(0, 200), c=st.integers(0, 200))
def test_midp_is_exact_minus_point_probability(b, c):
    midp = stats.mcnemar_midp(b, c)
    if b + c == 0 or b == c:
        assert midp == pytest.approx(1.0)
        return
    exact = sps.binomtest(b, b + c, 0.5).pvalue
    assert midp == pytest.approx(exact - sps.binom.pmf(min(b, c), b + c, 0.5), rel=1e-9, abs=1e-12)
    assert midp < exact


# --------------------------------------------------------------------------- bootstrap


def test_count_bootstrap_equals_index_resampling_in_distribution():
    b, c, n = 61, 57, 1000
    base, new = outcomes(677, b, c, n - 677 - b - c)
    d = np.array(new) - np.array(base)
    rng = np.random.default_rng(1)
    draws = 20_000
    by_index = d[rng.integers(0, n, size=(draws, n))].sum(axis=1)
    by_counts = stats.bootstrap_differences(b, c, n, draws, np.random.default_rng(2))
    ks = sps.ks_2samp(by_index, by_counts)
    assert ks.pvalue > 1e-3
    # exact moments of the resampled sum: mean n*delta, variance n*((b+c)/n - delta^2)
    delta = (c - b) / n
    var = n * ((b + c) / n - delta**2)
    for sample in (by_index, by_counts):
        assert sample.mean() == pytest.approx(n * delta, abs=4 * math.sqrt(var / draws))
        assert sample.var() == pytest.approx(var, rel=0.05)
    qs = [0.025, 0.25, 0.5, 0.75, 0.975]
    assert np.abs(np.quantile(by_index, qs) - np.quantile(by_counts, qs)).max() <= 1.0


@pytest.mark.parametrize("method", ["percentile", "BCa"])
@pytest.mark.parametrize(("n11", "b", "c", "n00"), [(677, 61, 57, 205), (120, 12, 25, 43)])
def test_ci_matches_scipy_paired_bootstrap(method, n11, b, c, n00):
    base, new = outcomes(n11, b, c, n00)
    n = len(base)
    ref = sps.bootstrap(
        (np.array(base, dtype=float), np.array(new, dtype=float)),
        lambda x, y, axis=-1: np.mean(y - x, axis=axis) * 100.0,
        paired=True, vectorized=True, n_resamples=10_000, method=method, random_state=np.random.default_rng(5),
    ).confidence_interval
    ours = stats.bootstrap_delta_ci(b, c, n, resamples=10_000, seed=3, method=method.lower())
    # Monte-Carlo error of a 2.5% quantile with 10k resamples is ~0.1 SE; allow 0.25 SE + one grid step
    se = stats.clt_se_pp(b, c, n)
    tol = 0.25 * se + 100.0 / n
    assert ours.ci_pp[0] == pytest.approx(ref.low, abs=tol)
    assert ours.ci_pp[1] == pytest.approx(ref.high, abs=tol)
    assert ours.se_pp == pytest.approx(se, rel=0.05)


def test_bootstrap_seeded_and_degenerate():
    a = stats.bootstrap_delta_ci(61, 57, 1000, seed=7)
    assert a == stats.bootstrap_delta_ci(61, 57, 1000, seed=7)
    assert a != stats.bootstrap_delta_ci(61, 57, 1000, seed=8)
    for method in ("percentile", "bca"):
        zero = stats.bootstrap_delta_ci(0, 0, 50, method=method)
        assert zero.ci_pp == (0.0, 0.0)
    allwins = stats.bootstrap_delta_ci(0, 10, 10, method="bca")
    assert allwins.ci_pp == (100.0, 100.0)


# --------------------------------------------------------------------------- proportions, power, pass@k, clustering


@pytest.mark.parametrize(("k", "n"), [(734, 1000), (0, 18), (18, 18), (7, 18), (102, 200)])
def test_wilson_matches_closed_form(k, n):
    z = sps.norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = stats.wilson_ci(k, n)
    assert lo == pytest.approx(max(0.0, centre - half), abs=1e-9)
    assert hi == pytest.approx(min(1.0, centre + half), abs=1e-9)


def test_comparison_has_wilson_and_power_fields():
    base, new = outcomes(677, 61, 57, 205)
    cmp = stats.paired_comparison(base, new)
    assert cmp.acc_new_ci[0] < cmp.acc_new < cmp.acc_new_ci[1]
    assert cmp.discordance == pytest.approx(0.118)
    # Miller 2024 / DESIGN.md: N=1000 and ~12% discordance -> MDE ~ 3.0pp at 80% power
    assert cmp.mde_pp == pytest.approx(3.0, abs=0.1)
    assert 0.7 < cmp.power_at_3pp < 0.9
    d = cmp.to_dict()
    assert d["ci_pp"] == list(cmp.ci_pp) and d["b"] == 61


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 60), data=st.data())
def test_pass_at_k_product_form_equals_binomial_form(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    reference = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    assert stats.pass_at_k(n, c, k) == pytest.approx(reference, abs=1e-12)


def test_pass_at_k_edges_and_large_n():
    assert stats.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert stats.pass_at_k(8, 0, 8) == 0.0
    assert stats.pass_at_k(8, 1, 8) == 1.0
    big = stats.pass_at_k(2000, 7, 100)  # the comb form overflows floats here; the product form does not
    assert big == pytest.approx(1 - math.comb(1993, 100) / math.comb(2000, 100), rel=1e-9)
    assert stats.mean_pass_at_k([(8, 0), (8, 8)], 4) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        stats.pass_at_k(4, 5, 1)


def test_cluster_robust_se_matches_statsmodels_cr0():
    import statsmodels.api as sm

    rng = np.random.default_rng(0)
    problems = np.repeat(np.arange(150), 4)
    difficulty = rng.uniform(0, 1, 150)
    values = (rng.uniform(0, 1, len(problems)) < difficulty[problems]).astype(float)
    fit = sm.OLS(values, np.ones(len(values))).fit(cov_type="cluster", cov_kwds={"groups": problems,
                                                                                 "use_correction": False})
    res = stats.cluster_robust_mean(values, problems)
    assert res.mean == pytest.approx(values.mean())
    assert res.se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert res.se > res.se_naive  # samples of one problem are positively correlated
    assert (res.n_clusters, res.n_samples) == (150, 600)
