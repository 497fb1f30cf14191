"""TRL on environment tasks whose actions are tool calls (``environment.actions: tool_calls``): the
``environment_factory`` adapter that ``rlexp launch`` generates (``launch/trl_tools.py``).

TRL 1.16's ``GRPOTrainer(environment_factory=...)`` contract, as its code reads
(``trainer/grpo_trainer.py``: ``__init__``, ``_generate_and_score_completions``, ``_tokenize_prompts``,
``_generate``, ``_tool_call_loop``, ``_get_tool_suffix_ids``; ``chat_template_utils.py``):

- ``environment_factory`` is a callable returning an environment instance, or a dict of them keyed
  by the dataset's ``environment`` column (rlexp passes the dict: rows of one dataset may name
  several environments). One instance per rollout of a batch, pooled and reused across batches;
- the instance's public functions (``inspect.getmembers(type(instance), inspect.isfunction)``, names
  not starting with ``_``, other than ``reset`` and ``get_reward``) are its tools, described to the
  chat template by their type hints and Google-style docstrings (transformers' ``get_json_schema``);
- before generation TRL calls ``reset(**row)`` with the dataset row's columns (without
  ``environment``); a string it returns is appended to the last user message of the ``prompt``;
- the model's completion is parsed with ``tokenizer.parse_response`` (the tokenizer's
  ``response_template``, transformers >= 5.13; TRL sets one itself only for the chat templates it
  knows); each parsed ``tool_calls`` entry calls the tool of that name with the parsed arguments (an
  exception becomes ``{"error": ...}``, counted in ``tools/failure_frequency``), its result is
  appended as a ``{"role": "tool"}`` message whose tokens (the template's rendering of the tool
  message and of the next generation prompt, ``_get_tool_suffix_ids``) get 0 in the ``tool_mask``,
  and the model generates again, at most ``max_tool_calling_iterations`` times, the whole completion
  within ``max_completion_length`` (a tool result that would pass it is dropped and the loop ends);
- the chat template must render ``user -> assistant(tool_calls) -> tool`` with the call's name,
  arguments and the tool content (``supports_tool_calling``, checked in ``__init__``), and be
  prefix-preserving (else TRL swaps in a training template it knows, or refuses);
- the reward comes from ``reward_funcs`` (which then receive ``environments``, the instances of the
  batch) and/or the instance's ``get_reward()``.

rlexp's side (:class:`ToolEpisode`, the base of each generated environment class): ``reset`` plays
the environment's ``reset(task)`` on the row's task and returns the observation; each tool is one
declared :class:`rlexp.environments.interface.Tool`, played as the action text ``Tool.action`` names
through the environment's ``step``; the model's final message (no tool call) is the episode's last
step, played by the reward function, whose return is the episode's (the sum of its turns' rewards).
The environment classes are imported by the generated module from their own modules, never copied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.trainers.trl.agent import check_episode_rules
from rlexp.trainers.trl.files import TrlFiles

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

# a chat template TRL's tool loop can use must carry a response_template to parse the calls with
RESPONSE_TEMPLATE_KEY = "response_template"


def tool_tables(att: Attempt, imports: Mapping[str, tuple[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """``{environment name: its tools as plain values}`` of every environment the attempt plays;
    an environment that declares no tools is refused on ``environment.actions``."""
    from rlexp.environments.interface import environment_tools, resolve

    spec = att.display_path or att.spec_path
    out = {}
    for name, (module, qualname) in sorted(imports.items()):
        tools = environment_tools(resolve(name))  # the class environment_imports resolved
        if not tools:
            raise InputError(spec, "environment.actions", f"tool_calls: environment {name!r} ({module}:{qualname}) "
                                                          "declares no tools (its actions are text only)")
        for tool in tools:
            names = [p for p, _ in tool.params]
            if not tool.name.isidentifier() or tool.name.startswith("_") or tool.name in ("reset", "get_reward") or \
                    not all(p.isidentifier() for p in names):
                raise InputError(spec, "environment.actions", f"tool_calls: environment {name!r} declares a tool "
                                                              f"{tool.name!r} that cannot be a method name")
        out[name] = [{"name": t.name, "description": t.description, "params": [list(p) for p in t.params],
                      "action": t.action} for t in tools]
    return out


def tool_calling_iterations(max_turns: int) -> int:
    """TRL's ``max_tool_calling_iterations`` for episodes of at most ``max_turns`` model turns:
    ``max_turns - 1``. GRPOTrainer (1.16) generates the first turn in ``_generate``, before its tool
    loop; each iteration of ``_tool_call_loop`` (``while idxs_with_tool and iteration_num <
    self.max_tool_calling_iterations``) runs the calls of the turn before and generates one turn
    more. N iterations are N + 1 model turns. (tests/test_trl_tool_turns.py runs TRL's own loop.)"""
    return max_turns - 1


def check_tool_recipe(att: Attempt, grpo_kwargs: Mapping[str, Any]) -> None:
    """What TRL's tool loop cannot serve, refused with one line naming the field."""
    spec = att.display_path or att.spec_path
    settings = att.environment
    check_episode_rules(att, grpo_kwargs)
    limit = grpo_kwargs.get("max_completion_length", att.recipe.max_completion_length)  # else TRL's default
    if limit is None:  # TRL's tool loop compares each completion's length with it: None fails there
        raise InputError(spec, "recipe.max_completion_length", "null: TRL's tool loop bounds the whole completion "
                                                               f"by it (state {settings.max_total_tokens}, "
                                                               "environment.max_total_tokens)")
    if settings.max_total_tokens != int(limit):
        raise InputError(spec, "environment.max_total_tokens", f"{settings.max_total_tokens}: TRL's tool loop bounds "
                                                               f"the whole completion by max_completion_length "
                                                               f"{limit} (state the same number)")
    if settings.max_tokens_per_turn != settings.max_total_tokens:
        raise InputError(spec, "environment.max_tokens_per_turn", f"{settings.max_tokens_per_turn}: TRL's tool loop "
                                                                  "has no per-turn budget (state max_total_tokens)")
    stated = grpo_kwargs.get("max_tool_calling_iterations")
    if stated is not None and stated != tool_calling_iterations(settings.max_turns):
        raise InputError(spec, "recipe.max_tool_calling_iterations",
                         f"{stated}: rlexp sets it to environment.max_turns - 1 = "
                         f"{tool_calling_iterations(settings.max_turns)} (the first turn is generated before "
                         "TRL's tool loop)")


def check_tool_template(att: Attempt) -> None:
    """The base model's tokenizer must carry a ``response_template`` (TRL parses the calls with it)."""
    import json
    from pathlib import Path

    config = Path(att.base_model()) / "tokenizer_config.json"
    if not config.is_file():
        return  # a hub id or a model not there yet: TRL's own check at start names the problem
    try:
        has = RESPONSE_TEMPLATE_KEY in json.loads(config.read_text())
    except ValueError:
        return
    if not has:
        raise InputError(config, RESPONSE_TEMPLATE_KEY, "missing: TRL's environment_factory parses the model's tool "
                                                        "calls with the tokenizer's response_template (and needs a "
                                                        "chat template with tool calls and a tool role)")


def tools_adapter(att: Attempt, ad: Any, grpo_kwargs: dict[str, Any], rlexp_root: str) -> Any:
    """The environment_factory module of a tool-call attempt (nothing is written here); sets
    ``max_tool_calling_iterations`` in ``grpo_kwargs`` (:func:`tool_calling_iterations`)."""
    from rlexp.trainers.trl.agent import ROLLOUT_MODULE_OPTION, RolloutAdapter, environment_imports
    from rlexp.trainers.trl.tools_template import render_tools_module

    check_tool_recipe(att, grpo_kwargs)
    imports = environment_imports(att)
    tables = tool_tables(att, imports)
    check_tool_template(att)
    settings = att.environment
    grpo_kwargs["max_tool_calling_iterations"] = tool_calling_iterations(settings.max_turns)
    config = {
        "rlexp_root": rlexp_root,
        "environment": {"name": settings.name, "config": dict(settings.config or {}), "max_turns": settings.max_turns,
                        "max_tokens_per_turn": settings.max_tokens_per_turn,
                        "max_total_tokens": settings.max_total_tokens,
                        "success_threshold": settings.success_threshold, "actions": settings.actions},
        "episodes_path": str(TrlFiles.of(ad).episodes),
        "model_name_or_path": str(att.base_model()),
    }
    text = render_tools_module(att.id, imports, tables, config)
    module = TrlFiles.of(ad).tools_module
    return RolloutAdapter(module, text, (ROLLOUT_MODULE_OPTION, str(module)))


# ----------------------------------------------------------------------------- run by the generated module


class ToolEpisode:
    """One rollout's episode in an environment whose actions are tool calls: the base of the classes
    the generated module defines (one per environment, its tools as methods). Only ``reset`` and the
    tools are public: TRL takes every other public function for a tool."""

    ENVIRONMENT: Any = None  # the environment class
    NAME = ""  # its name in the rows
    TOOLS: dict[str, Any] = {}  # tool name -> rlexp.environments.interface.Tool

    def __init__(self) -> None:
        self._instances: dict[str, Any] = {}  # one environment per config, reset between episodes
        self._env: Any = None
        self._row: Any = None
        self._turns: list[dict[str, Any]] = []
        self._return = 0.0
        self._finish_reason: str | None = None
        self._error: str | None = None

    def reset(self, row: str | None = None, **columns: Any) -> str:
        """Start an episode on a dataset row (TRL passes the row's columns; ``row`` is its JSON)."""
        from rlexp.environments.interface import config_key
        from rlexp.trainers.trl.agent import decode_rows

        (self._row,) = decode_rows([row or ""], "trl environment_factory row")
        key = config_key(self._row.config)
        if key not in self._instances:
            self._instances[key] = self.ENVIRONMENT(dict(self._row.config))
        self._env = self._instances[key]
        self._turns, self._return, self._finish_reason, self._error = [], 0.0, None, None
        return str(self._env.reset(self._row.task))

    def _step(self, action: str, tool: str | None) -> Any:
        from rlexp.environments.episode_loop import step_environment

        answer = step_environment(self._env, action)
        if answer.error is not None:  # the environment failed: the episode ends as env_error (TRL sees the raise)
            self._finish_reason, self._error = "env_error", answer.error_text()
            raise answer.error
        self._turns.append({"action": action, "tool": tool, "feedback": answer.feedback, "reward": answer.reward,
                            "tool_call": answer.tool_call, "latency_s": answer.latency_s})
        self._return += answer.reward
        if answer.done:
            self._finish_reason = "stop"
        return answer.result

    def _call(self, name: str, **arguments: Any) -> str:
        """A tool call: played as the action text the tool names."""
        if self._finish_reason is not None:
            raise RuntimeError(f"the episode has ended ({self._finish_reason})")
        return self._step(self.TOOLS[name].action_text(arguments), name).feedback

    def _finish(self, messages: list[dict[str, Any]], truncated: bool, max_turns: int) -> dict[str, Any]:
        """End the episode on TRL's completion messages: a final message without tool calls is the
        last step; the episode's record (turns, return, finish reason)."""
        last = messages[-1] if messages else {}
        model_turns = sum(1 for m in messages if m.get("role") == "assistant")
        if self._finish_reason is None:
            if truncated:
                self._finish_reason = "length"
            elif last.get("role") == "assistant" and not last.get("tool_calls"):
                with contextlib.suppress(Exception):  # recorded as env_error by _step
                    self._step(str(last.get("content") or ""), None)
                # the model stopped (TRL's loop ends on a message without calls), ended or not by the environment
                self._finish_reason = self._finish_reason or "stop"
            else:  # TRL ended its loop after a tool result: out of iterations or of completion tokens
                self._finish_reason = "max_turns" if model_turns >= max_turns else "length"
        return {"env": self._row.env, "task": dict(self._row.task), "return": self._return,
                "finish_reason": self._finish_reason, "error": self._error, "model_turns": model_turns,
                "tool_calls": sum(t["tool_call"] for t in self._turns), "turns": list(self._turns)}


def tool_episode_metrics(records: list[Mapping[str, Any]]) -> dict[str, float]:
    """The episode metrics of a batch under the local trainer's names
    (:func:`rlexp.environments.interface.episode_metrics`), from the tool episodes' records; without
    ``agent_token_fraction`` (TRL keeps the tool mask to itself: its ``completions/mean_length``
    counts the model's tokens only)."""
    from rlexp.environments.interface import FINISH_REASONS

    n = len(records)
    if n == 0:
        return {}
    latencies = [t["latency_s"] for r in records for t in r["turns"]]
    out = {
        "turns_per_episode": sum(r["model_turns"] for r in records) / n,
        "tool_calls_per_episode": sum(r["tool_calls"] for r in records) / n,
        "env_errors": sum(r["finish_reason"] == "env_error" for r in records) / n,
        "env_latency_s": sum(latencies) / len(latencies) if latencies else 0.0,
        "episode_return": sum(r["return"] for r in records) / n,
    }
    for reason in FINISH_REASONS:
        out[f"finish_{reason}"] = sum(r["finish_reason"] == reason for r in records) / n
    return out


def greedy_tool_episode(model: Any, tokenizer: Any, episode: ToolEpisode, row: str, *, max_turns: int,
                        max_total_tokens: int) -> dict[str, Any]:  # fmt: skip
    """One greedy episode through the chat template's tool calls, as TRL's tool loop plays it (the
    in-run monitor): generate, parse the calls with the tokenizer's response template, call the
    tools, append their results as tool messages, until a message without calls or the budgets."""
    import torch
    from trl.chat_template_utils import parse_response

    tools = [getattr(episode, name) for name in episode.TOOLS]
    messages = [{"role": "user", "content": episode.reset(row=row)}]
    completion: list[dict[str, Any]] = []
    prompt_len, generated, truncated = None, 0, False
    eos = tokenizer.eos_token_id
    device = next(model.parameters()).device
    for _ in range(max_turns):
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                            return_dict=False)  # fmt: skip
        prompt_len = len(ids) if prompt_len is None else prompt_len
        budget = max_total_tokens - (len(ids) - prompt_len)
        if budget <= 0:
            break
        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=device), attention_mask=torch.ones(1, len(ids),
                                 dtype=torch.long, device=device), max_new_tokens=budget, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        new = out[0, len(ids):].tolist()
        generated += len(new)
        truncated = not new or new[-1] != eos
        message = parse_response(tokenizer, new, prefix=ids, tools=tools)
        messages.append(message)
        completion.append(message)
        if truncated or not message.get("tool_calls"):
            break
        for call in message["tool_calls"]:
            function = call["function"]
            try:
                result: Any = getattr(episode, function["name"])(**function["arguments"])
            except Exception as exc:  # noqa: BLE001 - as TRL's loop answers a failed tool
                result = {"error": str(exc)}
            tool_message = {"role": "tool", "name": function["name"], "content": str(result)}
            messages.append(tool_message)
            completion.append(tool_message)
    return episode._finish(completion, truncated, max_turns)
