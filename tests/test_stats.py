"""rlexp.stats against reference implementations (scipy, statsmodels), hand computation and the numbers
reported for the reference experiment (Baseline-S0 vs SOTA on the 1,000-problem OOD set)."""

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


# --------------------------------------------------------------------------- the reference experiment's numbers


def test_reference_ood1000_s0_vs_sota():
    # S0 738/1000, SOTA 734/1000, b=61, c=57
    base, new = outcomes(738 - 61, 61, 57, 1000 - 738 - 57)
    cmp = stats.paired_comparison(base, new, resamples=10_000, seed=0)
    assert (cmp.n, cmp.b, cmp.c) == (1000, 61, 57)
    assert cmp.acc_base == pytest.approx(0.738) and cmp.acc_new == pytest.approx(0.734)
    assert cmp.delta_pp == pytest.approx(-0.40)
    assert round(cmp.mcnemar_p, 4) == 0.7826
    assert cmp.ci_pp[0] == pytest.approx(-2.5, abs=0.15)
    assert cmp.ci_pp[1] == pytest.approx(1.7, abs=0.15)
    # SE 0.01086 = sqrt(((b+c)/N - delta^2)/N), by hand: sqrt((0.118 - 0.000016) / 1000)
    assert cmp.se_pp == pytest.approx(1.086, abs=0.001)


def test_reference_id200_s0_vs_sota():
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
def test_wilson_matches_closed_form_and_statsmodels(k, n):
    from statsmodels.stats.proportion import proportion_confint

    z = sps.norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = stats.wilson_ci(k, n)
    sm_lo, sm_hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert (lo, hi) == pytest.approx((sm_lo, sm_hi), abs=1e-12)
    assert lo == pytest.approx(max(0.0, centre - half), abs=1e-9)
    assert hi == pytest.approx(min(1.0, centre + half), abs=1e-9)


def test_comparison_has_wilson_and_power_fields():
    base, new = outcomes(677, 61, 57, 205)
    cmp = stats.paired_comparison(base, new)
    assert cmp.acc_new_ci[0] < cmp.acc_new < cmp.acc_new_ci[1]
    assert cmp.discordance == pytest.approx(0.118)
    # Miller 2024's z approximation: N=1000 and ~12% discordance -> MDE ~ 3.0pp at 80% power; the printed
    # MDE and power are the exact McNemar test's (the test the SOP runs), checked by an independent sum
    from scipy.stats import binom

    from rlexp.stats import mde_pp, power_at

    def exact_power(delta_pp: float, n: int = 1000, d: float = 0.118) -> float:
        total = 0.0
        for m in range(40, 200):
            k = np.arange(m + 1)
            p = np.minimum(1.0, 2 * np.minimum(binom.cdf(k, m, 0.5), binom.sf(k - 1, m, 0.5)))
            total += binom.pmf(m, n, d) * float(binom.pmf(k[p < 0.05], m, (d + delta_pp / 100) / (2 * d)).sum())
        return total

    assert mde_pp(1000, 0.118) == pytest.approx(3.0, abs=0.1)
    assert cmp.mde_pp > mde_pp(1000, 0.118) and exact_power(cmp.mde_pp) == pytest.approx(0.8, abs=1e-3)
    assert cmp.power_at_3pp == pytest.approx(exact_power(3.0), abs=1e-6)
    assert cmp.power_at_3pp < power_at(3.0, 1000, 0.118)  # the z approximation overstates it
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


# --------------------------------------------------------------------------- the library API: paired_test


REFERENCE = outcomes(677, 61, 57, 205)  # b=61, c=57, n=1000


def test_paired_test_result_fields():
    res = stats.paired_test(*REFERENCE)
    assert (res.b, res.c, res.n, res.statistic) == (61, 57, 1000, 57)
    assert res.delta == pytest.approx(-0.004)  # a proportion, not percentage points
    assert (res.correct_base, res.correct_new) == (738, 734)
    assert (res.accuracy_base, res.accuracy_new) == pytest.approx((0.738, 0.734))
    assert res.discordance == pytest.approx(0.118)
    assert res.standard_error == pytest.approx(0.01086, abs=1e-5)
    assert (res.alternative, res.method) == ("two-sided", "exact")
    assert round(res.pvalue, 4) == 0.7826
    with pytest.raises(AttributeError):
        res.pvalue = 0.0  # frozen, like scipy's result objects


