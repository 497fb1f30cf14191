"""Environment tasks: the interface an episode is played against, the dataset rows that name one,
and the trajectory an episode leaves behind — pure (no I/O, no torch).

An *environment* is a small object with two methods:

- ``reset(task) -> observation``: start an episode on one task (a mapping from the dataset row) and
  return the first observation, the text the model sees as its first user message;
- ``step(action_text) -> StepResult(feedback, reward, done, info)``: the model's turn as text in,
  the environment's answer out. ``feedback`` becomes the next user message (when ``done`` is false),
  ``reward`` is the reward of that turn, ``info`` carries what the metrics count (``tool_call``).

Instances are built once per ``(environment, config)`` and reused across episodes: ``reset`` must
forget everything of the previous episode. ``seed(n)`` makes any randomness of an environment
repeatable. The single-turn exact-match task is the one-step environment :class:`ExactMatchEnv`:
the observation is the problem, the one step grades the answer and ends the episode.

A dataset row names its environment (a registered name or an import path ``pkg.module:Class``),
the environment's config (a mapping of plain values) and the task::

    {"env": "exact_match", "config": {"suffix": ""}, "task": {"prompt": "2+3=", "answer": "5"}}

:func:`group_rows` groups rows by ``(env, config)``; :class:`EnvironmentCache` builds each group's
environment once. :class:`TrajectoryBuilder` assembles an episode token-in/token-out: prompt ids,
then model (agent) and environment tokens interleaved, the agent mask (model token = 1), each
turn's reward placed at that turn's last agent token, and a finish reason.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlexp.errors import InputError

FINISH_REASONS = ("stop", "length", "max_turns", "env_error")


@dataclass(frozen=True)
class StepResult:
    """What an environment answers to one model turn."""

    feedback: str
    reward: float
    done: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """The interface (structural: any class with these methods is an environment)."""

    def reset(self, task: Mapping[str, Any]) -> str: ...

    def step(self, action_text: str) -> StepResult: ...


@dataclass(frozen=True)
class Tool:
    """One of an environment's actions as a tool call (``environment.actions: tool_calls``, TRL's
    ``environment_factory``): the call ``name(param=value, ...)`` is played as the action text
    ``action.format(param=value, ...)``. Every parameter is a string, described for the tool's JSON
    schema. An environment declares its tools as the class attribute ``tools``; one that declares
    none cannot be played through tool calls."""

    name: str
    description: str
    params: tuple[tuple[str, str], ...]  # (name, description), in call order
    action: str  # the action text, with {param} placeholders

    def action_text(self, arguments: Mapping[str, Any]) -> str:
        return self.action.format(**{name: str(arguments[name]) for name, _ in self.params})


def environment_tools(cls: Any) -> tuple[Tool, ...]:
    """The tools an environment class declares (empty: its actions are text only)."""
    tools = getattr(cls, "tools", ())
    return tuple(t for t in tools if isinstance(t, Tool)) if isinstance(tools, (tuple, list)) else ()


class BaseEnvironment:
    """Convenience base: keeps the config and a seed; subclasses implement ``reset`` and ``step``."""

    tools: tuple[Tool, ...] = ()  # its actions as tool calls (none: text actions only)

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.seed_value = int(self.config.get("seed", 0))

    def seed(self, value: int) -> None:
        self.seed_value = int(value)

    def reset(self, task: Mapping[str, Any]) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self, action_text: str) -> StepResult:  # pragma: no cover - abstract
        raise NotImplementedError


# =============================================================================== the one-step task


class ExactMatchEnv(BaseEnvironment):
    """The single-turn exact-match task as an environment: the observation is ``prompt + suffix``;
    the one step extracts the answer with the shared extractor (the one eval uses), rewards 1.0 on a
    match and 0.0 otherwise, and ends the episode."""

    def reset(self, task: Mapping[str, Any]) -> str:
        self._gold = str(task["answer"])
        return str(task["prompt"]) + str(self.config.get("suffix", ""))

    def step(self, action_text: str) -> StepResult:
        from rlexp.evaluation.answers import extract_answer, is_correct

        answer, _ = extract_answer(action_text)
        hit = answer is not None and is_correct(answer, self._gold)
        return StepResult(feedback="", reward=1.0 if hit else 0.0, done=True, info={"answer": answer})


# =============================================================================== registry


_REGISTRY: dict[str, Callable[..., Any]] = {"exact_match": ExactMatchEnv}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an environment available by a short name in dataset rows."""

    def wrap(cls: type) -> type:
        _REGISTRY[name] = cls
        return cls

    return wrap


