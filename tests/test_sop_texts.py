"""Every quantitative sentence of sop/README.md, docs/plan.md, docs/compare.md and the docstrings that
quote power, selection and clustering figures, recomputed here: closed forms, scipy, an independent
sum over McNemar tables, or a simulation (fixed seeds, tolerance from the Monte-Carlo error).
Each check first asserts that the text still says what is recomputed, so a reworded sentence
fails here until its check is updated too."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import binom, binomtest

ROOT = Path(__file__).resolve().parent.parent
SOP = (ROOT / "sop" / "README.md").read_text()
PLAN = (ROOT / "docs" / "plan.md").read_text()
COMPARE = (ROOT / "docs" / "compare.md").read_text()
ROOT_README = (ROOT / "README.md").read_text()


def flat(text: str) -> str:
    """One line, comment markers of continued comment lines dropped."""
    return " ".join(re.sub(r"\n\s*# ?", " ", text).split())


def says(text: str, sentence: str) -> None:
    assert flat(sentence) in flat(text), sentence


def mcnemar_power_by_sum(delta_pp: float, n: int, d: float, alpha: float = 0.05) -> float:
    """Exact two-sided McNemar power: M ~ Bin(n, d), C | M ~ Bin(M, (d + Δ)/(2d)), rejecting where
    min(1, 2 min(P(X <= c), P(X >= c))) < alpha for X ~ Bin(M, 1/2)."""
    win = (d + delta_pp / 100) / (2 * d)
    sd = math.sqrt(n * d * (1 - d))
    total = 0.0
    for m in range(max(1, int(n * d - 10 * sd)), min(n, int(n * d + 10 * sd)) + 1):
        k = np.arange(m + 1)
        p = np.minimum(1.0, 2 * np.minimum(binom.cdf(k, m, 0.5), binom.sf(k - 1, m, 0.5)))
        total += binom.pmf(m, n, d) * float(binom.pmf(k[p < alpha], m, win).sum())
    return total


def z_mde(n: int, d: float) -> float:
    return 100 * (ndtri(0.975) + ndtri(0.8)) * math.sqrt(d / n)


def test_unpaired_intervals_are_about_1_9_times_as_wide():
    says(SOP, "Unpaired CIs would be about 1.9 times as wide at this SOP's shape (the ratio of the two "
              "standard errors is √(2p(1−p)/d): 1.86 at accuracy p = 0.705 and discordance d = 12%)")
    assert f"{math.sqrt(2 * 0.705 * 0.295 / 0.12):.2f}" == "1.86"


def test_the_mde_sentences_z_and_exact():
    says(SOP, "3.07pp by Miller's (2024) z approximation (`rlexp.stats.mde_pp`), 3.14pp for the exact McNemar test")
    says(PLAN, "N = 1,000 at 12 % gives an MDE of 3.07 pp and 78 % power to see +3.0 pp by this z approximation")
    says(PLAN, "it needs 3.14 pp for 80 % and has 76 % at +3.0 pp")
    says(PLAN, "The in-run OOD-202 monitor has an MDE of 7.0 pp (6.8 pp by the z approximation)")
    says(COMPARE, "the exact test needs 3.14 pp for 80% power and has 76% power at +3 pp")
    assert f"{z_mde(1000, 0.12):.2f}" == "3.07" and f"{z_mde(202, 0.12):.1f}" == "6.8"
    z = ndtri(0.975)
    shift = 0.03 / math.sqrt(0.12 / 1000)
    assert f"{(1 - 0.5 * math.erfc((shift - z) / math.sqrt(2))):.2f}" == "0.78"
    # exact: 80% is reached between 3.14 and 3.15 pp (so 3.14 to two decimals, as printed)
    assert mcnemar_power_by_sum(3.14, 1000, 0.12) < 0.8 < mcnemar_power_by_sum(3.15, 1000, 0.12)
    assert round(mcnemar_power_by_sum(3.0, 1000, 0.12), 2) == 0.76
    assert mcnemar_power_by_sum(6.95, 202, 0.12) < 0.8 < mcnemar_power_by_sum(7.05, 202, 0.12)
    # docstrings of rlexp.stats.mcnemar_power and rlexp.stats.PowerReport: 78.0% at Miller's MDE
    from rlexp import stats

    says(stats.mcnemar_power.__doc__ or "", "80.0% at Miller's MDE for N = 1000 and 12% discordance) this "
                                                 "is the test the SOP runs (78.0% there)")
    says((ROOT / "rlexp" / "stats" / "_power.py").read_text(), "(80.0% vs 78.0% at its MDE, 12% discordance)")
    assert f"{100 * mcnemar_power_by_sum(z_mde(1000, 0.12), 1000, 0.12):.0f}" == "78"
    assert abs(mcnemar_power_by_sum(z_mde(1000, 0.12), 1000, 0.12) - 0.780) < 0.0006
    assert stats.WIN_THRESHOLD_PP == 3.0


def test_three_independent_looks_at_the_per_checkpoint_rates():
    says(SOP, "(1 − (1 − 0.0375)³ = 10.8% for Gate-1a, 1 − (1 − 0.0402)³ = 11.6% for a bare McNemar p)")
    assert f"{100 * (1 - (1 - 0.0375) ** 3):.1f}" == "10.8" and f"{100 * (1 - (1 - 0.0402) ** 3):.1f}" == "11.6"


def test_holm_and_the_p_value_of_plus_3pp():
    says(SOP, "at N=1000 and 12% discordance a Δ of +3pp has p ≈ 0.008 (b = 45, c = 75), so p × 3 is still < 0.05. "
              "That no longer holds from about 15% discordance (p 0.018 at 15%, 0.040 at 20%")
    assert f"{binomtest(75, 120, 0.5).pvalue:.3f}" == "0.008"
    assert f"{binomtest(90, 150, 0.5).pvalue:.3f}" == "0.018"
    assert f"{binomtest(115, 200, 0.5).pvalue:.3f}" == "0.040"
    first = next(m for m in range(120, 200, 2) if 3 * binomtest((m + 30) // 2, m, 0.5).pvalue >= 0.05)
    assert 145 <= first <= 150  # "from about 15%" (148 discordant of 1000)


def test_seed_averaged_calibration_figures_within_the_monte_carlo_error():
    from rlexp.protocol import calibrate as cal
    from rlexp.spec.sop import load_sop

    says(SOP, "Gate-1b: 0.35% → 1.03% / 1.01% / 0.83%")
    says(SOP, "Gate-1a, which is the false-CONFIRM rate: 3.75% → 10.11% / 9.42% / 7.74% (± 0.04%)")
    says(SOP, "a bare McNemar p < 0.05: 4.0% → 11.2% / 10.7% / 8.8%")
    says(SOP, "| 0.3 | 0.08% ± 0.00% | 3.34% ± 0.03% | 30.05% ± 0.06% | 55.06% ± 0.07% |")
    says(ROOT_README, "false CONFIRM 7.7–10.1%")
    sims = 20_000
    res = cal.calibrate(load_sop(), cal.CalibrationSettings(sims=sims, seed=7, correlations=(0.3,),
                                                            below_bar_effects=(2.0,)))
    rows = {(r.gate, r.scenario): r for r in res.rows}

    def close(rate: float, quoted: float) -> bool:  # four Monte-Carlo errors of this draw, and the rounding
        return abs(rate - quoted) < 4 * math.sqrt(quoted * (1 - quoted) / sims) + 0.0005

    assert close(rows[("Gate-1a", "null (0pp)")].best_of_k.rate, 0.1011)
    assert close(rows[("Gate-1b", "null (0pp)")].best_of_k.rate, 0.0103)
    assert close(rows[("McNemar p<0.05 alone", "null (0pp)")].best_of_k.rate, 0.112)
    assert close(dict(((e, r) for _, e, r in res.stop_1_below_bar))[2.0].rate, 0.3005)


def test_the_winners_curse_and_the_adjusted_estimate():
    from test_selection import simulate_family

    from rlexp.protocol.selection import winner_inference

    says(SOP, "the raw best-of-3 Δ is on average +0.8 / +0.7 / +0.5pp above the truth at ρ = 0.3 / 0.6 / 0.9")
    says(SOP, "the median error of the adjusted estimate is within ±0.2pp at ρ = 0.3, 0.6 and 0.9 and its 95% "
              "interval covers 96–97%, while the raw Δ is +0.5 to +0.8pp high")
    says(SOP, "its mean error −0.3 to 0pp, its RMSE 1.2–1.7pp")
    from rlexp.protocol import selection

    says(selection.__doc__ or "", "by about +0.7 pp for K = 3 checkpoints of one run at N = 1000 and 12% discordance")
    studies = 2000
    for rho, quoted in ((0.3, 0.8), (0.6, 0.7), (0.9, 0.5)):
        x, cov = simulate_family(0.02, rho, studies, seed=21)
        res = winner_inference(x, cov, step=1 / 1000)
        raw_error = 100 * (res["raw"] - 0.02)
        assert abs(raw_error.mean() - quoted) < 0.05 + 3 * raw_error.std() / math.sqrt(studies)
        error = 100 * (res["estimate"] - 0.02)
        mc = 3 * error.std() / math.sqrt(studies)
        assert abs(np.median(error)) <= 0.2
        assert -0.3 - 0.05 - mc < error.mean() < 0.0 + mc
        assert np.sqrt(np.mean(error ** 2)) < 1.7 + 0.05 + mc
        cover = float(np.mean((res["low"] <= 0.02) & (res["high"] >= 0.02)))
        assert 0.96 - 0.005 - 3 * math.sqrt(0.96 * 0.04 / studies) < cover < 0.97 + 0.005 + 3 * math.sqrt(0.97 * 0.03 / studies)


def test_best_of_three_gate_pass_range():
    from rlexp.protocol.calibrate import gate_1b_best_of_k

    says(COMPARE, "the gate passes a true +3 pp only 52% of the time for one checkpoint (70–82% for the best of three)")
    says(PLAN, "70–82 % at a true +3.0 pp")
    says(SOP, "Power against a true +3pp is about 52% per checkpoint for Gate-1b**, 70–82% for the best of three")
    sims = 20_000
    rates = gate_1b_best_of_k(3.0, 1000, 0.12, sims=sims, seed=8)
    for rate, quoted in ((min(rates), 0.70), (max(rates), 0.82)):  # the rounding, and four Monte-Carlo errors
        assert abs(rate - quoted) < 0.005 + 4 * math.sqrt(quoted * (1 - quoted) / sims)


def test_the_few_clusters_warning_figures():
    # the CR1 t-test with G − 1 df, half the clusters of 2 items and half of 8, cluster and item effects
    # N(0, 1), 20,000 studies per G, seed 1: written out here with numpy and scipy
    from scipy import stats as sps

    from rlexp.stats import CLUSTER_WARN_BELOW

    source = (ROOT / "rlexp" / "stats" / "_mean_scores.py").read_text()
    says(source, "measured a 5% test rejecting 7.8% of true nulls at G = 5, 7.3% at 10, 6.5% at 20 and 5.6% at 30")
    says(COMPARE, "measured a 5% test rejecting 7.8% of true nulls at G = 5, 7.3% at 10, 6.5% at 20, 5.6% at 30")
    says((ROOT / "rlexp" / "stages" / "compare.py").read_text(), "(a 5% test rejected 7.8% of true nulls "
         "\"\n \"at 5 unequal clusters, 6.5% at 20, 5.6% at 30)")
    assert CLUSTER_WARN_BELOW == 30
    rng = np.random.default_rng(1)
    measured = {}
    for g in (5, 10, 15, 20, 30):
        studies = 20_000
        sizes = np.r_[np.full(g // 2, 2), np.full(g - g // 2, 8)]
        n = int(sizes.sum())
        codes = np.repeat(np.arange(g), sizes)
        x = rng.normal(size=(studies, g))[:, codes] + rng.normal(size=(studies, n))
        mean = x.mean(axis=1, keepdims=True)
        sums = np.stack([(x - mean)[:, codes == j].sum(axis=1) for j in range(g)], axis=1)
        se = np.sqrt((sums ** 2).sum(axis=1)) / n * math.sqrt(g / (g - 1))
        p = 2 * sps.t.sf(np.abs(mean[:, 0] / se), g - 1)
        measured[g] = float((p < 0.05).mean())
    assert {g: f"{100 * measured[g]:.1f}" for g in (5, 10, 20, 30)} == {5: "7.8", 10: "7.3", 20: "6.5", 30: "5.6"}


@pytest.mark.parametrize("needle", ["roughly threefold", "p is ≈ 0.006 or lower", "1 − 0.95³"])
def test_the_corrected_sentences_are_gone(needle):
    assert needle not in SOP
