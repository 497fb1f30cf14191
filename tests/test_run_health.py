"""Run health from the trainers' own logs (rlexp.protocol.run_health): training-inference mismatch, resume
integrity, off-policy staleness.

Each trainer's log is written here in that trainer's own format, with the metric names its code logs
(read from the wheels: OpenRLHF's models/loss.py ``vllm_kl``, verl's rollout_corr_helper.py ``rollout_corr/kl``
and trainer_base.py ``training/off_policy/trajectory_staleness/*``, TRL's grpo_trainer.py
``sampling/sampling_logp_difference/mean``), and read back through the readers `rlexp ingest` uses.
The expected steps and numbers are worked out by hand from the SOP's levels (warning above 1e-3 nats
per token for rollout_kl and 0.05 for the mean |Δ log p|; stop above 1e-2 / 0.2 on 3 logged steps in a
row), never from the code under test.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rlexp.cli import main
from rlexp.protocol.run_health import (
    Resume,
    expected_lag,
    merge_resumed,
    mismatch_verdict,
    resume_verdict,
    staleness_verdict,
)
from rlexp.spec.sop import load_sop

SOP = load_sop()
MISMATCH = SOP.run_health.mismatch


def test_the_sop_levels_are_the_ones_the_tests_assume():
    assert (MISMATCH.kl_warn_above, MISMATCH.kl_stop_above, MISMATCH.stop_after_steps) == (0.001, 0.01, 3)
    assert (MISMATCH.logp_diff_warn_above, MISMATCH.logp_diff_stop_above) == (0.05, 0.2)


def test_warning_then_stop_on_hand_rows():
    kl = {1: 0.0002, 2: 0.0004, 3: 0.0021, 4: 0.0003, 5: 0.02, 6: 0.03, 7: 0.05, 8: 0.06}
    rows = [{"global_step": s, "rollout_kl": v} for s, v in kl.items()]
    verdict = mismatch_verdict(rows, MISMATCH)
    assert verdict.passed is False
    assert verdict.numbers["stop"] == {"step": 7, "metric": "rollout_kl", "value": 0.05, "threshold": 0.01,
                                       "since_step": 5}
    assert verdict.numbers["warning_steps"] == [3, 5, 6, 7, 8]
    assert verdict.numbers["worst_steps"]["rollout_kl"][:2] == [[8, 0.06], [7, 0.05]]
    # two steps above the stop level are a warning, not a stop
    calm = mismatch_verdict(rows[:6], MISMATCH)
    assert calm.passed is True and calm.severity == "warning" and calm.numbers["stop"] is None
    assert calm.numbers["warning_steps"] == [3, 5, 6]
    # a break in the run of bad steps starts the count again
    broken = [{"global_step": s, "rollout_kl": v} for s, v in {1: 0.02, 2: 0.02, 3: 0.0, 4: 0.02, 5: 0.02}.items()]
    assert mismatch_verdict(broken, MISMATCH).passed is True


def test_nothing_logged_is_pending_never_a_pass():
    verdict = mismatch_verdict([{"global_step": 1, "reward": 0.5}], MISMATCH)
    assert verdict.passed is None and "nothing was measured" in verdict.reason


def test_a_nan_mismatch_counts_above_the_stop_level():
    rows = [{"global_step": s, "rollout_kl": float("nan")} for s in (1, 2, 3)]
    verdict = mismatch_verdict(rows, MISMATCH)
    assert verdict.passed is False and verdict.numbers["stop"]["value"] == "NaN"
    json.dumps(verdict.to_dict(), allow_nan=False)  # writable as strict JSON


def _ingest(capsys, path, trainer, fmt):
    assert main(["ingest", str(path), "--trainer", trainer, "--format", fmt, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    return {v["name"]: v for v in doc["run_health"]}


def _openrlhf_line(step, vllm_kl):
    # OpenRLHF's ppo_trainer.py logs the step's status dict after "✨ Global step N: "
    return (f"INFO 11-02 10:0{step % 10}:01 ppo_trainer.py:551] ✨ Global step {step}: "
            f"{{'policy_loss': -0.01, 'actor_lr': 1e-06, 'reward': 0.4, 'vllm_kl': {vllm_kl}}}")


def test_openrlhf_console_spike_warns_at_its_step(tmp_path, capsys):
    kl = [0.0003, 0.0002, 0.0004, 0.0035, 0.0003, 0.0002]
    log = tmp_path / "train.log"
    log.write_text("\n".join(_openrlhf_line(s, v) for s, v in enumerate(kl, start=1)) + "\n")
    health = _ingest(capsys, log, "openrlhf", "openrlhf-console")
    mismatch = health["mismatch"]
    assert mismatch["passed"] is True and mismatch["severity"] == "warning"
    assert mismatch["numbers"]["warning_steps"] == [4] and mismatch["numbers"]["metrics"] == ["rollout_kl"]
    assert health["resume"]["passed"] is None  # one run: never resumed


def test_verl_console_spike_stops(tmp_path, capsys):
    kl = [0.0004, 0.0005, 0.012, 0.015, 0.02, 0.0006]
    lines = [f"(TaskRunner pid=1) step:{s} - actor/pg_loss:-0.01 - actor/lr:1e-06 - rollout_corr/kl:{v} - "
             f"critic/score/mean:0.4" for s, v in enumerate(kl, start=1)]
    log = tmp_path / "verl.log"
    log.write_text("\n".join(lines) + "\n")
    mismatch = _ingest(capsys, log, "verl", "verl-console")["mismatch"]
    assert mismatch["passed"] is False
    assert mismatch["numbers"]["stop"]["step"] == 5 and mismatch["numbers"]["stop"]["since_step"] == 3


def test_trl_trainer_state_logp_difference(tmp_path, capsys):
    diff = {10: 0.01, 20: 0.012, 30: 0.09, 40: 0.011}
    history = [{"step": s, "learning_rate": 1e-6, "loss": 0.01, "sampling/sampling_logp_difference/mean": v,
                "sampling/importance_sampling_ratio/mean": 1.0} for s, v in diff.items()]
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 40, "log_history": history}))
    mismatch = _ingest(capsys, state, "trl", "trainer-state")["mismatch"]
    assert mismatch["numbers"]["metrics"] == ["rollout_logp_diff_mean"]
    assert mismatch["numbers"]["warning_steps"] == [30] and mismatch["passed"] is True


# --- resume integrity ---------------------------------------------------------------------------------

def _linear_warmup(step):  # a plan's LR: warm-up over 4 steps to 1e-6, then flat
    return 1e-6 * min(1.0, step / 4)


def test_resume_with_the_schedule_restarted_fails_with_the_two_lrs():
    before = [{"global_step": s, "actor_lr": _linear_warmup(s)} for s in range(1, 9)]
    after = [{"global_step": s, "actor_lr": _linear_warmup(s - 6)} for s in range(7, 11)]  # LR from 0 again
    verdict = resume_verdict([before, after], [Resume(6)], _linear_warmup, SOP.run_health.resume)
    assert verdict.passed is False
    [entry] = verdict.numbers["checked"]
    assert entry["lr_mismatch"] == {"step": 7, "logged": pytest.approx(2.5e-7), "planned": pytest.approx(1e-6)}
    assert "2.5e-07" in verdict.reason and "1e-06" in verdict.reason


def test_clean_resume_passes_and_wrong_first_step_fails():
    before = [{"global_step": s, "actor_lr": _linear_warmup(s)} for s in range(1, 9)]
    after = [{"global_step": s, "actor_lr": _linear_warmup(s)} for s in range(7, 11)]
    assert resume_verdict([before, after], [Resume(6)], _linear_warmup, SOP.run_health.resume).passed is True
    skipped = [r for r in after if r["global_step"] != 7]
    verdict = resume_verdict([before, skipped], [Resume(6)], _linear_warmup, SOP.run_health.resume)
    assert verdict.passed is False and "logged step 8 first (expected 7)" in verdict.reason
    empty = resume_verdict([before, []], [Resume(6)], _linear_warmup, SOP.run_health.resume, planned_steps=10)
    assert empty.passed is False and "logged no step" in empty.reason


def test_a_log_that_restarts_at_step_one_is_not_a_resume():
    runs = [[{"global_step": 1}, {"global_step": 2}], [{"global_step": 1}]]
    assert merge_resumed(runs) is None
    merged, resumes = merge_resumed([[{"global_step": s, "x": 0} for s in (1, 2, 3, 4)],
                                     [{"global_step": s, "x": 1} for s in (3, 4, 5)]])
    assert [r["global_step"] for r in merged] == [1, 2, 3, 4, 5] and [r["x"] for r in merged] == [0, 0, 1, 1, 1]
    assert resumes == [Resume(2)]


def _openrlhf_run(steps, lr):
    return [f"✨ Global step {s}: {{'policy_loss': -0.01, 'actor_lr': {lr(s)!r}, 'reward': 0.4}}" for s in steps]


@pytest.mark.parametrize("restarted", [False, True])
def test_import_run_prints_the_health_verdicts(eval_experiment, tmp_path, capsys, restarted):
    """`rlexp import-run` of a resumed run's log (the steps restart from a checkpoint): the resume gate
    against the attempt's plan, with the two LRs when the schedule restarted."""
    att = eval_experiment(steps=(2,), mid=2)
    (att / "metrics.jsonl").unlink()
    spec = att / "attempt.yaml"  # 8 prompts, 2 a step, 2 episodes: 8 global steps, half of them warm-up
    spec.write_text(spec.read_text().replace(
        "recipe: {pretrain: models/tiny-base}",
        "recipe: {pretrain: models/tiny-base, rollout_batch_size: 2, train_batch_size: 2, micro_train_batch_size: 1, "
        "n_samples_per_prompt: 1, num_episodes: 2, lr_warmup_ratio: 0.5, advantage_estimator: reinforce}"))
    assert main(["plan", str(att)]) in (0, 1)
    plan = json.loads((att / "plan.json").read_text())
    from rlexp.training.monitor import planned_lr

    total = plan["steps"]["global_steps_total"]
    assert total >= 3, plan["steps"]
    def lr(s):
        return planned_lr(plan, s)

    resumed_lr = (lambda s: planned_lr(plan, s - 1)) if restarted else lr  # one step behind the plan
    log = tmp_path / "train.log"
    log.write_text("\n".join(_openrlhf_run(range(1, 3), lr) + _openrlhf_run(range(2, total + 1), resumed_lr)) + "\n")
    capsys.readouterr()
    rc = main(["import-run", str(att), "--logs", str(log), "--format", "openrlhf-console"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [x for x in out.splitlines() if x.startswith("run health resume")]
    assert lr(2) != lr(1)  # in warm-up: a schedule one step behind shows
    if restarted:
        assert lines and "FAIL" in lines[0] and f"{lr(1):.6g}" in lines[0] and f"{lr(2):.6g}" in lines[0], out
    else:
        assert lines and "PASS" in lines[0], out
    rows = [json.loads(x) for x in (att / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == list(range(1, total + 1))


# --- staleness -----------------------------------------------------------------------------------------

def test_staleness_expected_from_settings_and_observed_from_verl():
    settings = SOP.run_health.staleness
    assert expected_lag({}) == {"mode": "synchronous", "max_versions": 0}
    sync = staleness_verdict([{"global_step": 1}], expected_lag({}), settings)
    assert sync.passed is True and "synchronous" in sync.reason
    lagged = [{"global_step": s, "policy_lag_max": v, "policy_lag_mean": v / 2} for s, v in ((1, 1), (2, 3), (3, 1))]
    verdict = staleness_verdict(lagged, expected_lag({"async": True, "queue": 2, "mode": "separate_async"}), settings)
    assert verdict.severity == "warning" and verdict.numbers["observed_max_step"] == 2
    assert "more than the launch settings allow (2)" in verdict.notes[0]


def test_verl_staleness_metric_names(tmp_path):
    from rlexp.training.log_files import read_log

    lines = [f"step:{s} - training/off_policy/trajectory_staleness/mean:{v / 2} - "
             f"training/off_policy/trajectory_staleness/max:{v}" for s, v in ((1, 0), (2, 1), (3, 2))]
    log = tmp_path / "verl.log"
    log.write_text("\n".join(lines) + "\n")
    rows = read_log(log, "verl", "verl-console").rows
    assert [r.get("policy_lag_max") for r in rows] == [0.0, 1.0, 2.0]


# --- plan: settings that bias or switch off the correction ------------------------------------------------

def _ids(found):
    return {v.name for v in found}


def test_openrlhf_correction_is_off_with_gspo_in_every_release():
    from rlexp.spec.recipe import Recipe
    from rlexp.trainers.openrlhf.checks import run_health_checks as checks

    def run_health_checks(stated, version, env=None):  # on the recipe load_attempt resolves from ``stated``
        return checks(Recipe.of(stated), version, env)

    for recipe in ({"enable_vllm_is_correction": True, "policy_loss_type": "gspo"},  # 0.9.x-0.10.1
                   {"algo.advantage.is_correction_enable": True, "actor.policy_loss_type": "gspo"},  # 0.10.2+
                   {"algo.advantage.is_correction_level": "token", "actor.policy_loss_type": "gspo"}):  # 0.11.2
        assert "health.is_correction_off_with_gspo" in _ids(run_health_checks(recipe, "0.11.2"))
    env = SimpleNamespace(loss="gspo")
    assert _ids(run_health_checks({"enable_vllm_is_correction": True}, "0.9.10", env)) == {
        "health.is_correction_off_with_gspo"}
    # the false alarm: no correction asked, or the PPO loss
    assert run_health_checks({"policy_loss_type": "gspo"}, "0.11.2") == []
    assert run_health_checks({"enable_vllm_is_correction": True, "policy_loss_type": "ppo"}, "0.9.10") == []
    assert _ids(run_health_checks({"enable_vllm_is_correction": True, "top_p": 0.9}, "0.9.10")) == {
        "health.is_correction_top_p"}


def test_trl_and_verl_top_p_with_the_correction():
    from rlexp.trainers.trl.checks import run_health_checks
    from rlexp.trainers.trl.recipe import TrlRecipe
    from rlexp.trainers.verl.checks import run_health_checks as verl_checks

    def trl_checks(stated, version):
        return run_health_checks(TrlRecipe.of(stated), version)

    assert _ids(trl_checks({"use_vllm": True, "top_p": 0.95}, "1.16.0")) == {"health.is_correction_top_p"}
    assert _ids(trl_checks({"use_vllm": True, "top_k": 50}, "1.16.0")) == {"health.is_correction_top_p"}
    assert trl_checks({"use_vllm": True, "top_p": 0.95, "vllm_importance_sampling_correction": False}, "1.16.0") == []
    assert trl_checks({"use_vllm": False, "top_p": 0.95}, "1.16.0") == []
    assert trl_checks({"use_vllm": True, "top_p": 0.95, "advantage_estimator": "rloo"}, "1.16.0") == []
    assert _ids(verl_checks({"algorithm.rollout_correction.rollout_is": "token",
                             "actor_rollout_ref.rollout.top_p": 0.9}, "0.9.1")) == {"health.is_correction_top_p"}
    assert verl_checks({"actor_rollout_ref.rollout.top_p": 0.9}, "0.9.1") == []


def test_openrlhf_gspo_correction_refused_at_plan(tmp_path, capsys):
    """Through `rlexp plan` on the committed A30 attempt (OpenRLHF 0.9.3's spelling): the error names models/loss.py."""
    import shutil
    from pathlib import Path

    exp = tmp_path / "seed-a30"
    shutil.copytree(Path(__file__).resolve().parent.parent / "experiments" / "seed-a30", exp)
    spec = exp / "a30" / "attempt.yaml"
    text = spec.read_text()
    assert "recipe:" in text
    spec.write_text(text.replace("recipe:", "recipe:\n  enable_vllm_is_correction: true\n  policy_loss_type: gspo", 1))
    main(["plan", str(exp / "a30"), "--json"])
    out = capsys.readouterr().out
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    found = checks["health.is_correction_off_with_gspo"]
    assert found["severity"] == "error" and "models/loss.py" in json.dumps(found)


def test_the_report_shows_the_mismatch_curve_and_its_worst_steps(tmp_path):
    from test_report import fill_attempt, make_experiment

    from rlexp.stages.report import report

    exp = make_experiment(tmp_path)
    att = exp / "a2"
    fill_attempt(att)
    rows = [json.loads(x) for x in (att / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # a spike at step 12 (warning level 1e-3), 3e-4 elsewhere
        row["rollout_kl"] = 0.004 if row["global_step"] == 12 else 0.0003
    (att / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = report(att, reports_dir=tmp_path / "reports", tracking_uri="off").report.read_text()
    line = next(x for x in text.splitlines() if x.startswith("training–inference mismatch"))
    assert "**WARN**" in line and "first at step 12" in line
    curve = next(x for x in text.splitlines() if x.startswith("- `rollout_kl`"))
    assert "worst: step 12 (0.004)" in curve and "max 0.004;" in curve and "█" in curve


def test_plan_shows_the_expected_lag_of_an_async_launch_only(tmp_path):
    from test_checks import spec, write

    from rlexp.spec import load_attempt
    from rlexp.stages.plan import build_plan

    sync = build_plan(load_attempt(write(tmp_path / "exp", "a1", spec())))
    assert "run_health" not in sync  # a synchronous plan stays as it was
    asynchronous = spec(recipe={"async_train": True, "async_queue_size": 2})
    plan = build_plan(load_attempt(write(tmp_path / "exp2", "a1", asynchronous)))
    assert plan["run_health"]["expected_lag"]["max_versions"] == 2


def test_the_report_shows_the_observed_staleness():
    from rlexp.reporting.markdown import _staleness_lines

    rows = [{"global_step": s, "policy_lag_max": v} for s, v in ((1, 0), (2, 3), (3, 1))]
    assert _staleness_lines(rows)[-1] == ("off-policy staleness (observed): batches up to 3 policy version(s) "
                                          "behind, at step 2")
