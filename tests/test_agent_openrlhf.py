"""OpenRLHF's own multi-turn executor, loaded from each listed release's wheel, plays rlexp's
generated agent file against a real engine: the demo tool task's base model (a few supervision
steps of ``rlexp demo --task tools``'s builder) behind OpenRLHF's ``llm_engine.generate`` contract,
greedy. Its ``observation_tokens``, ``action_ranges``, ``reward`` and ``scores`` must equal rlexp's
own rollout (:func:`rlexp.environments.episodes.run_episodes` with OpenRLHF's budget, ``max_length``) of
the same episodes — for every distinct ``openrlhf/utils/agent.py`` among the listed releases.

The reference is rlexp's rollout, an independent implementation (batched generation, its own
budget code); the executor's loop is OpenRLHF's code, not ours. The budgets are chosen so that
episodes end each way: the environment's ``done``, the turn limit, a turn cut by the room left
(its feedback appended past ``max_length``), and a tool call with its feedback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import sys
import textwrap
import zipfile
from collections import Counter
from copy import deepcopy
from dataclasses import dataclass, field

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlexp.trainers.openrlhf import agent as agent_openrlhf  # noqa: E402
from rlexp.trainers.openrlhf.parser import fetch, listed_releases  # noqa: E402

pytestmark = pytest.mark.openrlhf_wheels

RELEASES = {r.version: r for r in listed_releases()}
N_EPISODES = 24


def _agent_source(release) -> str:
    with zipfile.ZipFile(fetch(release)) as archive:
        for name in archive.namelist():
            if name.endswith("openrlhf/utils/agent.py"):
                return archive.read(name).decode()
    raise AssertionError(f"{release.wheel} has no openrlhf/utils/agent.py")


@pytest.fixture(scope="module")
def distinct_agents() -> dict[str, list[str]]:
    """sha256 of agent.py -> the releases that ship it."""
    out: dict[str, list[str]] = {}
    for version, release in RELEASES.items():
        out.setdefault(hashlib.sha256(_agent_source(release).encode()).hexdigest(), []).append(version)
    return out


def representatives() -> list[str]:
    """The first release of each distinct agent.py (computed at collection: a fetch per release)."""
    seen: dict[str, str] = {}
    for version, release in RELEASES.items():
        seen.setdefault(hashlib.sha256(_agent_source(release).encode()).hexdigest(), version)
    return list(seen.values())


REPRESENTATIVES = representatives()


def test_every_listed_release_ships_an_agent_py_and_8_versions_differ(distinct_agents):
    # 0.9.3-0.9.7 | 0.9.8-0.9.10 | 0.10.0 | 0.10.1, .post1 | .post2 | 0.10.2-0.11.0 | 0.11.1 | 0.11.2
    assert sum(len(v) for v in distinct_agents.values()) == len(RELEASES) == 18
    assert sorted(map(len, distinct_agents.values())) == [1, 1, 1, 1, 2, 3, 4, 5]
    assert REPRESENTATIVES == ["0.9.3", "0.9.8", "0.10.0", "0.10.1", "0.10.1.post2", "0.10.2", "0.11.1", "0.11.2"]


# ----------------------------------------------------------------------------- the real engine


@dataclass
class SamplingParams:
    """The fields of vLLM's SamplingParams that OpenRLHF's rollout sets (samples_generator.py)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 14
    min_tokens: int = 1
    skip_special_tokens: bool = False
    logprobs: int | None = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list | None = None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


