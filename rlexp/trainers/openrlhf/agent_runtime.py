"""What OpenRLHF's agent file runs: the agent and executor behind the generated file's two classes.

The file rlexp writes for ``--agent_func_path`` (:mod:`rlexp.trainers.openrlhf.agent`, which
explains the executor's contract) only states the attempt's values and defines the two classes
OpenRLHF looks for, each subclassing the mixin below and the release's own base::

    RUN = agent_runtime.AgentRun(ENVIRONMENT, CONFIG, max_turns=..., mask_error_episodes=..., ...)

    class Agent(agent_runtime.EnvironmentAgent, AgentInstanceBase):
        RUN = RUN

    class AgentExecutor(agent_runtime.EnvironmentExecutor, MultiTurnAgentExecutor):
        RUN = RUN
        AGENT = Agent

This module imports neither OpenRLHF nor torch at import time (torch, present on every OpenRLHF
worker, only when a step's output is built): it runs inside the release's process, and in rlexp's
tests under the release's own ``openrlhf.utils.agent``. The turn itself is
:mod:`rlexp.environments.episode_loop`'s, as in every other loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlexp.environments.episode_loop import (
    reset_environment_in_thread,
    step_environment_in_thread,
    turn_finish,
)
from rlexp.environments.interface import FINISH_REASONS, resolve


class AgentRun:
    """One agent file's state on one rollout engine: the attempt's environment and limits, the pool
    of environment instances (built once, reset between episodes, one per running episode), the
    policy's tokenizer (OpenRLHF hands it to ``execute`` only) and the error episodes in a row."""

    def __init__(self, environment: str, config: Mapping[str, Any], *, max_turns: int, mask_error_episodes: bool,
                 outage_episodes: int) -> None:  # fmt: skip
        self.environment = environment
        self.config = dict(config)
        self.max_turns = int(max_turns)
        self.mask_error_episodes = bool(mask_error_episodes)
        self.outage_episodes = int(outage_episodes)
        self.tokenizer: Any = None
        self.idle: list[Any] = []  # environment instances not in an episode now
        self.built = 0
        self.failed_in_a_row = 0

    def take(self) -> Any:
        if self.idle:
            return self.idle.pop()
        self.built += 1
        return resolve(self.environment)(dict(self.config))

    def action_text(self, text: str) -> str:
        """The action as rlexp decodes it (skip_special_tokens): OpenRLHF samples without skipping."""
        for token in sorted(getattr(self.tokenizer, "all_special_tokens", ()) or (), key=len, reverse=True):
            if token:
                text = text.replace(token, "")
        return text


