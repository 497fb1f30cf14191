"""One metrics vocabulary: each trainer's logged names -> the canonical names of
docs/ARCHITECTURE.md "Metrics JSONL" (pure; no I/O).

One table per trainer, ``canonical name -> the trainer's source names, most preferred first``,
declared in the trainer's package (its ``metrics`` module, a :class:`Vocabulary`). Whichever
reader runs (console, JSONL, TensorBoard, a trainer's own file logger, ``trainer_state.json``),
a row passes through :func:`canonical_row` with its trainer's table, so
a metric has the same name whatever file it came from. Where several source names of one row map
to the same canonical name (OpenRLHF 0.11 logs both ``reward`` and ``rollout/reward_mean``), the
first one listed wins and the others keep their own names: nothing is dropped.

Source names were read from the trainers' own code (their wheels) and, for older releases, from
console output their users pasted (see each table).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

STEP_KEYS = ("global_step", "step", "training/global_step", "train/global_step")
TIME_KEY = "time"  # rlexp.storage.layout.STEP_TIME_KEY (core cannot import storage)

# names every trainer's rows may carry (rlexp's own metrics.jsonl, the seed's patched trainer)
COMMON: dict[str, tuple[str, ...]] = {
    "grad_norm": ("grad_norm", "actor_grad_norm", "grad_norm_actor"),
    "step_time_s": ("step_time_s", "step_time", "time/step"),
    "ratio_max": ("ratio_max", "ratio_max_actor"),
    "ppo_clip_ratio": ("ppo_clip_ratio", "clip_ratio"),
    TIME_KEY: (TIME_KEY, "timestamp", "_timestamp"),
}

@dataclass(frozen=True)
class Vocabulary:
    """One trainer's metric names: ``canonical name -> its source names, most preferred first``;
    the source names also kept under their own name; the prefixes of the phase timings that add
    up to ``step_time_s`` when it logs no step time of its own. Each trainer's package declares
    its own (``TrainerRules.metric_vocabulary``; the trainer's ``metrics`` module)."""

    names: Mapping[str, tuple[str, ...]]
    keep_source: tuple[str, ...] = ()
    step_time_parts: tuple[str, ...] = ()


# a trainer that logs rlexp's own names only (the local trainer)
COMMON_VOCABULARY = Vocabulary(COMMON)


@cache
def vocabulary(trainer: str) -> Vocabulary:
    """The vocabulary of ``trainer`` (a ``trainer.name``), from its package (rlexp.trainers)."""
    from rlexp.trainers import rules

    return rules(trainer).metric_vocabulary()


def trainers() -> tuple[str, ...]:
    """Every trainer whose metrics can be read (the registry's)."""
    from rlexp.trainers import names

    return names()


# a name logged with its scale, "actor/lr(1e-4)": the value is lr * 1e4
SCALED_NAME = re.compile(r"^(?P<name>.+)\((?P<scale>1e[-+]?\d+)\)$")


def _unscaled(value: Any, scale: float) -> Any:
    """A value logged multiplied by 1/scale, back to its own size (a value that is not a number as it is)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value * scale
    return value


def table(trainer: str) -> Mapping[str, tuple[str, ...]]:
    return vocabulary(trainer).names


def strip_prefix(key: str) -> str:
    key = str(key).strip()
    return key[len("train/"):] if key.startswith("train/") else key


def canonical_row(raw: Mapping[str, Any], trainer: str) -> dict[str, Any]:
    """``raw`` (source names, any values) -> the same values under canonical names.

    ``global_step`` is left to the caller; a scaled name (``actor/lr(1e-4)``) is unscaled; a
    source name that loses to a preferred one keeps its own name. Values are not checked here."""
    vocab = vocabulary(trainer)
    names = vocab.names
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        name = strip_prefix(key)
        if m := SCALED_NAME.match(name):
            name, value = m.group("name"), _unscaled(value, float(m.group("scale")))
        flat.setdefault(name, value)
    taken: set[str] = set()
    out: dict[str, Any] = {}
    for canonical, sources in names.items():
        for source in sources:
            if source in flat:
                out[canonical] = flat[source]
                taken.add(source)
                break
    for name, value in flat.items():
        if name in taken and name not in vocab.keep_source:
            continue
        out.setdefault(name, value)
    parts_of = vocab.step_time_parts
    if parts_of and "step_time_s" not in out:
        values = (_unscaled(v, 1.0) for k, v in flat.items() if k.startswith(parts_of))
        parts = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
        if parts:  # no timing/step: the phases of the step, added up (what timing/step is)
            out["step_time_s"] = float(sum(parts))
    return out
