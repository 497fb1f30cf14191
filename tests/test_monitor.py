"""In-run monitor: spike log, G3 smoke gate, G5 runtime assertions, the SOP early-stop rule.

Reference numbers are recorded from the real campaign behind the SOP (docs/plan.md tells its
attempts): the first five steps of a micro_train_batch_size 2 run, and A30's in-run OOD-202
trajectory, with the stop step worked out by hand from the early-stop rule (sop/README.md#early-stop).
"""

from __future__ import annotations

import json

import pytest

from rlexp.training import monitor

# a recorded run: step, grad norm, reward, log_ratio_abs_p99, time (step 1 is warm-up)
PROFILE = [(1, 5.16, 0.547, 1.71, 300.0), (2, 1.77, 0.352, 1.77, 125.9), (3, 39.06, 0.500, 2.09, 104.1),
           (4, 171.40, 0.398, 1.99, 114.7), (5, 7.03, 0.609, 1.89, 113.5)]

# A30's recorded OOD-202 greedy accuracy at steps 10..200 (percent)
A30_OOD = [63.4, 63.6, 66.2, 62.1, 66.1, 64.2, 63.5, 64.7, 62.8, 66.4, 64.4, 62.9, 66.5, 63.9, 65.3, 65.7,
           64.2, 65.2, 64.7, 65.5]


def profile_rows():
    return [{"global_step": s, "grad_norm": g, "reward": r, "log_ratio_abs_p99": p, "step_time_s": t}
            for s, g, r, p, t in PROFILE]


def test_spikes_and_stability_on_the_seed_profile():
    st = monitor.stability(profile_rows())
    assert [s.global_step for s in st.spikes] == [4]  # only 171.40 is above 50
    assert st.spike_count == 1 and st.max_grad_norm == 171.40 and st.max_grad_norm_step == 4
    assert st.log_ratio_abs_p99_max == 2.09 and st.log_ratio_abs_p99_median == 1.89
    assert monitor.spikes(profile_rows(), threshold=30.0)[0].global_step == 3


def ten_steps(step_time=115.0, reward=0.5, lr=5e-7, slow_step=None):
    rows = []
    for s in range(1, 11):
        t = 300.0 if s == 1 else (step_time * 4 if s == slow_step else step_time)
        rows.append({"global_step": s, "step_time_s": t, "reward": reward, "actor_lr": lr * s / 10,
                     "grad_norm": 10.0})
    return rows


def test_g3_pending_pass_fail():
    pending = monitor.g3_smoke(ten_steps()[:5])
    assert pending.name == "g3" and pending.passed is None and pending.status == "PENDING"
    assert pending.notes == ("5 of 10 smoke steps done",)
    passed = monitor.g3_smoke(ten_steps())
    assert passed.passed is True and passed.numbers["median_step_time_s"] == 115.0  # warm-up excluded
    assert "step time of steps 2..10" in passed.rule
    blown = monitor.g3_smoke(ten_steps(slow_step=7))
    assert blown.passed is False and "4.00x" in blown.notes[0]
    crashed = monitor.g3_smoke(ten_steps()[:3], crashed=True, exit_code=-9)
    assert crashed.passed is False and "step 3" in crashed.notes[0]


def test_g3_window_fits_a_run_shorter_than_the_smoke_steps(tmp_path):
    eight = ten_steps()[:8]
    # the SOP smokes 10 steps; a run planned for 8 is judged on its 8, not pending "8 of 10" forever
    assert monitor.g3_smoke(eight).notes == ("8 of 10 smoke steps done",)
    verdict = monitor.g3_smoke(eight, planned_steps=8)
    assert verdict.passed is True and "step time of steps 2..8" in verdict.rule
    assert monitor.g3_smoke(ten_steps()[:5], planned_steps=8).notes == ("5 of 8 smoke steps done",)
    assert monitor.g3_smoke(ten_steps()[:5], planned_steps=200).notes == ("5 of 10 smoke steps done",)
    assert monitor.g3_smoke(ten_steps(slow_step=7)[:8], planned_steps=8).passed is False
    # through the run monitor, from the plan's global steps
    run = monitor.RunMonitor(tmp_path, plan={"steps": {"global_steps_total": 8}})
    run.update(eight)
    g3 = json.loads((tmp_path / "guards" / "g3.json").read_text())
    assert g3["passed"] is True and g3["numbers"]["steps_done"] == 8
    # a crash at step 6 of an 8-step run is inside its window: G3 fails
    crashed = monitor.RunMonitor(tmp_path / "c", plan={"steps": {"global_steps_total": 8}})
    crashed.update(ten_steps()[:6])
    assert crashed.record_crash(1).passed is False


PLAN = {"schedule": {"lr_table": [{"global_step": s, "lr_mean": 9e-9, "actor_lr_logged": 5e-7 * s / 10}
                                  for s in range(1, 21)]}}


