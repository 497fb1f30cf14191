"""Rewards beyond exact match, composable with weights — pure functions (no I/O).

- :func:`ndcg`: retrieval quality of a ranked list of document ids against the task's gold ids
  (binary relevance, or graded gains given as a mapping), ``DCG@k / IDCG@k`` with the log2
  discount ``1 / log2(rank + 1)`` (rank from 1);
- an LLM judge: :func:`judge_messages` builds the request, :func:`parse_judge_reply` reads a score
  in [0, 1] from a reply that is exactly one verdict (``yes``/``no``, ``correct``/``incorrect``) or one
  number — anything else is an error, not a guess —, and
  :func:`judge_cache_key` names a call by ``(judge model, prompt, answer)`` so a rerun finds it;
- :func:`applicable_weights`: which weighted parts apply to a dataset row (the return always;
  NDCG only where the row has gold documents; the judge only where the row has a reference answer
  to grade against) — a part that cannot score a row is left out, never scored 0;
- :func:`combine`: the weighted mean of named parts, renormalised over the parts given (the ones
  that apply), so a row that lacks gold documents is scored on the rest at full scale. A part that
  *failed* (a judge call that did not return a usable score: :class:`RewardError`) makes the
  combined reward an explicit error with its reason, never a silent 0; callers count those errors;
- :func:`episode_reward`: an episode's reward under the weights (the parts that apply, combined) —
  the one rule for training (the local trainer) and the eval;
- :func:`weights_problem`: the plan-time check of the weights (each in [0, 1], summing to 1, and a
  success threshold the combined reward can reach).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JUDGE_ERROR = "judge_error"


@dataclass(frozen=True)
class RewardError:
    """A reward part that could not be computed (``kind`` e.g. ``judge_error``) and why."""

    kind: str
    reason: str


@dataclass(frozen=True)
class Combined:
    """A composite reward: ``value`` is None exactly when some part failed (then ``error`` says which)."""

    value: float | None
    parts: Mapping[str, float | RewardError] = field(default_factory=dict)
    error: RewardError | None = None


def ndcg(retrieved: Sequence[str], gold: Iterable[str] | Mapping[str, float], k: int | None = None) -> float:
    """NDCG@k of ``retrieved`` (best first) against ``gold`` (ids, or id → gain). Repeated ids count
    once (their first rank). No gold document at all: 0.0."""
    gains = dict(gold) if isinstance(gold, Mapping) else {g: 1.0 for g in gold}
    if k is not None and k < 1:
        raise ValueError("k must be >= 1")
    seen: set[str] = set()
    ranked: list[float] = []
    for doc in retrieved:
        if doc in seen:
            continue
        seen.add(doc)
        ranked.append(float(gains.get(doc, 0.0)))
    cut = len(ranked) if k is None else k
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(ranked[:cut]))
    ideal = sorted((float(g) for g in gains.values()), reverse=True)[: (len(gains) if k is None else k)]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


NO_REWARD_PART = "no_reward_part"
# the tolerance of "the weights sum to 1": weights are written in decimal in a YAML file
WEIGHT_SUM_TOLERANCE = 1e-6


def applicable_weights(weights: Mapping[str, float], task: Mapping[str, Any]) -> dict[str, float]:
    """The weighted parts that apply to the dataset row ``task``: ``env`` (the episode's return)
    always; ``ndcg`` only where the row lists ``gold_docs`` (without gold documents there is nothing
    to rank against — scoring 0 would punish a row for its dataset); ``judge`` only where the row
    has a reference ``answer`` (the judge grades the final answer against it). Zero weights are
    dropped. The same rule serves every place a row's reward is composed."""
    out: dict[str, float] = {}
    for name, weight in weights.items():
        if float(weight) <= 0:
            continue
        if name == "ndcg" and not task.get("gold_docs"):
            continue
        if name == "judge" and task.get("answer") is None:
            continue
        out[name] = float(weight)
    return out


def combine(parts: Mapping[str, float | RewardError], weights: Mapping[str, float]) -> Combined:
    """``Σ weights[name] × parts[name] / Σ weights[name]`` — the weighted mean over the parts
    weighted (the caller passes those that apply to the row, :func:`applicable_weights`); every
    weighted name must be present. A failed part makes the whole an explicit error (the first
    failure, in name order); no positive weight at all is an explicit ``no_reward_part`` error."""
    missing = sorted(set(weights) - set(parts))
    if missing:
        raise KeyError(f"no reward part {missing[0]!r}")
    total = sum(float(w) for w in weights.values() if float(w) > 0)
    if total <= 0:
        return Combined(None, dict(parts), RewardError(NO_REWARD_PART, "no weighted reward part applies to this row"))
    for name in sorted(weights):
        if isinstance(parts[name], RewardError):
            return Combined(None, dict(parts), parts[name])  # type: ignore[arg-type]
    value = sum(float(weights[name]) * float(parts[name]) for name in sorted(weights)) / total  # type: ignore[arg-type]
    return Combined(value, dict(parts), None)


def episode_reward(weights: Mapping[str, float], task: Mapping[str, Any], *, episode_return: float,
                   retrieved: Iterable[str], judge: Callable[[], float | RewardError] | None = None) -> Combined:
    """The reward of one episode of row ``task`` under ``weights`` (``environment.reward``): the
    parts that apply to the row (:func:`applicable_weights`) — ``env`` the episode's return,
    ``ndcg`` the documents it retrieved (in order) against the row's ``gold_docs``, ``judge`` what
    ``judge()`` returns for its final answer — combined by :func:`combine`. The one rule for a
    training step and for the eval, so an episode scores the same in both."""
    applicable = applicable_weights(weights, task)
    parts: dict[str, float | RewardError] = {}
    if "env" in applicable:
        parts["env"] = float(episode_return)
    if "ndcg" in applicable:
        parts["ndcg"] = ndcg([str(d) for d in retrieved], [str(d) for d in task.get("gold_docs") or ()])
    if "judge" in applicable:
        if judge is None:
            raise ValueError("a judge weight needs a judge")
        parts["judge"] = judge()
    return combine(parts, applicable)


def weights_problem(weights: Mapping[str, float], success_threshold: float) -> str | None:
    """Why ``weights`` (``environment.reward``) cannot grade correctly, or None. Each weight lies in
    [0, 1] and they sum to 1 (so the combined reward stays on the parts' [0, 1] scale and a weight
    reads as a share); since every part scores at most 1, the combined reward reaches at most 1 — a
    success threshold above 1 could never be met, and one of 0 or below makes every episode a success."""
    if not weights:
        return None
    for name in sorted(weights):
        if not 0.0 <= float(weights[name]) <= 1.0:
            return f"{name}: weight {float(weights[name]):g} outside [0, 1]"
    total = sum(float(w) for w in weights.values())
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        shown = ", ".join(f"{k}: {float(v):g}" for k, v in sorted(weights.items()))
        return (f"weights {{{shown}}} sum to {total:g}, not 1: the combined reward is their weighted mean "
                f"over the parts that apply to a row, so state shares that sum to 1")
    if not 0.0 < float(success_threshold) <= 1.0:
        return (f"success_threshold {float(success_threshold):g} cannot be reached by a combined reward in [0, 1] "
                "(every part scores at most 1): state a threshold in (0, 1]")
    return None


# =============================================================================== the judge


JUDGE_INSTRUCTIONS = (
    "You grade an answer to a question. Reply with one word: yes if the answer is correct, no otherwise."
)


def judge_messages(prompt: str, answer: str, reference: str | None = None) -> list[dict[str, str]]:
    """The chat messages sent to the judge for one (prompt, answer)."""
    user = f"Question:\n{prompt}\n\nAnswer:\n{answer}"
    if reference is not None:
        user += f"\n\nReference answer:\n{reference}"
    return [{"role": "system", "content": JUDGE_INSTRUCTIONS}, {"role": "user", "content": user}]


# the whole reply, once stripped of blanks, quotes, bold markers and one final period: the
# instructions ask for one word, so a reply that says more is not read for a word it happens to hold
_VERDICTS = {"yes": 1.0, "correct": 1.0, "no": 0.0, "incorrect": 0.0}
_SCORE = re.compile(r"[+]?(?:\d+(?:\.\d*)?|\.\d+)")
_WRAPPING = " \t\r\n\"'`*"


def parse_judge_reply(text: str) -> float | RewardError:
    """A score in [0, 1] from the judge's reply, or a ``judge_error`` saying why not.

    Strict: the reply must be exactly one verdict word (``yes``/``no``/``correct``/``incorrect``,
    any case, optionally quoted, in bold or ending in one ``.``/``!``) or exactly one number in [0, 1].
    Anything else — a sentence around the verdict (``"Step 1: the answer is wrong. No."``), two
    numbers, a number out of range — is an error, never a guess: an error is counted and not cached.
    """
    core = text.strip(_WRAPPING)
    if core[-1:] in (".", "!"):
        core = core[:-1].strip(_WRAPPING)
    word = core.lower()
    if word in _VERDICTS:
        return _VERDICTS[word]
    if _SCORE.fullmatch(core):
        value = float(core)
        if 0.0 <= value <= 1.0:
            return value
        return RewardError(JUDGE_ERROR, f"score {value:g} outside [0, 1]")
    return RewardError(JUDGE_ERROR, f"unreadable reply (not exactly one verdict word or score): {text[:80]!r}")


def judge_cache_key(model: str, prompt: str, answer: str) -> str:
    """The cache key of one judge call: a hash of ``(judge model, prompt, answer)``."""
    text = json.dumps([model, prompt, answer], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# =============================================================================== accounting


def reward_error_counts(records: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """Eval records whose composite reward failed, by kind (``{"episodes": n, "judge_error": k}``):
    what the report shows and ``rlexp decide`` refuses to score, as G2 counts parse failures."""
    out = {"episodes": 0, JUDGE_ERROR: 0}
    for record in records:
        out["episodes"] += 1
        error = record.get("reward_error")
        if isinstance(error, Mapping):
            kind = str(error.get("kind") or JUDGE_ERROR)
            out[kind] = out.get(kind, 0) + 1
    return out