def _binom_tail_ge(k: int, m: int) -> float:
    return sum(math.comb(m, i) for i in range(k, m + 1)) / 2**m


def _binom_tail_le(k: int, m: int) -> float:
    return sum(math.comb(m, i) for i in range(0, k + 1)) / 2**m


@settings(max_examples=60, deadline=None)
@given(b=st.integers(0, 80), c=st.integers(0, 80), ties=st.integers(0, 30))
def test_paired_test_pvalues_by_hand_and_statsmodels(b, c, ties):
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import binom_test

    base, new = outcomes(ties, b, c, 3)
    m = b + c
    greater = stats.paired_test(base, new, alternative="greater")
    less = stats.paired_test(base, new, alternative="less")
    two = stats.paired_test(base, new)
    mid_two = stats.paired_test(base, new, method="midp")
    mid_greater = stats.paired_test(base, new, alternative="greater", method="midp")
    mid_less = stats.paired_test(base, new, alternative="less", method="midp")
    if m == 0:
        assert {greater.pvalue, less.pvalue, two.pvalue, mid_two.pvalue} == {1.0}
        return
    point = math.comb(m, c) / 2**m
    assert greater.pvalue == pytest.approx(_binom_tail_ge(c, m), rel=1e-9, abs=1e-15)
    assert less.pvalue == pytest.approx(_binom_tail_le(c, m), rel=1e-9, abs=1e-15)
    assert two.pvalue == pytest.approx(min(1.0, 2 * min(_binom_tail_ge(c, m), _binom_tail_le(c, m))), rel=1e-9)
    assert two.pvalue == pytest.approx(mcnemar([[ties, b], [c, 3]], exact=True).pvalue, rel=1e-9, abs=1e-12)
    assert greater.pvalue == pytest.approx(binom_test(c, m, 0.5, alternative="larger"), rel=1e-9, abs=1e-12)
    assert less.pvalue == pytest.approx(binom_test(c, m, 0.5, alternative="smaller"), rel=1e-9, abs=1e-12)
    assert mid_greater.pvalue == pytest.approx(_binom_tail_ge(c, m) - point / 2, rel=1e-9, abs=1e-15)
    assert mid_less.pvalue == pytest.approx(_binom_tail_le(c, m) - point / 2, rel=1e-9, abs=1e-15)
    assert mid_two.pvalue == pytest.approx(stats.mcnemar_midp(b, c), rel=1e-12)
    assert greater.statistic == c and greater.delta == pytest.approx((c - b) / (ties + m + 3))


def test_paired_test_accepts_bools_arrays_and_float_ones():
    base, new = REFERENCE
    ref = stats.paired_test(base, new)
    assert stats.paired_test(np.array(base, dtype=bool), [bool(y) for y in new]) == ref
    assert stats.paired_test(np.array(base, dtype=float), np.array(new, dtype=np.int8)) == ref
    assert stats.paired_test(tuple(base), np.array(new, dtype=object)) == ref


@pytest.mark.parametrize(("y_base", "y_new", "message"), [
    ([0.4, 2, 0], [1, 0, 5], "y_base must contain only 0 and 1 (or False and True): 2 value(s) are not, "
                             "the first is 0.4 at index 0"),
    ([1, 0, 1], [1, 0, 5], "y_new must contain only 0 and 1 (or False and True): 1 value(s) are not, "
                           "the first is 5 at index 2"),
    ([1, 0, 1], [1, float("nan"), 1], "y_new must contain only 0 and 1"),
    ([1, -1], [1, 0], "the first is -1 at index 1"),
    ([1, "1"], [1, 0], "the first is '1' at index 1"),
    ([1, None], [1, 0], "the first is None at index 1"),
    ([1, 1 + 0j], [1, 0], "y_base must contain only 0 and 1"),
    ([1, 0, 1], [1, 0], "differ in length (3 vs 2)"),
    ([], [], "empty"),
    ([[1, 0], [0, 1]], [[1, 0], [0, 1]], "one-dimensional"),
    ("0101", [0, 1, 0, 1], "got a string"),
    ({"p1": 1}, {"p1": 1}, "rlexp.stats.pair"),
])
def test_paired_test_rejects_bad_input(y_base, y_new, message):
    with pytest.raises(ValueError) as err:
        stats.paired_test(y_base, y_new)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_paired_counts_no_longer_accepts_non_binary_values():
    # it used to return b=1, c=1 here, reading 0.4, 2 and 5 as truthy
    with pytest.raises(ValueError, match="0.4 at index 0"):
        stats.paired_counts([0.4, 2, 0], [1, 0, 5])
    with pytest.raises(ValueError, match="empty"):
        stats.paired_counts([], [])


