"""Environment-error episodes on OpenRLHF 0.11.2 and verl 0.9.1: out of the gradient by the trainers'
own loss code, counted in what they log, and still in their group's baseline under the trainers'
own estimators (which cannot leave one sample out; on verl's grpo rlexp runs its own estimator,
tests/test_verl_env_error_baseline.py).

An environment fails every 5th step (20% of the steps; every episode here is one step). rlexp's
generated adapter plays 10 episodes (two groups of 5) in the trainer's own agent code (OpenRLHF's
``MultiTurnAgentExecutor`` from the wheel; verl's ``AgentLoopBase`` from the wheel with rlexp's loop).
The episodes go through the trainer's own code that turns them into a training batch (OpenRLHF's
``_process_response_into_experience``; verl's padding as its agent loop worker pads), then through
the trainer's own policy loss (OpenRLHF's ``PolicyLoss`` with ``aggregate_loss`` and the optimizer-
step normaliser ``_optimizer_step_loss_norm``; verl's ``compute_policy_loss_vanilla`` with
``agg_loss``), with advantages that are NOT zero on the failed episodes: autograd gives their
log-probs a gradient of exactly 0, and the other episodes' gradient equals the one of a batch
without the failed episodes at all. All trainer functions are taken from the pinned wheels by AST
and executed (their modules import Ray, DeepSpeed, vLLM, which do not install here).
"""

from __future__ import annotations

import ast
import asyncio
import math
import zipfile
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.test_agent_openrlhf import RELEASES, CompletionOutput, RequestOutput, release_experience_function  # noqa: E402
from tests.test_agent_openrlhf import SamplingParams as OpenRLHFSamplingParams  # noqa: E402
from tests.test_agent_verl import (  # noqa: E402, F401 - the fixtures: the wheel's agent loop classes
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    Cfg,
    release_functions,
    verl_batch,
    verl_module,
    verl_source,
    wheel,
)

pytestmark = pytest.mark.openrlhf_wheels  # OpenRLHF's wheels (scripts/fetch-openrlhf); verl's as test_agent_verl

N_EPISODES, GROUP = 10, 5
ENV = "flaky_env_mod:FlakyEnv"
# One step per episode; every 5th step (counted over the process: 20% of the steps) raises. The
# others end the episode with reward 1 on every third step, else 0 (a group's rewards differ).
FLAKY_ENV = """
from rlexp.environments.interface import BaseEnvironment, StepResult


class FlakyEnv(BaseEnvironment):
    steps = 0

    def reset(self, task):
        return str(task["prompt"])

    def step(self, action_text):
        FlakyEnv.steps += 1
        if FlakyEnv.steps % 5 == 0:
            raise RuntimeError("backend down")
        return StepResult("", float(FlakyEnv.steps % 3 == 0), True, {})
"""


@pytest.fixture(scope="module")
def flaky_env(tmp_path_factory):
    """The environment's module, importable by the adapters as ``flaky_env_mod``; its step counter
    reset by each caller."""
    import importlib
    import sys

    directory = tmp_path_factory.mktemp("flaky")
    (directory / "flaky_env_mod.py").write_text(FLAKY_ENV)
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module("flaky_env_mod").FlakyEnv
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop("flaky_env_mod", None)


@pytest.fixture(scope="module")
def tokenizer(tiny_base_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_base_model)


