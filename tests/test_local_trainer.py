"""The local GRPO trainer as a process: a short real run, SIGKILL + --resume, SIGTERM, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rlexp.experiment.files import read_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOTAL = 6  # global steps of the tiny run

SPEC = """\
id: {id}
trainer: {{name: local}}
recipe:
  pretrain: models/tiny-base
  advantage_estimator: {estimator}
  eps_clip: 0.2
  init_kl_coef: 0.01
  n_samples_per_prompt: 4
  rollout_batch_size: 4
  train_batch_size: 8
  micro_train_batch_size: 4
  actor_learning_rate: 1.0e-3
  lr_warmup_ratio: 0.2
  lora_rank: 4
  lora_alpha: 8
  target_modules: [q_proj, v_proj]
  temperature: 1.0
  generate_max_len: 8
  eval_steps: 3
  save_steps: 2
  seed: 7
intent: {{global_steps: {total}}}
datasets:
  pool: {{path: data/pool_64.jsonl}}
  ood_monitor: {{path: data/ood_monitor_20.jsonl}}
  ood_primary: {{path: data/ood_primary_40.jsonl}}
  id: {{path: data/id_20.jsonl}}
  sanity: {{path: data/sanity_18.jsonl}}
eval: {{engine: local, max_tokens: 8}}
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("exp")
    build_task_datasets(root / "data", seed=0, pool_size=64, monitor_size=20, primary_size=40, id_size=20)
    build_tiny_model(root / "models" / "tiny-base", seed=0)
    return root


def make_attempt(root: Path, attempt_id: str, estimator: str = "group_norm", total: int = TOTAL) -> Path:
    d = root / attempt_id
    d.mkdir()
    (d / "attempt.yaml").write_text(SPEC.format(id=attempt_id, estimator=estimator, total=total))
    return d