class LocalEngine:
    """rlexp's local engine (greedy, one request at a time) behind OpenRLHF's ``generate(token_ids,
    sampling_params)``, answering as vLLM does: the EOS id ends ``token_ids`` and is not in the
    text; ``skip_special_tokens`` as requested (OpenRLHF asks for False)."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.calls: list[int] = []  # max_tokens of every request

    async def generate(self, prompt_token_ids, sampling_params):
        return await self._generate(prompt_token_ids, sampling_params)

    async def _generate(self, prompt_token_ids, sampling_params):
        from rlexp.evaluation.generation import generate_ids

        await asyncio.sleep(0)  # a request yields, as vLLM's does: the episodes of a batch interleave
        assert sampling_params.temperature == 0.0 and sampling_params.max_tokens >= 1
        self.calls.append(sampling_params.max_tokens)
        [[completion]] = generate_ids(self.model, self.tokenizer, [list(prompt_token_ids)],
                                      max_new_tokens=sampling_params.max_tokens, temperature=0.0)
        ids = list(completion.token_ids)
        shown = ids[:-1] if completion.finish_reason == "stop" else ids
        text = self.tokenizer.decode(shown, skip_special_tokens=sampling_params.skip_special_tokens)
        return RequestOutput([CompletionOutput(ids, text, completion.finish_reason)])


class LocalEngineMultiModal(LocalEngine):
    """The contract from 0.10.1: ``generate(token_ids, sampling_params, multi_modal_data=None)``."""

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        assert multi_modal_data is None
        return await self._generate(prompt_token_ids, sampling_params)


def engine_for(version: str, model, tokenizer) -> LocalEngine:
    from rlexp.trainers.openrlhf.parser import version_key

    cls = LocalEngineMultiModal if version_key(version) >= version_key("0.10.1") else LocalEngine
    return cls(model, tokenizer)


# ----------------------------------------------------------------------------- the demo task


# An environment outside rlexp, imported by path from the agent file: the demo's calculator with a
# shaped reward per tool call, so the executor's sum over turns is exercised (the calculator's
# tool turns are worth 0).
SHAPED_ENV = textwrap.dedent('''
    from rlexp.environments.interface import CalculatorEnv, StepResult


    class ShapedCalculator(CalculatorEnv):
        def step(self, action_text):
            result = CalculatorEnv.step(self, action_text)
            if result.info.get("tool_call"):
                return StepResult(result.feedback, result.reward + 0.25, result.done, result.info)
            return result


    class FlakyCalculator(CalculatorEnv):
        # fails on any turn after a tool call: an environment error ends the episode

        def reset(self, task):
            self.calls = 0
            return CalculatorEnv.reset(self, task)

        def step(self, action_text):
            if self.calls:
                raise RuntimeError("calculator backend down")
            result = CalculatorEnv.step(self, action_text)
            self.calls += int(bool(result.info.get("tool_call")))
            return result


    class BrokenResetCalculator(CalculatorEnv):
        # its task store fails for about half the tasks: reset raises, the episode never starts

        def reset(self, task):
            if sum(map(ord, str(task["prompt"]))) % 2:
                raise RuntimeError("task store down")
            return CalculatorEnv.reset(self, task)
''')


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The tool demo's datasets and a briefly supervised base (calls the tool, answers, or babbles)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.experiment.datasets import read_dataset
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_base, build_datasets

    root = tmp_path_factory.mktemp("tools")
    config = dataclasses.replace(ToolsDemoConfig.fast(), sft_steps=60, sft_batch=16, sizes=(64, 4, N_EPISODES, 4, 4),
                                 search_share=0.0)  # the calculator task alone: its episodes are the ones compared
    datasets = build_datasets(root / "data", config)
    base = build_base(root / "models", datasets["pool"], config)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    (root / "shaped_env_mod.py").write_text(SHAPED_ENV)
    sys.path.insert(0, str(root))
    try:
        yield {"model": model, "tokenizer": tokenizer, "records": read_dataset(datasets["ood_primary"]), "root": root}
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("shaped_env_mod", None)


# (environment, config, max_turns, max_length) — prompts are 10 tokens, a tool call 12, its
# feedback 7: room for every turn; room for one tool call whose feedback is appended past
# max_length; first turns cut by the room (a cut call still reaches the environment); one turn.
CASES = {
    "roomy": ("calculator", {"max_calls": 2}, 3, 96),
    "tight": ("shaped_env_mod:ShapedCalculator", {"max_calls": 2}, 3, 25),
    "cut": ("shaped_env_mod:ShapedCalculator", {"max_calls": 2}, 3, 21),
    "one_turn": ("shaped_env_mod:ShapedCalculator", {"max_calls": 2}, 1, 64),
    "env_error": ("shaped_env_mod:FlakyCalculator", {"max_calls": 2}, 3, 96),
    "reset_error": ("shaped_env_mod:BrokenResetCalculator", {"max_calls": 2}, 3, 96),
}
# The first request's max_tokens (OpenRLHF: generate_max_len / max_new_tokens). The executor
# left-truncates a prompt longer than max_length minus it (the plan's length.max_len rule keeps
# prompt_max_len + generate_max_len within max_len); later turns get the room left.
MAX_NEW_TOKENS = {"roomy": 14, "tight": 14, "cut": 11, "one_turn": 14, "env_error": 14, "reset_error": 14}


def rlexp_rollout(demo, env, config, max_turns, max_length):
    from rlexp.environments.episodes import run_episodes
    from rlexp.environments.interface import Budgets, rows_from_dataset

    rows = rows_from_dataset(demo["records"], default_env=env, default_config=config)
    budgets = Budgets(max_turns=max_turns, max_tokens_per_turn=1, max_total_tokens=1)  # unused with max_length
    return [t for [t] in run_episodes(demo["model"], demo["tokenizer"], rows, budgets=budgets, max_length=max_length)]


def ranges_of(trajectory):
    out, start = [], trajectory.prompt_len
    for turn in trajectory.turns:
        out.append((start, start + turn.action_tokens))
        start += turn.action_tokens + turn.feedback_tokens
    return out


async def _play(executor, engine, demo, max_length, max_new_tokens=14):
    tasks = [executor.execute(prompt=r["prompt"], label=r["answer"], sampling_params=SamplingParams(max_tokens=max_new_tokens),
                              max_length=max_length, hf_tokenizer=demo["tokenizer"], llm_engine=engine)
             for r in demo["records"]]  # fmt: skip
    return await asyncio.gather(*tasks)  # concurrently, as generate_responses runs them


@pytest.fixture(scope="module")
def references(demo):
    return {name: rlexp_rollout(demo, *case) for name, case in CASES.items()}


def test_the_reference_episodes_end_every_way(references):
    """Guards the test itself: the compared episodes cover each ending and both kinds of turn."""
    reasons = Counter(t.finish_reason for trajs in references.values() for t in trajs)
    assert reasons["stop"] and reasons["length"] and reasons["max_turns"] and reasons["env_error"]
    broken = references["reset_error"]  # both outcomes of a reset
    assert any(not t.turns and t.finish_reason == "env_error" for t in broken) and any(t.turns for t in broken)
    assert any(t.tool_calls and len(t.turns) >= 2 for t in references["roomy"])
    tight = references["tight"]
    assert any(len(t.token_ids) > CASES["tight"][3] for t in tight)  # feedback appended past max_length
    assert any(t.episode_return > 0 for t in tight)  # shaped tool rewards summed
    cut = references["cut"]
    assert any(t.turns[0].action_tokens == CASES["cut"][3] - t.prompt_len and t.turns[0].feedback_tokens
               for t in cut)  # a cut turn's action still steps the environment, its feedback appended
    assert all(len(t) == N_EPISODES for t in references.values())


def expected_logs(ref) -> dict[str, float]:
    """One episode's extra_logs as rlexp's own trajectory counts them (env_latency_s_per_episode
    aside: a wall-clock time)."""
    from rlexp.environments.interface import FINISH_REASONS

    return {"turns_per_episode": len(ref.turns), "tool_calls_per_episode": ref.tool_calls,
            "env_errors": float(ref.finish_reason == "env_error"), "episode_return": ref.episode_return,
            "agent_tokens_per_episode": ref.agent_tokens,
            "generated_tokens_per_episode": len(ref.token_ids) - ref.prompt_len,
            **{f"finish_{r}": float(ref.finish_reason == r) for r in FINISH_REASONS}}  # fmt: skip


@pytest.mark.parametrize("version", REPRESENTATIVES)
def test_real_executor_reproduces_rlexp_rollout(version, demo, references, tmp_path, monkeypatch):
    played = []
    for name, (env, config, max_turns, max_length) in CASES.items():
        agent_file = agent_openrlhf.write_agent_file(tmp_path / f"agent_{name}.py", env, config,
                                                     max_turns=max_turns, version=version)
        with agent_openrlhf.release_agent_module(version):
            executor = agent_openrlhf.load_agent_executor(agent_file)
            # the release's own executor runs the episodes (rlexp's mixin only completes its output)
            assert isinstance(executor, sys.modules["openrlhf.utils.agent"].MultiTurnAgentExecutor)
            engine = engine_for(version, demo["model"], demo["tokenizer"])
            outputs = asyncio.run(_play(executor, engine, demo, max_length, MAX_NEW_TOKENS[name]))
        assert len(outputs) == N_EPISODES
        played += outputs
        for i, (out, ref) in enumerate(zip(outputs, references[name], strict=True)):
            where = f"{version} {name} episode {i}"
            logs = {k: float(v) for k, v in out["extra_logs"].items()}
            latency = logs.pop("env_latency_s_per_episode")
            assert logs == pytest.approx(expected_logs(ref), abs=1e-6), where
            assert (latency > 0) == bool(ref.turns), where
            assert out["reward"] == pytest.approx(ref.episode_return, abs=1e-6), where
            assert float(out["scores"]) == pytest.approx(ref.episode_return, abs=1e-6), where
            assert out["label"] == demo["records"][i]["answer"]
            # an environment error leaves no action range where the release's loss can drop a sample (0.11.0+)
            masked = ref.finish_reason == "env_error" and agent_openrlhf.masks_error_episodes(version)
            if not ref.turns:  # reset failed: rlexp's prompt, then the one turn OpenRLHF samples, nothing after
                assert out["observation_tokens"][: len(ref.token_ids)] == list(ref.token_ids), where
                assert [tuple(r) for r in out["action_ranges"]] == (
                    [] if masked else [(ref.prompt_len, len(out["observation_tokens"]))]), where
                continue
            assert out["observation_tokens"] == list(ref.token_ids), where
            assert [tuple(r) for r in out["action_ranges"]] == ([] if masked else ranges_of(ref)), where
        # the executor's max_tokens is the room left, never a per-turn cap: the first turn gets it all
        prompt_lens = {len(r.token_ids) - sum(t.action_tokens + t.feedback_tokens for t in r.turns)
                       for r in references[name]}  # fmt: skip
        assert max(engine.calls) == max_length - min(prompt_lens)
    assert_logged_as_rlexp(version, played, [t for trajs in references.values() for t in trajs], monkeypatch)


# ----------------------------------------------------------------------------- what reaches the log


def release_experience_function(version: str):
    """The release's own ``_process_response_into_experience`` (``trainer/ppo_utils/
    experience_maker.py`` before 0.10.0, ``samples_generator.py`` from it), taken from its wheel by
    AST and executed: the code that turns an executor response (its extra_logs among it) into the
    sample's ``experience.info``. Its module's other imports (Ray, vLLM, DeepSpeed) are not needed."""
    import ast
    import types

    import torch

    with zipfile.ZipFile(fetch(RELEASES[version])) as archive:
        for name in archive.namelist():
            if name.endswith(("ppo_utils/experience_maker.py", "ppo_utils/samples_generator.py")):
                tree = ast.parse(archive.read(name).decode())
                found = [n for n in ast.walk(tree)
                         if isinstance(n, ast.FunctionDef) and n.name == "_process_response_into_experience"]
                if found:
                    namespace = {"torch": torch, "Experience": lambda **fields: types.SimpleNamespace(**fields)}
                    exec(compile(ast.Module([found[0]], []), name, "exec"), namespace)  # noqa: S102 - the pinned wheel
                    return namespace["_process_response_into_experience"]
    raise AssertionError(f"{version}: no _process_response_into_experience")


def release_ppo_train(version: str):
    """The release's own ``PPOActor.ppo_train`` (``trainer/ray/ppo_actor.py``), taken from its wheel
    by AST and executed: the code that averages every micro-batch's status (``experience.info``
    among it) into the step's status. ``iter_grad_accum_global_norm`` (0.10.4 on) only pairs each
    micro-batch with the loss normaliser, which the stand-in ``training_step`` does not use."""
    import ast

    import torch
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    with zipfile.ZipFile(fetch(RELEASES[version])) as archive:
        [name] = [n for n in archive.namelist() if n.endswith("trainer/ray/ppo_actor.py")]
        tree = ast.parse(archive.read(name).decode())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "ppo_train"
             and any(isinstance(s, ast.For) for s in ast.walk(n))]  # the actor's, not the trainer's ray call
    namespace = {"torch": torch, "DataLoader": DataLoader, "tqdm": tqdm,
                 "iter_grad_accum_global_norm": lambda batches, strategy, gas, mask_fn: ((b, None) for b in batches)}
    exec(compile(ast.Module([found[0]], []), name, "exec"), namespace)  # noqa: S102 - the pinned wheel
    weighted = "weights" in ast.unparse(found[0])  # 0.9.8 on: training_step returns metrics with weights
    return namespace["ppo_train"], weighted


class _Batch:
    """A collated micro-batch: what ppo_train reads of an Experience."""

    def __init__(self, infos):
        import torch

        self.info = {k: torch.cat([info[k] for info in infos]) for k in infos[0]}
        self.action_mask = torch.ones(len(infos), 1)

    def to_device(self, device):
        pass


class _Buffer:
    def __init__(self, infos, micro_batch):
        self.items, self.sample_batch_size = infos, micro_batch

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def collate_fn(self, items):
        return _Batch(items)


def ppo_train_status(version: str, infos: list[dict], micro_batch: int, monkeypatch) -> dict[str, float]:
    """The step's status as the release's ``ppo_train`` averages it (one rank, one epoch), over a
    stand-in ``training_step`` that returns what the release's does of ``experience.info``: before
    0.9.8 each key's micro-batch mean in the status; from 0.9.8 the info tensors as metrics with
    their weights ("sample": a value per sample), and the micro-batch's sample count."""
    import types

    import torch

    ppo_train, weighted = release_ppo_train(version)

    def training_step(experience, kl_ctl, step, loss_batch_info=None):
        if not weighted:
            return {"policy_loss": 0.5, "actor_lr": 1e-6,
                    **{k: v.float().mean().item() for k, v in experience.info.items()}}
        metrics = {"policy_loss": torch.tensor(0.5), "actor_lr": 1e-6, **experience.info}
        weights = {"policy_loss": "token", "actor_lr": None,
                   **{k: "token" if v.dim() == 0 else "sample" for k, v in experience.info.items()}}
        return {"metrics": metrics, "weights": weights, "num_samples": float(experience.action_mask.shape[0]),
                "num_action_tokens": float(experience.action_mask.sum().item())}

    ns = types.SimpleNamespace
    actor = ns(replay_buffer=_Buffer(infos, micro_batch), max_epochs=1, dataloader_pin_memory=False,
               training_step=training_step,
               strategy=ns(all_reduce=lambda d: d, is_rank_0=lambda: True, ring_attn_group=None, accumulated_gradient=1),
               args=ns(use_dynamic_batch=False, ds_tensor_parallel_size=1, train=ns(dynamic_batch_enable=False),
                       ds=ns(tensor_parallel_size=1)))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    torch.manual_seed(0)  # the DataLoader shuffles
    return ppo_train(actor, kl_ctl=0.0)