def answer_ids(tokenizer):
    return list(tokenizer("12", add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


def tasks():
    return [{"prompt": f"{g}+{g}=", "answer": str(2 * g)} for g in range(N_EPISODES // GROUP) for _ in range(GROUP)]


def wheel_functions(archive_path, path, names, namespace):
    """Top-level functions and classes ``names`` of ``path`` in a wheel, executed in ``namespace``."""
    with zipfile.ZipFile(archive_path) as archive:
        [member] = [n for n in archive.namelist() if n.endswith(path)]
        tree = ast.parse(archive.read(member).decode())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
    assert {n.name for n in found} == set(names)
    for node in found:
        node.decorator_list = []
    exec(compile(ast.Module(body=found, type_ignores=[]), member, "exec"), namespace)  # noqa: S102 - the pinned wheel
    return namespace


def check_left_out(loss_of, mask, advantages, errors):
    """Autograd through ``loss_of(log_probs, old, advantages, mask)``: rows ``errors`` get exactly 0,
    the others the gradient of the same batch with those rows removed. Returns the full gradient."""
    import torch

    torch.manual_seed(0)
    base = -torch.rand(mask.shape, dtype=torch.float64)
    old = base + 0.05 * torch.randn(mask.shape, dtype=torch.float64)  # ratios off 1, some clipped
    full = base.clone().requires_grad_(True)
    loss_of(full, old, advantages, mask).backward()
    keep = [i for i in range(mask.shape[0]) if i not in errors]
    part = base[keep].clone().requires_grad_(True)
    loss_of(part, old[keep], advantages[keep], mask[keep]).backward()
    assert errors and all(float(full.grad[i].abs().sum()) == 0.0 for i in errors)
    assert all(float(full.grad[i].abs().sum()) > 0 for i in keep)  # the others do train
    # OpenRLHF's step normaliser is float32 (tokens / gas): equal to its precision, not bit for bit
    assert torch.allclose(full.grad[keep], part.grad, rtol=1e-6, atol=0), (full.grad[keep] - part.grad).abs().max()
    return full.grad


# ----------------------------------------------------------------------------- OpenRLHF 0.11.2

OPENRLHF = "0.11.2"


class FixedEngine:
    """OpenRLHF's ``llm_engine.generate`` contract (from 0.10.1): always the same answer, EOS last."""

    def __init__(self, tokenizer):
        self.ids = answer_ids(tokenizer)
        self.text = tokenizer.decode(self.ids[:-1])

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        return RequestOutput([CompletionOutput(list(self.ids), self.text, "stop")])


@pytest.fixture(scope="module")
def openrlhf_episodes(tokenizer, flaky_env, tmp_path_factory):
    """The 10 episodes through 0.11.2's executor and its ``_process_response_into_experience``."""
    from rlexp.trainers.openrlhf import agent as agent_openrlhf

    path = agent_openrlhf.write_agent_file(tmp_path_factory.mktemp("agent") / "agent.py", ENV, {}, max_turns=1,
                                           version=OPENRLHF)
    flaky_env.steps = 0
    with agent_openrlhf.release_agent_module(OPENRLHF):
        executor = agent_openrlhf.load_agent_executor(path)
        engine = FixedEngine(tokenizer)

        async def play():
            return [await executor.execute(t["prompt"], t, OpenRLHFSamplingParams(), 256, tokenizer, engine)
                    for t in tasks()]

        responses = asyncio.run(play())
    to_experience = release_experience_function(OPENRLHF)
    return [to_experience(None, r, max_len=256) for r in responses]


@pytest.fixture(scope="module")
def openrlhf_loss():
    from typing import Optional

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F  # noqa: N812 - the wheel's own name

    from rlexp.trainers.openrlhf.parser import fetch

    wheel_path = fetch(RELEASES[OPENRLHF])
    space = {"torch": torch, "dist": dist, "nn": nn, "F": F, "Optional": Optional, "Tuple": tuple}
    wheel_functions(wheel_path, "openrlhf/models/utils.py", ("masked_mean",), space)
    wheel_functions(wheel_path, "openrlhf/models/loss.py", ("aggregate_loss", "PolicyLoss"), space)
    wheel_functions(wheel_path, "openrlhf/utils/loss_utils.py", ("_optimizer_step_loss_norm",), space)
    return space


def openrlhf_step(space, loss_type, micro):
    """One optimizer step as 0.11.2's ppo_train runs it: micro-batches of ``micro`` rows, each with
    the step's normaliser (``_optimizer_step_loss_norm`` over all of them), the losses summed with
    DeepSpeed's 1/gas."""
    policy = space["PolicyLoss"](policy_loss_type=loss_type)

    def loss_of(log_probs, old, advantages, mask):
        rows = range(0, mask.shape[0], micro)
        gas = len(rows)
        info = space["_optimizer_step_loss_norm"]([mask[i:i + micro] for i in rows], None, 1, gas)
        return sum(policy(log_probs[i:i + micro], old[i:i + micro], advantages[i:i + micro],
                          action_mask=mask[i:i + micro], **info)[0] for i in rows) / gas

    return loss_of


def padded_action_masks(experiences):
    import torch

    width = max(e.action_mask.shape[1] for e in experiences)
    mask = torch.zeros(len(experiences), width, dtype=torch.float64)
    for i, e in enumerate(experiences):
        mask[i, : e.action_mask.shape[1]] = e.action_mask[0]
    return mask


def test_openrlhf_error_episodes_have_no_action_token_and_are_counted(openrlhf_episodes):
    errors = [i for i, e in enumerate(openrlhf_episodes) if float(e.info["env_errors"][0])]
    assert errors == [4, 9]  # the 5th and 10th steps failed: 20%
    mask = padded_action_masks(openrlhf_episodes)
    assert [int(mask[i].sum()) for i in errors] == [0, 0]
    assert all(int(mask[i].sum()) > 0 for i in range(N_EPISODES) if i not in errors)
    # what OpenRLHF logs of env_errors (the batch's mean of the sample's info) is their share
    assert sum(float(e.info["env_errors"][0]) for e in openrlhf_episodes) / N_EPISODES == 0.2


@pytest.mark.parametrize("loss_type", ["ppo", "gspo"])  # token-mean, and GSPO's per-sample mean
@pytest.mark.parametrize("micro", [1, 2, N_EPISODES])
def test_openrlhf_policy_loss_gives_error_episodes_no_gradient(openrlhf_episodes, openrlhf_loss, loss_type, micro):
    import torch

    errors = [i for i, e in enumerate(openrlhf_episodes) if float(e.info["env_errors"][0])]
    mask = padded_action_masks(openrlhf_episodes)
    rewards = torch.tensor([float(e.rewards[0]) for e in openrlhf_episodes], dtype=torch.float64)
    groups = rewards.reshape(-1, GROUP)  # OpenRLHF's group_norm: the error episodes' rewards included
    scores = ((groups - groups.mean(-1, keepdim=True)) / (groups.std(-1, keepdim=True) + 1e-9)).reshape(-1)
    assert all(scores[i] != 0 for i in errors)  # the failed episodes do have an advantage
    advantages = scores.unsqueeze(-1).expand_as(mask).clone()  # on every position: only the mask drops them
    check_left_out(openrlhf_step(openrlhf_loss, loss_type, micro), mask, advantages, errors)


def play_openrlhf(path, tokenizer, flaky_env, steps_before=0):
    """The 10 tasks through 0.11.2's executor with the agent file at ``path``: the responses, or
    the exception that stopped them and how many episodes had finished."""
    from rlexp.trainers.openrlhf import agent as agent_openrlhf

    flaky_env.steps = steps_before
    finished = []
    with agent_openrlhf.release_agent_module(OPENRLHF):
        executor = agent_openrlhf.load_agent_executor(path)
        engine = FixedEngine(tokenizer)

        async def play():
            for t in tasks():
                finished.append(await executor.execute(t["prompt"], t, OpenRLHFSamplingParams(), 256, tokenizer, engine))

        try:
            asyncio.run(play())
        except RuntimeError as exc:
            return finished, exc
    return finished, None


def test_openrlhf_an_outage_stops_the_run_before_a_step_of_masked_episodes(tokenizer, flaky_env, tmp_path):
    """Error episodes in a row up to the agent file's outage count stop the run (an exception out
    of the executor, which fails OpenRLHF's rollout); a success in between starts the count again.
    The count is half an engine's share of an optimizer step."""
    from rlexp.spec.recipe import Recipe
    from rlexp.trainers.openrlhf import agent as agent_openrlhf

    assert agent_openrlhf.outage_episodes(Recipe.of({"train_batch_size": 128, "vllm_num_engines": 4})) == 16
    assert agent_openrlhf.outage_episodes(Recipe.of({"train_batch_size": 64})) == 32
    assert agent_openrlhf.outage_episodes(Recipe.of({})) == 64  # OpenRLHF's train_batch_size 128, one engine
    assert agent_openrlhf.outage_episodes(Recipe.of({"train_batch_size": 1})) == 1

    def agent_file(name, outage):
        return agent_openrlhf.write_agent_file(tmp_path / name, ENV, {}, max_turns=1, version=OPENRLHF, outage=outage)

    # the flaky environment fails the 5th and 10th steps: never two in a row
    finished, stopped = play_openrlhf(agent_file("two.py", 2), tokenizer, flaky_env)
    assert stopped is None and len(finished) == N_EPISODES
    # one error in a row is an outage for a count of 1: the 5th episode stops the run
    finished, stopped = play_openrlhf(agent_file("one.py", 1), tokenizer, flaky_env)
    assert len(finished) == 4 and "failed 1 episodes in a row" in str(stopped)


def test_openrlhf_when_every_episode_fails_the_step_is_nan(openrlhf_loss):
    """What the plan warns of: a step with no action token at all divides by 0 tokens; and a sample
    with none has a KL mean of 0/0 (why kl_target without use_kl_loss is refused)."""
    import torch

    mask = torch.zeros(2, 4, dtype=torch.float64)
    log_probs = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    loss = openrlhf_step(openrlhf_loss, "ppo", 2)(log_probs, torch.zeros(2, 4, dtype=torch.float64),
                                                   torch.ones(2, 4, dtype=torch.float64), mask)
    assert math.isnan(float(loss.detach()))
    assert math.isnan(float(openrlhf_loss["masked_mean"](torch.ones(1, 4), torch.zeros(1, 4), dim=-1)[0]))


# ----------------------------------------------------------------------------- verl 0.9.1


class FixedServer:
    """verl's ``server_manager.generate(request_id=, prompt_ids=, sampling_params=)``: the same answer."""

    def __init__(self, tokenizer):
        self.ids = answer_ids(tokenizer)

    async def generate(self, request_id, prompt_ids, sampling_params):
        return SimpleNamespace(token_ids=list(self.ids), log_probs=[-0.5] * len(self.ids))


@pytest.fixture(scope="module")
def verl_outputs(verl_module, tokenizer, flaky_env, tmp_path_factory):  # noqa: F811 - the imported fixture
    import importlib
    import sys

    from rlexp.trainers.verl import agent as agent_verl

    directory = tmp_path_factory.mktemp("verl-loop")
    agent_verl.write_agent_loop(directory, ENV, {}, max_turns=1, max_tokens_per_turn=16, max_total_tokens=16)
    sys.path.insert(0, str(directory))
    try:
        sys.modules.pop(agent_verl.MODULE_NAME, None)
        importlib.import_module(agent_verl.MODULE_NAME)
        entry = verl_module._agent_loop_registry[agent_verl.AGENT_NAME]
        module_name, _, cls_name = entry["_target_"].rpartition(".")
        config = Cfg({"actor_rollout_ref": {"rollout": {"prompt_length": PROMPT_LENGTH,
                                                        "response_length": RESPONSE_LENGTH}}, "data": {}})
        flaky_env.steps = 0

        async def play():
            outs = []
            for task in tasks():
                loop = getattr(importlib.import_module(module_name), cls_name)(
                    trainer_config=verl_module.DictConfigWrap(config), server_manager=FixedServer(tokenizer),
                    tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=None,
                    data_config=verl_module.DictConfigWrap(config.data), tools=verl_module.ToolListWrap([]))
                row = agent_verl.agent_row({"prompt": [{"role": "user", "content": task["prompt"]}]}, task)
                outs.append(await loop.run({"temperature": 0}, raw_prompt=row["prompt"], extra_info=row["extra_info"]))
            return outs

        return asyncio.run(play())
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(agent_verl.MODULE_NAME, None)


@pytest.fixture(scope="module")
def verl_algos(wheel):  # noqa: F811 - the imported fixture
    from collections import defaultdict
    from typing import Any, Optional

    import numpy as np
    import torch

    space = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": Optional, "Any": Any,
             "ActorConfig": object, "AlgoConfig": type("AlgoConfig", (), {})}
    verl_f = wheel_functions(wheel, "verl/utils/torch_functional.py", ("masked_sum", "masked_mean"),
                             {"torch": torch, "Optional": Optional})
    space["verl_F"] = SimpleNamespace(**{k: verl_f[k] for k in ("masked_sum", "masked_mean")})
    return wheel_functions(wheel, "verl/trainer/ppo/core_algos.py",
                           ("compute_grpo_outcome_advantage", "agg_loss", "compute_policy_loss_vanilla"), space)


class ActorConfig(dict):
    """The fields of verl's ActorConfig that compute_policy_loss_vanilla reads."""

    def __getattr__(self, name):
        return self[name]


def test_verl_error_episodes_have_no_response_and_are_logged(verl_outputs, wheel):  # noqa: F811
    from rlexp.trainers.verl.metrics import read_verl_console

    errors = [i for i, o in enumerate(verl_outputs) if o.extra_fields["env_errors"]]
    assert errors == [4, 9]
    assert all(verl_outputs[i].response_ids == [] == verl_outputs[i].response_mask for i in errors)
    assert all(sum(o.response_mask) > 0 for i, o in enumerate(verl_outputs) if i not in errors)
    # verl's own metrics of the batch, printed by its console logger, read back by rlexp
    compute = release_functions(wheel, ("compute_data_metrics", "_compute_response_info"), "verl/trainer/ppo/metric_utils.py")
    console = release_functions(wheel, ("concat_dict_to_str",), "verl/utils/logger/aggregate_logger.py")
    line = console["concat_dict_to_str"](compute["compute_data_metrics"](verl_batch(verl_outputs), use_critic=False),
                                         step=1)
    [row] = read_verl_console(line + "\n").runs[0].rows
    assert row["env_errors"] == pytest.approx(0.2, rel=1e-6)  # verl means in float32


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_verl_policy_loss_gives_error_episodes_no_gradient(verl_outputs, verl_algos, agg):
    import numpy as np
    import torch

    batch = verl_batch(verl_outputs)
    mask = batch.batch["response_mask"].to(torch.float64)
    errors = [i for i, o in enumerate(verl_outputs) if o.extra_fields["env_errors"]]
    index = np.array([i // GROUP for i in range(N_EPISODES)], dtype=object)
    advantages, _ = verl_algos["compute_grpo_outcome_advantage"](batch.batch["token_level_rewards"].double(), mask,
                                                                 index)
    advantages = advantages + 1.0  # non-zero everywhere, the failed episodes' positions too: only the mask drops them
    config = ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, global_batch_info={})

    def loss_of(log_probs, old, adv, m):
        return verl_algos["compute_policy_loss_vanilla"](old, log_probs, adv, m, loss_agg_mode=agg, config=config)[0]

    check_left_out(loss_of, mask, advantages, errors)


def test_verl_grpo_baseline_cannot_leave_one_sample_out(verl_algos):
    """Why verl's own GRPO cannot take the error episode out of the baseline: a NaN reward (the only
    value that could mean "none") makes every advantage of its group NaN (hence rlexp_grpo)."""
    import numpy as np
    import torch

    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    advantages, _ = verl_algos["compute_grpo_outcome_advantage"](rewards, torch.ones(4, 3),
                                                                 np.array(["a", "a", "a", "b"], dtype=object))
    assert torch.isnan(advantages[:3]).all() and not torch.isnan(advantages[3]).any()
