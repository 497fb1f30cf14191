"""Rewards beyond exact match, composable with weights — pure functions (no I/O).

- :func:`ndcg`: retrieval quality of a ranked list of document ids against the task's gold ids
  (binary relevance, or graded gains given as a mapping), ``DCG@k / IDCG@k`` with the log2
  discount ``1 / log2(rank + 1)`` (rank from 1);
- an LLM judge: :func:`judge_messages` builds the request, :func:`parse_judge_reply` reads a score
  in [0, 1] from a reply that is exactly one verdict (``yes``/``no``, ``correct``/``incorrect``) or one
  number — anything else is an error, not a guess —, and
  :func:`judge_cache_key` names a call by ``(judge model, prompt, answer)`` so a rerun finds it;
- :func:`combine`: a weighted sum of named parts. A part that *failed* (a judge call that did not
  return a usable score: :class:`RewardError`) makes the combined reward an explicit error with its
  reason, never a silent 0; callers count those errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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


def combine(parts: Mapping[str, float | RewardError], weights: Mapping[str, float]) -> Combined:
    """``Σ weights[name] × parts[name]``; every weighted name must be present. A failed part makes the
    whole an explicit error (the first failure, in name order)."""
    missing = sorted(set(weights) - set(parts))
    if missing:
        raise KeyError(f"no reward part {missing[0]!r}")
    for name in sorted(weights):
        if isinstance(parts[name], RewardError):
            return Combined(None, dict(parts), parts[name])  # type: ignore[arg-type]
    value = sum(float(weights[name]) * float(parts[name]) for name in sorted(weights))  # type: ignore[arg-type]
    return Combined(value, dict(parts), None)


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
