"""TRL's GRPOTrainer for real, on CPU: `rlexp launch` trains the demo's tiny model for a few steps
with trainer.name trl, and its max_steps and logged LR equal the plan at every step; then `rlexp
eval` and `rlexp decide` work on its checkpoints. Needs .venv-trl (scripts/setup-trl); CI builds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trl_venv import trl_python_or_skip

REPO = Path(__file__).resolve().parents[1]
TRL_PYTHON = trl_python_or_skip()
pytest.importorskip("torch")

SPEC = """\
trainer: {name: trl}
recipe:
  model_name_or_path: models/tiny-base
  per_device_train_batch_size: 4
  gradient_accumulation_steps: 2
  num_generations: 4
  num_train_epochs: 1
  max_completion_length: 8
  learning_rate: 1.0e-3
  lr_scheduler_type: cosine
  warmup_steps: 1
  logging_steps: 1
  eval_strategy: steps
  eval_steps: 2
  save_strategy: steps
  save_steps: 2
  bf16: false
  seed: 7
intent: {global_steps: 4}
checkpoints: {mid: 2}
datasets:
  pool: {path: data/pool_9.jsonl}
  ood_monitor: {path: data/ood_monitor_8.jsonl}
  ood_primary: {path: data/ood_primary_16.jsonl}
  id: {path: data/id_8.jsonl}
  sanity: {path: data/sanity_18.jsonl}
eval: {engine: local, max_tokens: 8}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model
    from rlexp.stages.launch import launch

    root = tmp_path_factory.mktemp("trl") / "exp"
    build_task_datasets(root / "data", seed=0, pool_size=9, monitor_size=8, primary_size=16, id_size=8)
    build_tiny_model(root / "models" / "tiny-base", seed=0)
    attempt = root / "t1"
    attempt.mkdir()
    (attempt / "attempt.yaml").write_text(SPEC)
    result = launch(attempt, tracking_uri=f"sqlite:///{root / 'mlflow.db'}", poll_s=0.2)
    return attempt, result


def test_launch_runs_trl_with_the_planned_steps_and_lr(trained):
    attempt, result = trained
    log = (attempt / "launch" / "stdout.log").read_text()
    assert result.state == "finished", log[-3000:]
    assert result.argv[0] == str(TRL_PYTHON) and result.argv[1].endswith("train_trl.py")
    plan = json.loads((attempt / "plan.json").read_text())
    # by hand: S = GA = 2, P = 4·1·2/4 = 2 prompts; floor(9/2) = 4 chunks; L = 8; ceil(8/2) = 4 steps
    assert plan["steps"]["optimizer_steps_total"] == 4 and plan["steps"]["warmup_steps"] == 1
    # TRL's own count, printed by the generated script from transformers' TrainerState
    assert "rlexp: TRL max_steps=4 warmup_steps=1" in log
    assert "rlexp: trl 1.16.0 transformers 5.24.0 torch 2.13.0" in log
    provenance = json.loads((attempt / "launch" / "provenance.json").read_text())
    assert json.dumps(provenance).count('"trl": "1.16.0"') == 1
    state = json.loads((attempt / "checkpoints" / "trl" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["max_steps"] == 4 and state["global_step"] == 4
    planned = {r["global_step"]: r for r in plan["lr"]}
    logged = {e["step"]: e["learning_rate"] for e in state["log_history"] if "learning_rate" in e}
    assert sorted(logged) == [1, 2, 3, 4]
    for step, lr in logged.items():
        # transformers 5.24 reads the logged LR before scheduler.step(): the LR this step applied (not
        # the next step's, as older releases logged); step 1 is 0.0 (warm-up of 1 step: λ(0) = 0)
        assert lr == pytest.approx(planned[step]["actor_lr_logged"], rel=1e-12, abs=1e-18), step
        assert lr == pytest.approx(planned[step]["lr_first"], rel=1e-12, abs=1e-18), step
        if step > 1:
            assert lr != pytest.approx(planned[step - 1]["lr_first"], rel=1e-6)  # the steps are told apart
    assert logged[1] == 0.0 and logged[2] == pytest.approx(1e-3, rel=1e-12)
    # the same values through TensorBoard (float32) into metrics.jsonl
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert row["actor_lr"] == pytest.approx(logged[row["global_step"]], rel=1e-6)
        assert 0.0 <= row["reward"] <= 1.0 and "grad_norm" in row and "response_length" in row
        assert ("monitor_acc" in row) == (row["global_step"] in (2, 4))
    saved = sorted(p.name for p in (attempt / "checkpoints").glob("global_step*_hf"))
    assert saved == ["global_step2_hf", "global_step4_hf"] == [f"global_step{g}_hf" for g in plan["save_global_steps"]]


def test_metrics_reach_mlflow(trained):
    from mlflow.tracking import MlflowClient

    attempt, _ = trained
    client = MlflowClient(f"sqlite:///{attempt.parent / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert len(runs) == 1
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "actor_lr")] == [1, 2, 3, 4]


def test_eval_and_decide_work_on_its_checkpoints(trained):
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate

    attempt, _ = trained
    evaluate(attempt, show_progress=False)
    selection = json.loads((attempt / "eval" / "selection.json").read_text())
    assert selection["final"] == 4 and selection["mid"] == 2
    assert (attempt / "eval" / "global_step4" / "ood_primary.jsonl").exists()
    assert (attempt / "eval" / "baseline_s0" / "ood_primary.jsonl").exists()
    decision = decide(attempt).to_dict()
    assert decision["decision"] in ("STOP-1", "CONFIRM", "CONTINUE", "STOP-3a", "STOP-3b", "DEBUG")
    assert (attempt / "decision.json").exists()
