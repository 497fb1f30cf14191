"""The statistics beyond 0/1 (rlexp.stats.mean_score_comparison) against reference implementations, and the
compare options around them (--mean-score, --cluster on records, --paired-out limits, letters)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from rlexp.cli import main
from rlexp.stats import mean_score_comparison, paired_bootstrap_ci

INSPECT = Path(__file__).parent / "data" / "interop" / "inspect"


def test_mean_score_against_scipy_and_by_hand():
    base = [0.0, 0.5, 1.0, 0.25, 0.75, 0.5, 0.0, 1.0]
    new = [0.5, 0.5, 1.0, 0.75, 1.0, 0.25, 0.5, 1.0]
    d = np.array(new) - np.array(base)
    out = mean_score_comparison(base, new, resamples=4000, seed=1)
    ref = sps.ttest_rel(new, base)
    assert out["delta"] == pytest.approx(0.1875) and out["delta_pp"] == pytest.approx(18.75)
    assert out["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(8))
    assert out["t"] == pytest.approx(ref.statistic) and out["p_value"] == pytest.approx(ref.pvalue)
    assert (out["items_improved"], out["items_worse"], out["df"]) == (4, 1, 7)
    assert out["mde"] == pytest.approx((1.959964 + 0.841621) * out["se"], rel=1e-5)


def test_bootstrap_percentile_and_bca_against_scipy():
    rng = np.random.default_rng(0)
    d = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], p=[0.1, 0.1, 0.5, 0.15, 0.15], size=200)
    ref = sps.bootstrap((d,), np.mean, n_resamples=20_000, method="percentile", rng=np.random.default_rng(5))
    lo, hi = paired_bootstrap_ci(d, resamples=20_000, seed=3, confidence=0.95, method="percentile")
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.01)
    lo_bca, hi_bca = paired_bootstrap_ci(d, resamples=5_000, seed=3, confidence=0.95, method="bca")
    assert lo_bca < d.mean() < hi_bca and abs(lo_bca - lo) < 0.03
    lo_basic, hi_basic = paired_bootstrap_ci(d, resamples=20_000, seed=3, confidence=0.95, method="basic")
    assert (lo_basic, hi_basic) == pytest.approx((2 * d.mean() - hi, 2 * d.mean() - lo))


def test_constant_differences_have_no_spread():
    out = mean_score_comparison([0.2, 0.4, 0.6], [0.3, 0.5, 0.7], resamples=200)
    assert out["se"] == 0 and out["p_value"] == 0.0 and out["ci"] == pytest.approx([0.1, 0.1])
    assert out["t"] is None and out["mde"] is None


def write_records(path: Path, ys: list[int], buckets: list[str]) -> Path:
    path.write_text("".join(json.dumps({"problem_hash": f"h{i}", "correct": y, "bucket": b}) + "\n"
                            for i, (y, b) in enumerate(zip(ys, buckets, strict=True))))
    return path


def test_mean_score_option_and_cluster_on_rlexp_records(tmp_path, capsys):
    rng = np.random.default_rng(2)
    base = [int(x) for x in rng.integers(0, 2, 60)]
    new = [int(x) for x in rng.integers(0, 2, 60)]
    buckets = [f"b{i % 7}" for i in range(60)]
    a, b = write_records(tmp_path / "a.jsonl", base, buckets), write_records(tmp_path / "b.jsonl", new, buckets)
    assert main(["compare", str(a), str(b), "--json", "--mean-score", "--cluster", "bucket", "--resamples", "500"]) == 0
    out = json.loads(capsys.readouterr().out)
    # with --cluster the item-level t-test is kept as p_value_naive; p_value is the clustered one (CR1, G - 1 df)
    assert out["mode"] == "mean-score" and out["p_value_naive"] == pytest.approx(sps.ttest_rel(new, base).pvalue)
    d = np.array(new, float) - np.array(base, float)
    sums = {}
    for x, g in zip(d - d.mean(), buckets, strict=True):
        sums[g] = sums.get(g, 0.0) + x
    assert out["n_clusters"] == 7
    assert out["se_clustered"] == pytest.approx(math.sqrt(sum(v * v for v in sums.values())) / 60)
    assert out["sources"]["base"]["format"] == "rlexp"
    # --paired-out needs 0/1 scores compared in the binary mode, two files
    assert main(["compare", str(a), str(b), "--mean-score", "--paired-out", str(tmp_path / "p.jsonl")]) == 2
    assert "--paired-out" in capsys.readouterr().err and not (tmp_path / "p.jsonl").exists()
    assert main(["compare", str(a), str(b), str(b), "--paired-out", str(tmp_path / "p.jsonl")]) == 2
    capsys.readouterr()
    assert main(["compare", str(a)]) == 2
    assert "at least one file" in capsys.readouterr().err


def test_letters_partial_and_no_answer_in_an_inspect_log(tmp_path, capsys):
    """A copy of a real Inspect .json log with some C/I values turned into P (partial, 0.5) and N
    (no answer, counted as 0 and reported): the partial credit switches to the mean-score mode."""
    log = json.loads((INSPECT / "model_a.json").read_text())
    for sample, letter in zip(log["samples"][:4], ["P", "P", "N", "N"], strict=False):
        sample["scores"]["match"]["value"] = letter
    edited = tmp_path / "letters.json"
    edited.write_text(json.dumps(log))
    assert main(["compare", str(INSPECT / "model_a.json"), str(edited), "--scorer", "match", "--json",
                 "--resamples", "500"]) == 0
    out = json.loads(capsys.readouterr().out)
    original = {s["id"]: {"C": 1.0, "I": 0.0}[s["scores"]["match"]["value"]]
                for s in json.loads((INSPECT / "model_a.json").read_text())["samples"]}
    changed = dict(original)
    for sample_id, value in zip(list(original)[:4], [0.5, 0.5, 0.0, 0.0], strict=True):
        changed[sample_id] = value
    assert out["mode"] == "mean-score" and out["sources"]["new"]["no_answer_counted_as_0"] == 2
    assert out["mean_new"] == pytest.approx(sum(changed.values()) / 20)
    assert out["delta"] == pytest.approx((sum(changed.values()) - sum(original.values())) / 20)


def _size_of_cr1_test(sizes: list[int], studies: int, seed: int) -> float:
    from rlexp.stats import clustered_se

    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes)), sizes).tolist()
    rejected = 0
    for _ in range(studies):
        d = rng.normal(size=len(sizes))[labels] + rng.normal(size=len(labels))  # cluster + item effects, true Δ = 0
        res = clustered_se([0.0] * len(labels), list(d), labels, unit=False)
        rejected += res["p_clustered"] < 0.05
    return rejected / studies


def test_cr1_t_test_holds_its_level_with_equal_clusters_and_over_rejects_with_few_unequal_ones():
    # with equal-size clusters the CR1 t-statistic with G - 1 df is the one-sample t on the cluster means: exact
    studies = 2000
    mc = 3 * math.sqrt(0.05 * 0.95 / studies)  # three Monte-Carlo standard errors
    assert abs(_size_of_cr1_test([4] * 5, studies, seed=3) - 0.05) < mc
    # half the clusters of 2 items, half of 8 (the design behind CLUSTER_WARN_BELOW): above 5% at G = 6
    assert _size_of_cr1_test([2, 2, 2, 8, 8, 8], studies, seed=4) > 0.05 + mc / 3


def test_binary_scores_with_cluster_use_the_clustered_p_and_keep_mcnemar(tmp_path, capsys):
    import statsmodels.api as sm

    rng = np.random.default_rng(0)
    base = [int(x) for x in rng.random(200) < 0.6]
    new = [int(x) for x in rng.random(200) < 0.7]
    buckets = [f"g{i % 12}" for i in range(200)]
    a, b = write_records(tmp_path / "a.jsonl", base, buckets), write_records(tmp_path / "b.jsonl", new, buckets)
    assert main(["compare", str(a), str(b), "--json", "--cluster", "bucket", "--resamples", "500"]) == 0
    out = json.loads(capsys.readouterr().out)
    d = np.array(new, float) - np.array(base, float)
    codes = np.unique(buckets, return_inverse=True)[1]
    fit = sm.OLS(d, np.ones(len(d))).fit(cov_type="cluster", cov_kwds={"groups": codes, "use_correction": True},
                                         use_t=True)
    assert out["mode"] == "binary" and out["n_clusters"] == 12 and out["cluster_df"] == 11
    assert out["p_value"] == pytest.approx(float(fit.pvalues[0]))
    assert out["ci_pp"] == pytest.approx([100 * float(x) for x in fit.conf_int()[0]])
    assert out["mcnemar_p"] == out["p_value_naive"]  # McNemar kept, as the items-independent test
    assert any("only 12 clusters" in w for w in out["warnings"])
    # Gate-1b's figures come from the same clustered test as the power beside them (statsmodels' CR1 SE,
    # scipy's noncentral t written out here): a pass needs Δ ≥ 3pp and the clustered p < 0.05
    se_pp, df = 100 * float(fit.bse[0]), 11
    cut = max(3.0 / se_pp, sps.t.ppf(0.975, df))
    assert out["gate_1b_pass_power_at_3pp"] == pytest.approx(sps.nct.sf(cut, df, 3.0 / se_pp), rel=1e-6)
    assert out["gate_1b_pass_power_at_3pp"] <= out["power_at_3pp"]   # a Gate-1b pass is a clustered rejection
    assert sps.nct.sf(cut, df, out["gate_1b_effect_80_pp"] / se_pp) == pytest.approx(0.8, abs=1e-5)
    best = out["gate_1b_best_of_k_at_3pp"]["rates"]
    assert all(out["gate_1b_pass_power_at_3pp"] <= r <= 1 - (1 - out["gate_1b_pass_power_at_3pp"]) ** 3 + 1e-9
               for r in best)   # between one checkpoint and three independent ones
    assert out["gate_1b_pass_power_at_3pp_naive"] != out["gate_1b_pass_power_at_3pp"]