def trainer_cmd(attempt: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlexp.backends.local_trainer", str(attempt), *extra]


def env() -> dict[str, str]:
    return {**os.environ, "RLEXP_TORCH_THREADS": "1", "PYTHONPATH": str(REPO)}


def run(attempt: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        trainer_cmd(attempt, *extra), env=env(), capture_output=True, text=True, timeout=300
    )


def wait_for_rows(proc: subprocess.Popen, metrics: Path, rows: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.exists() and metrics.read_text().count("\n") >= rows:
            return
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early: {proc.returncode}")
        time.sleep(0.05)
    raise AssertionError("trainer too slow")


def predicted_actor_lr(attempt: Path) -> dict[int, float]:
    from rlexp.spec import load_attempt
    from rlexp.training.schedule import compute_steps, logged_actor_lr

    att = load_attempt(attempt)
    steps = compute_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, trainer="local")
    return {g: logged_actor_lr(g, steps) for g in range(1, steps.global_steps_total + 1)}


FIELDS = {
    "global_step", "policy_loss", "actor_lr", "reward", "response_length", "kl", "ppo_clip_ratio",
    "group_reward_std", "grad_norm", "ratio_max", "log_ratio_abs_p99", "entropy", "has_boxed",
    "truncated", "step_time_s", "time",
}  # fmt: skip


@pytest.mark.slow
def test_sigkill_then_resume_reaches_the_end_without_duplicates(experiment):
    # Reference: one uninterrupted run.
    straight = make_attempt(experiment, "straight")
    started_at = time.time()
    done = run(straight)
    assert done.returncode == 0, done.stderr
    reference = read_jsonl(straight / "metrics.jsonl")
    assert [r["global_step"] for r in reference] == list(range(1, TOTAL + 1))
    # each step's own time (Unix seconds), in order, within the run: what MLflow stores as its timestamp
    times = [r["time"] for r in reference]
    assert times == sorted(times) and started_at <= times[0] and times[-1] <= time.time()
    for row in reference:
        assert set(row) >= FIELDS
        assert ("monitor_acc" in row) == (row["global_step"] % 3 == 0)
        assert row["grad_norm"] >= 0 and 0 <= row["reward"] <= 1
    # The logged LR is what rlexp.training.schedule predicts (OpenRLHF 0.11: get_last_lr after the step).
    lrs = predicted_actor_lr(straight)
    assert [r["actor_lr"] for r in reference] == [lrs[g] for g in range(1, TOTAL + 1)]
    saved = sorted(p.name for p in (straight / "checkpoints").glob("global_step*_hf"))
    assert saved == ["global_step2_hf", "global_step4_hf", "global_step6_hf"]
    assert (straight / "checkpoints" / "global_step2_hf" / "adapter_config.json").exists()

    # Killed run: SIGKILL once step 3 is logged (state saved at 2), then --resume.
    killed = make_attempt(experiment, "killed")
    metrics = killed / "metrics.jsonl"
    proc = subprocess.Popen(trainer_cmd(killed), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_rows(proc, metrics, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(read_jsonl(metrics)) >= 3  # rows past the checkpoint exist before the resume
    resumed = run(killed, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    # normally the state of step 2; step 4's only if the kill raced past a whole global step
    assert "resumed from global_step2" in resumed.stdout or "resumed from global_step4" in resumed.stdout
    rows = read_jsonl(metrics)
    assert [r["global_step"] for r in rows] == list(range(1, TOTAL + 1))  # none lost, none duplicated
    assert [r["actor_lr"] for r in rows] == [lrs[g] for g in range(1, TOTAL + 1)]
    # Same seeds, same data order, restored optimizer/scheduler/weights: the same run.
    for got, want in zip(rows, reference, strict=True):
        for key in ("reward", "policy_loss", "kl", "grad_norm", "response_length", "entropy"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), (got["global_step"], key)

    # Resuming a finished run does nothing and keeps every row.
    again = run(killed, "--resume")
    assert again.returncode == 0 and len(read_jsonl(metrics)) == TOTAL


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_and_exits_zero(experiment):
    attempt = make_attempt(experiment, "termed", estimator="dr_grpo", total=40)
    metrics = attempt / "metrics.jsonl"
    proc = subprocess.Popen(trainer_cmd(attempt), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_rows(proc, metrics, 1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    last = read_jsonl(metrics)[-1]["global_step"]
    assert last < 40
    assert (attempt / "checkpoints" / f"global_step{last}_hf" / "adapter_model.safetensors").exists()
    assert (attempt / "checkpoints" / "state" / f"global_step{last}" / "trainer_state.pt").exists()


def test_second_run_without_resume_refuses_to_overwrite(experiment):
    attempt = make_attempt(experiment, "refuse")
    (attempt / "metrics.jsonl").write_text(json.dumps({"global_step": 1}) + "\n")
    result = run(attempt)
    assert result.returncode == 2
    assert "--resume" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unsupported_recipe_is_a_one_line_input_error(experiment):
    attempt = make_attempt(experiment, "bad", estimator="gae")
    result = run(attempt)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "recipe.advantage_estimator" in line and "attempt.yaml" in line
    assert not (attempt / "metrics.jsonl").exists()


def test_demo_recipe_loads_and_spans_its_schedule(experiment):
    import yaml

    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.spec import load_attempt
    from rlexp.stages.demo import DEMO_POOL_SIZE, DEMO_RECIPE
    from rlexp.trainers.local.config import config_from_attempt

    build_task_datasets(experiment / "data", seed=0, pool_size=DEMO_POOL_SIZE, monitor_size=20, primary_size=40,
                        id_size=20)  # fmt: skip
    d = experiment / "demo"
    d.mkdir()
    spec = {
        "id": "demo",
        "trainer": {"name": "local"},
        "recipe": {"pretrain": "models/tiny-base", **DEMO_RECIPE},
        "datasets": {
            "pool": {"path": f"data/pool_{DEMO_POOL_SIZE}.jsonl"},
            "ood_monitor": {"path": "data/ood_monitor_20.jsonl"},
        },
    }
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    cfg = config_from_attempt(load_attempt(d))
    cfg.validate()
    # 1024 prompts × 8 samples / 64 per optimizer step = 128 optimizer steps, warm-up ceil(6.4) = 7,
    # 1024 / 16 = 64 global steps of 2 optimizer steps each.
    steps = cfg.steps(DEMO_POOL_SIZE)  # rlexp.training.schedule's counts: the trainer builds its scheduler with them
    assert (steps.optimizer_steps_total, steps.warmup_steps, steps.global_steps_total) == (128, 7, 64)
    assert steps.optimizer_steps_per_global_step == 2 and steps.micro_batches_per_optimizer_step == 1
    assert cfg.target_modules == tuple(DEMO_RECIPE["target_modules"])


def test_the_local_trainer_resumes_from_its_latest_complete_state(tmp_path):
    """checkpoints/state/global_step{N} with its trainer_state.pt written; a state a killed writer
    left without it does not count, nor do the adapters."""
    from rlexp.experiment.layout import AttemptDir, Checkpoint
    from rlexp.trainers.local.train import latest_state

    ad = AttemptDir(tmp_path / "a")
    assert latest_state(ad.root) is None
    for step, complete in ((4, True), (8, True), (12, False)):
        folder = tmp_path / "a" / "checkpoints" / "state" / f"global_step{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "trainer_state.pt").write_bytes(b"")
    (tmp_path / "a" / "checkpoints" / "global_step16_hf").mkdir()
    assert latest_state(ad.root) == Checkpoint(8, path=tmp_path / "a" / "checkpoints" / "state" / "global_step8")
