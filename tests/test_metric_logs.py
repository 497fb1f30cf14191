"""The training-log readers on files built from each trainer's own format strings.

Releases and the format each fixture reproduces (read from their wheels):
- OpenRLHF 0.9.3-0.11.2 (identical in all of them): openrlhf/utils/logging_utils.py
  ``_FORMAT = "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"``, datefmt ``"%m-%d %H:%M:%S"``;
  trainer/ppo_trainer.py ``logger.info(f"✨ Global step {global_step}: {log_status}")`` and
  ``f"✨ Evaluation completed in {time_str}, global_step {global_step}, eval_metrics: {logs}"``; 0.11's
  ``rollout/reward_mean``, ``rollout/response_length_mean``, ``rollout/truncated_rate``; trainer/ray/ppo_actor.py's
  tqdm bar ``desc=f"Train epoch [{epoch + 1}/{self.max_epochs}]"`` with ``pbar.set_postfix(short_status)``
  (act_loss, reward, return, gen_len, tot_len, kl, act_lr, grad_norm, ent_loss).
- verl 0.9.1: verl/utils/logger/aggregate_logger.py ``concat_dict_to_str``: ``f"step:{step}"`` then
  ``f"{k}:{pprint.pformat(v)}"`` for each number, joined by ``" - "``; verl/utils/tracking.py ``FileLogger``:
  ``orjson.dumps({"step": step, "data": data})`` per line (NaN becomes null). Older verl, as its users paste it:
  ``actor/lr(1e-4)`` (``lr * 1e4``), ``actor/entropy_loss``, ``timing/*``, records broken at ``" - "``.
- TRL 1.16: GRPOTrainer's ``self._metrics`` keys (``completions/mean_length``, ``reward_std``,
  ``clip_ratio/region_mean``, ``policy_loss``, ``kl``, ``entropy``) plus transformers' ``loss``,
  ``grad_norm``, ``learning_rate``, ``epoch``, ``step`` in ``trainer_state.json``'s ``log_history``
  (``TrainerState.save_to_json``: ``json.dumps(asdict(self), indent=2, sort_keys=True) + "\\n"``).
"""

from __future__ import annotations

import io
import json
import logging
import math
import pprint
import random

import pytest

from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.trainers.openrlhf import console
from rlexp.training import followers, ingest, log_files, metrics_file

OPENRLHF_FORMAT = "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"
OPENRLHF_DATEFMT = "%m-%d %H:%M:%S"


def openrlhf_lines(statuses: list[tuple[int, dict]]) -> list[str]:
    """What OpenRLHF's logger prints for each (global_step, log_status)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(OPENRLHF_FORMAT, datefmt=OPENRLHF_DATEFMT))
    log = logging.getLogger("rlexp-test-openrlhf")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    for step, status in statuses:
        log.info(f"✨ Global step {step}: {status}")
    return stream.getvalue().splitlines()


def status_011(step: int) -> dict:
    """OpenRLHF 0.11.2's log_status keys (experience info, actor status, rollout stats, timing)."""
    return {"policy_loss": 0.01 * step, "actor_lr": 1e-6 * step, "ppo_kl": 0.001, "entropy_loss": 0.9,
            "actor_grad_norm": 2.5, "kl": 0.002, "response_length": 512.0 + step, "total_length": 800.0,
            "reward": 0.25, "return": 0.25,
            "rollout/reward_mean": 0.3, "rollout/reward_std": 0.4, "rollout/response_length_mean": 510.0,
            "rollout/truncated_rate": 0.05, "rollout/num_samples": 64.0,
            "timing/make_experience": 30.0, "timing/ppo_train": 20.0, "timing/step_total": 55.5}


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


# --- OpenRLHF console ---------------------------------------------------------------------------

