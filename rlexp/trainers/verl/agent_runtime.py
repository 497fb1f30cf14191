"""What verl's generated agent loop runs: the loop behind the generated file's class.

The module rlexp writes for verl (:mod:`rlexp.trainers.verl.agent`, which explains verl's
contract) only states the attempt's values and defines the class verl's YAML names, subclassing
the mixin below and the release's own ``AgentLoopBase``::

    RUN = agent_runtime.LoopRun(ENVIRONMENT, CONFIG, max_turns=..., max_tokens_per_turn=..., ...)

    @register(AGENT_NAME)
    class RlexpEnvironmentAgentLoop(agent_runtime.EnvironmentAgentLoop, AgentLoopBase):
        RUN = RUN
        OUTPUT = AgentLoopOutput

This module imports nothing of verl (the generated file hands it the release's ``AgentLoopOutput``
as ``OUTPUT``): it runs in verl's agent-loop workers, and in rlexp's tests under the wheel's own
classes. The turn itself is :mod:`rlexp.environments.episode_loop`'s, as in every other loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from rlexp.environments.episode_loop import (
    reset_environment_in_thread,
    step_environment_in_thread,
    turn_finish,
)
from rlexp.environments.interface import resolve


class LoopRun:
    """One loop module's state in one worker: the attempt's environment, its budgets, and the pool
    of environment instances (reset between episodes, one per running episode)."""

    def __init__(self, environment: str, config: Mapping[str, Any], *, max_turns: int, max_tokens_per_turn: int,
                 max_total_tokens: int) -> None:  # fmt: skip
        self.environment = environment
        self.config = dict(config)
        self.max_turns = int(max_turns)
        self.max_tokens_per_turn = int(max_tokens_per_turn)
        self.max_total_tokens = int(max_total_tokens)
        self.idle: list[Any] = []  # environment instances not in an episode now

    def take(self) -> Any:
        return self.idle.pop() if self.idle else resolve(self.environment)(dict(self.config))


def row_task(kwargs: Mapping[str, Any]) -> Any:
    """The environment's task of one dataset row: rlexp's own (``extra_info.rlexp_task``), else the
    last chat message as the prompt and the row's ground truth as the answer."""
    extra = kwargs.get("extra_info") or {}
    if extra.get("rlexp_task"):
        return json.loads(extra["rlexp_task"])
    messages = list(kwargs.get("raw_prompt") or [])
    prompt = messages[-1]["content"] if messages else ""
    return {"prompt": prompt, "answer": (kwargs.get("reward_model") or {}).get("ground_truth")}


class EnvironmentAgentLoop:
    """The agent loop (mixed in before the release's ``AgentLoopBase``): one episode per ``run``."""

    RUN: LoopRun
    OUTPUT: Any  # the release's AgentLoopOutput
    tokenizer: Any
    server_manager: Any
    rollout_config: Any
    _cap_text_prompt_length: Any  # the four above and this: AgentLoopBase's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        from rlexp.evaluation.generation import encode_prompt, render_prompt

        tok = self.tokenizer
        env = self.RUN.take()
        try:
            start = await reset_environment_in_thread(env, row_task(kwargs))
            prompt_ids = self._cap_text_prompt_length(encode_prompt(tok, render_prompt(tok, start.observation, "")))
            if start.failed:  # recorded as rlexp's rollout records it: an env_error episode, no turn, reward 0
                return self._output(prompt_ids, [], [], 0.0, 0, 0, "env_error", 0.0)
            return await self._play(env, prompt_ids, sampling_params)
        finally:
            self.RUN.idle.append(env)

    async def _play(self, env: Any, prompt_ids: list[int], sampling_params: Mapping[str, Any]) -> Any:
        from rlexp.environments.episodes import render_user_turn
        from rlexp.evaluation.generation import encode_prompt

        run, tok = self.RUN, self.tokenizer
        stop_ids = {tok.eos_token_id}
        budget = min(run.max_total_tokens, self.response_length)
        response: list[int] = []
        mask: list[int] = []
        total, turns, tool_calls, env_s = 0.0, 0, 0, 0.0
        logprobs: list[float] | None = []  # the server's, per response token (None once a turn came without them)
        finish = "max_turns"
        for turn in range(run.max_turns):
            room = min(run.max_tokens_per_turn, budget - len(response))
            if room < 1:
                finish = "length"
                break
            params = dict(sampling_params, max_tokens=room)
            output = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids + response,
                                                        sampling_params=params)
            ids = list(output.token_ids)[:room]
            # fewer tokens than allowed: the server stopped on a stop token (any the model's
            # generation config names); at the cap, only the tokenizer's EOS says so
            stopped = bool(ids) and (len(ids) < room or ids[-1] in stop_ids)
            response += ids
            mask += [1] * len(ids)
            served = getattr(output, "log_probs", None)
            logprobs = logprobs + [float(v) for v in served[: len(ids)]] if logprobs is not None and served else None
            turns += 1
            answer = await step_environment_in_thread(env, tok.decode(ids, skip_special_tokens=True))
            env_s += answer.latency_s
            if answer.failed:  # an environment failure ends the episode, counted, and out of the loss:
                # no response (verl's aborted sample: every position masked, logged as response/aborted_ratio);
                # its return so far still enters its group's baseline (verl's GRPO mean has no exclusion)
                return self._output(prompt_ids, [], [], total, turns, tool_calls, "env_error", env_s)
            total += answer.reward
            tool_calls += int(answer.tool_call)
            ended = turn_finish(stopped=stopped, done=answer.done, last_turn=turn == run.max_turns - 1)
            if ended is not None:
                finish = ended
                break
            feedback = encode_prompt(tok, render_user_turn(tok, answer.feedback))
            if len(response) + len(feedback) >= budget:
                finish = "length"
                break
            response += feedback
            mask += [0] * len(feedback)
            if logprobs is not None:
                logprobs += [0.0] * len(feedback)  # not sampled: masked out of the loss, as verl's tool loop pads
        if logprobs is not None and len(logprobs) != len(response):
            logprobs = None  # a server that returned fewer log-probs than tokens: none rather than misaligned
        return self._output(prompt_ids, response[: self.response_length], mask[: self.response_length], total, turns,
                            tool_calls, finish, env_s,
                            logprobs[: self.response_length] if logprobs and response else None)

    def _output(self, prompt_ids: list[int], response: list[int], mask: list[int], total: float, turns: int,
                tool_calls: int, finish: str, env_s: float, logprobs: list[float] | None = None) -> Any:  # fmt: skip
        """The episode as verl takes it. What verl logs of it (metric_utils.py compute_data_metrics):
        num_turns -> num_turns/mean (verl counts chat messages: the prompt, each model turn and each
        feedback, 2 per model turn here), the reward -> critic/score/mean, the extra field
        tool_call_counts -> tool_call_counts/mean (the legacy trainer, trainer.use_v1=false, whose
        batch keeps the extra fields), the environment's seconds as AgentLoopMetrics.tool_calls ->
        agent_loop/tool_calls/* timings. The other fields carry the local trainer's names, unlogged."""
        return self.OUTPUT(
            prompt_ids=prompt_ids,
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs,  # verl's rollout_log_probs (rollout correction, bypass mode)
            reward_score=total,  # verl puts it on the last response token (rm_scores[-1])
            num_turns=2 * turns,
            metrics={"tool_calls": env_s},
            extra_fields={"tool_call_counts": tool_calls, "turns_per_episode": turns,
                          "tool_calls_per_episode": tool_calls, "env_errors": int(finish == "env_error"),
                          "finish_reason": finish},
        )