def test_g5_lr_matches_plan_and_reward_not_stuck():
    assert monitor.planned_lr(PLAN, 10) == pytest.approx(5e-7)  # actor_lr_logged wins over lr_mean
    ok = monitor.g5_runtime(ten_steps(), PLAN)
    assert ok.name == "g5" and ok.passed is True, ok.notes
    low_lr = monitor.g5_runtime(ten_steps(lr=2.5e-7), PLAN)
    assert low_lr.passed is False and "50% of planned" in low_lr.notes[0]
    stuck = monitor.g5_runtime(ten_steps(reward=0.0), PLAN)
    assert stuck.passed is False and "reward stuck at 0.000" in stuck.notes[0]
    assert monitor.g5_runtime(ten_steps(reward=1.0), PLAN).passed is False
    assert monitor.g5_runtime(ten_steps(), None).passed is False  # no plan: cannot assert the LR
    assert monitor.g5_runtime(ten_steps()[:9], PLAN).passed is None  # pending


def test_early_stop_fires_on_a30_trajectory_at_step_80(tmp_path):
    # smoothed (3-point): step 30 = 64.40 is the best; steps 40..80 give 63.97, 64.80, 64.13, 64.60,
    # 64.13 — none >= 65.40 (+1.0pp), so patience 5 runs out at step 80 (sop/README.md#early-stop).
    run = monitor.RunMonitor(tmp_path)
    verdict = None
    for i, acc in enumerate(A30_OOD):
        step = 10 * (i + 1)
        for s in range(step - 9, step + 1):  # ten training steps per eval
            row = {"global_step": s, "reward": 0.5, "grad_norm": 12.0}
            if s == step:
                row["monitor_acc"] = acc / 100
            verdict = run.update([row])
            if verdict is not None:
                break
        if verdict is not None:
            break
    assert verdict is not None and verdict.passed
    assert verdict.numbers["stop_step"] == 80 and verdict.numbers["best_step"] == 30
    assert verdict.numbers["best_smoothed"] == pytest.approx((63.4 + 63.6 + 66.2) / 300)


def test_run_monitor_writes_spike_log_and_guards(tmp_path):
    run = monitor.RunMonitor(tmp_path, plan=PLAN)
    rows = ten_steps()
    rows[3]["grad_norm"] = 171.4
    run.update(rows[:5])
    run.update(rows[5:])
    run.update(rows[3:5])  # re-sent rows do not log a spike twice
    spikes = [json.loads(line) for line in (tmp_path / "launch" / "spikes.jsonl").read_text().splitlines()]
    assert spikes == [{"global_step": 4, "metric": "grad_norm", "value": 171.4, "threshold": 50.0}]
    g3 = json.loads((tmp_path / "guards" / "g3.json").read_text())
    g5 = json.loads((tmp_path / "guards" / "g5.json").read_text())
    # the one guards/ schema (rlexp.stages.guard.Verdict)
    assert list(g3) == ["name", "passed", "rule", "numbers", "notes", "details"]
    assert g3["name"] == "g3" and g3["passed"] is True and g5["name"] == "g5" and g5["passed"] is True
    assert g3["numbers"]["steps_done"] == 10 and g3["notes"][0].startswith("no crash")
    assert not (tmp_path / "guards" / "G3.json").exists() and not (tmp_path / "guards" / "G5.json").exists()


def test_crash_before_step_10_fails_g3(tmp_path):
    run = monitor.RunMonitor(tmp_path)
    run.update(ten_steps()[:4])
    verdict = run.record_crash(-9)
    assert verdict.passed is False
    g3 = json.loads((tmp_path / "guards" / "g3.json").read_text())
    assert g3["passed"] is False and g3["numbers"]["exit_code"] == -9 and "exited with code -9" in g3["notes"][0]


def test_run_monitor_writes_a_verdict_only_when_it_changes(tmp_path, monkeypatch):
    from rlexp.experiment import verdicts as guardrails

    writes: list[tuple[str, bool | None]] = []
    original = guardrails.write_verdict

    def counting(attempt_dir, verdict):
        writes.append((verdict.name, verdict.passed))
        return original(attempt_dir, verdict)

    monkeypatch.setattr(guardrails, "write_verdict", counting)
    run = monitor.RunMonitor(tmp_path, plan=PLAN)
    rows = ten_steps()
    run.update(rows[:4])
    assert writes == [("g3", None), ("g5", None)]  # pending verdicts are written too
    g3 = json.loads((tmp_path / "guards" / "g3.json").read_text())
    assert g3["passed"] is None and g3["notes"] == ["4 of 10 smoke steps done"]
    writes.clear()
    run.update([])  # a poll with nothing new
    run.update(rows[2:4])  # re-sent rows
    assert writes == []
    run.update(rows[4:])
    assert writes == [("g3", True), ("g5", True)]
    writes.clear()
    for _ in range(3):  # later polls and steps leave the decided verdicts alone
        run.update([{"global_step": 11, "reward": 0.5, "grad_norm": 1.0}])
    assert writes == []
    resumed = monitor.RunMonitor(tmp_path, plan=PLAN)  # a resume: the verdicts on disk count as written
    resumed.update(rows)
    assert writes == []
    resumed.record_crash(1)  # after step 10 a crash does not change G3
    assert writes == []