def test_openrlhf_011_names_mapped(tmp_path):
    lines = openrlhf_lines([(s, status_011(s)) for s in (1, 2, 3)])
    read = log_files.read_log(write(tmp_path, "train.log", lines), "openrlhf")
    rows = read.rows
    assert [r["global_step"] for r in rows] == [1, 2, 3] and read.not_understood == []
    row = rows[1]
    assert row["policy_loss"] == pytest.approx(0.02) and row["actor_lr"] == pytest.approx(2e-6)
    assert row["ppo_kl"] == 0.001 and row["entropy"] == 0.9 and row["grad_norm"] == 2.5 and row["kl"] == 0.002
    assert row["step_time_s"] == 55.5 and row["reward"] == 0.25 and row["response_length"] == 514.0
    assert row["rollout/reward_mean"] == 0.3  # lost to "reward": kept under its own name, not dropped
    assert row["truncated"] == 0.05  # no "truncated" key: rollout/truncated_rate is it
    assert "time" in row  # the logging prefix's month-day time


def test_openrlhf_rollout_names_when_the_status_has_no_reward(tmp_path):
    status = {k: v for k, v in status_011(1).items() if k not in ("reward", "response_length")}
    read = log_files.read_log(write(tmp_path, "train.log", openrlhf_lines([(1, status)])), "openrlhf")
    assert read.rows[0]["reward"] == 0.3 and read.rows[0]["response_length"] == 510.0


def test_openrlhf_one_unreadable_line_in_the_middle_is_counted(tmp_path):
    lines = openrlhf_lines([(s, status_011(s)) for s in range(1, 6)])
    lines[2] = lines[2].split("Global step 3:")[0] + "Global step 3: <metrics lost>"
    read = log_files.read_log(write(tmp_path, "train.log", ["vLLM noise"] + lines), "openrlhf")
    assert [r["global_step"] for r in read.rows] == [1, 2, 4, 5]
    assert read.not_understood == [4]


def test_openrlhf_wrapped_and_abridged_lines(tmp_path):
    lines = openrlhf_lines([(s, status_011(s)) for s in (1, 2, 3)])
    wrapped = [lines[1][i:i + 80] for i in range(0, len(lines[1]), 80)]  # a terminal's hard wrap
    abridged = lines[2][:lines[2].index("'ppo_kl'")] + "…, 'kl': 0.002}"
    read = log_files.read_log(write(tmp_path, "train.log", [lines[0], *wrapped, abridged, "done"]), "openrlhf")
    assert [r["global_step"] for r in read.rows] == [1, 2, 3] and read.not_understood == []
    assert read.rejoined == [2] and read.abridged == [2 + len(wrapped)]
    assert read.rows[1]["step_time_s"] == 55.5 and read.rows[1]["policy_loss"] == pytest.approx(0.02)
    assert read.rows[2] == pytest.approx({"global_step": 3, "policy_loss": 0.03, "actor_lr": 3e-6, "kl": 0.002,
                                          "time": read.rows[2]["time"]})


def test_openrlhf_two_runs_in_one_file_are_not_merged(tmp_path):
    first = openrlhf_lines([(s, {"reward": 0.1 * s}) for s in (1, 2, 3)])
    second = openrlhf_lines([(s, {"reward": 0.5 + s}) for s in (1, 2)])
    path = write(tmp_path, "train.log", first + ["restarted"] + second)
    read = log_files.read_log(path, "openrlhf")
    assert [r.steps for r in read.runs] == [[1, 2, 3], [1, 2]] and read.runs[1].first_line == 5
    assert read.runs[1].rows[1]["reward"] == 2.5
    summary = log_files.log_summary(path, read)
    assert [(r["first_step"], r["last_step"]) for r in summary["runs"]] == [(1, 3), (1, 2)]