def assert_logged_as_rlexp(version, outputs, references, monkeypatch):
    """The batch's episodes, through the release's own code into ``experience.info`` and averaged
    by its own ``ppo_train``, logged as ppo_trainer.py logs a step (``✨ Global step N: {status}``),
    read back by rlexp's reader: the local trainer's names carry rlexp's own metrics of the same
    episodes (:func:`rlexp.environments.interface.episode_metrics`)."""
    import torch

    from rlexp.environments.interface import episode_metrics
    from rlexp.trainers.openrlhf.metrics import read_openrlhf_console
    from rlexp.training.metric_names import EPISODE_METRICS

    process = release_experience_function(version)
    infos = [process(None, out, prompt_max_len=1024, max_new_tokens=1024, max_len=2048).info for out in outputs]
    for info in infos:  # what the experience maker adds before training (make_experience: kl; advantages: return)
        info.setdefault("kl", torch.zeros(1))
        info.setdefault("return", info["reward"])
    status = ppo_train_status(version, infos, 8, monkeypatch)
    read = read_openrlhf_console(f"✨ Global step 1: {status}\n", "openrlhf")
    [row] = read.runs[0].rows
    expected = episode_metrics(references)
    assert set(EPISODE_METRICS) == set(expected)  # every name the local trainer logs
    for name in EPISODE_METRICS:
        if name == "env_latency_s":  # a wall-clock time: the mean over every turn played, as rlexp's
            turns = sum(float(out["extra_logs"]["turns_per_episode"]) for out in outputs)
            seconds = sum(float(out["extra_logs"]["env_latency_s_per_episode"]) for out in outputs)
            assert row[name] == pytest.approx(seconds / turns, rel=1e-5), version
            continue
        assert row[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (version, name)
    assert 0 < row["env_errors"] < 1 and 0 < row["agent_token_fraction"] < 1


@pytest.mark.parametrize("version", REPRESENTATIVES)
def test_agent_mask_from_action_ranges_is_rlexps(version, demo, references, tmp_path):
    """OpenRLHF builds the action mask from action_ranges (experience maker): it equals rlexp's
    agent mask on every token."""
    env, config, max_turns, max_length = CASES["tight"]
    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", env, config, max_turns=max_turns,
                                                 version=version)
    with agent_openrlhf.release_agent_module(version):
        executor = agent_openrlhf.load_agent_executor(agent_file)
        outputs = asyncio.run(_play(executor, engine_for(version, demo["model"], demo["tokenizer"]), demo, max_length))
    for out, ref in zip(outputs, references["tight"], strict=True):
        mask = [0] * len(out["observation_tokens"])
        for start, end in out["action_ranges"]:
            mask[start:end] = [1] * (end - start)
        assert mask == list(ref.agent_mask)