def test_a_resume_keeps_a_crash_verdict_until_g3_is_decided_again(tmp_path):
    first = monitor.RunMonitor(tmp_path, plan=PLAN)
    rows = ten_steps()
    first.update(rows[:3])
    first.record_crash(-9)
    resumed = monitor.RunMonitor(tmp_path, plan=PLAN)
    resumed.update(rows[:5])  # pending again in memory: the crash verdict on disk stays
    g3 = json.loads((tmp_path / "guards" / "g3.json").read_text())
    assert g3["passed"] is False and g3["numbers"]["exit_code"] == -9
    resumed.update(rows[5:])
    assert json.loads((tmp_path / "guards" / "g3.json").read_text())["passed"] is True


def _sop_with(tmp_path, **gates):
    import yaml

    from rlexp.spec.sop import DEFAULT_SOP, load_sop

    data = yaml.safe_load(DEFAULT_SOP.read_text())
    for gate, values in gates.items():
        data["guardrails"][gate].update(values)
    data["version"] = "test"
    path = tmp_path / "sop-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_sop(path)


def test_in_run_numbers_come_from_the_sop_file(tmp_path):
    rows = ten_steps()
    rows[3]["grad_norm"] = 40.0
    assert monitor.spikes(rows) == []  # 40 is not above the SOP's 50
    sop = _sop_with(tmp_path, spikes={"grad_norm": 30.0}, g3={"smoke_steps": 5, "step_time_max_ratio": 5.0},
                    g5={"at_step": 5, "reward_stuck_low": 0.6, "reward_stuck_high": 0.9})
    assert [s.global_step for s in monitor.spikes(rows, sop=sop)] == [4]
    assert monitor.stability(rows, sop=sop).spike_threshold == 30.0
    assert monitor.g3_smoke(rows[:5]).passed is None  # pending: the SOP in force smokes 10 steps
    assert monitor.g3_smoke(rows[:5], sop=sop).passed is True
    blown = ten_steps(slow_step=7)
    assert monitor.g3_smoke(blown).passed is False
    assert monitor.g3_smoke(blown, sop=_sop_with(tmp_path, g3={"step_time_max_ratio": 5.0})).passed is True
    g5 = monitor.g5_runtime(rows, PLAN, sop=sop)  # reward 0.5 is below the copy's 0.6
    assert g5.passed is False and "reward stuck at 0.500" in g5.notes[0] and "at step 5" in g5.rule
    run = monitor.RunMonitor(tmp_path / "run", plan=PLAN, sop=sop)
    run.update(rows)
    logged = [json.loads(line) for line in (tmp_path / "run" / "launch" / "spikes.jsonl").read_text().splitlines()]
    assert logged == [{"global_step": 4, "metric": "grad_norm", "value": 40.0, "threshold": 30.0}]
    assert json.loads((tmp_path / "run" / "guards" / "g5.json").read_text())["passed"] is False


def test_spike_threshold_module_constant_is_the_sops():
    from rlexp.spec.sop import load_sop

    assert monitor.guard_settings().spikes.grad_norm == load_sop().guardrails.spikes.grad_norm == 50.0
    with pytest.raises(AttributeError):
        _ = monitor.NOT_A_SETTING


def test_the_environment_error_stop_reads_the_sops_threshold(tmp_path):
    from rlexp.spec.sop import load_sop

    settings = load_sop().guardrails.env_errors
    assert (settings.max_rate, settings.window) == (0.25, 5)
    # an environment failing 20% of its episodes: masked in training, the run goes on
    flaky = [{"global_step": s, "env_errors": 0.2} for s in range(1, 8)]
    run = monitor.RunMonitor(tmp_path)
    assert run.update(flaky[:4]) is None
    assert monitor.env_error_verdict(flaky[:4]).passed is None  # 4 of 5 steps: pending
    assert run.update(flaky[4:]) is None
    assert monitor.env_error_verdict(flaky).passed is False
    # then the backend degrades: steps 4..8 = (0.2 x 4 + 0.3) / 5 = 0.22, still within 0.25;
    # steps 5..9 = (0.2 x 3 + 0.3 + 0.6) / 5 = 0.30 > 0.25: stop
    assert run.update([{"global_step": 8, "env_errors": 0.3}]) is None
    verdict = run.update([{"global_step": 9, "env_errors": 0.6}])
    assert verdict is not None and verdict.name == "env_errors" and verdict.passed is True
    assert verdict.numbers["rate"] == pytest.approx(0.30) and verdict.numbers["from_step"] == 5
    # a run with no environment task never logs env_errors: nothing to judge
    assert monitor.env_error_verdict([{"global_step": s, "reward": 0.5} for s in range(1, 20)]).passed is None
