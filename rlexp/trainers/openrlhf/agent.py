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
from rlexp.trainers.launch import check_one_environment
from rlexp.trainers.openrlhf.checks import masks_error_episodes

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.spec.recipe import Recipe

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
hold up the other episodes of this engine's event loop. The code is rlexp's
(rlexp/trainers/openrlhf/agent_runtime.py); this file states the attempt's values.
"""

import json

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from rlexp.trainers.openrlhf import agent_runtime

ENVIRONMENT = {env!r}
CONFIG = json.loads({config!r})
MAX_TURNS = {max_turns!r}
MASK_ERROR_EPISODES = {mask_errors!r}  # this release's loss normalises over the step (models/loss.py aggregate_loss)
# an outage, not a flaky step: this many error episodes in a row on one engine stop the run, before an
# optimizer step can hold only masked episodes (its loss would be 0/0 and its gradient NaN)
OUTAGE_EPISODES = {outage!r}

RUN = agent_runtime.AgentRun(ENVIRONMENT, CONFIG, max_turns=MAX_TURNS, mask_error_episodes=MASK_ERROR_EPISODES,
                             outage_episodes=OUTAGE_EPISODES)


class Agent(agent_runtime.EnvironmentAgent, AgentInstanceBase):
    RUN = RUN


class AgentExecutor(agent_runtime.EnvironmentExecutor, MultiTurnAgentExecutor):
    RUN = RUN
    AGENT = Agent
'''


def agent_flag(version: str) -> str:
    """The agent-file flag of a listed release, read from its flag table."""
    from rlexp.trainers.openrlhf.argv import load_flag_table

    table = load_flag_table(version)
    for flag in (AGENT_FLAG_DOTTED, AGENT_FLAG_UNDERSCORE):
        if flag in table:
            return flag
    raise ValueError(f"OpenRLHF {table.version} has no agent-file flag")


def outage_episodes(recipe: Recipe) -> int:
    """Error episodes in a row, on one vLLM engine, that the agent file stops the run at: half of
    that engine's share of an optimizer step (``train_batch_size`` samples over the engines), at
    least 1. An optimizer step whose every episode failed would hold no action token once they are
    masked; the engines share a step's prompts evenly, so such a step makes every engine see at
    least its share in a row, and half of it leaves room for an uneven split. Independent errors at
    the SOP's stop rate (a quarter) reach 16 in a row with probability 0.25**16 ≈ 2e-10."""
    return max(1, recipe.train_batch_size // (2 * max(1, recipe.vllm_num_engines or 1)))


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


def launch_files(att: Attempt, recipe: Mapping[str, Any], agent_file: Path) -> tuple[dict[str, Any], dict[Path, str]]:
    """``rlexp launch`` on an environment task: the recipe with the agent file in it, and the file
    to write beside the argv (the attempt's environment, its config and turn limit)."""
    check_one_environment(att)
    env = att.environment
    text = render_agent_file(env.name, env.config, max_turns=env.max_turns, version=att.trainer.version,
                             outage=outage_episodes(att.recipe))
    return agent_recipe(recipe, agent_file), {Path(agent_file): text}
