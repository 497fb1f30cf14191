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
from dataclasses import dataclass, field
from functools import cache
from typing import Any

STEP_KEYS = ("global_step", "step", "training/global_step", "train/global_step")

# an in-run eval's accuracy under any of these names (a set's ``eval_<set>_pass1``, ...) is also
# the run's ``monitor_acc``, the one the gates follow
MONITOR_KEYS = ("monitor_acc", "greedy_pass_at_1", "greedy_pass@1", "pass1", "pass@1")


def is_monitor_key(key: str) -> bool:
    """Whether a logged eval metric's name ends in one of :data:`MONITOR_KEYS`."""
    tail = key.split("/")[-1].lower()
    return any(tail == m or tail.endswith(m) for m in MONITOR_KEYS)
TIME_KEY = "time"  # rlexp.experiment.layout.STEP_TIME_KEY (core cannot import storage)

# names every trainer's rows may carry (rlexp's own metrics.jsonl, the seed's patched trainer)
COMMON: dict[str, tuple[str, ...]] = {
    "grad_norm": ("grad_norm", "actor_grad_norm", "grad_norm_actor"),
    "step_time_s": ("step_time_s", "step_time", "time/step"),
    "ratio_max": ("ratio_max", "ratio_max_actor"),
    "ppo_clip_ratio": ("ppo_clip_ratio", "clip_ratio"),
    TIME_KEY: (TIME_KEY, "timestamp", "_timestamp"),
}

# the local trainer's episode metrics (rlexp.environments.interface.episode_metrics), the names every
# trainer's agentic runs are read back under
EPISODE_METRICS = ("turns_per_episode", "tool_calls_per_episode", "env_errors", "agent_token_fraction",
                   "env_latency_s", "episode_return", "finish_stop", "finish_length", "finish_max_turns",
                   "finish_env_error")


@dataclass(frozen=True)
class Ratio:
    """A canonical metric a trainer logs only in parts: ``numerator / denominator``, each a logged
    source name (or, the denominator, a number); 0 where the denominator is 0 (as the local trainer
    counts an empty batch). Two means over the same episodes give the ratio of the sums."""

    numerator: str
    denominator: str | float


@dataclass(frozen=True)
class Vocabulary:
    """One trainer's metric names: ``canonical name -> its source names, most preferred first``;
    the source names also kept under their own name; the prefixes of the phase timings that add
    up to ``step_time_s`` when it logs no step time of its own; the canonical metrics it logs only
    in parts (:class:`Ratio`, computed where it logs no value under the canonical name itself).
    Each trainer's package declares its own (``TrainerRules.metric_vocabulary``; the trainer's
    ``metrics`` module)."""

    names: Mapping[str, tuple[str, ...]]
    keep_source: tuple[str, ...] = ()
    step_time_parts: tuple[str, ...] = ()
    ratios: Mapping[str, Ratio] = field(default_factory=dict)


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


# --- a logged value as a number (every reader's, rlexp.training.metric_logs among them) --------

_NUMPY = re.compile(r"^(?:np|numpy)\.(?:float|int|uint)\d*\((.*)\)$")
_TENSOR_TEXT = re.compile(r"^tensor\(\s*([^,()]+)[^()]*\)$")
_NONFINITE_TEXT = {"nan": math.nan, "-nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
                   "infinity": math.inf, "-infinity": -math.inf}


def number(value: Any) -> float | None:
    """A metric value as a float (NaN and infinities kept), or None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return text_number(value)
    return None


def text_number(text: str) -> float | None:
    """``0.5``, ``1e-6``, ``nan``, ``np.float64(0.5)``, ``tensor(0.25, device='cuda:0')`` -> float."""
    text = text.strip()
    for pattern in (_NUMPY, _TENSOR_TEXT):
        if m := pattern.match(text):
            text = m.group(1).strip()
    if text.lower() in _NONFINITE_TEXT:
        return _NONFINITE_TEXT[text.lower()]
    try:
        return float(text)
    except ValueError:
        return None


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
    for canonical, ratio in vocab.ratios.items():
        if canonical not in out and (value := _ratio(flat, ratio)) is not None:
            out[canonical] = value
    return out


def _ratio(flat: Mapping[str, Any], ratio: Ratio) -> float | None:
    """``ratio`` of a row's values (as the logs write numbers: ``0.5``, ``np.float64(0.5)``); None
    where a part is missing or not a number."""
    den = ratio.denominator if isinstance(ratio.denominator, int | float) else flat.get(ratio.denominator)
    num, den = number(flat.get(ratio.numerator)), number(den)
    if num is None or den is None:
        return None
    return num / den if den else 0.0
