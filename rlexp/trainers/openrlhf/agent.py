"""OpenRLHF's agent file for an rlexp environment: what ``--agent_func_path`` (before 0.10.2) /
``--train.agent_func_path`` (from 0.10.2) names, generated from the attempt's environment.

OpenRLHF (``openrlhf/utils/agent.py``; 8 distinct versions of that file among the listed releases
0.9.3–0.11.2, the multi-turn executor unchanged in what it asks of an agent) loads the file with
``importlib`` and instantiates the module-level class ``AgentExecutor`` without arguments; it must
subclass the release's ``AgentExecutorBase`` (``trainer/ray/vllm_engine.py::_load_agent_executor``).
The generated class is a ``MultiTurnAgentExecutor`` over an ``AgentInstanceBase`` subclass, which
the executor builds afresh, without arguments, for every episode. Hence:

- environment instances live at module level, in a pool: built once per worker, reset between
  episodes, each running episode holding its own (episodes of one engine run concurrently);
- ``execute`` receives the policy's tokenizer; the file keeps it at module level, because the
  agent instance never sees it and must render the environment's text through the chat template:
  the executor tokenises the returned *text* and appends it, so the first observation is the
  templated prompt and every feedback is the template's further user turn
  (:func:`rlexp.environments.episodes.render_user_turn`), the ids rlexp's own rollout appends;
- OpenRLHF samples with ``skip_special_tokens=False``: the action text may carry special tokens,
  removed before the environment sees it (rlexp decodes with ``skip_special_tokens=True``);
- ``rewards``: a tensor per step, summed over turns by the executor (the trajectory's reward);
  ``scores``: the executor keeps the *last* step's, so each step returns the return so far;
- there is no turn limit in the executor: the agent says ``done`` after ``max_turns`` turns (with
  no feedback, as rlexp's rollout ends there), and after the environment's own ``done``;
- budgets: before every turn the executor sets ``max_tokens`` to the room left in ``max_length``
  (``max_len``; ``prompt_max_len + generate_max_len`` before 0.9.8): a per-turn cap cannot be
  enforced, and the last feedback is appended without a length check.
  :func:`rlexp.environments.episodes.run_episodes` with ``max_length`` plays exactly that.

The environment's own code is imported by the file (a registered name or ``module:Class``), never
copied: rlexp (and the environment's package) must be importable on the rollout workers. The task
handed to ``reset`` is ``{"prompt": prompt, "answer": label}`` (the dataset's ``input_key`` and
``label_key``, with OpenRLHF's own chat template off: the agent renders the observation), or the
label itself when it is a mapping.

Metrics: each episode's ``extra_logs`` (the executor keeps the last step's; ``execute`` completes
them from the finished response) carry the local trainer's per-episode values under its names
(:func:`rlexp.environments.interface.episode_metrics`): ``turns_per_episode``,
``tool_calls_per_episode``, ``env_errors`` (0/1), ``episode_return``, ``finish_<reason>`` (0/1),
and the parts of its two ratios of sums: ``agent_tokens_per_episode`` and
``generated_tokens_per_episode`` (tokens after the prompt; agent_token_fraction is their quotient),
``env_latency_s_per_episode`` (env_latency_s = it over turns_per_episode). OpenRLHF puts every
extra_logs key into the sample's ``experience.info`` (``_process_response_into_experience``) and
the actor's ``ppo_train`` averages it over the batch's samples into the ``Global step`` dict (and
``train/<key>`` on TensorBoard/wandb) under the key itself; :mod:`rlexp.trainers.openrlhf.metrics`
reads the ratios back. A mean over samples equals the local trainer's mean over episodes when
every sample weighs the same: from 0.9.8 by construction (sample-weighted), before it as a mean of
micro-batch means (equal micro-batches; not with ``use_dynamic_batch``).

An environment whose ``reset`` raises is recorded as rlexp's rollout records it: an ``env_error``
episode, reward 0, no turn, no token after the prompt in its metrics. The executor still samples
one turn from the prompt; the agent ends the episode there. One whose ``step`` raises ends with its
return so far. From 0.11.0 (:func:`masks_error_episodes`) an error episode leaves the executor with
no action range: its ``action_mask`` is 0 at every token, and the release's ``PolicyLoss``
(``aggregate_loss`` over the optimizer step's token or sample count) gives it no gradient. Its
reward still enters the group's mean and std (``experience_maker.py``: a plain mean over the
``n_samples_per_prompt`` rewards; a NaN would make the group's advantages NaN). OpenRLHF's
per-sample and per-micro-batch means over the action mask (``kl`` and ``logprobs_diff`` of the
experience, ``ppo_clip_ratio``, ``ppo_kl``) are 0/0 for a sample, or a micro-batch, with no action
token: NaN in the step's log (flagged, not stopped, by rlexp's ingest); an optimizer step whose
every episode failed would have no token at all, and its loss would be 0/0: the agent file stops
the run first, at :func:`outage_episodes` error episodes in a row on one engine. Before 0.11.0 the loss takes those
means itself, so error episodes stay in it, trained with their reward.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rlexp.experiment.files import atomic_write_text
from rlexp.trainers.openrlhf.checks import masks_error_episodes

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

AGENT_FLAG_UNDERSCORE = "--agent_func_path"  # 0.9.3 ... 0.10.1.post2
AGENT_FLAG_DOTTED = "--train.agent_func_path"  # 0.10.2 on
AGENT_MODULE = "openrlhf/utils/agent.py"
LOGGING_MODULE = "openrlhf/utils/logging_utils.py"
# The flags that make OpenRLHF hand the dataset's raw prompt and label to the agent (the agent
# renders the environment's observation through the chat template itself).
DATA_KEYS = {"input_key": "prompt", "label_key": "answer", "apply_chat_template": False}

_TEMPLATE = '''"""OpenRLHF agent file generated by rlexp for the environment {env!r}.

