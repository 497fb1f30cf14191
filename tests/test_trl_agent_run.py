"""TRL's GRPOTrainer on the demo's tool task, for real on CPU: `rlexp launch` writes the rollout
module (rlexp.trainers.trl.agent), TRL 1.16 trains the calculator episodes through its
``rollout_func``/``env_mask`` for a few steps, the environment's tokens are masked where the
rollout's own records put them, TRL read that mask, the episode metrics reach metrics.jsonl and
MLflow under the local trainer's names, and `rlexp eval` + `rlexp decide` run on its checkpoints.
Needs .venv-trl (scripts/setup-trl); CI builds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trl_tool_task import read_episodes, read_metrics, train_tool_task
from trl_venv import trl_python_or_skip

REPO = Path(__file__).resolve().parents[1]
TRL_PYTHON = trl_python_or_skip()
pytest.importorskip("torch")

pytestmark = pytest.mark.slow

# by hand: B 8 × W 1 × S 1 = 8 completions per generation batch, G 4 -> P = 2 prompts; 8 prompts
# -> 4 chunks -> L = 4 batches, GA 1 -> 4 optimizer steps in one epoch
SPEC = """\
trainer: {name: trl}
recipe:
  model_name_or_path: models/tools-base
  per_device_train_batch_size: 8
  gradient_accumulation_steps: 1
  num_generations: 4
  num_train_epochs: 1
  max_completion_length: 48
  temperature: 1.0
  learning_rate: 2.0e-4
  beta: 0.0
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
  pool: {path: data/pool_8.jsonl}
  ood_monitor: {path: data/ood_monitor_4.jsonl}
  ood_primary: {path: data/ood_primary_8.jsonl}
  id: {path: data/id_4.jsonl}
  sanity: {path: data/sanity_4.jsonl}
eval: {engine: local, max_tokens: 14}
environment:
  name: calculator
  config: {max_calls: 2}
  max_turns: 3
  max_tokens_per_turn: 14
  max_total_tokens: 48
  primary_metric: success