def registered() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def resolve(name: str, where: str | None = None) -> Callable[..., Any]:
    """The environment class named ``name``: a registered name, or an import path
    ``package.module:Class`` (``package.module.Class`` also works)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise InputError(where, "env", f"{name!r} is neither a registered environment {registered()} nor module:Class")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(where, "env", f"cannot import {name!r}: {exc}") from None
    return cls


# =============================================================================== dataset rows


@dataclass(frozen=True)
class EnvRow:
    env: str
    config: Mapping[str, Any]
    task: Mapping[str, Any]

    @property
    def group_key(self) -> tuple[str, str]:
        return (self.env, config_key(self.config))


def config_key(config: Mapping[str, Any]) -> str:
    """A canonical text of a config (sorted keys), so equal configs group together."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _refuse_credential(config: Mapping[str, Any], where: str | None, field: str) -> None:
    """A row's config is written into the records and reports as the spec's is: a key in it is
    refused as in a spec (``rlexp.spec.schema.credential_in``), by reference only."""
    from rlexp.spec.schema import credential_in

    found = credential_in(dict(config), "config", by_key=True)
    if found:
        raise InputError(where, f"{field}: {found[0]}", f"{found[1]}: credentials never go in a dataset row (it is copied into "
                                          "the records and reports); set the key in an environment variable "
                                          "and name it in a *_env entry the environment reads")


def parse_rows(rows: Iterable[Mapping[str, Any]], where: str | None = None) -> list[EnvRow]:
    """Dataset rows → :class:`EnvRow`; a bad row raises one InputError naming ``where`` and the field
    (``row 3: config``)."""
    out: list[EnvRow] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InputError(where, f"row {i}", "expected a mapping with env, config, task")
        unknown = set(row) - {"env", "config", "task", "id"}
        if unknown:
            raise InputError(where, f"row {i}: {sorted(unknown)[0]}", "unknown key (expected env, config, task)")
        env = row.get("env")
        if not isinstance(env, str) or not env:
            raise InputError(where, f"row {i}: env", "must be a non-empty string")
        config = row.get("config", {})
        if not isinstance(config, Mapping):
            raise InputError(where, f"row {i}: config", "must be a mapping")
        try:
            config_key(config)
        except (TypeError, ValueError):
            raise InputError(where, f"row {i}: config", "must hold plain JSON values") from None
        _refuse_credential(config, where, f"row {i}")
        task = row.get("task")
        if not isinstance(task, Mapping):
            raise InputError(where, f"row {i}: task", "must be a mapping")
        out.append(EnvRow(env=env, config=dict(config), task=dict(task)))
    return out


def rows_from_dataset(
    records: Iterable[Mapping[str, Any]], where: str | None = None, *, default_env: str = "exact_match",
    default_config: Mapping[str, Any] | None = None,
) -> list[EnvRow]:
    """Rows of an ordinary dataset file (``prompt``, ``answer``, ``problem_hash``, ...) that may also
    name ``env`` and ``config``: the record itself is the task, so the dataset checks (hashes,
    leakage, disjoint sets) apply unchanged. A record without ``env`` is the one-step exact-match
    task (``default_env``) with ``default_config`` (e.g. the pool's prompt suffix)."""
    raw = []
    for record in records:
        if not isinstance(record, Mapping):
            raise InputError(where, f"row {len(raw)}", "expected a mapping")
        task = {k: v for k, v in record.items() if k not in ("env", "config")}
        raw.append({"env": record.get("env", default_env),
                    "config": record.get("config", dict(default_config or {})), "task": task})  # fmt: skip
    return parse_rows(raw, where)


def rows_for_task(
    records: Iterable[Mapping[str, Any]], settings: Any, *, prompt_suffix: str = "", where: str | None = None,
) -> list[EnvRow]:
    """The rows of an attempt's environment task (``settings``: rlexp.spec.EnvironmentSettings)
    from one of its dataset files: a record naming no ``env`` plays ``settings.name`` with
    ``settings.config`` (the exact-match environment takes the dataset's prompt suffix unless the
    config sets one). Every environment named is resolved here, so a bad name stops before a run."""
    default_config = dict(settings.config or {})
    if settings.name == "exact_match":
        default_config.setdefault("suffix", prompt_suffix)
    rows = rows_from_dataset(records, where, default_env=settings.name, default_config=default_config)
    for name in sorted({row.env for row in rows}):
        resolve(name, where)
    return rows


def budgets_of(settings: Any) -> Budgets:
    """The episode budgets of an attempt's environment settings."""
    return Budgets(settings.max_turns, settings.max_tokens_per_turn, settings.max_total_tokens)


