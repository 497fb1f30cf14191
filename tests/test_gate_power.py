"""Gate-1b pass power (rlexp.core.gate_power) against the published simulation figures and against
rlexp.core.calibrate's own simulation of the gates."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.core.gate_power import gate_1b_effect_for_power, gate_1b_pass_probability


def test_the_figures_of_the_independent_check():
    # an independent simulation: a true +3pp passes Gate-1b 52% of the time at N=1000 (12% discordance);
    # the effect that passes with 80% is 3.87pp at N=1000 and 7.07pp at N=200
    assert gate_1b_pass_probability(3.0, 1000, 0.12) == pytest.approx(0.52, abs=0.01)
    assert gate_1b_effect_for_power(1000, 0.12) == pytest.approx(3.87, abs=0.02)
    assert gate_1b_effect_for_power(200, 0.12) == pytest.approx(7.07, abs=0.03)


def test_against_the_calibration_simulation():
    from rlexp.core.calibrate import CalibrationSettings, IntervalTable, judge, simulate_counts
    from rlexp.core.sop import load_sop

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
