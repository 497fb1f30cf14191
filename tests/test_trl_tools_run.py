"""TRL's GRPOTrainer with ``environment_factory`` on the demo's tool task, for real on CPU: an attempt
with ``environment.actions: tool_calls``; `rlexp launch` writes the environment_factory module
(rlexp.trainers.trl.agent_tools: the calculator's and the search's tools as methods), TRL 1.16
generates, parses the tiny model's tool calls with its response template, calls the tools and masks
their results. Checked against the chat template's own rendering, not rlexp's code: the tools were
called (counted by the environments), TRL's completion ids are the rendered conversation, the
mask's zeros (read back through TRL's mask-counted ``completions/mean_length``) are the tool
results' tokens, and the reward TRL logs is the episodes' mean return.
Needs .venv-trl (scripts/setup-trl); CI builds it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from trl_tool_task import read_episodes, read_metrics, train_tool_task
from trl_venv import trl_python_or_skip

REPO = Path(__file__).resolve().parents[1]
TRL_PYTHON = trl_python_or_skip()
pytest.importorskip("torch")

pytestmark = pytest.mark.slow

# by hand: B 8 × W 1 × S 1 = 8 completions per generation batch, G 4 -> P = 2 prompts; 8 prompts
# -> 4 chunks -> 4 optimizer steps in one epoch (stated: 3)
SPEC = """\
trainer: {name: trl}
recipe:
  model_name_or_path: models/tools-base-calls
  per_device_train_batch_size: 8
  gradient_accumulation_steps: 1
  num_generations: 4
  num_train_epochs: 1
  max_steps: 3
  max_completion_length: 48
  temperature: 1.0
  learning_rate: 2.0e-4
  beta: 0.0
  logging_steps: 1
  eval_strategy: steps
  eval_steps: 3
  save_strategy: steps
  save_steps: 3
  bf16: false
  seed: 7
intent: {global_steps: 3}
datasets:
  pool: {path: data/pool_8.jsonl}
  ood_monitor: {path: data/ood_monitor_4.jsonl}
  ood_primary: {path: data/ood_primary_8.jsonl}
  id: {path: data/id_4.jsonl}
  sanity: {path: data/sanity_4.jsonl}
eval: {engine: local, max_tokens: 48}
environment:
  name: calculator
  config: {max_calls: 2}
  actions: tool_calls
  max_turns: 3
  max_tokens_per_turn: 48
  max_total_tokens: 48
  primary_metric: success
