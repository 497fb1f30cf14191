"""The one turn of an episode, shared by every loop that plays rlexp's environments.

Four loops play an environment: rlexp's own rollout (:func:`rlexp.environments.episodes.play_episodes`:
the local trainer, TRL's ``rollout_func``, episode eval), OpenRLHF's multi-turn executor (the agent
file, :mod:`rlexp.trainers.openrlhf.agent_runtime`), verl's agent loop
(:mod:`rlexp.trainers.verl.agent_runtime`) and TRL's tool-calling loop
(:class:`rlexp.trainers.trl.agent_tools.ToolEpisode`). Who generates, and when, is each trainer's
API (a batch of episodes turn by turn, one callback per step, one coroutine per episode, TRL's own
loop calling tools); what happens at a turn is the same everywhere, and lives here once:

- :func:`reset_environment` (and :func:`reset_environment_in_thread`): the episode's start, a raise
  recorded as the episode's environment error;
- :func:`step_environment` (and :func:`step_environment_in_thread` for the asynchronous loops, which
  run the environment off their event loop): the environment's ``step`` timed, a raise recorded as
  the episode's environment error (an outcome, not a crash), the reward and the tool-call flag read
  the one way;
- :func:`turn_finish`: whether the episode ends after this turn, and why — a turn cut by its token
  room ends it as ``length``, the environment's ``done`` as ``stop``, the last allowed turn as
  ``max_turns``; otherwise it goes on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvStep:
    """The environment's answer to one action: its ``StepResult`` (None when ``step`` raised,
    ``error`` then the exception), and the seconds the call took."""

    result: Any
    latency_s: float
    error: BaseException | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def reward(self) -> float:
        """The turn's reward (0.0 when the environment failed: the turn earns nothing)."""
        return 0.0 if self.result is None else float(self.result.reward)

    @property
    def done(self) -> bool:
        return self.result is not None and bool(self.result.done)

    @property
    def feedback(self) -> str:
        return "" if self.result is None else self.result.feedback

    @property
    def tool_call(self) -> bool:
        return bool(self.info.get("tool_call"))

    def error_text(self) -> str:
        """``Type: message`` of the environment's exception (what an episode record keeps)."""
        return f"{type(self.error).__name__}: {self.error}"


def _answer(result: Any, started: float) -> EnvStep:
    return EnvStep(result, time.perf_counter() - started, info=dict(result.info or {}))


def step_environment(env: Any, action_text: str) -> EnvStep:
    """``env.step(action_text)``, timed; an exception is returned as the step's error."""
    started = time.perf_counter()
    try:
        result = env.step(action_text)
    except Exception as exc:  # noqa: BLE001 - an environment failure is an outcome, not a crash
        return EnvStep(None, time.perf_counter() - started, exc)
    return _answer(result, started)


async def step_environment_in_thread(env: Any, action_text: str) -> EnvStep:
    """:func:`step_environment` with ``step`` run in a worker thread (``asyncio.to_thread``), so a
    slow tool does not hold up the other episodes of the caller's event loop; the seconds are the
    caller's wait."""
    import asyncio

    started = time.perf_counter()
    try:
        result = await asyncio.to_thread(env.step, action_text)
    except Exception as exc:  # noqa: BLE001 - an environment failure is an outcome, not a crash
        return EnvStep(None, time.perf_counter() - started, exc)
    return _answer(result, started)


@dataclass(frozen=True)
class EnvReset:
    """The environment's first observation, or (``error`` set) the exception ``reset`` raised: the
    episode then ends as an environment error with no turn, played from the empty observation."""

    observation: str
    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def error_text(self) -> str:
        """``reset: Type: message``, what an episode record keeps."""
        return f"reset: {type(self.error).__name__}: {self.error}"


def reset_environment(env: Any, task: Any) -> EnvReset:
    """``env.reset(task)``; an exception is returned as the episode's error."""
    try:
        return EnvReset(env.reset(task))
    except Exception as exc:  # noqa: BLE001 - an environment failure is an outcome, not a crash
        return EnvReset("", exc)


async def reset_environment_in_thread(env: Any, task: Any) -> EnvReset:
    """:func:`reset_environment` in a worker thread (``asyncio.to_thread``)."""
    import asyncio

    try:
        return EnvReset(await asyncio.to_thread(env.reset, task))
    except Exception as exc:  # noqa: BLE001 - an environment failure is an outcome, not a crash
        return EnvReset("", exc)


def turn_finish(*, stopped: bool, done: bool, last_turn: bool) -> str | None:
    """The episode's finish reason if it ends after this turn, else None. ``stopped``: the model
    ended its turn itself (not cut by its token room); ``done``: the environment ended the
    episode; ``last_turn``: no turn is allowed after this one. A cut turn ends the episode first
    (graded as it stands, as the single-turn trainer grades a cut completion)."""
    if not stopped:
        return "length"
    if done:
        return "stop"
    if last_turn:
        return "max_turns"
    return None
