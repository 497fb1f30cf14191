"""Metric readers: OpenRLHF stdout lines, the seed's training_metrics.jsonl, TensorBoard scalars."""

from __future__ import annotations

import datetime
import json
import math
import os

import pytest

from rlexp.errors import InputError
from rlexp.trainers.openrlhf import console
from rlexp.training import followers, ingest, log_files, metrics_file

# The line OpenRLHF v0.9.3 prints (ppo_trainer.py: logger.info(f"✨ Global step {global_step}: {log_status}")),
# a Python dict repr; 'nan' and a string are what crashed the seed's A19 run.
STDOUT = (
    "2026-02-23 06:30:01 INFO ppo_trainer ✨ Global step 3: {'policy_loss': 0.0123, 'actor_lr': 5e-07, "
    "'reward': 0.546875, 'response_length': 1834.5, 'kl': nan, 'ppo_clip_ratio': 'n/a', "
    "'group_reward_std': tensor(0.25, device='cuda:0'), 'actor_grad_norm': 39.06}\n"
)


def test_stdout_line_normalised_nan_kept_and_strings_dropped_with_count():
    stats = ingest.IngestStats()
    row = console.parse_stdout_line(STDOUT, stats, trainer="openrlhf")
    assert math.isnan(row.pop("kl"))  # a NaN is data: kept, its step flagged
    assert row == {"global_step": 3, "policy_loss": 0.0123, "actor_lr": 5e-07, "reward": 0.546875,
                   "response_length": 1834.5, "group_reward_std": 0.25, "grad_norm": 39.06,
                   "time": datetime.datetime(2026, 2, 23, 6, 30, 1).timestamp()}  # the line's own time
    assert stats.dropped_values == 1 and stats.dropped_keys == {"ppo_clip_ratio": 1}
    assert stats.nonfinite_steps == {3: ["kl"]}
    assert console.parse_stdout_line("Episode [1/1]: 3%|█ | 3/200\n", stats, trainer="openrlhf") is None


def test_read_stdout_log(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text("noise\n" + STDOUT + STDOUT.replace("step 3", "step 4").replace("0.0123", "0.02"))
    rows, stats = log_files.finite_rows(log_files.read_log(log, "openrlhf", "openrlhf-console"))
    assert [r["global_step"] for r in rows] == [3, 4] and rows[1]["policy_loss"] == 0.02
    assert stats.rows == 2 and stats.dropped_values == 2 and stats.nonfinite_steps == {3: ["kl"], 4: ["kl"]}


def test_openrlhf_log_prefix_without_a_year_gives_the_step_time(tmp_path):
    # OpenRLHF's logging_utils: "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s" with
    # datefmt "%m-%d %H:%M:%S" (no year): the year is the one at or before the log's last change
    line = "INFO 12-31 23:59:58 ppo_trainer.py:512] ✨ Global step 7: {'reward': 0.5}\n"
    log = tmp_path / "stdout.log"
    log.write_text(line + "INFO 01-01 00:00:03 ppo_trainer.py:512] ✨ Global step 8: {'reward': 0.25}\n"
                   "✨ Global step 9: {'reward': 0.75}\n")  # no prefix: no time
    january = datetime.datetime(2027, 1, 1, 0, 5).timestamp()
    os.utime(log, (january, january))
    rows, _ = log_files.finite_rows(log_files.read_log(log, "openrlhf", "openrlhf-console"))
    assert rows[0]["time"] == datetime.datetime(2026, 12, 31, 23, 59, 58).timestamp()  # last year's December
    assert rows[1]["time"] == datetime.datetime(2027, 1, 1, 0, 0, 3).timestamp()
    assert "time" not in rows[2] and rows[2]["reward"] == 0.75
    assert ingest.line_time("INFO 02-30 10:00:00 x.py:1] ") is None  # not a date


def test_training_metrics_jsonl_keeps_nan_and_drops_strings(tmp_path):
    path = tmp_path / "training_metrics.jsonl"
    path.write_text(
        '{"step": 1, "reward": 0.5, "grad_norm": 5.16, "log_ratio_abs_p99": 1.71}\n'
        '{"step": 2, "reward": NaN, "grad_norm": "171.4", "entropy": 1.31}\n'
    )
    rows, stats = ingest.read_training_metrics_jsonl(path, trainer="openrlhf")
    assert math.isnan(rows[1].pop("reward"))
    assert rows == [{"global_step": 1, "reward": 0.5, "grad_norm": 5.16, "log_ratio_abs_p99": 1.71},
                    {"global_step": 2, "entropy": 1.31}]
    assert stats.dropped_keys == {"grad_norm": 1} and stats.nonfinite_steps == {2: ["reward"]}


@pytest.mark.parametrize(("text", "field"), [
    ('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": \n', "line 2"),
    ('[1, 2]\n', "line 1"),
    ('{"reward": 0.5}\n', "line 1"),
])
def test_training_metrics_jsonl_structural_errors(tmp_path, text, field):
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        ingest.read_training_metrics_jsonl(path, trainer="openrlhf")
    assert info.value.field == field and str(path) in info.value.one_line()


def _write_events(logdir, scalars):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for tag, step, value in scalars:
        writer.add_scalar(tag, value, step)
    writer.close()


def test_tensorboard_scalars_become_rows(tmp_path):
    # OpenRLHF's TensorboardLogger writes train/<key> and eval/<key> under a run subdirectory
    _write_events(tmp_path / "tb" / "run1", [
        ("train/policy_loss", 1, 0.25), ("train/actor_lr", 1, 2.5e-7), ("train/actor_grad_norm", 1, 12.5),
        ("train/policy_loss", 2, 0.125), ("train/actor_lr", 2, 5e-7),
        ("eval/eval_probe_pass1", 2, 0.634),
    ])
    rows, stats = ingest.read_tensorboard(tmp_path / "tb", trainer="openrlhf")
    assert [r["global_step"] for r in rows] == [1, 2]
    assert rows[0]["policy_loss"] == pytest.approx(0.25) and rows[0]["grad_norm"] == pytest.approx(12.5)
    assert rows[1]["actor_lr"] == pytest.approx(5e-7, rel=1e-6)  # float32 in the event file
    assert rows[1]["monitor_acc"] == pytest.approx(0.634, rel=1e-6)
    assert stats.rows == 2
    # each step's time: the wall_time TensorBoard stored with its events (the latest of the step)
    from tensorboard.backend.event_processing import event_accumulator

    [run] = ingest.event_dirs(tmp_path / "tb")
    acc = event_accumulator.EventAccumulator(str(run))
    acc.Reload()
    walls = {e.step: e.wall_time for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag) if tag == "train/actor_lr"}
    assert rows[0]["time"] >= walls[1] and rows[1]["time"] >= walls[2] and rows[1]["time"] > 1e9


