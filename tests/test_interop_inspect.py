"""Inspect AI logs written by Inspect itself (tests/data/interop/inspect, made by
scripts/make-harness-fixtures with Inspect's mock model): what rlexp reads equals what Inspect
computed; the mean-score mode agrees with a direct computation on a multi-epoch log."""

from __future__ import annotations

import builtins
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.evaluation.harnesses import Choice, detect_format, inspect_log, read_items

DATA = Path(__file__).parent / "data" / "interop" / "inspect"
HARNESS = json.loads((DATA / "harness-results.json").read_text())
SAMPLES = json.loads((DATA / "sample-scores.json").read_text())  # from the EvalLog Inspect returned
needs_zstd = pytest.mark.skipif(importlib.util.find_spec("zstandard") is None,
                                reason=".eval members are zstd-compressed: needs zstandard (test extra)")
LETTER = {"C": 1.0, "I": 0.0}


def run_json(args: list[str], capsys) -> dict:
    assert main(["compare", *args, "--json", "--resamples", "2000"]) == 0
    return json.loads(capsys.readouterr().out)


def fail(args: list[str], capsys) -> str:
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


@needs_zstd
@pytest.mark.parametrize("log", ["model_a.eval", "model_a.json", "model_b.eval"])
@pytest.mark.parametrize("scorer", ["match", "includes"])
def test_accuracy_equals_what_inspect_computed(log, scorer):
    items = read_items(DATA / log, choice=Choice(scorer=scorer))
    assert detect_format(DATA / log) == "inspect"
    assert items.harness_version == HARNESS[log]["inspect_ai_version"] == "0.3.285"
    accuracy = sum(i.mean for i in items.items.values()) / len(items.items)
    assert accuracy == pytest.approx(HARNESS[log]["scores"][scorer]["accuracy"], abs=1e-12)
    assert len(items.items) == 20 and items.task == "addition"


@needs_zstd
def test_eval_and_json_of_one_run_give_the_same_items():
    a = read_items(DATA / "model_a.eval", choice=Choice(scorer="match"))
    b = read_items(DATA / "model_a.json", choice=Choice(scorer="match"))
    assert a.items == b.items


def test_json_log_needs_no_inspect_nor_zstandard(monkeypatch):
    real_import = builtins.__import__

    def no_harness(name, *args, **kwargs):
        if name.split(".")[0] in ("inspect_ai", "zstandard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_harness)
    monkeypatch.setattr(inspect_log, "use_inspect_ai", lambda: False)  # as where inspect_ai is not installed
    items = read_items(DATA / "model_a.json", choice=Choice(scorer="includes"))
    assert sum(i.mean for i in items.items.values()) / 20 == pytest.approx(HARNESS["model_a.json"]["scores"]["includes"]["accuracy"])
    with pytest.raises(InputError, match=r"zstd.*rlexp\[inspect\]"):
        read_items(DATA / "model_a.eval", choice=Choice(scorer="includes"))


def test_two_scorers_exit_2_listing_them(capsys):
    err = fail([str(DATA / "model_a.json"), str(DATA / "model_a.json")], capsys)
    assert "several scorers: includes, match" in err and "--scorer" in err and "model_a.json" in err
    err = fail([str(DATA / "model_a.json"), str(DATA / "model_a.json"), "--scorer", "exact"], capsys)
    assert "'exact' is not in this file" in err and "includes, match" in err


@needs_zstd
def test_binary_comparison_counts_match_the_logs(capsys):
    out = run_json([str(DATA / "model_a.eval"), str(DATA / "model_b.eval"), "--scorer", "match"], capsys)
    base = {s["id"]: LETTER[s["scores"]["match"]] for s in SAMPLES["model_a.eval"]}
    new = {s["id"]: LETTER[s["scores"]["match"]] for s in SAMPLES["model_b.eval"]}
    b = sum(1 for k in base if base[k] == 1 and new[k] == 0)
    c = sum(1 for k in base if base[k] == 0 and new[k] == 1)
    assert (out["mode"], out["n"], out["b"], out["c"]) == ("binary", 20, b, c)
    assert out["mcnemar_p"] == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue)
    assert out["sources"]["base"]["chosen"] == {"scorer": "match"}
    assert out["sources"]["new"]["harness"] == "inspect_ai" and out["sources"]["new"]["harness_version"] == "0.3.285"


