"""verl's Megatron engine's learning rate at every scheduler step (``model_engine: megatron``, verl 0.9.1).

Pure functions of the actor's optimizer keys (``actor_rollout_ref.actor.optim.*`` of the megatron
config) and the scheduler's horizon. Read from verl 0.9.1's wheel and megatron-core's
``OptimizerParamScheduler`` (megatron/core/optimizer_param_scheduler.py; tests/test_verl_megatron_lr.py
holds every value against that class itself):

- ``verl/utils/megatron/optimizer.py`` ``get_megatron_optimizer_param_scheduler``:
  ``lr_decay_steps`` is the stated one, else the optimizer's ``total_training_steps`` (the trainer
  writes its scheduler horizon there: total_training_steps × parameter_sync_step); the warm-up is
  ``lr_warmup_steps``, or ``int(lr_warmup_steps_ratio × lr_decay_steps)`` when the ratio is set and
  the steps are null or <= 0; ``init_lr = lr_warmup_init``, ``max_lr = lr``, ``min_lr``,
  ``lr_decay_style``, ``wsd_decay_steps = lr_wsd_decay_steps``, ``lr_wsd_decay_style``;
- megatron-core's ``get_lr`` after ``num_steps`` calls of ``step(1)`` (its constructor's ``step(0)``
  sets the first update's LR): a linear warm-up from ``init_lr`` while ``num_steps <= warmup``, then
  ``max_lr`` (constant), else ``min_lr`` past ``lr_decay_steps``, else the decay style:
  ``inverse-square-root``, ``linear``, ``cosine`` or ``WSD`` (flat, then its own decay over the last
  ``wsd_decay_steps``: linear, cosine, exponential or minus_sqrt), between ``max_lr`` and ``min_lr``;
- verl's Megatron engine steps it once per local update (``lr_scheduler_step``: ``step(1)``) and
  logs ``param_groups[0]["lr"]`` after that step: the LR of the next update.

The constructor's asserts (``min_lr >= 0``, ``max_lr >= min_lr``, ``init_lr <= max_lr``,
``lr_decay_steps > 0``, ``lr_warmup_steps < lr_decay_steps``, WSD's decay steps) stop verl before
its first step; :func:`megatron_lr_schedule` refuses the same configs, naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTOR_OPTIM = "actor_rollout_ref.actor.optim"
DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WSD_DECAY_STYLES = ("linear", "cosine", "exponential", "minus_sqrt")


class MegatronConfigError(ValueError):
    """A value verl's Megatron scheduler refuses; ``key`` names the recipe key."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class MegatronLRSchedule:
    """megatron-core's OptimizerParamScheduler as verl builds it (the LR part; weight decay is constant
    in verl: start_wd = end_wd = weight_decay)."""

    init_lr: float  # lr_warmup_init
    max_lr: float  # lr
    min_lr: float
    warmup_steps: int  # after verl's ratio rule (<= 0: no warm-up)
    decay_steps: int  # lr_decay_steps, or the scheduler's horizon
    decay_style: str
    wsd_decay_steps: int | None
    wsd_decay_style: str
    name = "megatron"

    @property
    def peak_lr(self) -> float:
        return self.max_lr

    def lr(self, num_steps: int) -> float:
        """``get_lr`` with ``num_steps`` scheduler steps taken (the same float operations, in order)."""
        max_lr, min_lr = self.max_lr, self.min_lr
        if self.warmup_steps > 0 and num_steps <= self.warmup_steps:
            return self.init_lr + ((max_lr - self.init_lr) * float(num_steps) / float(self.warmup_steps))
        if self.decay_style == "constant":
            return max_lr
        if num_steps > self.decay_steps:
            return min_lr
        if self.decay_style == "inverse-square-root":
            warmup_steps = max(self.warmup_steps, 1)
            steps = max(num_steps, 1)
            return max(min_lr, max_lr * warmup_steps**0.5 / (steps**0.5))
        decay_ratio = float(num_steps - self.warmup_steps) / float(self.decay_steps - self.warmup_steps)
        delta_lr = max_lr - min_lr
        if self.decay_style == "linear":
            coeff = 1.0 - decay_ratio
        elif self.decay_style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
        else:  # WSD
            anneal_start = self.decay_steps - self.wsd_decay_steps  # type: ignore[operator]
            if num_steps <= anneal_start:
                coeff = 1.0
            else:
                wsd_ratio = float(num_steps - anneal_start) / float(self.wsd_decay_steps)  # type: ignore[arg-type]
                if self.wsd_decay_style == "linear":
                    coeff = 1.0 - wsd_ratio
                elif self.wsd_decay_style == "cosine":
                    coeff = 0.5 * (math.cos(math.pi * wsd_ratio) + 1.0)
                elif self.wsd_decay_style == "exponential":
                    coeff = (2.0 * math.pow(0.5, wsd_ratio)) - 1.0
                else:  # minus_sqrt
                    coeff = 1.0 - math.sqrt(wsd_ratio)
        return min_lr + coeff * delta_lr

    def factor(self, num_steps: int) -> float:
        """The LR after ``num_steps`` scheduler steps, as a fraction of the peak."""
        return self.lr(num_steps) / self.max_lr if self.max_lr else 0.0

    @property
    def min_lr_reached(self) -> float:
        """The lowest LR the schedule reaches (after its decay)."""
        return self.max_lr if self.decay_style == "constant" else self.min_lr

    def warmup_rule(self, recipe: Mapping[str, Any]) -> str:
        from rlexp.trainers.verl.recipe import as_verl_recipe

        optim = as_verl_recipe(recipe).actor_rollout_ref.actor.optim
        stated = optim.lr_warmup_steps
        if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
            return f"lr_warmup_steps {stated}"
        return f"int({optim.lr_warmup_steps_ratio} × lr_decay_steps {self.decay_steps:,})"

    def as_dict(self) -> dict[str, Any]:
        return {"lr_warmup_init": self.init_lr, "lr": self.max_lr, "min_lr": self.min_lr,
                "lr_warmup_steps": self.warmup_steps, "lr_decay_steps": self.decay_steps,
                "lr_decay_style": self.decay_style, "lr_wsd_decay_steps": self.wsd_decay_steps,
                "lr_wsd_decay_style": self.wsd_decay_style}