def test_paired_test_rejects_unknown_options():
    with pytest.raises(ValueError, match="alternative must be one of 'two-sided', 'greater', 'less'"):
        stats.paired_test([1], [0], alternative="larger")
    with pytest.raises(ValueError, match="method must be one of 'exact', 'midp'"):
        stats.paired_test([1], [0], method="asymptotic")
    res = stats.paired_test([1, 0], [0, 1])
    for kwargs, message in [({"confidence_level": 1.0}, "confidence_level"), ({"confidence_level": 0}, "confidence"),
                            ({"method": "studentized"}, "method must be one of"),
                            ({"n_resamples": 0}, "n_resamples"), ({"n_resamples": 2.5}, "n_resamples")]:
        with pytest.raises(ValueError, match=message):
            res.confidence_interval(**kwargs)


# --------------------------------------------------------------------------- confidence_interval vs scipy.stats.bootstrap


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("method", ["percentile", "basic", "BCa"])
@pytest.mark.parametrize(("n11", "b", "c", "n00"), [(677, 61, 57, 205), (120, 12, 25, 43)])
def test_confidence_interval_matches_scipy_bootstrap(alternative, method, n11, b, c, n00):
    base, new = outcomes(n11, b, c, n00)
    n = len(base)
    ref = sps.bootstrap(
        (np.array(base, dtype=float), np.array(new, dtype=float)),
        lambda x, y, axis=-1: np.mean(y - x, axis=axis),
        paired=True, vectorized=True, n_resamples=10_000, method=method, alternative=alternative,
        rng=np.random.default_rng(5),
    ).confidence_interval
    res = stats.paired_test(base, new, alternative=alternative)
    ours = res.confidence_interval(confidence_level=0.95, method=method, n_resamples=10_000, rng=3)
    assert isinstance(ours, stats.ConfidenceInterval) and ours == (ours.low, ours.high)
    # Monte-Carlo error of a tail quantile with 10k resamples is ~0.1 SE; allow 0.25 SE + one grid step
    tol = 0.25 * res.standard_error + 1.0 / n
    if alternative == "less":  # scipy: -inf; ours: the bound of delta
        assert ours.low == -1.0
    else:
        assert ours.low == pytest.approx(ref.low, abs=tol)
    if alternative == "greater":
        assert ours.high == 1.0
    else:
        assert ours.high == pytest.approx(ref.high, abs=tol)


def test_confidence_interval_rng_and_the_pp_wrapper():
    res = stats.paired_test(*REFERENCE)
    assert res.confidence_interval(rng=7) == res.confidence_interval(rng=np.random.default_rng(7))
    assert res.confidence_interval(rng=7) != res.confidence_interval(rng=8)
    for method in ("percentile", "bca"):
        ci = res.confidence_interval(method=method, rng=11)
        pp = stats.bootstrap_delta_ci(61, 57, 1000, seed=11, method=method).ci_pp
        assert (100 * ci.low, 100 * ci.high) == pytest.approx(pp, abs=1e-12)
    cmp = stats.paired_comparison(*REFERENCE, seed=11, confidence=0.9, method="basic")
    ci = res.confidence_interval(confidence_level=0.9, method="basic", rng=11)
    assert cmp.ci_pp == pytest.approx((100 * ci.low, 100 * ci.high), abs=1e-12)
    # a 90% interval sits inside the 99% one drawn from the same resamples
    narrow, wide = res.confidence_interval(0.9, rng=1), res.confidence_interval(0.99, rng=1)
    assert wide.low <= narrow.low < res.delta < narrow.high <= wide.high


