"""Newcombe's hybrid score interval for the paired difference, and the many-tables bootstrap.

Reference values: Newcombe RG (1998), "Improved confidence intervals for the difference between
binomial proportions based on paired data", Statistics in Medicine 17:2635-2650, Table II, method 10
(95% limits, four decimals). Its tables are given as (e, f, g, h) = (both positive, first only,
second only, both negative) with the difference (f - g) / n; here the first is the new model, so
n11 = e, c = f, b = g, n00 = h. The same four examples and limits are the reference values of the
tests of the R package propint (``ci.two.dep.props``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlexp import stats
from rlexp.cli import main

NEWCOMBE_1998_TABLE_II = [  # (e, f, g, h), (low, high)
    ((36, 12, 2, 0), (0.0569, 0.3404)),
    ((18, 12, 2, 18), (0.0562, 0.3290)),
    ((53, 0, 0, 1), (-0.0729, 0.0729)),
    ((0, 30, 0, 0), (0.8395, 1.0000)),
]


@pytest.mark.parametrize(("table", "limits"), NEWCOMBE_1998_TABLE_II)
def test_newcombe_method_10_reproduces_the_published_limits(table, limits):
    e, f, g, h = table
    ci = stats.newcombe_paired_ci(stats.PairedCounts(n11=e, b=g, c=f, n00=h))
    assert (round(ci.low, 4), round(ci.high, 4)) == limits
    low, high = stats.newcombe_paired_ci_arrays(np.array([e]), np.array([g]), np.array([f]), np.array([h]))
    assert (float(low[0]), float(high[0])) == (ci.low, ci.high)


def test_newcombe_is_antisymmetric_and_holds_the_estimate():
    rng = np.random.default_rng(0)
    n11, b, c, n00 = rng.integers(0, 40, (4, 500))
    n11[0] = 1  # one table with a single pair in all
    b[0] = c[0] = n00[0] = 0
    low, high = stats.newcombe_paired_ci_arrays(n11, b, c, n00, 0.9)
    swapped_low, swapped_high = stats.newcombe_paired_ci_arrays(n11, c, b, n00, 0.9)
    assert swapped_low == pytest.approx(-high, abs=1e-12) and swapped_high == pytest.approx(-low, abs=1e-12)
    delta = (c - b) / (n11 + b + c + n00)
    assert np.all((low <= delta + 1e-12) & (delta - 1e-12 <= high)) and np.all((low >= -1) & (high <= 1))
    wider_low, wider_high = stats.newcombe_paired_ci_arrays(n11, b, c, n00, 0.99)
    assert np.all(wider_low <= low + 1e-12) and np.all(wider_high >= high - 1e-12)
    with pytest.raises(ValueError):
        stats.newcombe_paired_ci_arrays(0, 0, 0, 0)


def test_compare_counts_with_newcombe():
    counts = stats.PairedCounts(n11=677, b=61, c=57, n00=205)
    cmp = stats.compare_counts(counts, method="newcombe")
    ci = stats.newcombe_paired_ci(counts)
    assert cmp.ci_method == "newcombe" and cmp.ci_pp == pytest.approx((100 * ci.low, 100 * ci.high), abs=1e-12)
    # the bootstrap standard deviation is still the seeded bootstrap's
    assert cmp.bootstrap_se_pp == stats.compare_counts(counts).bootstrap_se_pp
    with pytest.raises(ValueError, match="method"):
        stats.compare_counts(counts, method="wald")


@pytest.mark.parametrize("method", ["percentile", "bca", "basic"])
def test_bootstrap_many_equals_one_at_a_time(method):
    pairs = [(0, 0), (0, 3), (3, 0), (61, 57), (57, 61), (40, 75), (41, 74), (5, 9)]
    many = stats.bootstrap_delta_ci_many(pairs + [(61, 57)], 1000, resamples=2000, seed=3, method=method)
    assert set(many) == set(pairs)
    for b, c in pairs:
        assert many[(b, c)] == stats.bootstrap_delta_ci(b, c, 1000, resamples=2000, seed=3, method=method).ci_pp


def coverage_with_few_discordant_pairs(method: str, tables: int = 20_000) -> float:
    """Share of nominal 95% intervals holding the true difference 0 when about 10 of N=1000 pairs are
    discordant (P(b) = P(c) = 0.005, baseline accuracy 0.70); the bootstrap as decide computes it."""
    rng = np.random.default_rng(2)
    n11, b, c, n00 = rng.multinomial(1000, [0.695, 0.005, 0.005, 0.295], size=tables).T
    if method == "newcombe":
        low, high = stats.newcombe_paired_ci_arrays(n11, b, c, n00)
        return float(np.mean((low <= 1e-12) & (high >= -1e-12)))
    keys = list(zip(b.tolist(), c.tolist(), strict=True))
    ci = stats.bootstrap_delta_ci_many(keys, 1000, method=method)
    return float(np.mean([ci[k][0] <= 1e-9 and ci[k][1] >= -1e-9 for k in keys]))


def test_coverage_with_about_ten_discordant_pairs():
    # Monte-Carlo s.e. of each coverage: about 0.15%. The measured figures (sop/README.md):
    # BCa 92.8%, percentile 95.7%, Newcombe 96.5% with 100,000 tables.
    bca = coverage_with_few_discordant_pairs("bca")
    newcombe = coverage_with_few_discordant_pairs("newcombe")
    assert newcombe >= 0.95
    assert bca < 0.94  # the under-coverage the warning is about
    assert newcombe > bca + 0.02


def test_compare_cli_newcombe_and_the_bca_warning_names_it(tmp_path, capsys):
    def write(path, ys):
        path.write_text("".join(json.dumps({"problem_hash": f"h{i}", "correct": y}) + "\n" for i, y in enumerate(ys)))
        return path

    base = write(tmp_path / "b.jsonl", [1] * 40 + [1] * 3 + [0] * 7 + [0] * 50)
    new = write(tmp_path / "n.jsonl", [1] * 40 + [0] * 3 + [1] * 7 + [0] * 50)
    assert main(["compare", str(base), str(new), "--json", "--method", "newcombe"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = stats.newcombe_paired_ci(stats.PairedCounts(40, 3, 7, 50))
    assert out["ci_method"] == "newcombe" and out["ci_pp"] == pytest.approx([100 * ref.low, 100 * ref.high])
    assert "warnings" not in out
    assert main(["compare", str(base), str(new), "--method", "newcombe"]) == 0
    assert "Newcombe hybrid score 95% CI" in capsys.readouterr().out
    assert main(["compare", str(base), str(new), "--json", "--method", "bca"]) == 0
    assert "--method newcombe" in json.loads(capsys.readouterr().out)["warnings"][0]
    assert main(["compare", str(base), str(new), "--method", "newcombe", "--mean-score"]) == 2
    assert "--method" in capsys.readouterr().err


def test_an_sop_may_choose_newcombe_and_the_rules_name_it(tmp_path, capsys):
    from rlexp.errors import InputError
    from rlexp.protocol import gates
    from rlexp.spec.sop import DEFAULT_SOP, load_sop

    text = DEFAULT_SOP.read_text()
    assert "  method: percentile" in text
    path = tmp_path / "sop-newcombe.yaml"
    path.write_text(text.replace("  method: percentile", "  method: newcombe"))
    sop = load_sop(path)
    assert sop.bootstrap.method == "newcombe"
    assert "Newcombe CI low > -0.5pp" in gates.gate_1a_rule(sop)
    assert "bootstrap CI low" in gates.gate_1b_rule(load_sop())
    cmp = stats.paired_comparison([1] * 40 + [1] * 3 + [0] * 7 + [0] * 50, [1] * 40 + [0] * 3 + [1] * 7 + [0] * 50,
                                  method=sop.bootstrap.method)
    assert cmp.ci_method == "newcombe"
    assert main(["sop", "calibrate", "--sop", str(path), "--sims", "200", "--correlation", "0.6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ci_method"] == "newcombe"
    path.write_text(text.replace("  method: percentile", "  method: wald"))
    with pytest.raises(InputError, match="bootstrap.method"):
        load_sop(path)


def test_newcombe_arrays_broadcast_a_scalar_with_arrays():
    # as the docstring says: one shared n11 and n00 against arrays of b and c, each row equal to the scalar call
    b, c = np.array([2, 3, 0]), np.array([12, 5, 1])
    low, high = stats.newcombe_paired_ci_arrays(36, b, c, 0)
    assert low.shape == high.shape == (3,)
    for i in range(3):
        ci = stats.newcombe_paired_ci(stats.PairedCounts(n11=36, b=int(b[i]), c=int(c[i]), n00=0))
        assert (float(low[i]), float(high[i])) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert (float(low[0]), float(high[0])) == pytest.approx((0.0569, 0.3404), abs=5e-5)  # Newcombe (1998) (a)
    with pytest.raises(ValueError):
        stats.newcombe_paired_ci_arrays(36, np.array([2, -1]), 12, 0)