def test_tensorboard_dir_without_events_is_one_line_error(tmp_path):
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no TensorBoard event files"):
        ingest.read_tensorboard(tmp_path / "tb", trainer="openrlhf")
    with pytest.raises(InputError, match="not found"):
        ingest.read_tensorboard(tmp_path / "missing", trainer="openrlhf")


@pytest.mark.parametrize(("line", "field"), [
    ('{"global_step": 1, "reward": "0.5"}', "line 1: reward"),
    ('{"global_step": 1, "reward": NaN}', "line 1: reward"),
    ('{"global_step": "1", "reward": 0.5}', "line 1: global_step"),
    ('{"global_step": 1, "reward": true}', "line 1: reward"),
])
def test_normalised_metrics_file_is_read_strictly(tmp_path, line, field):
    path = tmp_path / "metrics.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError) as info:
        metrics_file.read_metrics(path)
    assert info.value.field == field


def test_duplicate_step_in_metrics_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"global_step": 1}\n{"global_step": 1}\n')
    with pytest.raises(InputError, match="appears twice"):
        metrics_file.read_metrics(path)


def test_append_new_rows_never_duplicates_and_repairs_torn_tail(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"global_step": 1, "reward": 0.5}\n{"global_step": 2, "rew')  # killed mid-line
    written = metrics_file.append_new_rows(path, [{"global_step": 1, "reward": 9.0}, {"global_step": 2, "reward": 0.25},
                                            {"global_step": 3, "reward": 0.75}])
    assert [r["global_step"] for r in written] == [2, 3]
    rows = metrics_file.read_metrics(path)
    assert [(r["global_step"], r["reward"]) for r in rows] == [(1, 0.5), (2, 0.25), (3, 0.75)]
    assert metrics_file.append_new_rows(path, rows) == []


def test_follower_reads_only_complete_lines(tmp_path):
    log = tmp_path / "stdout.log"
    metrics = tmp_path / "metrics.jsonl"
    follower = followers.MetricsFollower("stdout", log, metrics, trainer="openrlhf", console=console.CONSOLE)
    assert follower.poll() == []  # no log yet
    first, second = STDOUT, STDOUT.replace("step 3", "step 4")
    log.write_text(first + second[:40])  # the trainer is mid-way through printing step 4
    assert follower.poll() == []  # step 3 is held: its eval line may still come
    with open(log, "a") as fh:
        fh.write(second[40:])
    assert [r["global_step"] for r in follower.poll()] == [3]  # step 4 began: step 3 is complete
    assert [r["global_step"] for r in follower.close()] == [4]  # the run ended
    assert [json.loads(line)["global_step"] for line in metrics.read_text().splitlines()] == [3, 4]
    # a new follower (a resumed launch) continues the same file without duplicating
    again = followers.MetricsFollower("stdout", log, metrics, trainer="openrlhf", console=console.CONSOLE)
    assert again.poll() == [] and again.close() == []


# OpenRLHF v0.9.3 ppo_trainer.evaluate(): logged after "Global step N" of the same step; with
# --eval_n_samples_per_prompt 1 both keys are named pass1 (pass{n} with n = 1).
EVAL = ("2026-02-23 06:41:10 INFO ppo_trainer ✨ Evaluation completed in 0:01:02, global_step 3, "
        "eval_metrics: {'eval_default_pass1': 0.634}\n")


def test_eval_line_joins_its_training_step(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text(STDOUT + EVAL + STDOUT.replace("step 3", "step 4"))
    rows, _ = log_files.finite_rows(log_files.read_log(log, "openrlhf", "openrlhf-console"))
    assert rows[0]["monitor_acc"] == 0.634 and rows[0]["eval_default_pass1"] == 0.634
    assert rows[0]["policy_loss"] == 0.0123 and "monitor_acc" not in rows[1]
    follower = followers.MetricsFollower("stdout", log, tmp_path / "metrics.jsonl", trainer="openrlhf", console=console.CONSOLE)
    live = follower.poll()
    assert [(r["global_step"], r.get("monitor_acc")) for r in live] == [(3, 0.634)]


def test_tensorboard_follower_waits_for_a_later_step(tmp_path):
    _write_events(tmp_path / "tb", [("train/reward", 1, 0.5), ("train/reward", 2, 0.625)])
    metrics = tmp_path / "metrics.jsonl"
    follower = followers.MetricsFollower("tensorboard", tmp_path / "tb", metrics, trainer="openrlhf")
    assert [r["global_step"] for r in follower.poll()] == [1]  # step 2 may still get scalars
    assert [r["global_step"] for r in follower.close()] == [2]