def test_environments_are_pooled_at_module_level(demo, tmp_path):
    """The executor builds a fresh agent per episode; environments are built only for episodes
    that run at once, then reused (reset between episodes)."""
    env, config, max_turns, max_length = CASES["roomy"]
    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", env, config, max_turns=max_turns,
                                                 version="0.11.2")
    with agent_openrlhf.release_agent_module("0.11.2"):
        executor = agent_openrlhf.load_agent_executor(agent_file)
        engine = engine_for("0.11.2", demo["model"], demo["tokenizer"])

        async def one_at_a_time():
            return [await executor.execute(prompt=r["prompt"], label=r["answer"], sampling_params=SamplingParams(),
                                           max_length=max_length, hf_tokenizer=demo["tokenizer"], llm_engine=engine)
                    for r in demo["records"]]  # fmt: skip

        asyncio.run(one_at_a_time())
        run = executor.RUN  # the agent file's module-level state (the file is not in sys.modules)
        assert run.built == 1 and len(run.idle) == 1
        asyncio.run(_play(executor, engine, demo, max_length))  # all at once: one instance per running episode
        assert run.built == N_EPISODES and len(run.idle) == N_EPISODES


@pytest.mark.parametrize("version", REPRESENTATIVES)
def test_unset_max_new_tokens_breaks_the_executor_before_0_10_2(version, demo, tmp_path):
    """OpenRLHF 0.9.8 made ``max_new_tokens`` optional (None: "dynamic"); the multi-turn executor
    computes ``max_length - max_tokens`` and fails on None until 0.10.2 (``... or 1``). rlexp's
    plan requires the flag on those releases (rlexp.protocol.agentic_checks)."""
    from rlexp.trainers.openrlhf.checks import openrlhf_needs_max_new_tokens
    from rlexp.trainers.openrlhf.parser import version_key

    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", "calculator", {}, max_turns=2, version=version)
    record = demo["records"][0]
    with agent_openrlhf.release_agent_module(version):
        executor = agent_openrlhf.load_agent_executor(agent_file)
        engine = engine_for(version, demo["model"], demo["tokenizer"])
        call = executor.execute(prompt=record["prompt"], label=record["answer"],
                                sampling_params=deepcopy(SamplingParams(max_tokens=None)), max_length=64,
                                hf_tokenizer=demo["tokenizer"], llm_engine=engine)  # fmt: skip
        try:
            asyncio.run(call)
            failed = False
        except TypeError:
            failed = True
    assert failed == (version_key(version) < version_key("0.10.2"))
    # the plan rule says the same for every release sharing this agent.py
    assert openrlhf_needs_max_new_tokens(version) == (failed and version_key(version) >= version_key("0.9.8"))