Passed as {flag} (OpenRLHF {version}). OpenRLHF builds ``AgentExecutor()`` once per rollout
engine; its MultiTurnAgentExecutor builds ``Agent()`` afresh for every episode. The environment is
imported, not copied; instances are pooled at module level and reset between episodes. The
environment's reset and step run in a worker thread (asyncio.to_thread), so a slow tool does not
hold up the other episodes of this engine's event loop.
"""

import asyncio
import json
import time

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from rlexp.environments.episodes import render_user_turn
from rlexp.evaluation.generation import render_prompt
from rlexp.environments.interface import FINISH_REASONS, resolve

ENVIRONMENT = {env!r}
CONFIG = json.loads({config!r})
MAX_TURNS = {max_turns!r}
MASK_ERROR_EPISODES = {mask_errors!r}  # this release's loss normalises over the step (models/loss.py aggregate_loss)
# an outage, not a flaky step: this many error episodes in a row on one engine stop the run, before an
# optimizer step can hold only masked episodes (its loss would be 0/0 and its gradient NaN)
OUTAGE_EPISODES = {outage!r}
_FAILED_IN_A_ROW = [0]

_TOKENIZER = None  # the policy's tokenizer, as OpenRLHF hands it to execute()
_IDLE = []  # environment instances not in an episode now (one episode holds one instance)
_BUILT = [0]


def _take():
    if _IDLE:
        return _IDLE.pop()
    _BUILT[0] += 1
    return resolve(ENVIRONMENT)(dict(CONFIG))


def _action_text(text):
    """The action as rlexp decodes it (skip_special_tokens): OpenRLHF samples without skipping."""
    for token in sorted(getattr(_TOKENIZER, "all_special_tokens", ()) or (), key=len, reverse=True):
        if token:
            text = text.replace(token, "")
    return text


def _step_output(reward, total, feedback, done, sampling_params, logs):
    return {{
        "rewards": torch.tensor(float(reward)),
        "scores": torch.tensor(float(total)),  # the executor keeps the last step's: the return
        "environment_feedback": feedback,
        "done": done,
        "sampling_params": sampling_params,
        "extra_logs": {{k: torch.tensor(float(v)) for k, v in logs.items()}},
    }}


class Agent(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.env = None
        self.reset_error = None
        self.turns = 0
        self.total = 0.0
        self.tool_calls = 0
        self.latency = 0.0

    async def reset(self, states, **kwargs):
        label = states["label"]
        task = dict(label) if isinstance(label, dict) else {{"prompt": states["observation"], "answer": label}}
        self.env = _take()
        try:
            observation = await asyncio.to_thread(self.env.reset, task)
        except Exception as exc:  # recorded as rlexp's rollout records it: an env_error episode, reward 0
            self.reset_error = f"reset: {{type(exc).__name__}}: {{exc}}"
            self._release()
            observation = ""  # the prompt rlexp's rollout keeps for it (the executor samples one turn from it)
        return {{"observation": render_prompt(_TOKENIZER, observation, "")}}

    def _logs(self, finish):
        # the executor keeps the last step's extra_logs: the episode's values so far
        return {{"turns_per_episode": self.turns, "tool_calls_per_episode": self.tool_calls,
                "env_errors": int(finish == "env_error"), "episode_return": self.total,
                "env_latency_s_per_episode": self.latency, "finish": FINISH_REASONS.index(finish)}}

    async def step(self, states, **kwargs):
        sampling_params = states.get("sampling_params")
        if self.reset_error is not None:  # no environment to step: the episode ends with reward 0
            return _step_output(0.0, 0.0, "", True, sampling_params, self._logs("env_error"))
        self.turns += 1
        started = time.perf_counter()
        try:
            result = await asyncio.to_thread(self.env.step, _action_text(states["action_text"]))
        except Exception:  # an environment failure ends the episode with no reward for the turn, counted
            self.latency += time.perf_counter() - started
            self._release()
            return _step_output(0.0, self.total, "", True, sampling_params, self._logs("env_error"))
        self.latency += time.perf_counter() - started
        self.total += float(result.reward)
        if (result.info or {{}}).get("tool_call"):
            self.tool_calls += 1
        done = bool(result.done) or self.turns >= MAX_TURNS
        feedback = "" if done else render_user_turn(_TOKENIZER, result.feedback)
        if done:
            self._release()
        # "stop"/"max_turns" unless the turn was cut by the room left (known after the executor returns)
        finish = ("stop" if result.done else "max_turns") if done else "length"
        return _step_output(result.reward, self.total, feedback, done, sampling_params, self._logs(finish))

    def _release(self):
        if self.env is not None:
            _IDLE.append(self.env)
            self.env = None


def episode_logs(response, max_length, eos_token_id):
    """The extra_logs of one finished episode: the local trainer's per-episode values (its metric
    names), the finish reason as one 0/1 flag per reason, and the token counts whose batch means
    give agent_token_fraction (agent tokens / tokens after the prompt)."""
    logs = {{k: float(v) for k, v in (response.get("extra_logs") or {{}}).items()}}
    finish = FINISH_REASONS[int(logs.pop("finish"))]
    ranges = [tuple(r) for r in response["action_ranges"]]
    if logs["turns_per_episode"] and ranges:
        start, end = ranges[-1]
        # the last turn was cut iff it filled the room it was given without an end of sequence
        # ("truncated", its finish reason, where the release returns it)
        cut = response["truncated"] if "truncated" in response else (
            end - start >= max_length - start and response["observation_tokens"][end - 1] != eos_token_id)
        if cut and finish in ("stop", "max_turns"):
            finish = "length"
        agent = sum(e - s for s, e in ranges)
        generated = len(response["observation_tokens"]) - ranges[0][0]
    else:  # the environment failed at reset: rlexp's rollout has no turn and no token after the prompt
        agent = generated = 0
    logs.update(agent_tokens_per_episode=agent, generated_tokens_per_episode=generated)
    logs.update({{f"finish_{{reason}}": float(reason == finish) for reason in FINISH_REASONS}})
    return {{k: torch.tensor(float(v)) for k, v in logs.items()}}


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(Agent)

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, *args, **kwargs):
        global _TOKENIZER
        _TOKENIZER = hf_tokenizer
        response = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine,
                                         *args, **kwargs)
        response["extra_logs"] = episode_logs(response, max_length, getattr(hf_tokenizer, "eos_token_id", None))
        if MASK_ERROR_EPISODES and float(response["extra_logs"]["env_errors"]) > 0:
            _FAILED_IN_A_ROW[0] += 1
            if _FAILED_IN_A_ROW[0] >= OUTAGE_EPISODES:
                raise RuntimeError(
                    f"rlexp agent: the environment {{ENVIRONMENT!r}} failed {{_FAILED_IN_A_ROW[0]}} episodes in a row "
                    "on this engine: stopped as an outage (a step of masked episodes only has no token to train)")
            # no action range: OpenRLHF's action_mask is 0 at every token, so the episode is out of
            # its loss; its reward (the return so far) still enters the group's baseline
            response["action_ranges"] = []
        else:
            _FAILED_IN_A_ROW[0] = 0
        return response
'''


def agent_flag(version: str) -> str:
    """The agent-file flag of a listed release, read from its flag table."""
    from rlexp.trainers.openrlhf.argv import load_flag_table

    table = load_flag_table(version)
    for flag in (AGENT_FLAG_DOTTED, AGENT_FLAG_UNDERSCORE):
        if flag in table:
            return flag
    raise ValueError(f"OpenRLHF {table.version} has no agent-file flag")


def outage_episodes(recipe: Mapping[str, Any]) -> int:
    """Error episodes in a row, on one vLLM engine, that the agent file stops the run at: half of
    that engine's share of an optimizer step (``train_batch_size`` samples over the engines), at
    least 1. An optimizer step whose every episode failed would hold no action token once they are
    masked; the engines share a step's prompts evenly, so such a step makes every engine see at
    least its share in a row, and half of it leaves room for an uneven split. Independent errors at
    the SOP's stop rate (a quarter) reach 16 in a row with probability 0.25**16 ≈ 2e-10."""
    from rlexp.trainers.openrlhf.checks import stated_value

    batch = stated_value(recipe, "train_batch_size", "train.batch_size") or 128
    engines = stated_value(recipe, "vllm_num_engines", "vllm.num_engines") or 1
    return max(1, int(batch) // (2 * max(1, int(engines))))


def render_agent_file(env: str, config: Mapping[str, Any], *, max_turns: int, version: str,
                      outage: int = 64) -> str:
    """The agent file's text for one environment (a registered name or ``module:Class``) and its
    config (plain JSON values), ending episodes after ``max_turns`` turns and stopping the run after
    ``outage`` error episodes in a row (:func:`outage_episodes`; where the release masks them)."""
    from rlexp.environments.interface import check_budget_values

    check_budget_values("environment", max_turns=max_turns)
    config_text = json.dumps(dict(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return _TEMPLATE.format(env=env, config=config_text, max_turns=int(max_turns), flag=agent_flag(version),
                            version=version, mask_errors=masks_error_episodes(version), outage=max(1, int(outage)))


def write_agent_file(path: str | Path, env: str, config: Mapping[str, Any], *, max_turns: int, version: str,
                     outage: int = 64) -> Path:
    return atomic_write_text(path, render_agent_file(env, config, max_turns=max_turns, version=version, outage=outage))


def agent_recipe(recipe: Mapping[str, Any], agent_file: str | Path) -> dict[str, Any]:
    """The recipe with the agent file in it: OpenRLHF replaces the remote reward by the agent
    (``remote_rm_url = "agent"`` when an agent file is set), so no reward file is named; the
    dataset's raw prompt and label reach the agent (``DATA_KEYS``)."""
    merged = {k: v for k, v in recipe.items() if k != "remote_rm_url"}
    merged.update(DATA_KEYS)
    merged["agent_func_path"] = str(agent_file)
    return merged


# ----------------------------------------------------------------------------- the release's own code


@contextmanager
def release_agent_module(version: str, wheel: Path | None = None) -> Iterator[ModuleType]:
    """``openrlhf.utils.agent`` of one listed release, executed from its wheel (with the wheel's
    own ``logging_utils``; ``agent.py`` imports nothing else of OpenRLHF, plus ``asyncio`` and
    ``aiohttp``). Installed in ``sys.modules`` for the duration, so an agent file's
    ``from openrlhf.utils.agent import ...`` gets this release; the previous modules are restored."""
    from rlexp.trainers.openrlhf.parser import _Wheel, fetch, listed_releases

    if wheel is None:
        release = next((r for r in listed_releases() if r.version == version), None)
        if release is None:
            raise ValueError(f"OpenRLHF {version} is not a listed release")
        wheel = fetch(release)
    files = _Wheel(Path(wheel))
    names = ("openrlhf", "openrlhf.utils", "openrlhf.utils.logging_utils", "openrlhf.utils.agent")
    saved = {name: sys.modules.get(name) for name in names}
    try:
        for package in names[:2]:
            module = ModuleType(package)
            module.__path__ = []  # a namespace: nothing else of the package is importable
            sys.modules[package] = module
        for name, path in ((names[2], LOGGING_MODULE), (names[3], AGENT_MODULE)):
            module = ModuleType(name)
            module.__file__ = f"{Path(wheel).name}/{path}"
            sys.modules[name] = module
            exec(compile(files.source(path), module.__file__, "exec"), module.__dict__)  # noqa: S102 - the pinned wheel
        yield sys.modules[names[3]]
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load_agent_executor(agent_file: str | Path) -> Any:
    """What OpenRLHF's ``_load_agent_executor`` does (``trainer/ray/vllm_engine.py``, the same in
    every listed release): import the file, require ``AgentExecutor`` subclassing the release's
    ``AgentExecutorBase`` (the one installed by :func:`release_agent_module`), build it without
    arguments."""
    import importlib.util

    base = sys.modules["openrlhf.utils.agent"].AgentExecutorBase
    spec = importlib.util.spec_from_file_location("agent_module", str(agent_file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "AgentExecutor"):
        raise ValueError(f"{agent_file}: no module-level class AgentExecutor")
    if not issubclass(module.AgentExecutor, base):
        raise ValueError(f"{agent_file}: AgentExecutor does not subclass this release's AgentExecutorBase")
    return module.AgentExecutor()


def check_one_environment(att: Attempt) -> None:
    """The generated adapters play the attempt's one environment (the trainers hand the agent a
    prompt and a label, not a row's ``env``/``config``): a training-set row naming another one is
    refused here (file and line) rather than silently played in the wrong environment."""
    from rlexp.errors import InputError
    from rlexp.experiment.files import iter_jsonl

    env = att.environment
    for role in ("pool", "ood_monitor"):
        ref = att.datasets.get(role)
        if ref is None or ref.path is None or not Path(ref.path).exists():
            continue
        for line, record in iter_jsonl(ref.path):
            if record.get("env", env.name) != env.name or dict(record.get("config", env.config) or {}) != dict(env.config):
                raise InputError(ref.path, f"line {line}: env",
                                 f"this row names its own environment; on {att.trainer.name} every row plays the "
                                 f"attempt's environment.name {env.name!r} with its config")


def launch_files(att: Attempt, recipe: Mapping[str, Any], agent_file: Path) -> tuple[dict[str, Any], dict[Path, str]]:
    """``rlexp launch`` on an environment task: the recipe with the agent file in it, and the file
    to write beside the argv (the attempt's environment, its config and turn limit)."""
    check_one_environment(att)
    env = att.environment
    text = render_agent_file(env.name, env.config, max_turns=env.max_turns, version=att.trainer.version,
                             outage=outage_episodes(recipe))
    return agent_recipe(recipe, agent_file), {Path(agent_file): text}
