"""The learning rate of verl's VeOmni engine at every scheduler step (verl 0.9.1, VeOmni 0.1.11).

A pure function of the optimizer values a recipe resolves to; nothing here imports VeOmni or torch.
Read from the two releases' code:

- verl 0.9.1 (``verl/workers/engine/veomni/transformer_impl.py``, ``_build_lr_scheduler``) hands
  ``veomni.optim.build_lr_scheduler`` the optimizer group's ``total_training_steps`` (as
  ``train_steps``), ``lr``, ``lr_min``, ``lr_scheduler_type`` (as ``lr_decay_style``),
  ``lr_decay_ratio``, ``lr_warmup_steps_ratio`` (as ``lr_warmup_ratio``) and ``lr_start``. Nothing
  else: ``lr_warmup_steps``, which verl's FSDP engine prefers over the ratio, is never read on this
  engine, so a recipe that states it gets no warm-up from it. The trainer fills in
  ``total_training_steps`` before the workers start: the run's total global steps times the
  scheduler steps per global step (``parameter_sync_step`` of V1's ``separate_async`` mode, else 1).
  When the recipe names no value, ``_generated_ppo_veomni_trainer.yaml`` does: ``cosine``, ``lr_min``
  0, ``lr_start`` 0, ratio 0, ``lr_decay_ratio`` 1 (the dataclass default ``constant`` is never seen
  through Hydra); the keyword defaults below are those values.
- VeOmni 0.1.11 (``veomni/optim/lr_scheduler.py``; the pin in verl's ``veomni-sft`` extra, and the
  same file at VeOmni's main branch) builds a torch ``LambdaLR``: the LR after ``i`` calls of
  ``scheduler.step()`` is ``lr × f(i)``. With ``N`` the scheduler's length, the warm-up is
  ``W = int(N × lr_warmup_steps_ratio)`` steps, the float product truncated (0.29 × 100 is
  28.999…, so 28 steps). While ``i < W`` every style ramps in a straight line from ``lr_start`` (at
  ``i`` = 0) toward ``lr``: ``f(i) = (lr_start + (lr − lr_start) · i / max(1, W)) / lr`` (``lr`` is
  reached at ``i = W``, the first step after the ramp). After it:

  * ``constant``: ``f = 1``: ``lr`` to the end; ``lr_min`` and ``lr_decay_ratio`` play no part;
  * ``linear``: ``f(i) = max(1e-7 / lr, (N − i) / max(1, N − W))``: down in a straight line to
    0 at step ``N``, but never below an LR of 1e-7. That floor is not ``lr_min``: ``build_lr_scheduler``
    does not pass ``lr_min`` on to the linear schedule, whose own default (1e-7) stands; nor
    ``lr_decay_ratio``;
  * ``cosine``: the decay ends at ``D = int(N × lr_decay_ratio)``; half a cosine wave carries ``f``
    from 1 at ``W`` to ``m = lr_min / lr`` at ``D``: ``f(i) = m + (1 − m) · ½ (1 + cos(π · p))``
    with ``p = (i − W) / max(1, D − W)``; past ``D`` it stays ``m`` (a ratio below 1 ends the decay
    early and holds ``lr_min`` after it); a negative ``f`` (only when ``lr_min`` < 0) is clamped to 0.

  The formulas divide by ``lr``: with ``lr`` 0 VeOmni fails when verl builds the scheduler (it
  evaluates ``f(0)`` then), except ``constant`` without warm-up, which never divides.

When it applies: verl's engine worker calls ``scheduler.step()`` once per actor update, after the
update's last mini-batch, and logs ``get_last_lr()[0]`` as ``actor/lr``. So update ``u`` (0-based
count of updates) runs all of its optimizer steps at ``lr(u)``, and the ``actor/lr`` logged with it
is ``lr(u + 1)``, the LR the next update will use. The float operations below are VeOmni's, in
its order, times ``lr`` as ``LambdaLR`` multiplies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEDULER_TYPES = ("constant", "linear", "cosine")  # VeOmni's lr_decay_style; any other is its ValueError
# the optimizer keys (under actor_rollout_ref.actor.optim, or critic.optim) verl hands VeOmni, by their
# verl names, which are this function's keyword names; and the one verl has that this engine ignores
SCHEDULE_KEYS = ("lr", "lr_scheduler_type", "lr_warmup_steps_ratio", "lr_decay_ratio", "lr_min", "lr_start")
IGNORED_KEYS = ("lr_warmup_steps",)
# the linear schedule's floor: get_linear_schedule_with_warmup's default min_lr, which
# build_lr_scheduler leaves in place (it passes lr_min to the cosine schedule only)
LINEAR_MIN_LR = 1e-7


class VeOmniScheduleError(ValueError):
    """A value VeOmni's scheduler cannot be built with; ``key`` is its name in verl's optimizer group."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