def epoch_means(log: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for s in SAMPLES[log]:
        values.setdefault(s["id"], []).append(float(s["scores"]["closeness"]))
    assert all(len(v) == 4 for v in values.values())
    return {k: sum(v) / len(v) for k, v in values.items()}


@needs_zstd
def test_mean_score_mode_agrees_with_a_direct_computation(capsys):
    base, new = epoch_means("epochs_a.eval"), epoch_means("epochs_b.eval")
    assert sum(base.values()) / len(base) == pytest.approx(HARNESS["epochs_a.eval"]["scores"]["closeness"]["mean"])
    ids = sorted(base)
    d = np.array([new[k] - base[k] for k in ids])
    out = run_json([str(DATA / "epochs_a.eval"), str(DATA / "epochs_b.eval")], capsys)
    assert out["mode"] == "mean-score" and out["n"] == 20
    assert out["samples_per_item"]["base"] == {"min": 4, "max": 4, "mean": 4.0}
    assert out["mean_base"] == pytest.approx(HARNESS["epochs_a.eval"]["scores"]["closeness"]["mean"])
    assert out["mean_new"] == pytest.approx(HARNESS["epochs_b.eval"]["scores"]["closeness"]["mean"])
    assert out["delta"] == pytest.approx(d.mean())
    assert out["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(20))
    ttest = sps.ttest_rel([new[k] for k in ids], [base[k] for k in ids])
    assert out["t"] == pytest.approx(ttest.statistic) and out["p_value"] == pytest.approx(ttest.pvalue)
    lo, hi = out["ci"]
    assert lo < d.mean() < hi
    # the percentile bootstrap of a mean is close to the normal interval at n = 20
    assert lo == pytest.approx(d.mean() - 1.96 * d.std(ddof=0) / math.sqrt(20), abs=0.02)


@needs_zstd
def test_cluster_robust_se_against_the_formula(capsys):
    base, new = epoch_means("epochs_a.eval"), epoch_means("epochs_b.eval")
    group = {s["id"]: s["group"] for s in SAMPLES["epochs_a.eval"]}
    ids = sorted(base)
    d = np.array([new[k] - base[k] for k in ids])
    resid = d - d.mean()
    sums: dict[str, float] = {}
    for k, r in zip(ids, resid, strict=True):
        sums[group[k]] = sums.get(group[k], 0.0) + r
    expected = math.sqrt(sum(v * v for v in sums.values())) / len(ids)
    out = run_json([str(DATA / "epochs_a.eval"), str(DATA / "epochs_b.eval"), "--cluster", "group"], capsys)
    assert out["n_clusters"] == 5 and out["se_clustered"] == pytest.approx(expected)
    err = fail([str(DATA / "epochs_a.eval"), str(DATA / "epochs_b.eval"), "--cluster", "topic"], capsys)
    assert "'topic'" in err and "group" in err


@needs_zstd
def test_errored_sample_exit_2_or_dropped_with_intersect(capsys):
    bad = [s["id"] for s in SAMPLES["errored.eval"] if s["error"]]
    assert bad == ["q01"]
    err = fail([str(DATA / "model_a.eval"), str(DATA / "errored.eval"), "--scorer", "match"], capsys)
    assert "errored.eval" in err and "addition:q01" in err and "errored sample" in err
    # --scorer match names the only scorer of errored.eval too
    out = run_json([str(DATA / "model_a.eval"), str(DATA / "errored.eval"), "--scorer", "match", "--intersect"], capsys)
    assert out["n"] == 19
    errored = [d for d in out["dropped"] if d["file"] == str(DATA / "errored.eval") and "only in" not in d["reason"]]
    assert errored == [{"file": str(DATA / "errored.eval"), "key": "addition:q01",
                        "reason": "addition:q01 epoch 1: errored sample (RuntimeError('scripted failure for this sample'))"}]
    assert {"file": str(DATA / "model_a.eval"), "key": "addition:q01", "reason": "only in the baseline"} in out["dropped"]
    new_items = read_items(DATA / "errored.eval", intersect=True)
    acc = sum(i.mean for i in new_items.items.values()) / len(new_items.items)
    assert acc == pytest.approx(HARNESS["errored.eval"]["scores"]["match"]["accuracy"])


@needs_zstd
def test_partial_log_exit_2_or_noted_with_intersect(capsys):
    assert HARNESS["partial.eval"]["status"] == "error"
    err = fail([str(DATA / "model_a.eval"), str(DATA / "partial.eval"), "--scorer", "match"], capsys)
    assert "partial log" in err and "'error'" in err
    items = read_items(DATA / "partial.eval", choice=Choice(scorer="match"), intersect=True)
    assert any("partial log" in n for n in items.notes)
    assert set(items.items) == {f"addition:{s['id']}" for s in SAMPLES["partial.eval"] if not s["error"] and s["scores"]}


@needs_zstd
def test_several_models_holm_adjusted(capsys):
    from statsmodels.stats.multitest import multipletests

    out = run_json([str(DATA / "model_a.eval"), str(DATA / "model_b.eval"), str(DATA / "model_a.json"),
                    "--scorer", "includes"], capsys)
    assert out["family"] == {"adjustment": "holm", "m": 2}
    ps = [c["p_value"] for c in out["comparisons"]]
    assert ps[1] == 1.0  # the same run read as .json: b = c = 0
    expected = multipletests(ps, method="holm")[1]
    assert [c["p_holm"] for c in out["comparisons"]] == pytest.approx(list(expected))


def statsmodels_cluster_fit(d: np.ndarray, groups: list[str]):
    import statsmodels.api as sm

    codes = np.unique(groups, return_inverse=True)[1]
    return sm.OLS(d, np.ones(len(d))).fit(cov_type="cluster", cov_kwds={"groups": codes, "use_correction": True},
                                          use_t=True)


@needs_zstd
def test_cluster_p_ci_and_mde_use_cr1_with_cluster_count_df(capsys):
    base, new = epoch_means("epochs_a.eval"), epoch_means("epochs_b.eval")
    group = {s["id"]: s["group"] for s in SAMPLES["epochs_a.eval"]}
    ids = sorted(base)
    d = np.array([new[k] - base[k] for k in ids])
    fit = statsmodels_cluster_fit(d, [group[k] for k in ids])  # the reference: statsmodels, CR1, t with G - 1 df
    out = run_json([str(DATA / "epochs_a.eval"), str(DATA / "epochs_b.eval"), "--cluster", "group"], capsys)
    assert out["n_clusters"] == 5 and out["cluster_df"] == 4
    assert out["se_clustered_cr1"] == pytest.approx(float(fit.bse[0]))
    assert out["p_value"] == pytest.approx(float(fit.pvalues[0])) and 0.025 < out["p_value"] < 0.035
    assert out["p_value_naive"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue) and out["p_value_naive"] < 0.001
    assert out["ci"] == pytest.approx([float(x) for x in fit.conf_int()[0]])
    se = float(fit.bse[0])
    assert out["mde"] == pytest.approx((sps.t.ppf(0.975, 4) + sps.t.ppf(0.8, 4)) * se)
    assert any("only 5 clusters" in w for w in out["warnings"])
    assert main(["compare", str(DATA / "epochs_a.eval"), str(DATA / "epochs_b.eval"), "--cluster", "group",
                 "--resamples", "500"]) == 0
    text = capsys.readouterr().out
    assert "clusters (group)" in text and "0.0287" in text and "only 5 clusters" in text