def test_openrlhf_nan_is_kept_and_flagged(tmp_path):
    lines = openrlhf_lines([(1, {"reward": 0.5, "kl": 0.1}), (2, {"reward": 0.5, "kl": float("nan"),
                                                                  "policy_loss": float("inf")})])
    assert "'kl': nan" in lines[1]  # Python's repr, what the log holds
    read = log_files.read_log(write(tmp_path, "train.log", lines), "openrlhf")
    assert math.isnan(read.rows[1]["kl"]) and read.rows[1]["policy_loss"] == math.inf
    assert sorted(read.nonfinite) == [(2, "kl"), (2, "policy_loss")]


def test_openrlhf_eval_line_joins_its_step(tmp_path):
    lines = openrlhf_lines([(10, {"reward": 0.5})])
    lines.append("INFO 02-23 06:31:00 ppo_trainer.py:598] ✨ Evaluation completed in 0:01:02, global_step 10, "
                 "eval_metrics: {'eval_probe_pass1': 0.625}")
    read = log_files.read_log(write(tmp_path, "train.log", lines), "openrlhf")
    assert len(read.rows) == 1 and read.rows[0]["monitor_acc"] == 0.625 and read.rows[0]["reward"] == 0.5


def test_openrlhf_tqdm_postfix_when_there_is_no_global_step_line(tmp_path):
    from tqdm import tqdm

    stream = io.StringIO()
    for step in (1, 2):
        for epoch in (1, 2):  # max_epochs 2: the step's metrics are the last epoch's
            bar = tqdm(range(3), desc=f"Train epoch [{epoch}/2]", file=stream, ascii=False)
            for _ in bar:
                bar.set_postfix({"act_loss": 0.0123 * step, "reward": 0.5, "return": 0.5, "gen_len": 300.0 + step,
                                 "tot_len": 450.0, "kl": 0.0, "act_lr": 1e-06, "grad_norm": 0.3})
            bar.close()
    read = log_files.read_log(write(tmp_path, "train.log", stream.getvalue().split("\n")), "openrlhf")
    assert read.steps_counted and [r["global_step"] for r in read.rows] == [1, 2]
    assert read.rows[1]["policy_loss"] == pytest.approx(0.0246) and read.rows[1]["actor_lr"] == 1e-6
    assert read.rows[1]["response_length"] == 302.0 and read.rows[0]["grad_norm"] == 0.3


# --- verl console and file logger -----------------------------------------------------------------

def verl_console(step: int, data: dict) -> str:
    """verl 0.9.1's console logger line."""
    return " - ".join([f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in data.items()])


def verl_data(step: int) -> dict:
    return {"actor/pg_loss": -0.01 * step, "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 0.0004,
            "actor/kl_loss": 0.003, "actor/entropy": 1.25, "actor/grad_norm": 0.75, "actor/lr": 1e-06,
            "critic/score/mean": 0.375, "response_length/mean": 420.5, "response_length/clip_ratio": 0.0625,
            "timing_s/gen": 40.0, "timing_s/step": 62.5, "training/global_step": step}


def test_verl_console_091(tmp_path):
    lines = ["(TaskRunner pid=1) " + verl_console(s, verl_data(s)) for s in (1, 2, 3)]
    lines.insert(2, "step:2 - garbage")  # one unreadable line in the middle
    read = log_files.read_log(write(tmp_path, "verl.log", ["Training Progress: 0%"] + lines), "verl")
    assert read.format == "verl-console" and read.not_understood == [4]
    assert [r["global_step"] for r in read.rows] == [1, 2, 3]
    row = read.rows[0]
    assert row == pytest.approx({"global_step": 1, "policy_loss": -0.01, "ppo_clip_ratio": 0.002, "ppo_kl": 0.0004,
                                 "kl": 0.003, "entropy": 1.25, "grad_norm": 0.75, "actor_lr": 1e-6, "reward": 0.375,
                                 "response_length": 420.5, "truncated": 0.0625, "timing_s/gen": 40.0,
                                 "step_time_s": 62.5})