def group_rows(rows: list[EnvRow]) -> dict[tuple[str, str], list[int]]:
    """Row indices grouped by ``(env, config)``, groups in order of first appearance."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.group_key, []).append(i)
    return groups


class EnvironmentCache:
    """One environment instance per ``(env, config)``, built on first use and reused after
    (``builds`` counts constructions, for the tests and the metrics)."""

    def __init__(self, where: str | None = None) -> None:
        self.where = where
        self._instances: dict[tuple[str, str], Any] = {}
        self.builds = 0

    def get(self, row: EnvRow) -> Any:
        key = row.group_key
        if key not in self._instances:
            cls = resolve(row.env, self.where)
            self._instances[key] = cls(dict(row.config))
            self.builds += 1
        return self._instances[key]

    def __len__(self) -> int:
        return len(self._instances)


# =============================================================================== trajectories


def check_budget_values(where: str, **limits: int) -> None:
    """The one check of episode limits handed to code (``Budgets``, the trainers' generated agent
    files): each at least 1. (In ``attempt.yaml`` the spec's own rule refuses them first, naming the
    field; their defaults are the spec's, :class:`rlexp.spec.EnvironmentSettings`.)"""
    for name, value in limits.items():
        if int(value) < 1:
            raise InputError(None, f"{where}.{name}", "must be >= 1")


@dataclass(frozen=True)
class Budgets:
    """Episode limits: turns, new tokens per model turn, and all tokens after the prompt. No
    defaults here: an attempt's are its spec's (:func:`budgets_of`)."""

    max_turns: int
    max_tokens_per_turn: int
    max_total_tokens: int

    def __post_init__(self) -> None:
        check_budget_values("budgets", max_turns=self.max_turns, max_tokens_per_turn=self.max_tokens_per_turn,
                            max_total_tokens=self.max_total_tokens)


@dataclass(frozen=True)
class Turn:
    """One model turn and the environment's answer to it."""

    action: str
    action_tokens: int
    feedback: str
    feedback_tokens: int
    reward: float
    info: Mapping[str, Any]
    latency_s: float


@dataclass(frozen=True)
class Trajectory:
    """An episode token-in/token-out. ``token_ids`` = prompt then interleaved model/environment
    tokens; ``agent_mask[i]`` is 1 for a model token, 0 for prompt and environment tokens;
    ``token_rewards[i]`` holds a turn's reward at that turn's last model token, 0 elsewhere."""

    token_ids: tuple[int, ...]
    agent_mask: tuple[int, ...]
    token_rewards: tuple[float, ...]
    prompt_len: int
    turns: tuple[Turn, ...]
    finish_reason: str
    error: str | None = None

    @property
    def episode_return(self) -> float:
        return float(sum(self.token_rewards))

    @property
    def tool_calls(self) -> int:
        return sum(1 for t in self.turns if t.info.get("tool_call"))

    @property
    def agent_tokens(self) -> int:
        return sum(self.agent_mask)

    def to_record(self) -> dict[str, Any]:
        """The trajectory as plain JSON values (what an eval record would hold)."""
        return {
            "finish_reason": self.finish_reason,
            "return": self.episode_return,
            "error": self.error,
            "turns": [
                {"action": t.action, "feedback": t.feedback, "reward": t.reward,
                 "tool_call": bool(t.info.get("tool_call")), "latency_s": t.latency_s,
                 # the documents a search tool returned, in rank order (scored by NDCG)
                 **({"retrieved": [str(d) for d in t.info["retrieved"]]} if "retrieved" in t.info else {})}
                for t in self.turns
            ],
        }  # fmt: skip


class TrajectoryBuilder:
    """Accumulates one episode's tokens. Token ids are appended as produced and never re-tokenised:
    the model's ids as sampled, the environment's feedback tokenised once when it arrives."""

    def __init__(self, prompt_ids: Iterable[int]) -> None:
        self.ids: list[int] = list(prompt_ids)
        self.mask: list[int] = [0] * len(self.ids)
        self.rewards: list[float] = [0.0] * len(self.ids)
        self.prompt_len = len(self.ids)
        self.turns: list[Turn] = []

    @property
    def generated(self) -> int:
        """Tokens after the prompt (model and environment): what ``max_total_tokens`` limits."""
        return len(self.ids) - self.prompt_len

    def add_agent(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if not ids:
            raise ValueError("a model turn has at least one token")
        self.ids += ids
        self.mask += [1] * len(ids)
        self.rewards += [0.0] * len(ids)

    def set_turn_reward(self, reward: float) -> None:
        """Place the turn's reward at its last agent token (the last token appended as agent)."""
        last = max(i for i, m in enumerate(self.mask) if m)
        self.rewards[last] += float(reward)

    def add_env(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        self.ids += ids
        self.mask += [0] * len(ids)
        self.rewards += [0.0] * len(ids)

    def finish(self, reason: str, error: str | None = None) -> Trajectory:
        if reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish reason {reason!r}")
        return Trajectory(tuple(self.ids), tuple(self.mask), tuple(self.rewards), self.prompt_len,
                          tuple(self.turns), reason, error)  # fmt: skip


def episode_record(
    task: Mapping[str, Any], trajectory: Trajectory, *, problem_hash: str, success_threshold: float = 1.0,
    include_tokens: bool = False,
) -> dict[str, Any]:
    """An eval record of one episode: the fields every eval record has (``problem_hash, gold,
    output, answer, parse_method, correct, finish_reason, prompt_tokens, completion_tokens,
    bucket``) — ``output`` the final model turn, ``correct`` the success flag (``return >=
    success_threshold``), ``completion_tokens`` the agent tokens — plus ``reward`` (the return) and
    ``trajectory`` (turns, tool calls, feedback, finish reason; the token ids and agent mask too with
    ``include_tokens``), and the task's ``gold_docs`` where it names some (a retrieval task). For the
    one-step exact-match environment it is the single-turn record plus those two keys."""
    from rlexp.evaluation.answers import extract_answer

    output = trajectory.turns[-1].action if trajectory.turns else ""
    answer, method = extract_answer(output)
    episode = trajectory.to_record()
    if include_tokens:
        episode.update(token_ids=list(trajectory.token_ids), agent_mask=list(trajectory.agent_mask),
                       prompt_len=trajectory.prompt_len)  # fmt: skip
    record = {
        "problem_hash": problem_hash,
        "gold": task.get("answer"),
        "output": output,
        "answer": answer,
        "parse_method": method,
        "correct": int(trajectory.episode_return >= success_threshold),
        "finish_reason": trajectory.finish_reason,
        "prompt_tokens": trajectory.prompt_len,
        "completion_tokens": trajectory.agent_tokens,
        "bucket": task.get("bucket"),
        "reward": trajectory.episode_return,
        "trajectory": episode,
    }
    if task.get("gold_docs") is not None:
        record["gold_docs"] = [str(d) for d in task["gold_docs"]]
    return record


def episode_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Per-step episode metrics: turns per episode, tool calls per episode, environment errors (a
    fraction of episodes), the fraction of agent tokens among the tokens after the prompt, the mean
    environment latency per step, and the fraction of episodes ending by each finish reason."""
    n = len(trajectories)
    if n == 0:
        return {}
    turns = [len(t.turns) for t in trajectories]
    after_prompt = sum(len(t.token_ids) - t.prompt_len for t in trajectories)
    latencies = [turn.latency_s for t in trajectories for turn in t.turns]
    out = {
        "turns_per_episode": sum(turns) / n,
        "tool_calls_per_episode": sum(t.tool_calls for t in trajectories) / n,
        "env_errors": sum(1 for t in trajectories if t.finish_reason == "env_error") / n,
        "agent_token_fraction": sum(t.agent_tokens for t in trajectories) / max(1, after_prompt),
        "env_latency_s": sum(latencies) / len(latencies) if latencies else 0.0,
        "episode_return": sum(t.episode_return for t in trajectories) / n,
    }
    for reason in FINISH_REASONS:
        out[f"finish_{reason}"] = sum(1 for t in trajectories if t.finish_reason == reason) / n
    return out


# =============================================================================== a calculator tool


@register("calculator")
class CalculatorEnv(BaseEnvironment):
    """Products (or sums, differences) the model may delegate to a calculator tool.

    Task: ``{"prompt": "123*45=", "answer": "5535"}``. Each model turn is either

    - a tool call ``calc A*B`` (also ``+``, ``-``; non-negative integers of at most ``max_digits``
      digits): the feedback is the result, the turn's reward 0, ``info["tool_call"]`` true;
    - an answer ``\\boxed{N}``: graded by exact match with the shared extractor, the episode ends.

    Anything else, or more than ``max_calls`` tool calls, ends the episode with reward 0. Nothing is
    ever evaluated as code: the expression is matched by a regular expression and computed on ints.
    As a tool call (``tools``): ``calc(expression="123*45")`` is the action ``calc 123*45``.
    """

    tools = (Tool("calc", "Compute a product, sum or difference of two non-negative integers.",
                  (("expression", "the expression, e.g. 123*45"),), "calc {expression}"),)

    def reset(self, task: Mapping[str, Any]) -> str:
        self._gold = str(task["answer"])
        self._calls = 0
        return str(task["prompt"]) + str(self.config.get("suffix", ""))

    def step(self, action_text: str) -> StepResult:
        import re

        from rlexp.evaluation.answers import extract_answer, is_correct

        text = action_text.strip()
        max_digits = int(self.config.get("max_digits", 6))
        number = rf"(\d{{1,{max_digits}}})"
        call = re.fullmatch(rf"calc\s*{number}\s*([*+-])\s*{number}", text)
        if call:
            self._calls += 1
            if self._calls > int(self.config.get("max_calls", 2)):
                return StepResult("", 0.0, True, {"tool_call": True, "invalid": "too many calls"})
            a, op, b = int(call.group(1)), call.group(2), int(call.group(3))
            value = a * b if op == "*" else a + b if op == "+" else a - b
            return StepResult(str(value), 0.0, False, {"tool_call": True})
        answer, _ = extract_answer(text)
        if answer is None:
            return StepResult("", 0.0, True, {"invalid": "neither a tool call nor an answer"})
        return StepResult("", 1.0 if is_correct(answer, self._gold) else 0.0, True, {"answer": answer})


# =============================================================================== a search tool


def search_corpus(seed: int, size: int) -> dict[str, str]:
    """The generated corpus of the search environment: ``size`` documents ``kNNN=VV`` (a 3-digit
    key, a 2-digit value), the key being the document id; the same for the same ``(seed, size)``."""
    import random

    if not 1 <= size <= 900:
        raise ValueError("corpus_size must be in 1..900 (the keys k100..k999)")
    rng = random.Random(f"search-corpus-{seed}")
    keys = rng.sample(range(100, 1000), size)
    return {f"k{k}": str(rng.randint(10, 99)) for k in keys}


@register("search")
class SearchEnv(BaseEnvironment):
    """Lookups in a small generated corpus (:func:`search_corpus` of ``corpus_seed`` and
    ``corpus_size``) through a search tool.

    Task: ``{"prompt": "k417?", "answer": "83", "gold_docs": ["k417"]}``. Each model turn is either

    - a search ``look kNNN``: the feedback is the ``top_k`` documents nearest the query (the most
      digits in place first, then by key) as ``kNNN=VV`` separated by spaces, ``info["retrieved"]``
      their ids in rank order (what NDCG scores against ``gold_docs``), ``info["tool_call"]`` true;
    - an answer ``\\boxed{VV}``: graded by exact match, the episode ends.

    Anything else, or more than ``max_calls`` searches, ends the episode with reward 0. The corpus
    is built once per instance, so the environment cache builds it once per ``(env, config)``.
    As a tool call (``tools``): ``look(key="k417")`` is the action ``look k417``.
    """

    tools = (Tool("look", "Search the corpus: the documents nearest a key, as key=value.",
                  (("key", "a document key, e.g. k417"),), "look {key}"),)

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.corpus = search_corpus(int(self.config.get("corpus_seed", 0)), int(self.config.get("corpus_size", 400)))

    def reset(self, task: Mapping[str, Any]) -> str:
        self._gold = str(task["answer"])
        self._calls = 0
        return str(task["prompt"]) + str(self.config.get("suffix", ""))

    def search(self, query: str) -> list[str]:
        """Document ids nearest ``query`` (a key ``kNNN``), best first."""
        def score(key: str) -> tuple[int, str]:
            return (-sum(a == b for a, b in zip(key, query, strict=False)), key)

        return sorted(self.corpus, key=score)[: int(self.config.get("top_k", 2))]

    def step(self, action_text: str) -> StepResult:
        import re

        from rlexp.evaluation.answers import extract_answer, is_correct

        text = action_text.strip()
        call = re.fullmatch(r"look\s*(k\d{3})", text)
        if call:
            self._calls += 1
            if self._calls > int(self.config.get("max_calls", 2)):
                return StepResult("", 0.0, True, {"tool_call": True, "invalid": "too many calls"})
            found = self.search(call.group(1))
            feedback = " ".join(f"{key}={self.corpus[key]}" for key in found)
            return StepResult(feedback, 0.0, False, {"tool_call": True, "retrieved": found})
        answer, _ = extract_answer(text)
        if answer is None:
            return StepResult("", 0.0, True, {"invalid": "neither a search nor an answer"})
        return StepResult("", 1.0 if is_correct(answer, self._gold) else 0.0, True, {"answer": answer})
