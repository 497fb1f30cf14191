"""Power of the paired comparison: Miller 2024 against the SOP's figure, statsmodels and a simulation."""

from __future__ import annotations

import math

import pytest

from rlexp.stats import mde_pp, n_for_mde, power_at, power_report


def test_sop_figure_n1000_12pct_discordance_is_about_3pp():
    # sop/README.md, Gate-1b: "with N=1000 and about 12% discordance, the minimal detectable effect at 80%
    # power is about 3pp" (ω² ≈ 0.118 was the discordance observed)
    assert mde_pp(1000, 0.118) == pytest.approx(3.0, abs=0.05)
    assert mde_pp(1000, 0.12) == pytest.approx(3.0, abs=0.1)


def test_ood202_could_not_see_5pp():
    # the 202-problem monitor could not see 5pp (docs/plan.md, power): N=200 gives a 95% CI of ±6.7pp
    # on one accuracy, and the paired MDE on 202 is still > 5pp
    assert mde_pp(202, 0.12) > 5.0
    assert power_at(3.0, 202, 0.12) < 0.3


@pytest.mark.parametrize(
    ("n", "discordance", "delta_pp"), [(1000, 0.12, 3.0), (202, 0.12, 5.0), (5000, 0.05, 1.0)]
)
def test_matches_statsmodels_normal_power(n, discordance, delta_pp):
    from statsmodels.stats.power import NormalIndPower

    # a paired test on differences d_i is a one-sample z-test: effect size δ/σ with σ² = discordance
    effect = (delta_pp / 100) / math.sqrt(discordance)
    expected = NormalIndPower().power(
        effect_size=effect, nobs1=n, alpha=0.05, ratio=0, alternative="two-sided"
    )
    assert power_at(delta_pp, n, discordance) == pytest.approx(expected, abs=1e-9)
    solved = NormalIndPower().solve_power(effect_size=None, nobs1=n, alpha=0.05, power=0.8, ratio=0)
    assert mde_pp(n, discordance) == pytest.approx(100 * solved * math.sqrt(discordance), rel=1e-4)


def test_matches_a_simulated_mcnemar_z_test():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    n, d, delta = 1000, 0.12, 0.03
    # per problem: +1 with prob (d+δ)/2, -1 with prob (d-δ)/2, 0 otherwise
    counts = rng.multinomial(n, [(d + delta) / 2, (d - delta) / 2, 1 - d], size=20_000)
    c, b = counts[:, 0], counts[:, 1]
    z = (c - b) / np.sqrt(np.maximum(b + c, 1))
    simulated = float(np.mean(np.abs(z) > 1.959963984540054))
    assert power_at(3.0, n, d) == pytest.approx(simulated, abs=0.02)


def test_n_for_mde_inverts_mde():
    n = n_for_mde(3.0, 0.12)
    assert mde_pp(n, 0.12) <= 3.0 < mde_pp(n - 1, 0.12)


def test_power_at_mde_is_the_target_power():
    assert power_at(mde_pp(1000, 0.12), 1000, 0.12) == pytest.approx(0.8, abs=1e-3)


def test_report_context_numbers():
    r = power_report(1000, 0.12, baseline_accuracy=0.65)
    # one accuracy on OOD-1000: SE = sqrt(0.65 × 0.35 / 1000) ≈ 1.5% (by hand)
    assert r.se_single_pp == pytest.approx(1.5, abs=0.05)
    assert r.mde_unpaired_pp > r.mde_pp  # pairing is why the SOP pairs
    assert r.as_dict()["power_at_win_threshold"] == pytest.approx(power_at(3.0, 1000, 0.12))


@pytest.mark.parametrize("bad", [{"n": 0}, {"discordance": 0.0}, {"discordance": 1.5}, {"alpha": 1.0}])
def test_invalid_inputs(bad):
    args = {"n": 100, "discordance": 0.1, "alpha": 0.05} | bad
    with pytest.raises(ValueError):
        mde_pp(**args)