def test_agent_file_imports_the_environment_and_names_the_flag():
    text = agent_openrlhf.render_agent_file("pkg.mod:MyEnv", {"b": 1, "a": [2]}, max_turns=3, version="0.10.1")
    assert "ENVIRONMENT = 'pkg.mod:MyEnv'" in text and 'CONFIG = json.loads(\'{"a":[2],"b":1}\')' in text
    assert "--agent_func_path (OpenRLHF 0.10.1)" in text
    assert "--train.agent_func_path" in agent_openrlhf.render_agent_file("calculator", {}, max_turns=1, version="0.10.2")
    compile(text, "agent.py", "exec")


def test_agent_flag_per_release():
    from rlexp.trainers.openrlhf.parser import version_key

    for version in RELEASES:
        expected = "--train.agent_func_path" if version_key(version) >= version_key("0.10.2") else "--agent_func_path"
        assert agent_openrlhf.agent_flag(version) == expected


def test_agent_recipe_argv_parses_in_each_release(tmp_path):
    """The recipe with the agent file builds an argv every release's flag table accepts, with the
    agent flag and without a reward file (OpenRLHF sets remote_rm_url to "agent" itself)."""
    from rlexp.trainers.openrlhf.argv import build_train_argv

    recipe = {"pretrain": "m", "remote_rm_url": "/x/reward_func.py", "advantage_estimator": "group_norm",
              "n_samples_per_prompt": 4, "generate_max_len": 48, "prompt_data": "d.jsonl"}
    for version in RELEASES:
        argv = build_train_argv(agent_openrlhf.agent_recipe(recipe, tmp_path / "agent.py"), version).argv
        flag = agent_openrlhf.agent_flag(version)
        assert argv[argv.index(flag) + 1] == str(tmp_path / "agent.py")
        assert not any("remote_rm_url" in a or a == "--reward.remote_url" for a in argv)
        assert not any(a.endswith("apply_chat_template") for a in argv)