def test_verl_console_older_names_and_pasted_wrapping(tmp_path):
    # older verl: actor/lr(1e-4) = lr * 1e4, actor/entropy_loss, timing/* (no timing/step), KL in the reward;
    # printed with :.3f and pasted broken at " - "
    lines = ["step:5 - timing/gen:15.664 - timing/update_actor:20.314 - actor/entropy_loss:0.433",
             "    - actor/pg_loss:-0.005 - actor/lr(1e-4):0.010 - actor/reward_kl_penalty:0.001",
             "    - critic/score/mean:0.004 - response_length/mean:210.000",
             "step:6 - actor/lr(1e-4):0.020 - timing/step:30.000 - actor/entropy_loss:nan"]
    read = log_files.read_log(write(tmp_path, "verl.log", lines), "verl")
    assert read.rejoined == [1] and read.not_understood == []
    first, second = read.rows
    assert first["actor_lr"] == pytest.approx(1e-6) and first["entropy"] == 0.433 and first["kl"] == 0.001
    assert first["step_time_s"] == pytest.approx(15.664 + 20.314)  # the phases added up
    assert first["reward"] == 0.004 and first["response_length"] == 210.0 and first["policy_loss"] == -0.005
    assert second["step_time_s"] == 30.0 and second["actor_lr"] == pytest.approx(2e-6)
    assert math.isnan(second["entropy"]) and read.nonfinite == [(6, "entropy")]


def test_verl_file_logger(tmp_path):
    lines = [json.dumps({"step": s, "data": {**verl_data(s), "actor/kl_loss": None if s == 2 else 0.003}})
             for s in (0, 1, 2, 3)]
    lines.insert(2, '{"step": 1, "data": ')  # cut line in the middle
    read = log_files.read_log(write(tmp_path, "verl_metrics.jsonl", lines), "verl")
    assert read.format == "verl-file" and read.not_understood == [3]
    assert [r["global_step"] for r in read.rows] == [0, 1, 2, 3]
    assert math.isnan(read.rows[2]["kl"]) and read.nonfinite == [(2, "kl")]  # orjson's null for a NaN
    assert read.rows[1]["step_time_s"] == 62.5 and read.rows[1]["reward"] == 0.375


# --- TRL ------------------------------------------------------------------------------------------

def trl_logs(step: int) -> dict:
    return {"loss": 0.02, "grad_norm": 0.5, "learning_rate": 1e-06 * step, "num_tokens": 1000.0 * step,
            "completions/mean_length": 128.5, "completions/clipped_ratio": 0.25, "reward": 0.5, "reward_std": 0.125,
            "frac_reward_zero_std": 0.0, "kl": 0.01, "entropy": 0.75, "clip_ratio/region_mean": 0.0,
            "policy_loss": 0.015, "epoch": 0.1 * step, "step": step}


def trainer_state(entries: list) -> str:
    state = {"best_metric": None, "epoch": 0.3, "global_step": 3, "log_history": entries, "max_steps": 3,
             "logging_steps": 1, "trial_name": None}
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def test_trl_trainer_state(tmp_path):
    entries = [trl_logs(1), trl_logs(2), {"epoch": 0.25, "note": "no step"}, trl_logs(3),
               {"epoch": 0.3, "step": 3, "total_flos": 0.0, "train_loss": 0.02, "train_runtime": 12.5}]
    path = tmp_path / "trainer_state.json"
    path.write_text(trainer_state(entries))
    read = log_files.read_log(path, "trl")
    assert read.format == "trainer-state" and [r["global_step"] for r in read.rows] == [1, 2, 3]
    text = path.read_text().splitlines()
    [line] = read.not_understood
    assert text[line - 1].strip() == "{" and '"note": "no step"' in "\n".join(text[line:line + 3])
    row = read.rows[1]
    assert row["actor_lr"] == 2e-6 and row["response_length"] == 128.5 and row["truncated"] == 0.25
    assert row["group_reward_std"] == 0.125 and row["policy_loss"] == 0.015 and row["ppo_clip_ratio"] == 0.0
    assert row["loss"] == 0.02  # policy_loss logged too: "loss" keeps its own name
    assert read.rows[2]["train_runtime"] == 12.5  # the summary entry merges into its step