"""
STEPS = [1, 2, 3]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    # a base supervised on tool-call episodes (half of them call a tool): headroom, and tool results to mask
    return train_tool_task(tmp_path_factory.mktemp("trl_tools") / "exp", SPEC, sft_steps=200, actions="tool_calls")


def test_trl_trains_through_the_generated_environment_factory(trained):
    attempt, result = trained
    log = (attempt / "launch" / "stdout.log").read_text()
    assert result.state == "finished", log[-3000:]
    module = attempt.resolve() / "launch" / "trl_tools.py"
    assert result.argv[2:] == ("--rollout-module", str(module))
    text = module.read_text()
    assert "from rlexp.environments.interface import CalculatorEnv as Env0" in text
    assert "def calc(self, expression: str) -> str:" in text and "def look(self, key: str) -> str:" in text
    script = (attempt / "launch" / "train_trl.py").read_text()
    assert "return train(CONFIG, argv, environment_factory=True)" in script
    assert '"max_tool_calling_iterations": 2' in script  # max_turns 3 - 1
    assert "rlexp: TRL max_steps=3" in log
    assert sorted(p.name for p in (attempt / "checkpoints").glob("global_step*_hf")) == ["global_step3_hf"]
    # the checkpoint keeps the tool-calling template and its response template
    saved = json.loads((attempt / "checkpoints" / "global_step3_hf" / "tokenizer_config.json").read_text())
    assert "response_template" in saved


def test_the_tools_were_called_in_the_environments(trained):
    attempt, _ = trained
    episodes, rows = read_episodes(attempt), read_metrics(attempt)
    assert [e["global_step"] for e in episodes] == [s for s in STEPS for _ in range(8)]
    # what the model was asked: reset()'s observation appended to the empty user message (the task's prompt)
    assert all(e["prompt"] == [{"role": "user", "content": e["task"]["prompt"]}] for e in episodes)
    calls = [t for e in episodes for t in e["turns"] if t["tool"] is not None]
    assert calls, "no episode called a tool"
    for turn in calls:  # played by the environment as its text action
        assert turn["tool_call"] and turn["action"].split()[0] in ("calc", "look") and turn["tool"] in ("calc", "look")
    for step in STEPS:
        batch = [e for e in episodes if e["global_step"] == step]
        # TRL's own count of the calls it made (tools/call_frequency per completion), less the ones
        # that failed (tools/failure_frequency per call: a wrong argument name, a call after the end)
        played = sum(t["tool"] is not None for e in batch for t in e["turns"])
        made = rows[step]["tools/call_frequency"] * 8
        assert made * (1 - rows[step]["tools/failure_frequency"]) == pytest.approx(played, abs=1e-5)
        assert rows[step]["tool_calls_per_episode"] == pytest.approx(played / 8, abs=1e-7)


def test_the_tool_mask_zeros_are_the_chat_templates_tool_turns(trained):
    from transformers import AutoTokenizer

    attempt, _ = trained
    tok = AutoTokenizer.from_pretrained(attempt.parent / "models" / "tools-base-calls")
    episodes, rows = read_episodes(attempt), read_metrics(attempt)
    model_tokens: dict[int, list[int]] = {}
    masked = 0
    for e in episodes:
        ids, pos, mask = e["completion_ids"], 0, []
        history = [{"role": "user", "content": e["task"]["prompt"]}]
        messages = e["messages"]
        k = 0
        while k < len(messages):
            if messages[k]["role"] == "tool":
                # a run of tool results: the template's tool turns and the next generation prompt,
                # rendered here from the messages alone
                run = messages[k:k + next((i for i, m in enumerate(messages[k:]) if m["role"] != "tool"),
                                          len(messages) - k)]
                before = tok.apply_chat_template(history, tokenize=False)
                after = tok.apply_chat_template(history + run, tokenize=False, add_generation_prompt=True)
                assert after.startswith(before)
                piece = tok(after[len(before):], add_special_tokens=False)["input_ids"]
                assert ids[pos:pos + len(piece)] == piece, (tok.decode(ids), after[len(before):])
                mask, pos, k = mask + [0] * len(piece), pos + len(piece), k + len(run)
                history += run
                masked += 1
            else:  # a model turn: the model's tokens up to its EOS (or the end of the completion)
                end = ids.index(tok.eos_token_id, pos) + 1 if tok.eos_token_id in ids[pos:] else len(ids)
                mask, pos, k = mask + [1] * (end - pos), end, k + 1
                history.append(messages[k - 1])
        assert pos == len(ids), (tok.decode(ids), messages)  # nothing else in the completion
        model_tokens.setdefault(e["global_step"], []).append(sum(mask))
    assert masked > 0, "no tool result was masked: the mask was never tested"
    for step in STEPS:
        # TRL counts completion lengths over its tool_mask (1 = model token): its zeros are those tool turns
        assert rows[step]["response_length"] == pytest.approx(sum(model_tokens[step]) / 8, rel=1e-6)


def test_the_reward_and_episode_metrics_reach_trls_logs(trained):
    attempt, _ = trained
    episodes, rows = read_episodes(attempt), read_metrics(attempt)
    for step in STEPS:
        batch = [e for e in episodes if e["global_step"] == step]
        # the return recomputed from the turns' rewards, not the record's own sum
        returns = [sum(t["reward"] for t in e["turns"]) for e in batch]
        assert [e["return"] for e in batch] == returns
        assert rows[step]["reward"] == pytest.approx(sum(returns) / 8, rel=1e-6, abs=1e-7)
        assert rows[step]["episode_return"] == pytest.approx(sum(returns) / 8, rel=1e-6, abs=1e-7)
        turns = sum(sum(m["role"] == "assistant" for m in e["messages"]) for e in batch)
        assert rows[step]["turns_per_episode"] == pytest.approx(turns / 8, rel=1e-6)
        assert ("monitor_acc" in rows[step]) == (step == 3)
    # the environment graded some final answers (a reward of 1 needs a right \\boxed{N} after the call)
    assert any(t["tool"] is None for e in episodes for t in e["turns"])


MONITOR = """
import importlib.util, json, sys
attempt, model_dir = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("tools", attempt + "/launch/trl_tools.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from transformers import AutoModelForCausalLM, AutoTokenizer
from rlexp.trainers.trl import agent_tools
tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir).eval()
rows = module.train_rows([json.loads(line) for line in open(sys.argv[3])], "", "monitor")
for row in rows:
    record = agent_tools.greedy_tool_episode(model, tok, module.ENVIRONMENT_FACTORY[row["environment"]](), row["row"],
                                             max_turns=3, max_total_tokens=48)
    print(json.dumps(record))
"""


def test_the_monitors_greedy_episodes_call_the_tools(trained):
    """The in-run monitor's loop (run in TRL's venv, as the training script runs it) on the base:
    the tools are called, their results reach the next turn, the final answer is graded."""
    attempt, _ = trained
    exp = attempt.parent
    done = subprocess.run([str(TRL_PYTHON), "-c", MONITOR, str(attempt), str(exp / "models" / "tools-base-calls"),
                           str(exp / "data" / "pool_8.jsonl")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(records) == 8
    calls = [t for r in records for t in r["turns"] if t["tool"] is not None]
    assert calls and all(t["tool_call"] for t in calls) and any(t["feedback"] for t in calls)
    for r in records:  # the return is the graded final answer's (the turns' rewards, summed by hand)
        assert r["return"] == sum(t["reward"] for t in r["turns"])
        if r["finish_reason"] == "stop" and r["turns"] and r["turns"][-1]["tool"] is None:
            final, gold = r["turns"][-1]["action"], r["task"]["answer"]
            if final == "\\boxed{" + gold + "}":
                assert r["return"] == 1.0
            elif gold not in final:
                assert r["return"] == 0.0
