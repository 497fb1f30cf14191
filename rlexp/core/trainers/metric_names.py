"""One metrics vocabulary: each trainer's logged names -> the canonical names of
docs/ARCHITECTURE.md "Metrics JSONL" (pure; no I/O).

One table per trainer, ``canonical name -> the trainer's source names, most preferred first``.
Whichever reader runs (console, JSONL, TensorBoard, verl's ``file`` logger, TRL's
``trainer_state.json``), a row passes through :func:`canonical_row` with its trainer's table, so
a metric has the same name whatever file it came from. Where several source names of one row map
to the same canonical name (OpenRLHF 0.11 logs both ``reward`` and ``rollout/reward_mean``), the
first one listed wins and the others keep their own names: nothing is dropped.

Source names were read from the trainers' own code (the wheels of OpenRLHF 0.9.3-0.11.2, verl
0.9.1, TRL 1.16) and, for older verl, from console output its users pasted (``actor/lr(1e-4)``,
``actor/entropy_loss``, ``timing/*``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
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

# OpenRLHF 0.9.3-0.11.2: the "Global step" dict (experience info + actor status), 0.11's
# rollout/* stats (ppo_trainer.py), timing/step_total (0.10+), and the tqdm postfix of the actor's
# "Train epoch" bar (ray/ppo_actor.py short_status: act_loss, gen_len, act_lr, ent_loss, ...)
OPENRLHF: dict[str, tuple[str, ...]] = {
    **COMMON,
    "policy_loss": ("policy_loss", "act_loss"),
    "actor_lr": ("actor_lr", "act_lr"),
    "reward": ("reward", "rollout/reward_mean"),
    "response_length": ("response_length", "rollout/response_length_mean", "gen_len"),
    "truncated": ("truncated", "rollout/truncated_rate"),
    "kl": ("kl",),
    "ppo_kl": ("ppo_kl",),
    "entropy": ("entropy", "entropy_loss", "ent_loss"),
    "step_time_s": ("step_time_s", "timing/step_total", "step_time", "time/step"),
}

# verl 0.9.1 (metric_utils.py, core_algos.py, workers) and older verl as users paste it
# (actor/lr(1e-4) scaled by 1e4, actor/entropy_loss, timing/*). kl: the KL loss to the reference
# when use_kl_loss, else the in-reward KL penalty.
VERL: dict[str, tuple[str, ...]] = {
    **COMMON,
    "reward": ("critic/score/mean",),
    "actor_lr": ("actor/lr",),  # actor/lr(1e-4) arrives here unscaled, see SCALED_NAME
    "grad_norm": ("actor/grad_norm",),
    "policy_loss": ("actor/pg_loss",),
    "ppo_clip_ratio": ("actor/pg_clipfrac",),
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "ppo_kl": ("actor/ppo_kl",),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "response_length": ("response_length/mean",),
    "truncated": ("response_length/clip_ratio",),
    "step_time_s": ("timing_s/step", "timing/step"),
    "monitor_acc": ("val-core/rlexp_ood_monitor/acc/mean@1",),
}
VERL_KEEP_SOURCE = ("val-core/rlexp_ood_monitor/acc/mean@1",)  # also kept under its own name
VERL_TIMING_PREFIXES = ("timing_s/", "timing/")
# per trainer: source names also kept under their own name, and the phase timings that add up to
# step_time_s when the trainer logs no step time of its own (verl: timing/step)
KEEP_SOURCE: dict[str, tuple[str, ...]] = {"verl": VERL_KEEP_SOURCE}
STEP_TIME_PARTS: dict[str, tuple[str, ...]] = {"verl": VERL_TIMING_PREFIXES}

# TRL 1.16 GRPOTrainer (self._metrics + transformers' loss/grad_norm/learning_rate) and older
# TRL's completion_length; "loss" is the policy loss only where no policy_loss is logged
TRL: dict[str, tuple[str, ...]] = {
    **COMMON,
    "actor_lr": ("learning_rate",),
    "response_length": ("completions/mean_length", "completion_length"),
    "truncated": ("completions/clipped_ratio",),
    "group_reward_std": ("reward_std",),
    "ppo_clip_ratio": ("clip_ratio/region_mean", "clip_ratio"),
    "policy_loss": ("policy_loss", "loss"),
}

LOCAL: dict[str, tuple[str, ...]] = dict(COMMON)

TABLES: dict[str, dict[str, tuple[str, ...]]] = {"openrlhf": OPENRLHF, "verl": VERL, "trl": TRL, "local": LOCAL}

# older verl: "actor/lr(1e-4)" is lr * 1e4
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


def table(trainer: str) -> dict[str, tuple[str, ...]]:
    return TABLES[trainer]


def strip_prefix(key: str) -> str:
    key = str(key).strip()
    return key[len("train/"):] if key.startswith("train/") else key


def canonical_row(raw: Mapping[str, Any], trainer: str) -> dict[str, Any]:
    """``raw`` (source names, any values) -> the same values under canonical names.

    ``global_step`` is left to the caller; a scaled name (``actor/lr(1e-4)``) is unscaled; a
    source name that loses to a preferred one keeps its own name. Values are not checked here."""
    names = TABLES[trainer]
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
        if name in taken and name not in KEEP_SOURCE.get(trainer, ()):
            continue
        out.setdefault(name, value)
    parts_of = STEP_TIME_PARTS.get(trainer)
    if parts_of and "step_time_s" not in out:
        values = (_unscaled(v, 1.0) for k, v in flat.items() if k.startswith(parts_of))
        parts = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
        if parts:  # no timing/step: the phases of the step, added up (what timing/step is)
            out["step_time_s"] = float(sum(parts))
    return out
