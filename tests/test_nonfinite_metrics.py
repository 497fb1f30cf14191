"""A NaN is data: a run whose metrics hold NaN/inf at one step keeps them in metrics.jsonl (as strict
JSON's "NaN"/"Infinity"), reads them back as floats, logs them to MLflow as NaN, flags the step in
the report, and none of the consumers crash or decide on them silently.

Every expected value below is written out from the rows this test builds, not computed by rlexp.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from test_report import fill_attempt, make_experiment
from test_tracking import migrated_db, sqlite_uri  # noqa: F401  (pytest fixtures)

from rlexp.errors import InputError
from rlexp.training import followers, metrics_file, monitor

NAN_STEP = 7  # grad_norm and policy_loss diverge here
INF_STEP = 12  # ratio_max overflows here


def _raw_rows() -> list[dict]:
    """What a patched trainer appends to training_metrics.jsonl (Python's json writes NaN/Infinity)."""
    rows = []
    for s in range(1, 21):
        row = {"step": s, "policy_loss": 0.01, "actor_lr": 1e-4 * min(1.0, s / 2), "reward": 0.4 + s / 100,
               "grad_norm": 3.0, "ratio_max": 1.5, "log_ratio_abs_p99": 0.2, "step_time_s": 1.0}
        if s == NAN_STEP:
            row["grad_norm"] = row["policy_loss"] = float("nan")
        if s == INF_STEP:
            row["ratio_max"] = float("inf")
        if s % 5 == 0:
            row["monitor_acc"] = [0.40, 0.45, 0.50, 0.48][s // 5 - 1]
        rows.append(row)
    return rows


@pytest.fixture
def nan_attempt(tmp_path):
    """The report fixture's attempt a2, its metrics.jsonl written by the follower of a trainer's JSONL."""
    exp = make_experiment(tmp_path)
    attempt = exp / "a2"
    fill_attempt(attempt)
    (attempt / "metrics.jsonl").unlink()
    source = tmp_path / "training_metrics.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in _raw_rows()))
    assert "NaN" in source.read_text() and "Infinity" in source.read_text()  # the trainer's own spelling
    follower = followers.MetricsFollower("jsonl", source, attempt / "metrics.jsonl", trainer="openrlhf")
    written = follower.close()
    assert len(written) == 20
    flagged = {step: sorted(names) for step, names in follower.stats.nonfinite_steps.items()}
    assert flagged == {NAN_STEP: ["grad_norm", "policy_loss"], INF_STEP: ["ratio_max"]}
    assert follower.stats.dropped_values == 0  # nothing left out
    return attempt


def test_metrics_jsonl_holds_the_nan_as_strict_json_and_the_reader_returns_floats(nan_attempt):
    path = nan_attempt / "metrics.jsonl"
    lines = path.read_text().splitlines()
    for line in lines:  # strict JSON: no bare NaN/Infinity token anywhere
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in metrics.jsonl"))
    on_disk = {json.loads(x)["global_step"]: json.loads(x) for x in lines}
    assert on_disk[NAN_STEP]["grad_norm"] == "NaN" and on_disk[NAN_STEP]["policy_loss"] == "NaN"
    assert on_disk[INF_STEP]["ratio_max"] == "Infinity"
    assert on_disk[NAN_STEP]["reward"] == pytest.approx(0.47)  # the rest of the step is there too

    rows = {r["global_step"]: r for r in metrics_file.read_metrics(path)}
    assert math.isnan(rows[NAN_STEP]["grad_norm"]) and math.isnan(rows[NAN_STEP]["policy_loss"])
    assert rows[INF_STEP]["ratio_max"] == math.inf
    assert rows[6]["grad_norm"] == 3.0 and rows[INF_STEP - 1]["ratio_max"] == 1.5

    # the local trainer's file, followed as written: the same spelling decoded, the step flagged
    follower = followers.MetricsFileFollower(path)
    followed = {r["global_step"]: r for r in follower.poll()}
    assert math.isnan(followed[NAN_STEP]["grad_norm"])
    assert sorted(follower.stats.nonfinite_steps) == [NAN_STEP, INF_STEP]

    # a resume cuts the file and rewrites it: the NaN survives the rewrite
    assert metrics_file.cut_metrics(path, 10) == 10
    assert json.loads(path.read_text().splitlines()[NAN_STEP - 1])["grad_norm"] == "NaN"


@pytest.mark.parametrize("value", ['"nan"', '"inf"', '"NaN "', '"n/a"', "null"])
def test_metrics_jsonl_is_strict_about_any_other_spelling(tmp_path, value):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"global_step": 1, "reward": 0.5}\n{"global_step": 2, "reward": ' + value + "}\n")
    with pytest.raises(InputError) as err:
        metrics_file.read_metrics(path)
    assert str(path) in str(err.value) and "line 2: reward" in str(err.value)


def test_mlflow_holds_nan_at_that_step_and_a_relog_is_no_rewind(nan_attempt, sqlite_uri):  # noqa: F811
    from mlflow.tracking import MlflowClient

    from rlexp.tracking import runs as tracking

    run_id = tracking.log_attempt(nan_attempt, sqlite_uri)
    client = MlflowClient(sqlite_uri)
    grad = {m.step: m.value for m in client.get_metric_history(run_id, "grad_norm")}
    assert sorted(grad) == list(range(1, 21))
    assert math.isnan(grad[NAN_STEP]) and grad[6] == 3.0
    ratio = {m.step: m.value for m in client.get_metric_history(run_id, "ratio_max")}
    assert ratio[INF_STEP] == sys.float_info.max  # MLflow's SQL store keeps +inf as the largest float
    # logged again: NaN read back from MLflow equals the NaN in the file, so the run is not retired
    assert tracking.log_attempt(nan_attempt, sqlite_uri) == run_id
    assert len(client.get_metric_history(run_id, "grad_norm")) == 20


def test_report_renders_and_flags_the_step(nan_attempt, tmp_path):
    from rlexp.stages.report import write_report

    text = write_report(nan_attempt, tmp_path / "reports").read_text()
    # a NaN grad norm is a spike (a divergence); the max is over the finite values (3.0 everywhere else)
    assert f"spikes (grad norm > 50): **1** of 20 steps (steps {NAN_STEP})" in text
    assert "max grad norm 3 (step 1)" in text and "ratio_max 1.5 ·" in text
    flagged = next(line for line in text.splitlines() if line.startswith("**NaN/inf**"))
    assert flagged.startswith("**NaN/inf** in 2 of 20 steps")
    assert f"step {INF_STEP}: ratio_max" in flagged
    assert any(f"step {NAN_STEP}: {a}, {b}" in flagged for a, b in (("policy_loss", "grad_norm"),
                                                                  ("grad_norm", "policy_loss")))
    png = tmp_path / "reports" / "exp" / "a2_grad_norm.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_in_run_monitor_and_guards_take_the_nan(nan_attempt):
    from rlexp.stages.evaluate import monitor_points

    rows = metrics_file.read_metrics(nan_attempt / "metrics.jsonl")
    run = monitor.RunMonitor(nan_attempt, plan=monitor.read_plan(nan_attempt))
    assert run.update(rows) is None  # 4 monitor points: patience 5 cannot have run out
    spikes = [json.loads(x) for x in (nan_attempt / "launch" / "spikes.jsonl").read_text().splitlines()]
    assert [(s["global_step"], s["value"]) for s in spikes] == [(NAN_STEP, "NaN")]
    g5 = json.loads((nan_attempt / "guards" / "g5.json").read_text())
    assert g5["passed"] is True  # step 10's LR and reward are finite: the NaN at step 7 is in grad_norm
    points, last = monitor_points(nan_attempt)
    assert points == [(5, 0.40), (10, 0.45), (15, 0.50), (20, 0.48)] and last == 20


def _ten(**at) -> list[dict]:
    """Ten steps that pass G5 against PLAN; ``at``: {key: (step, value)} overrides."""
    rows = [{"global_step": s, "actor_lr": 5e-7 * s / 10, "reward": 0.5, "grad_norm": 1.0, "step_time_s": 100.0}
            for s in range(1, 11)]
    for key, (step, value) in at.items():
        rows[step - 1][key] = value
    return rows


PLAN = {"lr_table": [{"global_step": s, "actor_lr_logged": 5e-7 * s / 10} for s in range(1, 21)]}


def test_g5_fails_on_a_nan_reward_or_lr_instead_of_passing_on_it():
    assert monitor.g5_runtime(_ten(), PLAN).passed is True
    nan_reward = monitor.g5_runtime(_ten(reward=(4, math.nan)), PLAN)
    assert nan_reward.passed is False and "reward NaN/inf at step 4" in nan_reward.notes[0]
    assert nan_reward.numbers["reward_mean"] == pytest.approx(0.5)  # the finite steps' mean, not NaN
    all_nan = monitor.g5_runtime([{**r, "reward": math.nan} for r in _ten()], PLAN)
    assert all_nan.passed is False and "not logged" not in all_nan.notes[0]
    nan_lr = monitor.g5_runtime(_ten(actor_lr=(10, math.nan)), PLAN)
    assert nan_lr.passed is False and "actor_lr is nan" in nan_lr.notes[0]
    assert nan_lr.numbers["logged_lr"] is None
    json.dumps(nan_lr.to_dict(), allow_nan=False)  # the verdict file stays strict JSON


def test_g3_and_spikes_on_nonfinite_values():
    g3 = monitor.g3_smoke(_ten(step_time_s=(5, math.inf)))
    assert g3.passed is False and "step 5" in g3.notes[0]
    found = monitor.spikes(_ten(grad_norm=(3, math.inf)), 50.0)
    assert [(s.global_step, s.value) for s in found] == [(3, math.inf)]
    st = monitor.stability(_ten(grad_norm=(3, math.nan)), 50.0)
    assert st.max_grad_norm == 1.0 and st.nonfinite_steps == (3,) and st.spike_count == 1


def test_early_stop_ignores_a_nan_accuracy_and_does_not_crash(tmp_path):
    run = monitor.RunMonitor(tmp_path)
    rows = [{"global_step": s, "reward": 0.5, "grad_norm": 1.0} for s in range(1, 31)]
    rows[9]["monitor_acc"], rows[19]["monitor_acc"], rows[29]["monitor_acc"] = 0.5, math.nan, 0.6
    assert run.update(rows) is None
    assert monitor.monitor_points(rows) == [(10, 0.5), (30, 0.6)]


def test_status_counts_the_steps_of_a_run_with_nan(nan_attempt, capsys):
    from rlexp.cli import main

    assert main(["status", str(nan_attempt.parent), "--json"]) == 0
    rows = {r["attempt"]: r for r in json.loads(capsys.readouterr().out)["attempts"]}
    assert rows["a2"]["steps"] == 20  # the NaN step is a step like any other


def test_checkpoint_selection_skips_a_nan_monitor_accuracy(tmp_path):
    from rlexp.stages.evaluate import monitor_points

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"global_step": 5, "monitor_acc": 0.4}\n{"global_step": 10, "monitor_acc": "NaN"}\n'
                    '{"global_step": 15, "monitor_acc": 0.5, "grad_norm": "Infinity"}\n')
    assert monitor_points(tmp_path) == ([(5, 0.4), (15, 0.5)], 15)
    path.write_text('{"global_step": 5, "monitor_acc": "nan"}\n')  # not the file's spelling: an error
    with pytest.raises(InputError, match="line 1: monitor_acc"):
        monitor_points(tmp_path)