@dataclass(frozen=True)
class VeOmniLRSchedule:
    """VeOmni's schedule for a run of ``train_steps`` scheduler steps."""

    train_steps: int      # N: the scheduler's length (verl's optim.total_training_steps)
    warmup_steps: int     # W = int(N × lr_warmup_steps_ratio)
    decay_steps: int      # D = int(N × lr_decay_ratio): where cosine's decay ends (others: N)
    peak_lr: float        # lr
    scheduler: str
    lr_min: float         # cosine's floor (constant and linear do not read it)
    lr_start: float

    def factor(self, step: int) -> float:
        """``f(step)``: the multiplier of ``lr`` after ``step`` calls of ``scheduler.step()``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        warmup, lr = self.warmup_steps, self.peak_lr
        if step < warmup:
            return (self.lr_start + (lr - self.lr_start) * step / max(1, warmup)) / lr
        if self.scheduler == "constant":
            return 1.0
        if self.scheduler == "linear":
            floor = LINEAR_MIN_LR / lr
            return max(floor, float(self.train_steps - step) / float(max(1, self.train_steps - warmup)))
        floor = self.lr_min / lr
        if step > self.decay_steps:
            return floor
        progress = float(step - warmup) / float(max(1, self.decay_steps - warmup))
        wave = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))  # VeOmni's num_cycles 0.5, its order
        return max(0, wave * (1 - floor) + floor)

    def lr(self, step: int) -> float:
        """The LR after ``step`` scheduler steps: what update ``step`` (0-based) runs with, and
        the ``actor/lr`` verl logs with update ``step - 1``."""
        return self.peak_lr * self.factor(step)

    def lrs(self) -> list[float]:
        """``lr(i)`` for ``i`` = 0 … N: the N updates' LRs, then the value logged after the last."""
        return [self.lr(i) for i in range(self.train_steps + 1)]

    # what the plan reads of an engine's schedule (rlexp.trainers.verl.steps.ENGINE_SCHEDULES)
    name = "veomni"

    @property
    def decay_style(self) -> str:
        return self.scheduler

    @property
    def min_lr_reached(self) -> float:
        """The LR the schedule ends at: ``lr`` (constant), else where the decay has brought it by step N
        (the decay only falls after the warm-up, so its end is its lowest)."""
        if self.scheduler == "constant":
            return self.peak_lr
        return self.lr(max(self.train_steps, self.warmup_steps))

    def warmup_rule(self, recipe: Mapping[str, Any]) -> str:
        from rlexp.trainers.verl.recipe import as_verl_recipe

        optim = as_verl_recipe(recipe).actor_rollout_ref.actor.optim
        rule = f"int({optim.lr_warmup_steps_ratio} × total_training_steps {self.train_steps:,})"
        stated = optim.lr_warmup_steps
        if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
            rule += f"; lr_warmup_steps {stated} is not read by the VeOmni engine"
        return rule

    def as_dict(self) -> dict[str, Any]:
        return {"lr": self.peak_lr, "lr_scheduler_type": self.scheduler, "lr_start": self.lr_start,
                "lr_min": self.lr_min, "lr_warmup_steps": self.warmup_steps, "lr_decay_steps": self.decay_steps,
                "total_training_steps": self.train_steps}


def veomni_lr_schedule(train_steps: int, *, lr: float, lr_scheduler_type: str = "cosine",
                       lr_warmup_steps_ratio: float = 0.0, lr_decay_ratio: float = 1.0, lr_min: float = 0.0,
                       lr_start: float = 0.0) -> VeOmniLRSchedule:
    """VeOmni's LR schedule as verl 0.9.1's VeOmni engine builds it (see the module doc): the
    keywords are verl's optimizer keys (:data:`SCHEDULE_KEYS`), their defaults verl's VeOmni
    config's; ``train_steps`` is the scheduler's length (total global steps × scheduler steps per
    global step). :class:`VeOmniScheduleError` names the key where VeOmni would fail."""
    if isinstance(train_steps, bool) or not isinstance(train_steps, int) or train_steps < 0:
        raise VeOmniScheduleError("total_training_steps", f"must be an integer >= 0 (got {train_steps!r})")
    numbers = {"lr": lr, "lr_warmup_steps_ratio": lr_warmup_steps_ratio, "lr_decay_ratio": lr_decay_ratio,
               "lr_min": lr_min, "lr_start": lr_start}
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise VeOmniScheduleError(key, f"must be a finite number (got {value!r})")
    if lr_scheduler_type not in SCHEDULER_TYPES:
        raise VeOmniScheduleError("lr_scheduler_type", f"{lr_scheduler_type!r}: VeOmni knows "
                                  f"{', '.join(SCHEDULER_TYPES)}")
    warmup = int(train_steps * lr_warmup_steps_ratio)
    if lr == 0 and (lr_scheduler_type != "constant" or warmup > 0):
        raise VeOmniScheduleError("lr", "0: VeOmni's schedule divides by it (the run fails when the scheduler "
                                  "is built)")
    decay = int(train_steps * lr_decay_ratio) if lr_scheduler_type == "cosine" else train_steps
    return VeOmniLRSchedule(train_steps=train_steps, warmup_steps=warmup, decay_steps=decay, peak_lr=float(lr),
                            scheduler=lr_scheduler_type, lr_min=float(lr_min), lr_start=float(lr_start))
