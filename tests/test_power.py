"""Power of the paired comparison: Miller 2024 against the SOP's figure, statsmodels and a simulation."""

from __future__ import annotations

import math
from pathlib import Path

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


# --------------------------------------------------------------------------- a clustered primary set


def _clustered_plan(tmp_path, capsys, *, with_file: bool, baseline: dict) -> dict:
    import json
    import shutil

    import yaml

    from rlexp.cli import main

    src = Path(__file__).resolve().parent.parent / "experiments" / "seed-a30"
    exp = tmp_path / "seed-a30"
    shutil.copytree(src, exp, ignore=shutil.ignore_patterns("plan.json"))
    spec_path = exp / "a29b" / "attempt.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["datasets"]["ood_primary"] = {"path": "data/ood.jsonl", "size": 1000, "cluster": "doc"}
    spec["baseline"] = {**(spec.get("baseline") or {}), **baseline}
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    if with_file:   # 1,000 problems from 50 documents of 20
        (exp / "data").mkdir(exist_ok=True)
        (exp / "data" / "ood.jsonl").write_text("".join(
            json.dumps({"prompt": f"q{i}", "answer": "1", "doc": f"d{i // 20}"}) + "\n" for i in range(1000)))
    main(["plan", str(exp / "a29b"), "--json"])
    return json.loads(capsys.readouterr().out)["power"]


def _reference(n: int, discordance: float, deff: float, g: int) -> dict:
    """The cluster-robust t's figures written out here: SE = sqrt(d / n · DEFF), t with G − 1 df;
    Gate-1b (Δ̂ ≥ 3 pp and p < 0.05) passes where T ≥ max(3 / SE, t_{0.975})."""
    from scipy import stats as sps

    se = 100 * math.sqrt(discordance / n * deff)
    df = g - 1
    crit = sps.t.ppf(0.975, df)
    return {"se_pp": se, "mde_pp": (crit + sps.t.ppf(0.8, df)) * se,
            "power": sps.nct.sf(crit, df, 3 / se) + sps.nct.cdf(-crit, df, 3 / se),
            "gate": sps.nct.sf(max(3 / se, crit), df, 3 / se)}


def test_plan_power_on_a_clustered_primary_set_uses_the_clustered_model(tmp_path, capsys):
    p = _clustered_plan(tmp_path, capsys, with_file=True, baseline={"cluster_icc": 0.05})
    cl = p["clustered"]
    assert cl["discordance"] == p["discordance"]
    ref = _reference(1000, p["discordance"], 1 + 19 * 0.05, 50)
    assert (cl["n_clusters"], cl["mean_cluster_size"], cl["clusters_from"]) == (50, 20, "the set's rows")
    assert cl["design_effect"] == pytest.approx(1.95) and cl["df"] == 49
    assert cl["se_pp"] == pytest.approx(ref["se_pp"], rel=1e-12)
    assert cl["mde_pp"] == pytest.approx(ref["mde_pp"], rel=1e-9)
    assert cl["power_at_win_threshold"] == pytest.approx(ref["power"], rel=1e-9)
    assert cl["gate_1b_pass_power_at_win_threshold"] == pytest.approx(ref["gate"], rel=1e-9)
    # the clustered power is lower than the one that treats the problems as independent
    assert cl["mde_pp"] > p["mde_pp"] and cl["gate_1b_pass_power_at_win_threshold"] < p[
        "gate_1b_pass_power_at_win_threshold"]


def test_plan_power_of_a_clustered_set_not_there_yet_is_assumed_or_unknown(tmp_path, capsys):
    cl = _clustered_plan(tmp_path / "a", capsys, with_file=False, baseline={"cluster_size": 10})["clustered"]
    ref = _reference(1000, cl["discordance"], 10.0, 100)    # ICC unset: 1, the worst case: DEFF = m
    assert cl["clusters_from"].startswith("assumed") and cl["icc_from"].startswith("worst case")
    assert cl["n_clusters"] == 100 and cl["mde_pp"] == pytest.approx(ref["mde_pp"], rel=1e-9)
    cl = _clustered_plan(tmp_path / "b", capsys, with_file=False, baseline={})["clustered"]
    assert cl["mde_pp"] is None and "unknown until the set's file is there" in cl["note"]