def step_output(reward: float, total: float, feedback: str, done: bool, sampling_params: Any,
                logs: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One step as the executor takes it."""
    import torch

    return {
        "rewards": torch.tensor(float(reward)),
        "scores": torch.tensor(float(total)),  # the executor keeps the last step's: the return
        "environment_feedback": feedback,
        "done": done,
        "sampling_params": sampling_params,
        "extra_logs": {k: torch.tensor(float(v)) for k, v in logs.items()},
    }


class EnvironmentAgent:
    """The agent instance (mixed in before the release's ``AgentInstanceBase``): the executor builds
    one, without arguments, for every episode."""

    RUN: AgentRun

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.env: Any = None
        self.reset_error: str | None = None
        self.turns = 0
        self.total = 0.0
        self.tool_calls = 0
        self.latency = 0.0

    async def reset(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        from rlexp.evaluation.generation import render_prompt

        label = states["label"]
        task = dict(label) if isinstance(label, dict) else {"prompt": states["observation"], "answer": label}
        self.env = self.RUN.take()
        start = await reset_environment_in_thread(self.env, task)
        if start.failed:  # recorded as rlexp's rollout records it: an env_error episode, from the empty
            # observation's prompt (the executor samples one turn from it)
            self.reset_error = start.error_text()
            self._release()
        return {"observation": render_prompt(self.RUN.tokenizer, start.observation, "")}

    def _logs(self, finish: str) -> dict[str, Any]:
        # the executor keeps the last step's extra_logs: the episode's values so far
        return {"turns_per_episode": self.turns, "tool_calls_per_episode": self.tool_calls,
                "env_errors": int(finish == "env_error"), "episode_return": self.total,
                "env_latency_s_per_episode": self.latency, "finish": FINISH_REASONS.index(finish)}

    async def step(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        from rlexp.environments.episodes import render_user_turn

        sampling_params = states.get("sampling_params")
        if self.reset_error is not None:  # no environment to step: the episode ends with reward 0
            return step_output(0.0, 0.0, "", True, sampling_params, self._logs("env_error"))
        self.turns += 1
        answer = await step_environment_in_thread(self.env, self.RUN.action_text(states["action_text"]))
        self.latency += answer.latency_s
        if answer.failed:  # an environment failure ends the episode with no reward for the turn, counted
            self._release()
            return step_output(0.0, self.total, "", True, sampling_params, self._logs("env_error"))
        self.total += answer.reward
        if answer.tool_call:
            self.tool_calls += 1
        # the executor has no turn limit and returns before it knows whether the turn was cut: "stop"
        # or "max_turns" end the episode here, "length" stands until execute() reads the response
        finish = turn_finish(stopped=True, done=answer.done, last_turn=self.turns >= self.RUN.max_turns)
        done = finish is not None
        feedback = "" if done else render_user_turn(self.RUN.tokenizer, answer.feedback)
        if done:
            self._release()
        return step_output(answer.reward, self.total, feedback, done, sampling_params, self._logs(finish or "length"))

    def _release(self) -> None:
        if self.env is not None:
            self.RUN.idle.append(self.env)
            self.env = None


def episode_logs(response: Mapping[str, Any], max_length: int, eos_token_id: int | None) -> dict[str, Any]:
    """The extra_logs of one finished episode: the local trainer's per-episode values (its metric
    names), the finish reason as one 0/1 flag per reason, and the token counts whose batch means
    give agent_token_fraction (agent tokens / tokens after the prompt)."""
    import torch

    logs = {k: float(v) for k, v in (response.get("extra_logs") or {}).items()}
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
    logs.update({f"finish_{reason}": float(reason == finish) for reason in FINISH_REASONS})
    return {k: torch.tensor(float(v)) for k, v in logs.items()}


class EnvironmentExecutor:
    """The executor (mixed in before the release's ``MultiTurnAgentExecutor``): built once per
    rollout engine; completes each episode's logs and, where the release masks error episodes,
    takes their action ranges away and stops the run at an outage."""

    RUN: AgentRun
    AGENT: type

    def __init__(self) -> None:
        super().__init__(self.AGENT)  # type: ignore[call-arg]  # MultiTurnAgentExecutor(agent_instance_cls)

    async def execute(self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any,
                      llm_engine: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:  # fmt: skip
        run = self.RUN
        run.tokenizer = hf_tokenizer
        response = await super().execute(prompt, label, sampling_params, max_length,  # type: ignore[misc]
                                         hf_tokenizer, llm_engine, *args, **kwargs)
        response["extra_logs"] = episode_logs(response, max_length, getattr(hf_tokenizer, "eos_token_id", None))
        if run.mask_error_episodes and float(response["extra_logs"]["env_errors"]) > 0:
            run.failed_in_a_row += 1
            if run.failed_in_a_row >= run.outage_episodes:
                raise RuntimeError(
                    f"rlexp agent: the environment {run.environment!r} failed {run.failed_in_a_row} episodes in a row "
                    "on this engine: stopped as an outage (a step of masked episodes only has no token to train)")
            # no action range: OpenRLHF's action_mask is 0 at every token, so the episode is out of
            # its loss; its reward (the return so far) still enters the group's baseline
            response["action_ranges"] = []
        else:
            run.failed_in_a_row = 0
        return response