def _number(config: Mapping[str, Any], name: str) -> float:
    key = f"{ACTOR_OPTIM}.{name}"
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MegatronConfigError(key, f"must be a finite number (got {value!r})")
    return float(value)


def _optional_int(config: Mapping[str, Any], name: str) -> int | None:
    key = f"{ACTOR_OPTIM}.{name}"
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MegatronConfigError(key, f"must be an integer or null (got {value!r})")
    return value


def megatron_lr_schedule(config: Mapping[str, Any], total_training_steps: int) -> MegatronLRSchedule:
    """The schedule ``get_megatron_optimizer_param_scheduler`` builds from the resolved config (dotted
    keys of the megatron config) when the trainer has set the optimizer's ``total_training_steps``
    to ``total_training_steps`` (the scheduler's horizon)."""
    decay_steps = _optional_int(config, "lr_decay_steps")
    if decay_steps is None:
        decay_steps = total_training_steps
    warmup = _optional_int(config, "lr_warmup_steps")
    ratio_value = config.get(f"{ACTOR_OPTIM}.lr_warmup_steps_ratio")
    if ratio_value is not None and (warmup is None or warmup <= 0):
        warmup = int(_number(config, "lr_warmup_steps_ratio") * decay_steps)
    if warmup is None:  # megatron-core compares it with 0: a TypeError before the first step
        raise MegatronConfigError(f"{ACTOR_OPTIM}.lr_warmup_steps", "null with lr_warmup_steps_ratio null: "
                                  "megatron-core's scheduler needs a number of warm-up steps")
    init_lr, max_lr, min_lr = (_number(config, k) for k in ("lr_warmup_init", "lr", "min_lr"))
    style = config.get(f"{ACTOR_OPTIM}.lr_decay_style")
    if style not in DECAY_STYLES:
        raise MegatronConfigError(f"{ACTOR_OPTIM}.lr_decay_style", f"megatron-core's OptimizerParamScheduler "
                                  f"supports {', '.join(DECAY_STYLES)} (got {style!r}: '{style} decay style is not "
                                  "supported')")
    wsd_steps = _optional_int(config, "lr_wsd_decay_steps")
    wsd_style = config.get(f"{ACTOR_OPTIM}.lr_wsd_decay_style")
    # OptimizerParamScheduler.__init__'s asserts, in its order
    where = f"{ACTOR_OPTIM}."
    if min_lr < 0.0:
        raise MegatronConfigError(where + "min_lr", f"must be >= 0 (got {min_lr}; megatron-core asserts min_lr >= 0)")
    if max_lr < min_lr:
        raise MegatronConfigError(where + "min_lr", f"{min_lr} is above lr {max_lr} (megatron-core asserts "
                                  "max_lr >= min_lr)")
    if init_lr > max_lr:
        raise MegatronConfigError(where + "lr_warmup_init", f"{init_lr} is above lr {max_lr} (megatron-core "
                                  "asserts init_lr <= max_lr)")
    if decay_steps <= 0:
        raise MegatronConfigError(where + "lr_decay_steps", f"the decay lasts {decay_steps} scheduler steps "
                                  "(megatron-core asserts lr_decay_steps > 0)")
    if warmup >= decay_steps:
        raise MegatronConfigError(where + "lr_warmup_steps", f"the warm-up ({warmup} scheduler steps) is not "
                                  f"shorter than lr_decay_steps {decay_steps} (megatron-core asserts "
                                  "lr_warmup_steps < lr_decay_steps)")
    if style == "WSD":
        if wsd_steps is None:
            raise MegatronConfigError(where + "lr_wsd_decay_steps", "null with lr_decay_style WSD "
                                      "(megatron-core asserts wsd_decay_steps is not None)")
        if wsd_style not in WSD_DECAY_STYLES:
            raise MegatronConfigError(where + "lr_wsd_decay_style", f"megatron-core's WSD decays "
                                      f"{', '.join(WSD_DECAY_STYLES)} (got {wsd_style!r})")
    return MegatronLRSchedule(init_lr, max_lr, min_lr, warmup, decay_steps, style, wsd_steps, str(wsd_style))
