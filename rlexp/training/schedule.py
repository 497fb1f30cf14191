"""OpenRLHF step math and the learning rate at every optimizer step — before a GPU is touched.

Three attempts were once lost to this arithmetic (docs/plan.md tells them): ``max_steps`` counts optimizer
steps, not global steps, and ``num_episodes`` over a large pool stretches warm-up over the whole
observed run. Everything here mirrors the trainer's code (OpenRLHF tags v0.9.3 … v0.11.0) and
``transformers``' ``cosine_with_min_lr`` scheduler, without importing either:

- ``max_steps = len(prompts) * n_samples_per_prompt // train_batch_size * num_episodes * max_epochs``
  (``trainer/ppo_trainer.py``); the scheduler is built with it, warm-up ``ceil(max_steps *
  lr_warmup_ratio)``, min LR ``0.1 × peak`` (a ``min_lr_ratio`` flag exists from v0.10.2).
- one global step = one rollout batch of ``rollout_batch_size`` prompts, trained for
  ``rollout_batch_size * n_samples_per_prompt * max_epochs / train_batch_size`` optimizer steps.
- a partial last rollout batch is dropped up to v0.10.4 (``floor(N / rollout_batch_size)``
  global steps per episode) and trained from v0.11.0 (``ceil``).
- the scheduler steps once per optimizer step (DeepSpeed steps it at the gradient-accumulation
  boundary). ``LambdaLR`` sets ``lr = peak × λ(0)`` at construction, so optimizer step ``k``
  (1-based) applies ``peak × λ(k − 1)``.
- the logged ``actor_lr``: up to v0.9.7 the mean over the global step's micro-batches of
  ``get_last_lr()`` read after each micro-batch (so ``(gas − 1)·λ(k−1) + λ(k)`` over ``gas`` per
  optimizer step); from v0.9.8 the value after the last micro-batch, ``λ(last step)``. The first
  reproduces the log of attempt A28 of docs/plan.md (37.5 %, 99.4 %, 75.9 %, 21.5 %, 10.1 % at global steps 1, 3,
  10, 20, 25).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

LOCAL_TRAINER_VERSION = "0.11.0"  # the local CPU trainer follows OpenRLHF 0.11 step semantics


def parse_version(version: str) -> tuple[int, int, int]:
    """'0.9.3' → (0, 9, 3); '0.10.1.post1' → (0, 10, 1); '0.11' → (0, 11, 0)."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not match:
        raise ValueError(f"not a version: {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def drops_partial_batch(version: str) -> bool:
    """True when the trainer drops a partial last rollout batch (OpenRLHF < 0.11)."""
    return parse_version(version) < (0, 11, 0)


def min_lr_is_configurable(version: str) -> bool:
    """``--actor.min_lr_ratio`` exists from v0.10.2; before, min LR is fixed at 0.1 × peak."""
    return parse_version(version) >= (0, 10, 2)


def actor_lr_logging(version: str) -> str:
    """How the trainer logs ``actor_lr`` per global step: ``micro_batch_mean`` or ``last``."""
    return "micro_batch_mean" if parse_version(version) < (0, 9, 8) else "last"


@dataclass(frozen=True)
class Steps:
    """Step counts of one run, as the trainer will count them."""

    trainer_version: str
    pool_size: int  # prompts in the training pool
    prompts: int  # prompts the trainer uses: min(pool_size, max_samples)
    n_samples_per_prompt: int
    rollout_batch_size: int
    train_batch_size: int
    micro_train_batch_size: int
    data_parallel_size: int  # actor GPUs / (ring_attn_size × ds_tensor_parallel_size)
    num_episodes: int
    max_epochs: int
    optimizer_steps_total: int  # max_steps: what the LR scheduler is built with
    optimizer_steps_per_episode: int
    optimizer_steps_per_global_step: float  # integral when the batches divide
    micro_batches_per_optimizer_step: float  # per data-parallel rank (gradient accumulation)
    global_steps_per_episode: int
    global_steps_total: int
    partial_batch_prompts: int  # prompts left over by the last rollout batch of an episode
    drops_partial_batch: bool  # True: v0.9/v0.10 drop them; False: v0.11 trains a short global step
    optimizer_steps_run: int  # optimizer steps the trainer actually executes
    warmup_steps: int
    peak_lr: float
    min_lr_ratio: float  # effective ratio (v0.9.x: always 0.1)
    min_lr_rate: float  # what the scheduler uses (v0.9.x: (peak × 0.1) / peak, like transformers)
    actor_lr_logging: str  # micro_batch_mean | last (after scheduler.step()) | applied (before it)

    @property
    def min_lr(self) -> float:
        return self.peak_lr * self.min_lr_rate

    def lambda_at(self, scheduler_step: int) -> float:
        """The LR multiplier after ``scheduler_step`` scheduler steps: OpenRLHF's ``cosine_with_min_lr``."""
        return cosine_with_min_lr_lambda(scheduler_step, self)

    def warmup_rule(self, recipe: Mapping[str, Any]) -> str:
        """How ``warmup_steps`` was computed, for messages."""
        return f"ceil({self.optimizer_steps_total:,} × {recipe.get('lr_warmup_ratio')})"

    # ---- what the step checks (rlexp.protocol.step_checks.check_step_counts) ask: a trainer whose step math
    # differs from OpenRLHF's words the findings its own way (None: the catalogue's OpenRLHF wording)
    partial_batch_ref = "docs/plan.md#optimizer-steps-and-global-steps"  # a class attribute, not a field

    def step_message(self, check_id: str, intent: int | None = None) -> str | None:
        return None

    # ---- what the LR checks (rlexp.protocol.step_checks.check_lr) ask of every trainer's step math
    lr_unit = "optimizer"  # the steps its LR scheduler counts (a class attribute, not a field)

    @property
    def lr_steps_run(self) -> int:
        """Scheduler steps of the run (``max_steps``: the scheduler is built with them)."""
        return self.optimizer_steps_total

    @property
    def lr_horizon(self) -> str:
        return f"max_steps {self.optimizer_steps_total:,}"

    def lr_at(self, global_step: int) -> GlobalStepLR:
        return lr_for_global_step(global_step, self)

    def best_fraction_through(self, global_step: int) -> float:
        return max_fraction_through(global_step, self)

    def eval_save_steps(self, recipe: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        """Global steps with an in-run eval, and with a saved checkpoint (OpenRLHF: multiples only)."""
        from rlexp.spec.recipe import as_recipe

        r, total = as_recipe(recipe), self.global_steps_total
        return firing_steps(int(r.eval_steps), total), firing_steps(int(r.save_steps), total)

    @property
    def warmup_global_steps(self) -> float:
        return self.warmup_steps / self.optimizer_steps_per_global_step

    def samples_through(self, global_step: int) -> int:
        """Samples (prompts × n) trained by the end of ``global_step`` (all epochs counted once)."""
        if global_step <= 0:
            return 0
        per_episode = self.global_steps_per_episode
        episode, within = divmod(global_step, per_episode) if per_episode else (0, 0)
        prompts_per_episode = self.prompts - (self.partial_batch_prompts if self.drops_partial_batch else 0)
        prompts = episode * prompts_per_episode + min(within * self.rollout_batch_size, prompts_per_episode)
        return prompts * self.n_samples_per_prompt

    def optimizer_steps_through(self, global_step: int) -> int:
        """Optimizer steps completed by the end of ``global_step``.

        DeepSpeed counts micro-batches across global steps, so when a batch does not divide the
        remainder carries into the next global step; exact when the batches divide."""
        global_step = min(global_step, self.global_steps_total)
        return self.samples_through(global_step) * self.max_epochs // self.train_batch_size

    def optimizer_range(self, global_step: int) -> tuple[int, int]:
        """First and last optimizer step (1-based, inclusive) of a global step; first > last when
        the global step completes no optimizer step."""
        return self.optimizer_steps_through(global_step - 1) + 1, self.optimizer_steps_through(global_step)


def compute_steps(
    recipe: Mapping[str, Any], pool_size: int, trainer_version: str, *, trainer: str
) -> Steps:
    """Step counts for a resolved recipe (OpenRLHF v0.9.x key names: a Recipe, or a mapping of some of its
    keys, the others at Recipe's defaults) and a pool of ``pool_size``; ``trainer`` (a name of
    rlexp.trainers) may fix the release's step semantics and run one process."""
    from rlexp.spec.recipe import as_recipe
    from rlexp.trainers import rules

    how = rules(trainer)
    version = how.step_version(trainer_version)
    if pool_size < 0:
        raise ValueError(f"pool_size must be >= 0, got {pool_size}")
    r = as_recipe(recipe)
    n, rollout, train = int(r.n_samples_per_prompt), int(r.rollout_batch_size), int(r.train_batch_size)
    micro, episodes, epochs = int(r.micro_train_batch_size), int(r.num_episodes), int(r.max_epochs)
    max_samples = int(r.max_samples)
    peak, warmup_ratio = float(r.actor_learning_rate), float(r.lr_warmup_ratio)
    for name, value in (("n_samples_per_prompt", n), ("rollout_batch_size", rollout),
                        ("train_batch_size", train), ("micro_train_batch_size", micro),
                        ("num_episodes", episodes), ("max_epochs", epochs)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    actor_gpus = int(r.actor_num_nodes) * int(r.actor_num_gpus_per_node)
    model_parallel = int(r.ring_attn_size) * int(r.ds_tensor_parallel_size)
    dp = max(1, actor_gpus // max(1, model_parallel))
    if how.single_process:
        dp = 1

    prompts = min(pool_size, max_samples)
    # trainer/ppo_trainer.py, same operator order: floor division happens before the products
    max_steps = prompts * n // train * episodes * epochs
    per_episode_opt = prompts * n // train * epochs
    drop = drops_partial_batch(version)
    partial = prompts % rollout
    gpe = prompts // rollout if drop else -(-prompts // rollout)
    total_global = gpe * episodes

    if min_lr_is_configurable(version):
        ratio = float(r.min_lr_ratio)
        rate = ratio  # v0.11 passes min_lr_rate directly
    else:
        ratio = 0.1
        rate = (peak * 0.1) / peak  # v0.9.x passes min_lr=lr*0.1; transformers divides by lr

    steps = Steps(
        trainer_version=version,
        pool_size=pool_size,
        prompts=prompts,
        n_samples_per_prompt=n,
        rollout_batch_size=rollout,
        train_batch_size=train,
        micro_train_batch_size=micro,
        data_parallel_size=dp,
        num_episodes=episodes,
        max_epochs=epochs,
        optimizer_steps_total=max_steps,
        optimizer_steps_per_episode=per_episode_opt,
        optimizer_steps_per_global_step=_maybe_int(rollout * n * epochs / train),
        micro_batches_per_optimizer_step=_maybe_int(train / (micro * dp)),
        global_steps_per_episode=gpe,
        global_steps_total=total_global,
        partial_batch_prompts=partial,
        drops_partial_batch=drop,
        optimizer_steps_run=0,
        warmup_steps=math.ceil(max_steps * warmup_ratio),
        peak_lr=peak,
        min_lr_ratio=ratio,
        min_lr_rate=rate,
        actor_lr_logging=actor_lr_logging(version),
    )
    run = steps.optimizer_steps_through(total_global)
    return _replace(steps, optimizer_steps_run=run)


def _replace(steps: Steps, **changes: Any) -> Steps:
    from dataclasses import replace

    return replace(steps, **changes)


def _maybe_int(x: float) -> float:
    return int(x) if float(x).is_integer() else x


# ----------------------------------------------------------------------------- the LR schedule


def lr_lambda(scheduler_step: int, steps: Steps) -> float:
    """The LR multiplier after ``scheduler_step`` calls of ``scheduler.step()``: the trainer's own
    schedule (:meth:`Steps.lambda_at`; another trainer's steps bring their own)."""
    return steps.lambda_at(scheduler_step)


def cosine_with_min_lr_lambda(scheduler_step: int, steps: Steps) -> float:
    """``transformers``' ``_get_cosine_schedule_with_warmup_lr_lambda`` (num_cycles 0.5), same
    float operations in the same order, after ``scheduler_step`` calls of ``scheduler.step()``."""
    warmup, total, num_cycles = steps.warmup_steps, steps.optimizer_steps_total, 0.5
    if scheduler_step < warmup:
        return float(scheduler_step) / float(max(1, warmup))
    progress = float(scheduler_step - warmup) / float(max(1, total - warmup))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - steps.min_lr_rate) + steps.min_lr_rate
    return max(0, factor)


def lr_at(optimizer_step: int, steps: Steps, recipe: Mapping[str, Any] | None = None) -> float:
    """The LR the optimizer applies at ``optimizer_step`` (1-based): ``peak × λ(step − 1)``.

    ``recipe`` is accepted for symmetry with :func:`compute_steps`; ``steps`` carries the peak."""
    if optimizer_step < 1:
        raise ValueError(f"optimizer steps are 1-based, got {optimizer_step}")
    return steps.peak_lr * lr_lambda(optimizer_step - 1, steps)


@dataclass(frozen=True)
class GlobalStepLR:
    """The LR seen by one global step."""

    global_step: int
    first_optimizer_step: int
    last_optimizer_step: int
    lr_first: float  # applied at the global step's first optimizer step
    lr_mean: float  # mean over its optimizer steps
    fraction_of_peak: float  # lr_mean / peak
    actor_lr_logged: float  # what the trainer will log as actor_lr for this global step

    def as_dict(self) -> dict[str, Any]:
        return {
            "global_step": self.global_step,
            "first_optimizer_step": self.first_optimizer_step,
            "last_optimizer_step": self.last_optimizer_step,
            "lr_first": self.lr_first,
            "lr_mean": self.lr_mean,
            "fraction_of_peak": self.fraction_of_peak,
            "actor_lr_logged": self.actor_lr_logged,
        }


def lr_for_global_step(global_step: int, steps: Steps) -> GlobalStepLR:
    first, last = steps.optimizer_range(global_step)
    if last < first:  # no optimizer step completes in this global step: the LR stays where it is
        lr = steps.peak_lr * lr_lambda(first - 1, steps)
        return GlobalStepLR(global_step, first, last, lr, lr, _frac(lr, steps), lr)
    lambdas = [lr_lambda(k - 1, steps) for k in range(first, last + 1)]
    lr_first = steps.peak_lr * lambdas[0]
    lr_mean = steps.peak_lr * math.fsum(lambdas) / len(lambdas)
    return GlobalStepLR(global_step, first, last, lr_first, lr_mean, _frac(lr_mean, steps),
                        logged_actor_lr(global_step, steps))  # fmt: skip


def _frac(lr: float, steps: Steps) -> float:
    return lr / steps.peak_lr if steps.peak_lr else 0.0


def logged_actor_lr(global_step: int, steps: Steps) -> float:
    """``actor_lr`` as the trainer logs it for ``global_step`` (see the module docstring)."""
    first, last = steps.optimizer_range(global_step)
    if steps.actor_lr_logging == "applied" and last >= first:  # read before scheduler.step(): the step's own LR
        return steps.peak_lr * lr_lambda(last - 1, steps)
    if steps.actor_lr_logging in ("last", "applied") or last < first:
        return steps.peak_lr * lr_lambda(last, steps)  # scheduler steps done = last
    gas = steps.micro_batches_per_optimizer_step
    total = 0.0
    for k in range(first, last + 1):
        total += ((gas - 1) * lr_lambda(k - 1, steps) + lr_lambda(k, steps)) / gas
    return steps.peak_lr * total / (last - first + 1)


def lr_table(steps: Steps, global_steps: Iterable[int]) -> list[GlobalStepLR]:
    return [lr_for_global_step(g, steps) for g in global_steps]


def max_fraction_through(global_step: int, steps: Steps) -> float:
    """Highest fraction of peak LR applied by any optimizer step up to the end of ``global_step``.

    The LR rises during warm-up and falls after, so the maximum is at the last step of warm-up
    or at ``global_step``'s last optimizer step, whichever comes first."""
    last = steps.optimizer_steps_through(global_step)
    if last < 1:
        return 0.0
    best_k = min(last, steps.warmup_steps + 1)
    return max(lr_lambda(best_k - 1, steps), lr_lambda(last - 1, steps))


def lr_rows_for_plan(
    steps: Steps, extra: Iterable[int] = (), full_limit: int = 2000
) -> tuple[list[int], str]:
    """Which global steps the plan lists: all of them for runs up to ``full_limit`` global steps,
    else the first 100, about 100 evenly spaced, and ``extra`` (milestones, eval points...)."""
    total = steps.global_steps_total
    if total <= full_limit:
        return list(range(1, total + 1)), "all"
    stride = max(1, total // 100)
    rows = set(range(1, 101)) | set(range(stride, total + 1, stride)) | {total}
    rows |= {g for g in extra if 1 <= g <= total}
    return sorted(rows), "sampled"


# ----------------------------------------------------------------------------- eval / save schedule


def fires(global_step: int, every: int) -> bool:
    """OpenRLHF's eval/save cadence test: ``global_step % every == 0``; ``every <= 0`` never fires."""
    return every is not None and every > 0 and global_step % every == 0


def firing_steps(every: int, total: int) -> list[int]:
    """Global steps where :func:`fires` is true, up to ``total``."""
    if every is None or every <= 0:
        return []
    return list(range(every, total + 1, every))


@dataclass(frozen=True)
class CheckpointPlan:
    """Where the K=3 checkpoints (sop/README.md#k3-checkpoints) can come from."""

    final: int
    mid: int | None
    saved: tuple[int, ...]
    evaluated: tuple[int, ...]
    best_by_monitor_candidates: tuple[int, ...]  # saved and evaluated in-run

    @property
    def final_saved(self) -> bool:
        return self.final in self.saved

    @property
    def final_evaluated(self) -> bool:
        return self.final in self.evaluated


def checkpoint_plan(steps: Steps, recipe: Mapping[str, Any], mid: int | None) -> CheckpointPlan:
    total = steps.global_steps_total
    evaluated, saved = steps.eval_save_steps(recipe)
    saved_set = set(saved)
    candidates = tuple(g for g in evaluated if g in saved_set)
    return CheckpointPlan(total, mid, tuple(saved), tuple(evaluated), candidates)


def milestone_steps(att: Attempt, total: int, warmup_global: float) -> list[int]:
    """Global steps worth a row in the LR table: start, end of warm-up, step 20 (the LR check),
    quarters of the run, the mid checkpoint, the intended length, the final step."""
    points = {1, min(total, 20), max(1, math.ceil(warmup_global)), total}
    points |= {max(1, round(total * q)) for q in (0.25, 0.5, 0.75)}
    if att.checkpoints_mid:
        points.add(att.checkpoints_mid)
    intent = att.intent.get("global_steps")
    if intent:
        points.add(intent)
    return sorted(p for p in points if 1 <= p <= total)