def test_confidence_interval_degenerate_tables():
    assert stats.paired_test([1, 0, 1], [1, 0, 1]).confidence_interval(method="bca", rng=0) == (0.0, 0.0)
    assert stats.paired_test([0] * 10, [1] * 10).confidence_interval(method="bca", rng=0) == (1.0, 1.0)
    # one problem: no jackknife, BCa falls back to the percentile interval
    assert stats.paired_test([1], [0]).confidence_interval(method="bca", rng=0) == (-1.0, -1.0)


# --------------------------------------------------------------------------- adjust_pvalues vs statsmodels


pvalue_lists = st.lists(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 0.01, 0.05, 1.0])),
                        min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(pvalues=pvalue_lists)
def test_adjust_pvalues_equals_statsmodels_multipletests(pvalues):
    from statsmodels.stats.multitest import multipletests

    for ours, theirs in [("bonferroni", "bonferroni"), ("bh", "fdr_bh"), ("by", "fdr_by")]:
        expected = multipletests(pvalues, method=theirs)[1]
        assert stats.adjust_pvalues(pvalues, method=ours) == pytest.approx(expected, rel=1e-12, abs=1e-15)
        assert stats.adjust_pvalues(pvalues, method=theirs) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # Holm by its definition: p_i adjusted = max over p_j <= p_i of min(1, (m - r_j + 1) p_j), r_j the rank
    # of p_j counting ties at their first place
    m = len(pvalues)
    rank = [1 + sum(q < p for q in pvalues) for p in pvalues]
    holm = [max(min(1.0, (m - r + 1) * q) for q, r in zip(pvalues, rank, strict=True) if q <= p) for p in pvalues]
    assert stats.adjust_pvalues(pvalues, method="holm") == pytest.approx(holm, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("pvalues", [[0.01, 0.04, 0.03], [0.0, 0.0, 1.0, 0.05], [0.02] * 5, [0.9],
                                     [0.001, 0.2, 0.013, 0.04, 0.6, 0.02, 0.5, 0.03]])
def test_adjust_pvalues_holm_equals_statsmodels(pvalues):  # one multipletests(holm) call costs ~0.2 s
    from statsmodels.stats.multitest import multipletests

    expected = multipletests(pvalues, method="holm")[1]
    assert stats.adjust_pvalues(pvalues, method="holm") == pytest.approx(expected, rel=1e-12, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(pvalues=pvalue_lists)
def test_adjust_pvalues_fdr_equals_scipy(pvalues):
    for method in ("bh", "by"):
        expected = sps.false_discovery_control(pvalues, method=method)
        assert stats.adjust_pvalues(pvalues, method=method) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_adjust_pvalues_by_hand_axis_and_errors():
    # Holm: sorted 0.01*3, 0.03*2, max(0.06, 0.04*1); BH: 0.04*3/3, 0.03*3/2 -> min(0.045, 0.04), 0.01*3
    assert stats.adjust_pvalues([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert stats.adjust_pvalues([0.01, 0.04, 0.03], "bh").tolist() == pytest.approx([0.03, 0.04, 0.04])
    assert stats.adjust_pvalues([0.5, 0.6], "bonferroni").tolist() == [1.0, 1.0]
    family = np.array([[0.01, 0.04, 0.03], [0.2, 0.001, 0.5]])
    rows = np.array([stats.adjust_pvalues(r) for r in family])
    assert np.array_equal(stats.adjust_pvalues(family), rows)
    assert np.array_equal(stats.adjust_pvalues(family.T, axis=0), rows.T)
    assert stats.adjust_pvalues([]).shape == (0,)
    for bad in ([0.1, float("nan")], [1.2], [-0.1]):
        with pytest.raises(ValueError, match=r"in \[0, 1\]"):
            stats.adjust_pvalues(bad)
    with pytest.raises(ValueError, match="scalar"):
        stats.adjust_pvalues(0.3)
    with pytest.raises(ValueError, match="method must be one of"):
        stats.adjust_pvalues([0.1], method="hommel")


# --------------------------------------------------------------------------- pair by problem id


def test_pair_aligns_by_id_in_baseline_order():
    p = stats.pair({"h1": 1, "h2": 0, "h3": 1}, {"h3": 0, "h1": 1, "h2": True})
    assert p.ids == ("h1", "h2", "h3")
    assert p.y_base.tolist() == [1, 0, 1] and p.y_new.tolist() == [1, 1, 0]
    assert (p.n, p.dropped) == (3, 0)
    with pytest.raises(ValueError):
        p.y_base[0] = 0  # read-only, like the frozen object holding it
    assert p.test() == stats.paired_test([1, 0, 1], [1, 1, 0])
    assert p.test(alternative="less").pvalue == pytest.approx(0.75)  # b = c = 1: P(X <= 1), X ~ Bin(2, 1/2)
    assert stats.pair({3: 1, 1: 0}, {1: 1, 3: 1}).ids == (3, 1)  # any hashable id


def test_pair_refuses_different_sets_unless_intersect():
    base = {"h1": 1, "h2": 0, "h3": 1}
    new = {"h1": 1, "h2": 1, "h4": 1, "h5": 0}
    with pytest.raises(stats.PairingError) as err:
        stats.pair(base, new)
    assert isinstance(err.value, ValueError)
    assert "1 only in outcomes_base, 2 only in outcomes_new" in str(err.value)
    assert (err.value.base_only, err.value.new_only, err.value.common) == (("h3",), ("h4", "h5"), 2)
    p = stats.pair(base, new, intersect=True)
    assert p.ids == ("h1", "h2")
    assert (p.dropped_base_only, p.dropped_new_only, p.dropped) == (("h3",), ("h4", "h5"), 3)
    with pytest.raises(stats.PairingError, match="no problem id in common"):
        stats.pair({"a": 1}, {"b": 1}, intersect=True)


def test_pair_validates_outcomes_and_types():
    with pytest.raises(ValueError, match=r"the first is outcomes_new\['h2'\] = 0.4"):
        stats.pair({"h1": 1, "h2": 0}, {"h1": 1, "h2": 0.4})
    with pytest.raises(ValueError, match=r"2 do not, the first is outcomes_base\['h1'\] = 2"):
        stats.pair({"h1": 2, "h2": None}, {"h1": 1, "h2": 0})
    with pytest.raises(TypeError, match="outcomes_base must be a mapping"):
        stats.pair([1, 0], {"h1": 1})


# --------------------------------------------------------------------------- the module as a library


def test_doctests_pass():
    import doctest
    import importlib
    import pkgutil

    # the examples live in the private modules that define the public names (scipy's layout)
    modules = [importlib.import_module(f"rlexp.stats.{m.name}") for m in pkgutil.iter_modules(stats.__path__)]
    attempted = 0
    for module in modules:
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted >= 40
    finder = doctest.DocTestFinder()
    for name in stats.__all__:
        obj = getattr(stats, name)
        if callable(obj) and not isinstance(obj, type):  # every public function shows how it is called
            module = importlib.import_module(obj.__module__)
            assert any(t.examples for t in finder.find(obj, name, module=module)), f"{name} has no example"


def test_all_names_exist_and_are_documented():
    assert len(set(stats.__all__)) == len(stats.__all__)
    for name in stats.__all__:
        assert getattr(stats, name).__doc__, name
    for name in ("paired_test", "pair", "adjust_pvalues", "ConfidenceInterval", "PairedTestResult"):
        assert name in stats.__all__


def test_import_needs_numpy_and_scipy_only():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import rlexp.stats as s\n"
        "lazy = sorted(m for m in ('numpy', 'scipy') if m in sys.modules)\n"
        "r = s.paired_test([1, 0, 1, 1], [1, 1, 1, 0])\n"
        "r.confidence_interval(method='bca', rng=0)\n"
        "s.adjust_pvalues([0.01, 0.2], 'by')\n"
        "s.pair({'a': 1}, {'a': 0}).test(method='midp')\n"
        "s.paired_comparison([1, 0], [0, 1])\n"
        "s.cluster_robust_mean([1, 0], ['a', 'b'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'mlflow', 'pandas', 'pydantic', 'statsmodels', 'yaml', 'typer', 'rich'})\n"
        "print(lazy, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"