def test_trl_older_names(tmp_path):
    old = {"loss": 0.03, "learning_rate": 5e-7, "completion_length": 200.0, "reward": 0.4, "step": 1}
    path = tmp_path / "trainer_state.json"
    path.write_text(trainer_state([old]))
    row = log_files.read_log(path, "trl").rows[0]
    assert row == {"global_step": 1, "policy_loss": 0.03, "actor_lr": 5e-7, "response_length": 200.0, "reward": 0.4}


def test_one_vocabulary_whichever_reader(tmp_path):
    """TRL's metrics through trainer_state.json, a JSONL and TensorBoard: the same canonical names."""
    logs = [trl_logs(1), trl_logs(2)]
    state = tmp_path / "trainer_state.json"
    state.write_text(trainer_state(logs))
    jsonl = write(tmp_path, "metrics.jsonl", [json.dumps(e) for e in logs])
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for entry in logs:
        for key, value in entry.items():
            if key != "step":
                writer.add_scalar(f"train/{key}", value, entry["step"])
    writer.close()
    names = [set(log_files.read_log(p, "trl").rows[1]) - {"time", "epoch"} for p in (state, jsonl, tmp_path / "tb")]
    assert names[0] == names[1] == names[2]
    assert {"actor_lr", "group_reward_std", "response_length", "policy_loss"} <= names[0]


def test_a_ratio_logged_in_parts():
    """A canonical metric a trainer logs only as the means of its parts (OpenRLHF's agent
    token counts): their quotient, 0 over a zero denominator (as the local trainer counts it), absent
    when a part is, never over a value logged under the canonical name itself; the parts keep their
    names. Reference values by hand."""
    from rlexp.training.metric_names import canonical_row

    row = canonical_row({"agent_tokens_per_episode": 6.0, "generated_tokens_per_episode": "8.0",
                         "env_latency_s_per_episode": 0.0, "turns_per_episode": 0.0}, "openrlhf")
    assert row == {"agent_tokens_per_episode": 6.0, "generated_tokens_per_episode": "8.0",
                   "env_latency_s_per_episode": 0.0, "turns_per_episode": 0.0,
                   "agent_token_fraction": 0.75, "env_latency_s": 0.0}
    assert "agent_token_fraction" not in canonical_row({"agent_tokens_per_episode": 6.0}, "openrlhf")
    assert canonical_row({"agent_tokens_per_episode": 6.0, "generated_tokens_per_episode": 8.0,
                          "agent_token_fraction": 0.5}, "openrlhf")["agent_token_fraction"] == 0.5
    # verl: chat messages (numpy scalars as its console prints them), two per model turn
    assert canonical_row({"num_turns/mean": "np.float64(3.5)"}, "verl")["turns_per_episode"] == 1.75


# --- JSONL ----------------------------------------------------------------------------------------

def test_jsonl_one_bad_line_counted(tmp_path):
    lines = ['{"step": 1, "reward": 0.5}', '{"step": 2, "reward": NaN}', "not json", '{"reward": 0.1}',
             '{"step": 3, "clip_ratio": 0.1}']
    read = log_files.read_log(write(tmp_path, "training_metrics.jsonl", lines), "openrlhf")
    assert read.not_understood == [3, 4] and [r["global_step"] for r in read.rows] == [1, 2, 3]
    assert math.isnan(read.rows[1]["reward"]) and read.rows[2] == {"global_step": 3, "ppo_clip_ratio": 0.1}


# --- the verb -------------------------------------------------------------------------------------

