"""`rlexp sop calibrate`: the simulation has the intended shape, and it judges like rlexp.core.gates does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlexp import stats
from rlexp.cli import main
from rlexp.core import calibrate as cal
from rlexp.core import gates
from rlexp.core.sop import load_sop

SOP = load_sop()


def test_simulated_studies_have_the_section_11_26_shape():
    s = cal.CalibrationSettings(sims=300, seed=1)
    for effect in (0.0, 3.0):
        sim = cal.simulate_counts(s, effect, np.random.default_rng(0), s.sims)
        b, c = sim["b"], sim["c"]
        assert b.shape == (300, 2, 3)
        assert ((b + c) / s.n).mean() == pytest.approx(0.12, abs=0.003)
        assert (100.0 * (c - b) / s.n).mean() == pytest.approx(effect, abs=0.15)
        assert 0.67 <= sim["base_acc"].mean() <= 0.74
        # checkpoints of one run are correlated, independent seeds are not
        delta = (c - b).astype(float)
        same_run = np.corrcoef(delta[:, 0, 0], delta[:, 0, 1])[0, 1]
        other_run = np.corrcoef(delta[:, 0, 0], delta[:, 1, 0])[0, 1]
        assert same_run > 0.3
        assert abs(other_run) < 0.2


@settings(max_examples=12, deadline=None)  # statsmodels' multipletests costs ~0.1 s a call
@given(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3))
def test_holm_vec_equals_statsmodels(pvalues):
    from statsmodels.stats.multitest import multipletests

    ref = multipletests(pvalues, method="holm")[1]
    assert cal.holm_vec(np.array([pvalues]))[0] == pytest.approx(ref, abs=1e-12)


def test_vectorised_mcnemar_equals_statsmodels():
    rng = np.random.default_rng(3)
    b, c = rng.integers(0, 120, 200), rng.integers(0, 120, 200)
    ours = cal.mcnemar_exact_vec(b, c)
    assert ours == pytest.approx([stats.mcnemar_exact_p(int(x), int(y)) for x, y in zip(b, c, strict=True)],
                                 rel=1e-9, abs=1e-12)


def test_vectorised_gates_equal_the_scalar_gates():
    s = cal.CalibrationSettings(sims=200, seed=2)
    rng = np.random.default_rng(4)
    sim = cal.simulate_counts(s, 3.0, rng, s.sims)
    b, c = sim["b"][:, 0, :].ravel(), sim["c"][:, 0, :].ravel()
    delta = 100.0 * (c - b) / s.n
    p = cal.mcnemar_exact_vec(b, c)
    lows = np.concatenate([np.array([-0.5, 0.0, -0.49, 0.01]), rng.uniform(-2, 2, len(b) - 4)])
    for name, alt in (("gate_1a", True), ("gate_1b", False)):
        vec = cal.gate_passes(delta, p, lows, getattr(SOP, name), ci_is_alternative=alt)
        fn = getattr(gates, name)
        scalar = [fn(stats_like(d, pv, lo), SOP).passed for d, pv, lo in zip(delta, p, lows, strict=True)]
        assert vec.tolist() == scalar
        assert 0 < sum(scalar) < len(scalar)  # both outcomes occur, so the comparison means something


def stats_like(delta, p, low):
    return gates.AttemptOutcome("x", None, (), None, float(delta), (float(low), 99.0), float(p))


def test_vectorised_bootstrap_low_matches_rlexp_stats():
    rng = np.random.default_rng(0)
    b, c = np.array([61, 44, 30]), np.array([57, 74, 62])
    lows = cal.bootstrap_ci_low_vec(b, c, 1000, 10_000, 0.95, rng)
    for x, y, low in zip(b, c, lows, strict=True):
        ref = stats.bootstrap_delta_ci(int(x), int(y), 1000, resamples=10_000, seed=9).ci_pp[0]
        assert low == pytest.approx(ref, abs=0.3)


def test_calibration_is_seeded_and_gate_1b_false_pass_is_at_most_5pct():
    s = cal.CalibrationSettings(sims=400, seed=11, resamples=500)
    one = cal.calibrate(SOP, s)
    assert one == cal.calibrate(SOP, s)
    rows = {(r.gate, r.scenario): r for r in one.rows}
    null_1b = rows[("Gate-1b", "null (0pp)")]
    assert null_1b.per_checkpoint <= 0.05 + 3 * max(null_1b.mc_se, 0.005)
    assert null_1b.best_of_k >= null_1b.per_checkpoint
    null_1a = rows[("Gate-1a", "null (0pp)")]
    assert null_1a.best_of_k > null_1a.per_checkpoint  # choosing among K inflates the false-pass rate
    power_1b = rows[("Gate-1b", "+3pp")]
    assert power_1b.per_checkpoint > 0.3  # a true +3pp passes about half the time per checkpoint
    assert "| Gate-1b | null (0pp) |" in one.markdown()


@pytest.mark.slow
def test_calibration_2000_sims_reference_table():
    res = cal.calibrate(SOP, cal.CalibrationSettings(sims=2000, seed=0))
    rows = {(r.gate, r.scenario): r for r in res.rows}
    assert rows[("Gate-1b", "null (0pp)")].per_checkpoint <= 0.05
    assert rows[("STOP-1 (1b + Gate-2)", "null (0pp)")].per_checkpoint <= 0.01


def test_cli_calibrate_json_and_bad_input(capsys):
    assert main(["sop", "calibrate", "--sims", "100", "--resamples", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["sims"] == 100 and out["sop_version"] == "v2.1-final"
    assert {r["gate"] for r in out["rows"]} >= {"Gate-1a", "Gate-1b"}
    assert main(["sop", "calibrate", "--sims", "100", "--effect-pp", "20"]) == 2
    assert "--effect-pp" in capsys.readouterr().err