"""
STEPS = [1, 2, 3, 4]
EPISODE_METRICS = ("turns_per_episode", "tool_calls_per_episode", "env_errors", "agent_token_fraction",
                   "env_latency_s", "episode_return")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    # a supervised base that calls the calculator in about half its episodes (headroom, and env tokens)
    return train_tool_task(tmp_path_factory.mktemp("trl_agent") / "exp", SPEC, sft_steps=100)


def test_trl_trains_the_tool_task_through_the_generated_rollout(trained):
    attempt, result = trained
    log = (attempt / "launch" / "stdout.log").read_text()
    assert result.state == "finished", log[-3000:]
    assert result.argv[1].endswith("train_trl.py")
    assert result.argv[2:] == ("--rollout-module", str(attempt.resolve() / "launch" / "trl_rollout.py"))
    assert "from rlexp.environments.interface import CalculatorEnv" in (attempt / "launch" / "trl_rollout.py").read_text()
    assert "rlexp: TRL max_steps=4" in log
    state = json.loads((attempt / "checkpoints" / "trl" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    saved = sorted(p.name for p in (attempt / "checkpoints").glob("global_step*_hf"))
    assert saved == ["global_step2_hf", "global_step4_hf"]


def test_env_mask_zeros_are_the_environment_tokens(trained):
    from transformers import AutoTokenizer

    from rlexp.environments.episodes import render_user_turn
    from rlexp.evaluation.generation import encode_prompt

    attempt, _ = trained
    tok = AutoTokenizer.from_pretrained(attempt.parent / "models" / "tools-base")
    episodes = read_episodes(attempt)
    # one episode per completion TRL asked for: 8 per step, each prompt 4 times in a row
    assert [e["global_step"] for e in episodes] == [s for s in STEPS for _ in range(8)]
    for group in range(0, len(episodes), 4):
        assert len({tuple(e["prompt_ids"]) for e in episodes[group:group + 4]}) == 1
    with_feedback = 0
    for e in episodes:
        # the mask rebuilt from the turns' own token counts: a turn's action tokens, then its feedback's
        expected, feedback_ids = [], []
        for turn in e["turns"]:
            expected += [1] * turn["action_tokens"] + [0] * turn["feedback_tokens"]
            if turn["feedback_tokens"]:
                # the feedback as the chat template renders a user turn, tokenised here on its own
                ids = encode_prompt(tok, render_user_turn(tok, turn["feedback"]))
                assert len(ids) == turn["feedback_tokens"]
                feedback_ids.append(ids)
        if e["finish_reason"] == "env_error":  # out of the loss: masked whole
            assert set(e["env_mask"]) <= {0} and len(e["completion_ids"]) == max(len(expected), 1)
            continue
        assert e["env_mask"] == expected and len(e["completion_ids"]) == len(expected)
        zeros = [t for t, m in zip(e["completion_ids"], e["env_mask"], strict=True) if m == 0]
        assert zeros == [t for ids in feedback_ids for t in ids]
        with_feedback += bool(feedback_ids)
    assert with_feedback > 0, "no episode called the tool: the mask was never tested"


def test_trl_read_the_env_mask_and_the_reward(trained):
    attempt, _ = trained
    episodes, rows = read_episodes(attempt), read_metrics(attempt)
    assert sorted(rows) == STEPS
    differs = 0
    for step in STEPS:
        batch = [e for e in episodes if e["global_step"] == step]
        agent = [sum(e["env_mask"]) for e in batch]
        full = [len(e["completion_ids"]) for e in batch]
        # TRL counts completion lengths over env_mask == 1 when it is given (completions/mean_length)
        assert rows[step]["response_length"] == pytest.approx(sum(agent) / len(agent), rel=1e-6)
        differs += sum(full) != sum(agent)
        # an environment-error episode's reward is None: TRL leaves it out of the reward it logs
        scored = [e["return"] for e in batch if e["finish_reason"] != "env_error"]
        assert rows[step]["reward"] == pytest.approx(sum(scored) / len(scored), rel=1e-6, abs=1e-7)
    assert differs > 0


def test_episode_metrics_have_the_local_trainer_names(trained):
    attempt, _ = trained
    episodes, rows = read_episodes(attempt), read_metrics(attempt)
    for step in STEPS:
        batch = [e for e in episodes if e["global_step"] == step]
        row = rows[step]
        assert set(EPISODE_METRICS) <= set(row), sorted(row)
        # recomputed from the records by hand (not by episode_metrics)
        assert row["turns_per_episode"] == pytest.approx(sum(len(e["turns"]) for e in batch) / 8, rel=1e-6)
        calls = sum(sum(t["tool_call"] for t in e["turns"]) for e in batch)
        assert row["tool_calls_per_episode"] == pytest.approx(calls / 8, rel=1e-6, abs=1e-7)
        agent = sum(sum(e["env_mask"]) for e in batch)
        assert row["agent_token_fraction"] == pytest.approx(agent / sum(len(e["completion_ids"]) for e in batch),
                                                            rel=1e-6)
        assert row["env_errors"] == pytest.approx(sum(e["finish_reason"] == "env_error" for e in batch) / 8, abs=1e-7)
        assert ("monitor_acc" in row) == (step in (2, 4))


def test_episode_metrics_reach_mlflow(trained):
    from mlflow.tracking import MlflowClient

    attempt, _ = trained
    client = MlflowClient(f"sqlite:///{attempt.parent / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    for name in ("turns_per_episode", "tool_calls_per_episode", "agent_token_fraction"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == STEPS


def test_eval_and_decide_work_on_its_checkpoints(trained):
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate

    attempt, _ = trained
    evaluate(attempt, show_progress=False)
    selection = json.loads((attempt / "eval" / "selection.json").read_text())
    assert selection["final"] == 4 and selection["mid"] == 2
    record = json.loads((attempt / "eval" / "global_step4" / "ood_primary.jsonl").read_text().splitlines()[0])
    assert "trajectory" in record  # evaluated as episodes
    assert (attempt / "eval" / "baseline_s0" / "ood_primary.jsonl").exists()
    decision = decide(attempt).to_dict()
    assert decision["decision"] in ("STOP-1", "CONFIRM", "CONTINUE", "STOP-3a", "STOP-3b", "DEBUG")
    assert (attempt / "decision.json").exists()
    # the report's environment section reads the TRL run's episode metrics from metrics.jsonl
    from rlexp.stages.report import report

    written = report(attempt, reports_dir=attempt.parent / "reports",
                     tracking_uri=f"sqlite:///{attempt.parent / 'mlflow.db'}")
    text = Path(written.report).read_text()
    first, last = read_metrics(attempt)[1], read_metrics(attempt)[4]
    assert (f"| tool_calls_per_episode | {first['tool_calls_per_episode']:.3f} | "
            f"{last['tool_calls_per_episode']:.3f} |") in text