def test_special_tokens_in_the_sampled_text_never_reach_the_environment(demo, tmp_path):
    """OpenRLHF samples with skip_special_tokens=False: a special token the model emits mid-turn is
    in the action text; the environment sees the text as rlexp decodes it (skipping them)."""
    tok = demo["tokenizer"]
    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", "calculator", {}, max_turns=2, version="0.11.2")
    with agent_openrlhf.release_agent_module("0.11.2"):
        executor = agent_openrlhf.load_agent_executor(agent_file)
    executor.RUN.tokenizer = tok
    ids = tok("calc 12*3", add_special_tokens=False)["input_ids"]
    raw = tok.decode([tok.pad_token_id, *ids[:4], tok.bos_token_id, *ids[4:], tok.eos_token_id],
                     skip_special_tokens=False)
    assert raw != "calc 12*3"
    assert executor.RUN.action_text(raw) == tok.decode(tok(raw, add_special_tokens=False)["input_ids"],
                                                       skip_special_tokens=True) == "calc 12*3"


@pytest.mark.parametrize("name", ["smollm2", "llama3.1", "tiny"])
def test_the_executors_turns_are_the_chat_templates_rendering(name, tmp_path):
    """The newest release's executor with rlexp's agent file, on a real ChatML (SmolLM2) and Llama
    3.1 template: the episode's observation tokens are the template's rendering of the
    conversation, ChatML's newline after ``<|im_end|>`` included."""
    from tests.chat_templates import ACTIONS, check_ids, scripted_turns, tokenizer_for

    version = REPRESENTATIVES[-1]
    tokenizer = tokenizer_for(name)
    turns, _ = scripted_turns(tokenizer, ACTIONS)

    class ScriptedEngine(engine_for(version, None, tokenizer).__class__):
        async def _generate(self, prompt_token_ids, sampling_params):
            [completion] = turns([list(prompt_token_ids)], sampling_params.max_tokens, None)
            ids = list(completion.token_ids)
            text = self.tokenizer.decode(ids[:-1], skip_special_tokens=sampling_params.skip_special_tokens)
            return RequestOutput([CompletionOutput(ids, text, "stop")])

    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", "test_chat_turns", {"turns": 3},
                                                 max_turns=3, version=version)
    with agent_openrlhf.release_agent_module(version):
        executor = agent_openrlhf.load_agent_executor(agent_file)
        out = asyncio.run(executor.execute(prompt="a", label="7", sampling_params=SamplingParams(max_tokens=64),
                                           max_length=400, hf_tokenizer=tokenizer,
                                           llm_engine=ScriptedEngine(None, tokenizer)))
    assert out["extra_logs"]["turns_per_episode"] == 3
    check_ids(tokenizer, name, out["observation_tokens"])


