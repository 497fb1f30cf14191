"""Per-item outcomes read from another harness's per-sample results, and the rules they obey.

Every reader (lm-eval samples JSONL, Inspect logs, lighteval details parquet, rlexp's own
records) turns one file into an :class:`ItemSet`: items keyed ``<task>:<id>``, each with its
scores (one per sample, epoch or repeat), a content fingerprint that pairing checks, and, where
the harness logs one, a prompt hash. Readers never guess: a file with several filters, metrics,
scorers or tasks needs the caller's choice (:class:`Choice`), and every item that cannot be used
(a duplicate key, a value that is not a score, an errored or unscored sample) goes through
:class:`Problems`, which raises a one-line :class:`InputError` — or, with ``--intersect``,
drops the item and records why.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError

# Inspect's score letters: correct, incorrect, partial, no answer. Partial is 0.5, as Inspect's own
# value_to_float() converts it; "N" counts as 0 and is reported.
LETTER_SCORES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


@dataclass(frozen=True)
class Choice:
    """What the caller chose where a file offers several: ``--task/--filter/--metric/--scorer``."""

    task: str | None = None
    filter: str | None = None
    metric: str | None = None
    scorer: str | None = None


@dataclass(frozen=True)
class Item:
    key: str                         # "<task>:<id>"
    scores: tuple[float, ...]        # one per sample / epoch / repeat, in file order
    fingerprint: str                 # content hash that must agree between runs
    prompt_hash: str | None = None   # the exact prompt, where the harness logs it
    fields: Mapping[str, Any] = field(default_factory=dict)  # scalar doc/metadata fields (--cluster)
    output: str | None = None

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores)

    @property
    def binary(self) -> bool:
        return len(self.scores) == 1 and self.scores[0] in (0.0, 1.0)


@dataclass
class ItemSet:
    """One file's items, and what was chosen, dropped and noted while reading it."""

    path: str
    format: str
    harness: str
    harness_version: str | None
    task: str
    chosen: dict[str, str | None]
    items: dict[str, Item]
    dropped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    no_answer: int = 0               # "N" values (counted as 0)

    def provenance(self) -> dict[str, Any]:
        return {
            "path": self.path, "format": self.format, "harness": self.harness,
            "harness_version": self.harness_version, "task": self.task, "chosen": dict(self.chosen),
            "items": len(self.items), "dropped": list(self.dropped), "notes": list(self.notes),
            "no_answer_counted_as_0": self.no_answer,
            "samples_per_item": samples_per_item(self.items.values()),
        }


def samples_per_item(items: Iterable[Item]) -> dict[str, float]:
    counts = [len(i.scores) for i in items]
    if not counts:
        return {"min": 0, "max": 0, "mean": 0.0}
    return {"min": min(counts), "max": max(counts), "mean": sum(counts) / len(counts)}


class Problems:
    """Items that cannot be used: an error at once (default), or dropped and recorded (``--intersect``)."""

    def __init__(self, path: str | Path, *, intersect: bool):
        self.path = str(path)
        self.intersect = intersect
        self.dropped: list[dict[str, str]] = []

    def flag(self, key: str, reason: str, *, where: str | None = None) -> None:
        """``key`` names the item dropped; ``where`` (default: the key) locates it in the file."""
        if not self.intersect:
            raise InputError(self.path, where or key, reason + "; or drop such items with --intersect")
        self.dropped.append({"key": key, "reason": reason if where is None else f"{where}: {reason}"})


class NotAScore(Exception):
    """A value that is not a score (a (gold, pred) pair, text...): the message says what it is."""


class Unscored(Exception):
    """None or NaN: the sample carries no score."""


@dataclass
class ScoreTally:
    no_answer: int = 0


def to_score(value: Any, tally: ScoreTally | None = None) -> float:
    """A harness's per-sample value as a number: booleans, finite numbers, and Inspect's
    C/I/P/N letters. None and NaN raise :class:`Unscored`; lists, dicts and other strings raise
    :class:`NotAScore` (lm-eval's f1/mcc/bleu keep a (gold, pred) pair per item, not a score)."""
    if value is None:
        raise Unscored("no score (None)")
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        number = float(value)
        if math.isnan(number):
            raise Unscored("unscored (NaN)")
        if not math.isfinite(number):
            raise NotAScore(f"{value!r} is not a finite score")
        return number
    if isinstance(value, str) and value in LETTER_SCORES:
        if value == "N" and tally is not None:
            tally.no_answer += 1
        return LETTER_SCORES[value]
    if isinstance(value, list | tuple):
        raise NotAScore(f"a list ({_short(value)}), not a per-item score: corpus-level metrics such as "
                        "f1, mcc or bleu keep (gold, prediction) pairs and cannot be paired per item")
    if isinstance(value, dict):
        raise NotAScore(f"a dict ({_short(value)}), not a score")
    raise NotAScore(f"{_short(value)} is not a score")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def choose(path: str | Path, what: str, offered: Iterable[str], chosen: str | None) -> str:
    """The one of ``offered`` to use: the only one, or the caller's ``--<what>``. Never a guess:
    several without a choice, or a choice that is not offered, is an InputError listing them."""
    options = sorted(set(offered))
    if chosen is not None:
        if chosen not in options:
            raise InputError(path, what, f"--{what} {chosen!r} is not in this file; it has: {', '.join(options)}")
        return chosen
    if not options:
        raise InputError(path, what, f"no {what} in this file")
    if len(options) > 1:
        raise InputError(path, what, f"several {what}s: {', '.join(options)}; choose one with --{what}")
    return options[0]


def fingerprint(*parts: Any) -> str:
    """SHA-256 of the canonical JSON of ``parts`` (sorted keys, no whitespace)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def scalar_fields(mapping: Any) -> dict[str, Any]:
    """The top-level scalar fields of a doc or metadata mapping (what ``--cluster`` may name)."""
    if not isinstance(mapping, Mapping):
        return {}
    return {str(k): v for k, v in mapping.items() if v is None or isinstance(v, _SCALARS)}


_SCALARS = (str, int, float, bool)

