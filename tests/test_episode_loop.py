"""The one turn every environment loop shares (rlexp/environments/episode_loop.py), and the runtime modules
the generated trainer files import (their end-to-end checks inside the trainers' own code are in
tests/test_agent_openrlhf.py, tests/test_agent_verl.py and tests/test_trl_agent.py)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import threading
from pathlib import Path

import pytest

from rlexp.environments.episode_loop import (
    reset_environment,
    reset_environment_in_thread,
    step_environment,
    step_environment_in_thread,
    turn_finish,
)
from rlexp.environments.interface import CalculatorEnv, StepResult

REPO = Path(__file__).resolve().parents[1]


class Scripted:
    """An environment answering each action from a script; ``"raise"`` raises."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.threads = []

    def step(self, action_text):
        self.threads.append(threading.get_ident())
        answer = self.answers.pop(0)
        if answer == "raise":
            raise ValueError(f"no answer to {action_text!r}")
        return answer


def test_a_step_reads_the_result_the_one_way():
    env = Scripted([StepResult("fb", 0.5, False, {"tool_call": True}), StepResult("", 1, True, None)])
    first = step_environment(env, "calc 1+1")
    assert (first.reward, first.done, first.feedback, first.tool_call, first.failed) == (0.5, False, "fb", True, False)
    assert first.latency_s >= 0.0
    second = step_environment(env, "\\boxed{2}")
    assert (second.reward, second.done, second.tool_call, dict(second.info)) == (1.0, True, False, {})
    assert isinstance(second.reward, float)  # an int reward is read as a float


def test_a_raising_environment_is_an_outcome_not_a_crash():
    answer = step_environment(Scripted(["raise"]), "x")
    assert answer.failed and answer.result is None and isinstance(answer.error, ValueError)
    assert (answer.reward, answer.done, answer.feedback, answer.tool_call) == (0.0, False, "", False)
    assert answer.error_text() == "ValueError: no answer to 'x'"


def test_the_asynchronous_step_runs_off_the_event_loop():
    env = Scripted([StepResult("fb", 0.25, False, {}), "raise"])
    loop_thread = threading.get_ident()  # asyncio.run runs the loop on the calling thread
    first = asyncio.run(step_environment_in_thread(env, "a"))
    second = asyncio.run(step_environment_in_thread(env, "b"))
    assert first.reward == 0.25 and second.failed
    assert len(env.threads) == 2 and loop_thread not in env.threads


# The finish rules rlexp's rollout has ended episodes by (a cut turn ends the episode as "length"
# even when the environment said done; done ends it as "stop"; the last allowed turn as
# "max_turns"), written out case by case rather than derived from the function.
FINISH_TABLE = [
    # stopped, done, last_turn -> reason
    (False, False, False, "length"),
    (False, True, False, "length"),
    (False, False, True, "length"),
    (False, True, True, "length"),
    (True, True, False, "stop"),
    (True, True, True, "stop"),
    (True, False, True, "max_turns"),
    (True, False, False, None),
]


@pytest.mark.parametrize(("stopped", "done", "last_turn", "reason"), FINISH_TABLE)
def test_turn_finish(stopped, done, last_turn, reason):
    assert turn_finish(stopped=stopped, done=done, last_turn=last_turn) == reason


def test_every_loop_steps_the_environment_through_the_shared_turn():
    """No loop calls ``env.step`` itself: rlexp's rollout, the TRL tool episode and the two runtime
    modules behind the OpenRLHF and verl files all go through rlexp.environments.episode_loop."""
    files = ["rlexp/environments/episodes.py", "rlexp/trainers/trl/agent_tools.py",
             "rlexp/trainers/openrlhf/agent_runtime.py", "rlexp/trainers/verl/agent_runtime.py"]
    for rel in files:
        source = (REPO / rel).read_text()
        assert "episode_loop import" in source, rel
        assert ".step(" not in source, f"{rel} steps an environment itself"
        if not rel.endswith("agent_tools.py"):  # TRL's tool loop sees a failed reset raise, as TRL reports it
            assert ".reset(" not in source, f"{rel} resets an environment itself"