def test_environment_steps_run_off_the_event_loop(demo, tmp_path):
    """reset and step run in worker threads (asyncio.to_thread): the executor's event loop never
    runs the environment, so a slow tool does not hold up the engine's other episodes."""
    import threading

    from rlexp.environments.interface import CalculatorEnv

    seen = []

    class Recording(CalculatorEnv):
        def reset(self, task):
            seen.append(threading.get_ident())
            return CalculatorEnv.reset(self, task)

        def step(self, action_text):
            seen.append(threading.get_ident())
            return CalculatorEnv.step(self, action_text)

    env, config, max_turns, max_length = CASES["roomy"]
    agent_file = agent_openrlhf.write_agent_file(tmp_path / "agent.py", env, config, max_turns=max_turns,
                                                 version="0.11.2")
    with agent_openrlhf.release_agent_module("0.11.2"):
        executor = agent_openrlhf.load_agent_executor(agent_file)
        engine = engine_for("0.11.2", demo["model"], demo["tokenizer"])
        executor.RUN.idle[:] = [Recording(dict(config)) for _ in range(N_EPISODES)]
        loop_thread = threading.get_ident()  # asyncio.run runs the loop on the calling thread
        asyncio.run(_play(executor, engine, demo, max_length))
    assert len(seen) >= N_EPISODES and loop_thread not in seen