def test_ingest_verb_text_and_json(tmp_path, capsys):
    lines = openrlhf_lines([(s, status_011(s)) for s in (1, 2, 3)])
    lines[1] = lines[1][:lines[1].index("Global step")] + "Global step 2: {broken"
    path = write(tmp_path, "train.log", lines)
    rc, out, err = cli(["ingest", str(path), "--trainer", "openrlhf"], capsys)
    assert rc == 0 and "read 2 steps; 1 line not understood: 2" in out and "entropy (2)" in out
    rc, out, _ = cli(["ingest", str(path), "--trainer", "openrlhf", "--json"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["not_understood"] == [2] and [s["step"] for s in doc["steps"]] == [1, 3]
    assert doc["steps"][0]["metrics"]["ppo_kl"] == 0.001 and doc["runs"][0]["first_step"] == 1


def test_ingest_verb_refusals(tmp_path, capsys):
    pointer = tmp_path / "trainer_state.json"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "a" * 64 + "\nsize 123456\n")
    rc, _, err = cli(["ingest", str(pointer), "--trainer", "trl"], capsys)
    assert rc == 2 and "Git LFS pointer" in err and "git lfs pull" in err and len(err.splitlines()) == 1
    empty = write(tmp_path, "x.log", ["nothing here"])
    rc, _, err = cli(["ingest", str(empty), "--trainer", "verl"], capsys)
    assert rc == 2 and "no metric steps" in err and len(err.splitlines()) == 1
    rc, _, err = cli(["ingest", str(empty), "--trainer", "nemo"], capsys)
    assert rc == 2 and "--trainer" in err


@pytest.mark.parametrize("fmt", ["openrlhf-console", "verl-console", "verl-file", "jsonl", "trainer-state"])
def test_ingest_fuzz_any_bytes_one_line(tmp_path, capsys, fmt):
    rng = random.Random(fmt)
    seeds = [b"\xff\xfe\x00", b"{" * 5000, b"[" * 100000, b"Global step 1: {" * 300, b"step:1 - a:" * 300,
             b'{"log_history": [{"step": 1e999}]}', b'{"step": -1, "data": {}}']
    for i in range(40):
        if i < len(seeds):
            data = seeds[i]
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 10, 200, 5000])))
        path = tmp_path / f"f{i}"
        path.write_bytes(data)
        rc, out, err = cli(["ingest", str(path), "--trainer", "openrlhf", "--format", fmt], capsys)
        assert rc in (0, 2), (fmt, data[:40])
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("rlexp: "), err


def test_strict_followers_still_refuse_bad_lines(tmp_path):
    path = write(tmp_path, "m.jsonl", ['{"step": 1}', "{bad"])
    with pytest.raises(InputError, match="line 2"):
        ingest.read_training_metrics_jsonl(path, trainer="openrlhf")


def test_stdout_follower_counts_unreadable_lines_and_restarts(tmp_path):
    lines = openrlhf_lines([(s, {"reward": 0.5, "kl": float("nan") if s == 3 else 0.1}) for s in (1, 2, 3)])
    lines[1] = lines[1][:lines[1].index("Global step 2:")] + "Global step 2: <lost>"  # nothing readable
    restart = openrlhf_lines([(1, {"reward": 0.9})])
    log = write(tmp_path, "stdout.log", lines + restart)
    follower = followers.MetricsFollower("stdout", log, tmp_path / "metrics.jsonl", trainer="openrlhf", console=console.CONSOLE)
    rows = follower.close()
    assert [r["global_step"] for r in rows] == [1, 3]
    assert follower.stats.not_understood == [2] and follower.stats.restarts == [4]
    assert follower.stats.nonfinite_steps == {3: ["kl"]} and math.isnan(rows[1]["kl"])  # kept, flagged
    assert '"kl": "NaN"' in (tmp_path / "metrics.jsonl").read_text()  # strict JSON's spelling on disk
    assert math.isnan(metrics_file.read_metrics(tmp_path / "metrics.jsonl")[1]["kl"])
    rows, stats = log_files.finite_rows(log_files.read_log(log, "openrlhf", "openrlhf-console"))
    assert stats.runs == 2 and [r["global_step"] for r in rows] == [1] and rows[0]["reward"] == 0.9