def test_a_failed_reset_is_an_outcome_with_the_empty_observation():
    class Broken:
        def reset(self, task):
            raise KeyError("prompt")

    class Fine:
        def reset(self, task):
            return f"solve {task['prompt']}"

    for start in (reset_environment(Broken(), {}), asyncio.run(reset_environment_in_thread(Broken(), {}))):
        assert start.failed and start.observation == "" and start.error_text() == "reset: KeyError: 'prompt'"
    for start in (reset_environment(Fine(), {"prompt": "1+1"}), asyncio.run(reset_environment_in_thread(Fine(), {"prompt": "1+1"}))):
        assert not start.failed and start.observation == "solve 1+1"


# ----------------------------------------------------------------------------- the runtime modules


def test_openrlhf_run_pools_environments_and_strips_special_tokens():
    from types import SimpleNamespace

    from rlexp.trainers.openrlhf.agent_runtime import AgentRun

    run = AgentRun("calculator", {"max_calls": 2}, max_turns=3, mask_error_episodes=True, outage_episodes=4)
    first = run.take()
    assert isinstance(first, CalculatorEnv) and run.built == 1
    run.idle.append(first)
    assert run.take() is first and run.built == 1  # reused, not rebuilt
    assert run.take() is not first and run.built == 2
    run.tokenizer = SimpleNamespace(all_special_tokens=["<|im_end|>", "<|im", "</s>"])
    assert run.action_text("calc 1+1<|im_end|></s>") == "calc 1+1"  # the longer token first: no "_end|>" left


def test_verl_row_task_reads_rlexps_task_else_the_chat_and_ground_truth():
    from rlexp.trainers.verl.agent_runtime import LoopRun, row_task

    assert row_task({"extra_info": {"rlexp_task": '{"prompt": "p", "answer": "7"}'}}) == {"prompt": "p", "answer": "7"}
    assert row_task({"raw_prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                     "reward_model": {"ground_truth": "3"}}) == {"prompt": "u", "answer": "3"}
    assert row_task({}) == {"prompt": "", "answer": None}
    run = LoopRun("calculator", {}, max_turns=2, max_tokens_per_turn=8, max_total_tokens=16)
    env = run.take()
    run.idle.append(env)
    assert run.take() is env and isinstance(run.take(), CalculatorEnv)


def test_runtime_modules_import_no_trainer_and_nothing_heavy():
    """The generated files' code is importable where the trainer is not: nothing of OpenRLHF, verl,
    TRL, torch or transformers at import time (read from the modules' top-level imports)."""
    heavy = {"torch", "transformers", "trl", "verl", "openrlhf", "datasets", "accelerate"}
    for rel in ("rlexp/environments/episode_loop.py", "rlexp/trainers/openrlhf/agent_runtime.py",
                "rlexp/trainers/verl/agent_runtime.py", "rlexp/trainers/trl/train_runtime.py",
                "rlexp/trainers/trl/rollout_runtime.py", "rlexp/trainers/trl/tools_runtime.py",
                "rlexp/trainers/verl/advantage_runtime.py"):
        tree = ast.parse((REPO / rel).read_text())
        for node in tree.body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not {n.split(".")[0] for n in names} & heavy, (rel, names)


def test_the_trl_reward_functions_keep_their_names_and_keywords():
    """TRL names a reward function's metrics by its ``__name__`` and passes the dataset's columns by
    keyword: the bound methods the generated modules export keep the names the templates had."""
    from rlexp.trainers.trl.rollout_runtime import Rollout
    from rlexp.trainers.trl.tools_runtime import ToolRollout

    assert Rollout.episode_return.__name__ == ToolRollout.episode_return.__name__ == "episode_return"
    params = list(inspect.signature(Rollout.episode_return).parameters)
    assert params[1:4] == ["prompts", "completions", "episode_return"]
    params = list(inspect.signature(ToolRollout.episode_return).parameters)
    assert params[1:5] == ["prompts", "completions", "completion_ids", "environments"]


def test_verls_grpo_over_responses_by_hand():
    """Group "a": returns 1 and 0 with a response, and an error episode (no response, reward 5)
    left out: mean 0.5, sample std sqrt(0.5); group "b": one sample left (mean 0, std 1)."""
    import math

    torch = pytest.importorskip("torch")
    from rlexp.trainers.verl.advantage_runtime import grpo_advantage_over_responses

    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [5.0, 0.0], [0.0, 3.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 0], [1, 1]])
    index = ["a", "a", "a", "b"]
    adv, ret = grpo_advantage_over_responses(rewards, mask, index)
    scaled = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [[scaled, scaled], [-scaled, -scaled], [0.0, 0.0], [3.0 / (1.0 + 1e-6)] * 2]
    assert torch.allclose(adv, torch.tensor(expected), rtol=1e-6, atol=1e-7) and adv is ret
    unscaled, _ = grpo_advantage_over_responses(rewards, mask, index, config={"norm_adv_by_std_in_grpo": False})
    assert torch.allclose(unscaled, torch.tensor([[0.5, 0.5], [-0.5, -0.5], [0.0, 0.0], [3.0, 3.0]]))


