"""The SOP's gates at, just below and just above every threshold; the example attempts' history replayed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.protocol import gates
from rlexp.spec.sop import DEFAULT_SOP, load_sop
from rlexp.stats import paired_comparison

SOP = load_sop()


@dataclass(frozen=True)
class Cmp:
    delta_pp: float
    mcnemar_p: float
    ci_pp: tuple[float, float] | None


def sop_with(tmp_path: Path, section: str, key: str, value) -> object:
    data = yaml.safe_load(DEFAULT_SOP.read_text())
    data[section][key] = value
    data["version"] = "test"
    path = tmp_path / "sop-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_sop(path)


# --------------------------------------------------------------------------- Gate-1a


@pytest.mark.parametrize(("delta", "passed"), [(2.0, True), (1.9, False), (2.1, True), (1.999999, False)])
def test_gate_1a_delta_threshold(delta, passed):
    assert gates.gate_1a(Cmp(delta, 0.01, (0.5, 4.0)), SOP).passed is passed


@pytest.mark.parametrize(("p", "passed"), [(0.10, False), (0.0999, True), (0.1001, False)])
def test_gate_1a_mcnemar_branch(p, passed):
    # CI branch fails (low -1.0 <= -0.5), so only p decides
    assert gates.gate_1a(Cmp(2.5, p, (-1.0, 5.0)), SOP).passed is passed


@pytest.mark.parametrize(("low", "passed"), [(-0.5, False), (-0.49, True), (-0.51, False)])
def test_gate_1a_ci_branch(low, passed):
    # McNemar branch fails (p = 0.2), so only the CI decides
    verdict = gates.gate_1a(Cmp(2.5, 0.2, (low, 5.0)), SOP)
    assert verdict.passed is passed
    assert verdict.numbers["ci_ok"] is passed
    assert "Gate-1a" in verdict.rule and "+2.0pp" in verdict.rule and "0.1" in verdict.rule


def test_gate_1a_float_rounding_of_delta_counts_as_at_threshold():
    # 20 of 1000 net wins is +2.0pp; however (c - b) / n rounds, it must pass
    assert gates.gate_1a(Cmp(100.0 * (0.07 - 0.05), 0.05, None), SOP).passed


# --------------------------------------------------------------------------- Gate-1b


@pytest.mark.parametrize(("delta", "passed"), [(3.0, True), (2.9, False), (3.1, True)])
def test_gate_1b_delta_threshold(delta, passed):
    assert gates.gate_1b(Cmp(delta, 0.01, (0.5, 6.0)), SOP).passed is passed


@pytest.mark.parametrize(("p", "passed"), [(0.05, False), (0.0499, True), (0.0501, False)])
def test_gate_1b_p_threshold(p, passed):
    assert gates.gate_1b(Cmp(3.5, p, (0.5, 6.0)), SOP).passed is passed


@pytest.mark.parametrize(("low", "passed"), [(0.0, False), (0.01, True), (-0.01, False)])
def test_gate_1b_ci_threshold(low, passed):
    assert gates.gate_1b(Cmp(3.5, 0.01, (low, 6.0)), SOP).passed is passed


def test_gate_1b_without_ci_skips_the_ci_clause():
    verdict = gates.gate_1b(Cmp(3.5, 0.01, None), SOP)
    assert verdict.passed and "CI clause skipped" in verdict.notes[0]


def test_thresholds_come_from_the_sop_file(tmp_path):
    looser = sop_with(tmp_path, "gate_1b", "min_delta_pp", 2.5)
    cmp = Cmp(2.7, 0.01, (0.5, 5.0))
    assert not gates.gate_1b(cmp, SOP).passed
    assert gates.gate_1b(cmp, looser).passed
    assert "+2.5pp" in gates.gate_1b(cmp, looser).rule
    stricter = sop_with(tmp_path, "early_stop", "patience_evals", 2)
    flat = [(10 * i, 0.5) for i in range(1, 7)]
    assert gates.early_stop(flat, stricter).numbers["stop_step"] == 50
    assert not gates.early_stop(flat, SOP).passed


# --------------------------------------------------------------------------- Holm over K


def test_holm_adjust_by_hand():
    # sorted p: 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.06, 0.04) = 0.06
    assert gates.holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert gates.holm_adjust([]) == []


def test_family_gates_report_per_checkpoint_and_holm():
    comps = {"global_step100": Cmp(3.2, 0.03, (0.3, 6.0)), "global_step200": Cmp(0.5, 0.7, (-1.5, 2.5)),
             "global_step130": Cmp(1.0, 0.4, (-1.0, 3.0))}
    fam = gates.family_gates(comps, SOP)
    assert fam.gate_1b["global_step100"].passed  # p = 0.03 < 0.05 alone
    assert fam.holm_p["global_step100"] == pytest.approx(0.09)
    assert not fam.gate_1b_holm["global_step100"].passed  # 0.09 >= 0.05 after Holm
    assert fam.any_passed("gate_1b", holm=False) and not fam.any_passed("gate_1b", holm=True)
    assert fam.any_passed("gate_1a", holm=True)  # the CI branch (0.3 > -0.5) is not adjusted


# --------------------------------------------------------------------------- Gate-2 and the ID guardrail


@pytest.mark.parametrize(("deltas", "passed"), [
    ([3.0, 3.0], True), ([2.9, 3.1], True), ([2.9, 3.0], False), ([0.0, 6.0], False),
    ([0.01, 5.99], True), ([-0.1, 7.0], False), ([3.5], False),
])
def test_gate_2_seeds(deltas, passed):
    assert gates.gate_2(deltas, 0.0, SOP).passed is passed


def test_gate_2_gold():
    assert gates.gate_2([4.0, 4.0], 0.0, SOP).numbers["gold"] is True
    assert gates.gate_2([3.9, 4.0], 0.0, SOP).numbers["gold"] is False


@pytest.mark.parametrize(("id_delta", "mean_ood", "passed", "relaxed"), [
    (-3.0, 3.5, True, False), (-3.1, 3.5, False, False), (-2.9, 3.5, True, False),
    (-5.0, 6.0, True, True), (-5.1, 6.0, False, True), (-3.1, 5.9, False, False), (-4.0, 6.1, True, True),
])
def test_id_guardrail(id_delta, mean_ood, passed, relaxed):
    verdict = gates.id_guardrail(id_delta, mean_ood, SOP)
    assert verdict.passed is passed and verdict.numbers["relaxed"] is relaxed
    if relaxed:
        assert "reported explicitly" in verdict.notes[0]


def test_gate_2_needs_id_guardrail():
    assert not gates.gate_2([3.5, 3.5], -3.5, SOP).passed
    missing = gates.gate_2([3.5, 3.5], None, SOP)
    assert not missing.passed and "ID" in missing.notes[0]


# --------------------------------------------------------------------------- STOP-3a / 3b / gray zone


def outcome(attempt, parent, delta, ci=(-1.0, 1.5), pool="P1", changed=("eps_clip",), recipe="R", size=3200, p=0.5):
    return gates.AttemptOutcome(attempt, parent, tuple(changed), pool, delta, ci, p, recipe, size, None, 42)


@pytest.mark.parametrize(("delta", "flat"), [(0.99, True), (1.0, False), (1.01, False), (-2.0, True)])
def test_flatness_threshold(delta, flat):
    assert gates.is_flat(delta, (-1.5, 2.5), 0.5, SOP) is flat


def test_flatness_needs_ci_to_include_zero():
    assert not gates.is_flat(0.5, (0.1, 0.9), 0.01, SOP)
    assert not gates.is_flat(-0.5, (-0.9, -0.1), 0.01, SOP)
    assert gates.is_flat(0.5, (0.0, 1.0), 0.01, SOP)  # the CI touches 0: includes it
    # no CI: McNemar not significant (p >= 0.05) stands in
    assert gates.is_flat(0.5, None, 0.05, SOP) and not gates.is_flat(0.5, None, 0.049, SOP)


def test_stop_3a():
    parent = outcome("a30", "a29", 0.2)
    assert gates.stop_3a(outcome("a31", "a30", -0.4), [parent], SOP).passed
    assert not gates.stop_3a(outcome("a31", "a30", 1.0), [parent], SOP).passed          # not flat
    assert not gates.stop_3a(outcome("a31", "a30", 0.1, pool="P2"), [parent], SOP).passed  # pool changed
    assert not gates.stop_3a(outcome("a31", "a30", 0.1, changed=("lr", "kl")), [parent], SOP).passed
    lone = gates.stop_3a(outcome("a31", "zz", 0.1), [parent], SOP)
    assert not lone.passed and "not in the ledger" in lone.notes[0]


def test_stop_3b():
    a = outcome("p1", "root", 0.3, pool="P1")
    assert gates.stop_3b(outcome("p2", "root", -0.2, pool="P2"), [a], SOP).passed
    assert not gates.stop_3b(outcome("p2", "root", -0.2, pool="P1"), [a], SOP).passed       # same pool
    assert not gates.stop_3b(outcome("p2", "root", -0.2, pool="P2", size=6400), [a], SOP).passed
    assert not gates.stop_3b(outcome("p2", "root", -0.2, pool="P2", recipe="R2"), [a], SOP).passed
    assert not gates.stop_3b(outcome("p2", "root", 1.2, pool="P2"), [a], SOP).passed


@pytest.mark.parametrize(("delta", "inside"), [(0.99, False), (1.0, True), (2.99, True), (3.0, False)])
def test_gray_zone(delta, inside):
    assert gates.gray_zone(delta, SOP).passed is inside


# --------------------------------------------------------------------------- early stop


def test_smoothing_equals_pandas_rolling_mean():
    import pandas as pd

    values = [0.61, 0.64, 0.62, 0.66, 0.65, 0.63, 0.67, 0.60]
    points = [(10 * (i + 1), v) for i, v in enumerate(values)]
    ours = [v for _, v in gates.smooth(points, 3)]
    ref = pd.Series(values).rolling(3).mean().tolist()
    assert ours[:2] == [None, None]
    assert ours[2:] == pytest.approx(ref[2:])


def plateau(n_after: int, last: float = 0.5) -> list[tuple[int, float]]:
    return [(10 * (i + 1), 0.5) for i in range(3 + n_after - 1)] + [(10 * (3 + n_after), last)]


@pytest.mark.parametrize(("evals_after_best", "stop"), [(4, False), (5, True), (6, True)])
def test_early_stop_patience(evals_after_best, stop):
    verdict = gates.early_stop(plateau(evals_after_best), SOP)
    assert verdict.passed is stop
    assert verdict.numbers["best_step"] == 30
    if stop:
        assert verdict.numbers["stop_step"] == 80  # the 5th eval after the first full window at step 30


def test_early_stop_min_improvement_exactly_one_pp_resets_patience():
    # a jump of 0.03 at one point raises the 3-point mean by exactly 1.0pp -> new best, patience resets
    points = [(10, 0.5), (20, 0.5), (30, 0.5), (40, 0.5), (50, 0.5), (60, 0.5), (70, 0.5), (80, 0.53)]
    verdict = gates.early_stop(points, SOP)
    assert not verdict.passed and verdict.numbers["best_step"] == 80
    # 0.029 raises it by 0.97pp: noise, and the 5th eval without a real gain stops the run
    below = gates.early_stop(points[:-1] + [(80, 0.529)], SOP)
    assert below.passed and below.numbers["best_step"] == 30


def test_early_stop_small_gains_do_not_move_the_best():
    # +0.15pp per eval: 5 evals add only +0.75pp over the best, so the rule stops
    points = [(10 * (i + 1), 0.5 + 0.0015 * i) for i in range(9)]
    verdict = gates.early_stop(points, SOP)
    assert verdict.passed


def test_early_stop_rejects_bad_points():
    for bad in ([(10, 1.2)], [(10, float("nan"))], [(10, "0.5")], [(10, 0.5), (10, 0.6)], [(-1, 0.5)], [(1.5, 0.5)]):
        with pytest.raises(InputError) as err:
            gates.early_stop(bad, SOP)
        assert "monitor_points" in err.value.field
    few = gates.early_stop([(10, 0.5), (20, 0.6)], SOP)
    assert not few.passed and "fewer than" in few.reason


def test_early_stop_sorts_points_and_counts_evals_not_steps():
    shuffled = list(reversed(plateau(5)))
    assert gates.early_stop(shuffled, SOP).passed
    gappy = [(10, 0.5), (20, 0.5), (30, 0.5), (70, 0.5), (80, 0.5), (150, 0.5), (160, 0.5)]
    assert not gates.early_stop(gappy, SOP).passed  # 4 evals after the first window, whatever the step gaps


# --------------------------------------------------------------------------- K=3 selection


def test_select_k3_basic_and_equals_pandas_argmax():
    import pandas as pd

    values = [0.60, 0.62, 0.66, 0.64, 0.60, 0.61, 0.63, 0.62, 0.60, 0.61]
    points = [(10 * (i + 1), v) for i, v in enumerate(values)]
    sel = gates.select_k3(points, 100, 50, range(10, 101, 10), SOP)
    assert sel.best_by_monitor == 40
    rolled = pd.Series(values, index=[s for s, _ in points]).rolling(3).mean()
    assert sel.best_by_monitor == int(rolled.idxmax())
    assert (sel.final, sel.mid) == (100, 50)
    assert sel.steps == [100, 50, sel.best_by_monitor]
    assert sel.to_dict()["checkpoints"] == [f"global_step{s}" for s in sel.steps]


def test_select_k3_ties_go_to_the_earliest_step():
    points = [(10, 0.5), (20, 0.6), (30, 0.7), (40, 0.5), (50, 0.6), (60, 0.7), (70, 0.5)]
    sel = gates.select_k3(points, 70, 40, [10, 20, 30, 40, 50, 60, 70], SOP)
    # smoothed 0.6 at steps 30, 60 (and 0.6 at 40, 50 too): earliest wins
    assert sel.best_by_monitor == 30
    assert any("tied" in n and "earliest" in n for n in sel.notes)


def test_select_k3_only_saved_steps_and_fallbacks():
    points = [(10 * (i + 1), v) for i, v in enumerate([0.5, 0.5, 0.5, 0.8, 0.5, 0.5, 0.5])]
    # the smoothed max is at 40..60; only 60 is saved among them (save every 20 -> 20, 40, 60)
    sel = gates.select_k3(points, 70, 50, [20, 40, 60], SOP)
    assert sel.final == 60 and any("final: step 70" in n for n in sel.notes)
    assert sel.mid == 40 and any("mid: pre-registered step 50 not saved" in n for n in sel.notes)
    assert sel.best_by_monitor == 40  # steps 40 and 60 tie at 0.6: earliest saved
    assert any("unsaved" in n for n in sel.notes)


def test_select_k3_missing_monitor_and_coincidence():
    sel = gates.select_k3([], 200, 100, [100, 200], SOP)
    assert sel.best_by_monitor is None and sel.steps == [200, 100]
    assert any("no in-run monitor points" in n for n in sel.notes)
    late = gates.select_k3([(150, 0.5), (175, 0.6), (200, 0.7)], 200, None, [100, 200], SOP)
    assert late.best_by_monitor == 200 and late.mid is None and late.steps == [200]
    assert any("coincides with final" in n for n in late.notes)
    short = gates.select_k3([(100, 0.6), (200, 0.5)], 200, 100, [100, 200], SOP)
    assert short.best_by_monitor == 100 and any("partial-window" in n for n in short.notes)
    with pytest.raises(InputError):
        gates.select_k3([], 200, 100, [], SOP)


# --------------------------------------------------------------------------- A29B and A30 (docs/plan.md) replayed


def paired(n: int, base_correct: int, b: int, c: int) -> tuple[list[int], list[int]]:
    n11 = base_correct - b
    n00 = n - n11 - b - c
    return [1] * n11 + [1] * b + [0] * c + [0] * n00, [1] * n11 + [0] * b + [1] * c + [0] * n00


def test_seed_history_no_gate_passes():
    # OOD-202 monitor, a30_step130 132/202 vs a29b_step200 127/202: the +2.5pp "win" (discordants assumed ~12%)
    probe = paired_comparison(*paired(202, 127, 10, 15))
    assert probe.delta_pp == pytest.approx(2.475, abs=0.01)
    assert not gates.gate_1a(probe, SOP).passed  # p and CI both far from the bar: not even worth a second seed
    # the same on OOD-1000, A30 checkpoints vs A29B's final (737): 735 and 736, ~12% discordant
    a30_130 = paired_comparison(*paired(1000, 737, 60, 58))
    a30_200 = paired_comparison(*paired(1000, 737, 59, 58))
    # Baseline-SOTA (a30_step130, 734) vs Baseline-S0 (738): b=61, c=57; ID-200: b=11, c=10
    sota_vs_s0 = paired_comparison(*paired(1000, 738, 61, 57))
    id_vs_s0 = paired_comparison(*paired(200, 103, 11, 10))
    assert sota_vs_s0.delta_pp == pytest.approx(-0.4) and round(sota_vs_s0.mcnemar_p, 3) == 0.783
    for cmp in (a30_130, a30_200, sota_vs_s0):
        assert not gates.gate_1a(cmp, SOP).passed
        assert not gates.gate_1b(cmp, SOP).passed
    fam = gates.family_gates({"global_step130": a30_130, "global_step200": a30_200}, SOP)
    assert not fam.any_passed("gate_1a", holm=False) and not fam.any_passed("gate_1b", holm=True)
    assert not gates.gate_2([sota_vs_s0.delta_pp], id_vs_s0.delta_pp, SOP).passed
    # A29 -> A30 (micro batch 1 -> 2, same pool) and S0 vs SOTA: both flat, so two consecutive same-pool
    # single-variable attempts without effect: STOP-3a, and the fault tree is the next step
    a30 = gates.AttemptOutcome("a30", "a29b", ("micro_train_batch_size",), "POOL", a30_130.delta_pp,
                               a30_130.ci_pp, a30_130.mcnemar_p)
    a29 = gates.AttemptOutcome("a29b", "a29", ("eps_clip",), "POOL", -0.1, (-2.2, 2.0), 0.93)
    assert gates.stop_3a(a30, [a29], SOP).passed


# --------------------------------------------------------------------------- fault tree


def test_fault_tree_a_at_threshold_and_missing_named():
    at = gates.fault_tree(gates.Diagnostics(pass_at_1=0.30, pass_at_k=0.40, k=8), SOP)
    classes = {c.cls: c for c in at.classes}
    assert classes["A"].indicated is True and at.suggestion.startswith("A)")
    below = gates.fault_tree(gates.Diagnostics(pass_at_1=0.30, pass_at_k=0.399, k=8), SOP)
    assert {c.cls: c for c in below.classes}["A"].indicated is False
    nothing = gates.fault_tree(gates.Diagnostics(), SOP)
    by = {c.cls: c for c in nothing.classes}
    assert all(c.indicated is None for c in nothing.classes) and nothing.suggestion is None
    assert set(by["A"].missing) == {"pass_at_1", "pass_at_k"}
    assert "ood_delta_pp" in by["C"].missing and "lr_final_fraction" in by["D"].missing


def test_fault_tree_c_d_b():
    c = gates.fault_tree(gates.Diagnostics(train_reward_trend_pp=1.0, ood_delta_pp=0.99, id_delta_pp=0.0), SOP)
    assert {x.cls: x for x in c.classes}["C"].indicated is True
    not_c = gates.fault_tree(gates.Diagnostics(train_reward_trend_pp=0.99, ood_delta_pp=0.0), SOP)
    assert {x.cls: x for x in not_c.classes}["C"].indicated is False
    # A30: peak at step 130 of 200 (< 75%), final LR at 0.1 x peak (< 0.5): schedule
    d = gates.fault_tree(gates.Diagnostics(peak_step=130, total_steps=200, lr_final_fraction=0.1,
                                           ood_delta_pp=-0.4, id_delta_pp=-0.5), SOP)
    by = {x.cls: x for x in d.classes}
    assert by["D"].indicated is True and by["B"].indicated is False and d.suggestion.startswith("D)")
    late = gates.fault_tree(gates.Diagnostics(peak_step=150, total_steps=200, lr_final_fraction=0.1,
                                              ratio_tail_early=1.0, ratio_tail_late=0.9,
                                              ood_delta_pp=-0.4, id_delta_pp=-0.5), SOP)
    by = {x.cls: x for x in late.classes}
    assert by["D"].indicated is False and by["B"].indicated is True and late.suggestion.startswith("B)")
    shrink = gates.fault_tree(gates.Diagnostics(ratio_tail_early=1.0, ratio_tail_late=0.49), SOP)
    assert {x.cls: x for x in shrink.classes}["D"].indicated is True
    assert set(shrink.to_dict()["classes"]) == {"A", "B", "C", "D"}