def test_the_reward_functions_grade_by_hand_and_their_files_need_no_rlexp():
    """The reward functions as modules (hand-graded cases), and the files rlexp writes from them:
    the parser verbatim plus the function, with no import of rlexp (the workers may not have it)."""
    from rlexp.trainers.openrlhf import reward_function as openrlhf_reward
    from rlexp.trainers.openrlhf.reward import render_reward_file
    from rlexp.trainers.verl import reward_function as verl_reward
    from rlexp.trainers.verl.reward import render_verl_reward_file

    out = openrlhf_reward.reward_func(["Q: 2+2? so \\boxed{4}", "Q: 3? 3", "Q: 5? \\boxed{6}"],
                                      ["Q: 2+2? ", "Q: 3? ", "Q: 5? "], ["4", "5", "5"])
    assert [float(x) for x in out["rewards"]] == [1.0, 0.0, 0.0]
    assert [float(x) for x in out["extra_logs"]["has_boxed"]] == [1.0, 0.0, 1.0]
    assert verl_reward.compute_score("d", "so \\boxed{12}", 12) == 1.0
    assert verl_reward.compute_score("d", "so \\boxed{13}", "12") == 0.0
    for text in (render_reward_file(), render_verl_reward_file()):
        assert "from rlexp" not in text and "import rlexp" not in text
        compile(text, "reward_func.py", "exec")


def test_the_generated_files_hold_values_and_declarations_not_loops():
    """What rlexp writes for a trainer to load states the attempt's values and declares the classes
    the trainer looks for; every loop, branch on an outcome and handler is in a runtime module."""
    from rlexp.environments.interface import CalculatorEnv, environment_tools
    from rlexp.trainers.openrlhf.agent import render_agent_file
    from rlexp.trainers.trl.rollout_template import render_rollout_module
    from rlexp.trainers.trl.template import render_training_script
    from rlexp.trainers.trl.tools_template import render_tools_module
    from rlexp.trainers.verl.advantage import render_estimator
    from rlexp.trainers.verl.agent import render_agent_loop

    tables = {"calculator": [{"name": t.name, "description": t.description, "params": [list(p) for p in t.params],
                              "action": t.action} for t in environment_tools(CalculatorEnv)]}
    imports = {"calculator": ("rlexp.environments.interface", "CalculatorEnv")}
    texts = {
        "openrlhf agent": render_agent_file("calculator", {"max_calls": 2}, max_turns=3, version="0.11.2"),
        "verl agent loop": render_agent_loop("calculator", {}, max_turns=3, max_tokens_per_turn=8, max_total_tokens=16),
        "verl estimator": render_estimator(),
        "trl script": render_training_script("t", "0.0", {"rlexp_root": "/r"}, environment_factory=True),
        "trl rollout": render_rollout_module("t", imports, {"rlexp_root": "/r"}),
        "trl tools": render_tools_module("t", imports, tables, {"rlexp_root": "/r"}),
    }
    for name, text in texts.items():
        kinds = {type(n).__name__ for n in ast.walk(ast.parse(text))}
        assert not kinds & {"For", "AsyncFor", "While", "Try", "With", "Lambda"}, (name, kinds)
