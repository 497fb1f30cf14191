"""verl's step math and learning rate at every step, as its PPO trainer counts them (release 0.9.1).

Pure functions of a resolved verl config (dotted Hydra keys, every key the math reads present: the
plan stage merges the stated keys over the defaults of the release's key table,
:mod:`rlexp.trainers.verl.releases`). Read from verl 0.9.1's wheel; docs/trainers.md cites file and line:

- ``python -m verl.trainer.main_ppo`` runs the V1 trainer (``trainer.use_v1``, true by default;
  ``verl/trainer/ppo/v1/trainer_base.py``), else the legacy ``RayPPOTrainer``
  (``verl/trainer/ppo/ray_trainer.py``). N is the pool after ``data.train_max_samples`` (when > 0)
  and after ``data.filter_overlong_prompts`` (which needs the tokenizer: the plan assumes no prompt
  is filtered and says so). An epoch is ``floor(N / batch)`` steps, the partial rest dropped: V1
  counts ``batch = data.train_batch_size``; the legacy trainer's dataloader batches
  ``data.gen_batch_size or data.train_batch_size`` with ``drop_last=True``;
- ``total_training_steps = trainer.total_training_steps`` when set, else ``floor(N / batch) ×
  trainer.total_epochs``. The loop numbers steps 1…, stops at ``is_last_step = global_steps >=
  total_training_steps``, or earlier when the epochs run out (a stated total larger than the data
  gives: the "last step" never comes);
- the LR scheduler is built for ``total_training_steps × k`` scheduler steps and steps ``k`` times
  per global step, once per local update after its last mini-batch; ``k`` is V1's
  ``parameter_sync_step``: 1 in the ``sync`` (default) and ``colocate_async`` modes,
  ``trainer.v1.separate_async.parameter_sync_step`` in ``separate_async``; 1 for the legacy
  trainer. Before ``trainer.critic_warmup`` the actor is not updated (nor its scheduler);
- a local update takes ``(train_batch_size / k) // ppo_mini_batch_size × ppo_epochs`` optimizer
  steps (mini-batches count prompts: both sizes are multiplied by ``rollout.n``);
- validation runs before training and is logged at step 0 (``trainer.val_before_train``), then at
  every ``trainer.test_freq``-th step and at the last step; checkpoints every
  ``trainer.save_freq``-th step and at the last step (only when the frequency is > 0);
- warm-up ``lr_warmup_steps`` when > 0, else ``int(lr_warmup_steps_ratio × scheduler total)``;
  ``constant``: ``step / max(1.0, warmup)`` then 1; ``cosine``: linear warm-up, then
  ``max(min_lr_ratio, cos(2π·num_cycles·progress)·(1−m)/2 + (1+m)/2)``, progress over
  ``total − warmup`` (``zero_indexed_step: false`` counts from 1);
- ``LambdaLR`` applies ``peak × λ(0)`` to the first update; scheduler step ``i`` (0-based) applies
  ``λ(i)``, and the ``actor/lr`` verl logs is read *after* ``scheduler.step()``: ``λ(i + 1)``, the
  LR of the next update (with k > 1, V1 averages it over the k updates: not modelled here).

The step counts above are the trainer's (``trainer_base.py`` / ``ray_trainer.py``), whatever engine
trains the actor; the LR schedule is the engine's (``model_engine``): the warm-up and schedules above
are FSDP's (``dp``, verl's default); Megatron's is megatron-core's OptimizerParamScheduler
(:mod:`rlexp.trainers.verl.megatron_schedule`), stepped at the same points (``engine_workers.py``
calls the engine's ``lr_scheduler_step`` once per local update and logs the LR it returns: the
optimizer's after the step). :data:`ENGINE_SCHEDULES` maps each engine to its schedule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTOR_OPTIM = "actor_rollout_ref.actor.optim"
SCHEDULER_TYPES = ("constant", "cosine")
ENGINE_KEY = "model_engine"  # the config-group choice; absent: verl's default engine
DEFAULT_ENGINE = "dp"  # FSDP

# The keys the step math reads (every one is in verl 0.9.1's config).
STEP_KEYS = (
    "data.train_batch_size", "data.gen_batch_size", "data.train_max_samples", "data.filter_overlong_prompts",
    "trainer.total_epochs", "trainer.total_training_steps", "trainer.test_freq", "trainer.save_freq",
    "trainer.val_before_train", "trainer.critic_warmup", "trainer.use_v1", "trainer.v1.trainer_mode",
    "trainer.v1.separate_async.parameter_sync_step",
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_epochs",
    f"{ACTOR_OPTIM}.lr", f"{ACTOR_OPTIM}.lr_warmup_steps", f"{ACTOR_OPTIM}.lr_warmup_steps_ratio",
    f"{ACTOR_OPTIM}.lr_scheduler_type", f"{ACTOR_OPTIM}.warmup_style", f"{ACTOR_OPTIM}.min_lr_ratio",
    f"{ACTOR_OPTIM}.num_cycles", f"{ACTOR_OPTIM}.zero_indexed_step",
)  # fmt: skip


class VerlConfigError(ValueError):
    """A value the step math cannot use; ``key`` names the recipe key."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class VerlSteps:
    """Step counts and the LR schedule of one verl run."""

    version: str
    pool_size: int  # prompts in the pool file
    prompts: int  # after data.train_max_samples (before filter_overlong_prompts)
    use_v1: bool  # trainer.use_v1: the V1 trainer (default) or the legacy RayPPOTrainer
    batch_prompts: int  # prompts a step counts: train_batch_size (V1), gen_batch_size or train_batch_size (legacy)
    train_batch_size: int
    n_samples_per_prompt: int  # actor_rollout_ref.rollout.n
    batches_per_epoch: int  # floor(prompts / batch_prompts): drop_last=True
    partial_batch_prompts: int  # prompts the last partial batch holds (dropped every epoch)
    total_epochs: int
    total_training_steps_stated: int | None
    total_training_steps: int  # global steps: is_last_step's bound
    scheduler_steps_per_global_step: int  # k: V1's parameter_sync_step (1 but in separate_async)
    scheduler_total: int  # total_training_steps × k: the LR scheduler's horizon
    global_steps_total: int  # steps the loop runs: min(total_training_steps, batches_per_epoch × total_epochs)
    reaches_last_step: bool  # the final step run is verl's is_last_step (final save/validation fire)
    ppo_mini_batch_size: int
    ppo_epochs: int
    optimizer_steps_per_global_step: int  # k × (train_batch_size / k) // ppo_mini_batch_size × ppo_epochs
    critic_warmup: int  # global steps before the first actor update (0: from step 1)
    warmup_steps: int
    peak_lr: float
    scheduler: str  # constant | cosine
    min_lr_ratio: float
    num_cycles: float
    zero_indexed_step: bool
    filters_prompts: bool  # data.filter_overlong_prompts: N may be smaller than planned
    engine: str = "dp"  # model_engine: whose LR scheduler (FSDP's LambdaLR above, or ENGINE_SCHEDULES')
    lr_schedule: Any = None  # the engine's schedule (lr(i), factor(i), ...) when not FSDP's
    fully_async: Any = None  # the fully-async trainer's own counts, for plan.json (rlexp.trainers.verl.fully_async)

    @property
    def first_update_step(self) -> int:
        """The first global step that updates the actor (and steps its scheduler)."""
        return max(1, self.critic_warmup)

    @property
    def actor_updates(self) -> int:
        """Global steps that update the actor."""
        return max(0, self.global_steps_total - self.first_update_step + 1)

    @property
    def scheduler_steps_run(self) -> int:
        return self.actor_updates * self.scheduler_steps_per_global_step

    @property
    def optimizer_steps_total(self) -> int:
        return self.actor_updates * self.optimizer_steps_per_global_step

    @property
    def warmup_global_steps(self) -> float:
        """Global steps until the LR first reaches its peak (warm-up counted in scheduler steps)."""
        return self.warmup_steps / self.scheduler_steps_per_global_step + self.first_update_step - 1

    # ---- what the LR checks (rlexp.protocol.step_checks.check_lr) ask of every trainer's step math
    lr_unit = "scheduler"  # verl's scheduler counts its own steps (k per global step)

    @property
    def lr_steps_run(self) -> int:
        return self.scheduler_steps_run

    @property
    def lr_horizon(self) -> str:
        return f"scheduler horizon {self.scheduler_total:,}"

    def warmup_rule(self, recipe: Mapping[str, Any]) -> str:
        """How ``warmup_steps`` was computed, for messages."""
        if self.lr_schedule is not None:
            return self.lr_schedule.warmup_rule(recipe)
        from rlexp.trainers.verl.recipe import as_verl_recipe

        optim = as_verl_recipe(recipe).actor_rollout_ref.actor.optim
        if isinstance(optim.lr_warmup_steps, int) and optim.lr_warmup_steps > 0:
            return f"lr_warmup_steps {optim.lr_warmup_steps}"
        return f"int({optim.lr_warmup_steps_ratio} × {self.scheduler_total:,} scheduler steps)"

    def lr_at(self, global_step: int) -> VerlStepLR:
        return lr_for_global_step(global_step, self)

    def best_fraction_through(self, global_step: int) -> float:
        return max_fraction_through(global_step, self)

    def update_index(self, global_step: int) -> int | None:
        """0-based index of the actor update made at ``global_step``; None when none is made."""
        if global_step < self.first_update_step or global_step > self.global_steps_total:
            return None
        return global_step - self.first_update_step


def config_int(config: Mapping[str, Any], key: str, *, minimum: int | None = None, optional: bool = False) -> int | None:
    """The integer at ``key`` of the composed config, or a :class:`VerlConfigError` naming the key."""
    value = config.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise VerlConfigError(key, f"must be an integer (got {value!r})")
    if minimum is not None and value < minimum:
        raise VerlConfigError(key, f"must be >= {minimum} (got {value})")
    return value


def _float(config: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = config.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool):
        raise VerlConfigError(key, f"must be a number (got {value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise VerlConfigError(key, f"must be a number (got {value!r})") from None
    if not math.isfinite(number):
        raise VerlConfigError(key, f"must be finite (got {value!r})")
    return number


def scheduler_type(config: Mapping[str, Any]) -> str:
    """``lr_scheduler_type``, or the deprecated ``warmup_style`` when set (it wins in verl 0.9.1's
    ``FSDPOptimizerConfig.__post_init__``)."""
    style = config.get(f"{ACTOR_OPTIM}.warmup_style")
    kind = style if style is not None else config.get(f"{ACTOR_OPTIM}.lr_scheduler_type")
    key = f"{ACTOR_OPTIM}.warmup_style" if style is not None else f"{ACTOR_OPTIM}.lr_scheduler_type"
    if kind not in SCHEDULER_TYPES:
        raise VerlConfigError(key, f"must be one of {', '.join(SCHEDULER_TYPES)} (got {kind!r})")
    return kind


def warmup_steps(stated: int, ratio: float, total: int) -> int:
    """verl's warm-up: ``lr_warmup_steps`` when > 0, else ``int(ratio × total)`` (truncation)."""
    return stated if stated > 0 else int(ratio * total)


def compute_verl_steps(config: Mapping[str, Any], pool_size: int, version: str) -> VerlSteps:
    """The step counts of a verl run on a pool of ``pool_size`` prompts."""
    if pool_size < 0:
        raise ValueError(f"pool_size must be >= 0, got {pool_size}")
    train_batch = config_int(config, "data.train_batch_size", minimum=1)
    gen_batch = config_int(config, "data.gen_batch_size", minimum=1, optional=True)
    max_samples = config_int(config, "data.train_max_samples", optional=True)
    epochs = config_int(config, "trainer.total_epochs", minimum=1)
    stated_total = config_int(config, "trainer.total_training_steps", minimum=1, optional=True)
    n = config_int(config, "actor_rollout_ref.rollout.n", minimum=1)
    mini = config_int(config, "actor_rollout_ref.actor.ppo_mini_batch_size", minimum=1)
    ppo_epochs = config_int(config, "actor_rollout_ref.actor.ppo_epochs", minimum=1)
    critic_warmup = config_int(config, "trainer.critic_warmup", minimum=0)
    engine = config.get(ENGINE_KEY) or DEFAULT_ENGINE
    if engine != DEFAULT_ENGINE and engine not in ENGINE_SCHEDULES:
        raise VerlConfigError(ENGINE_KEY, f"{engine!r}: rlexp does not plan verl's LR schedule on this engine "
                                          "(rlexp's limit)")
    if engine == DEFAULT_ENGINE:
        stated_warmup = config_int(config, f"{ACTOR_OPTIM}.lr_warmup_steps")
        ratio = _float(config, f"{ACTOR_OPTIM}.lr_warmup_steps_ratio")
        if not 0 <= ratio <= 1:
            raise VerlConfigError(f"{ACTOR_OPTIM}.lr_warmup_steps_ratio", f"must be between 0 and 1 (got {ratio})")
        min_lr_ratio = _float(config, f"{ACTOR_OPTIM}.min_lr_ratio", default=0.0)  # None means 0.0 in verl
        if not 0 <= min_lr_ratio <= 1:  # verl asserts it
            raise VerlConfigError(f"{ACTOR_OPTIM}.min_lr_ratio", f"must be between 0 and 1 (got {min_lr_ratio})")
        kind = scheduler_type(config)

    use_v1 = bool(config.get("trainer.use_v1", True))
    k = 1
    if use_v1 and config.get("trainer.v1.trainer_mode") == "separate_async":
        k = config_int(config, "trainer.v1.separate_async.parameter_sync_step", minimum=1)
        if train_batch % k:  # verl asserts it (PPOTrainer.step)
            raise VerlConfigError("trainer.v1.separate_async.parameter_sync_step",
                                  f"data.train_batch_size {train_batch} is not a multiple of it ({k})")
    prompts = min(pool_size, max_samples) if max_samples is not None and max_samples > 0 else pool_size
    batch = train_batch if use_v1 else (gen_batch or train_batch)
    per_epoch = prompts // batch
    data_total = per_epoch * epochs
    total = stated_total if stated_total is not None else data_total
    schedule = None
    if engine != DEFAULT_ENGINE:  # the trainer writes total × k into the optimizer's total_training_steps
        schedule = ENGINE_SCHEDULES[engine](config, total * k)
        stated_warmup, ratio = schedule.warmup_steps, 0.0
        kind = schedule.decay_style
        min_lr_ratio = schedule.min_lr_reached / schedule.peak_lr if schedule.peak_lr else 0.0
    return VerlSteps(
        version=version,
        pool_size=pool_size,
        prompts=prompts,
        use_v1=use_v1,
        batch_prompts=batch,
        train_batch_size=train_batch,
        n_samples_per_prompt=n,
        batches_per_epoch=per_epoch,
        partial_batch_prompts=prompts % batch,
        total_epochs=epochs,
        total_training_steps_stated=stated_total,
        total_training_steps=total,
        scheduler_steps_per_global_step=k,
        scheduler_total=total * k,
        global_steps_total=min(total, data_total),
        reaches_last_step=total <= data_total,
        ppo_mini_batch_size=mini,
        ppo_epochs=ppo_epochs,
        # verl: (local batch·n per rank) // (mini·n per rank) × ppo_epochs mini-batch iterations, k times
        optimizer_steps_per_global_step=(train_batch // k * n) // (mini * n) * ppo_epochs * k,
        critic_warmup=critic_warmup,
        warmup_steps=warmup_steps(stated_warmup, ratio, total * k),
        peak_lr=_float(config, f"{ACTOR_OPTIM}.lr"),
        scheduler=kind,
        min_lr_ratio=min_lr_ratio,
        num_cycles=_float(config, f"{ACTOR_OPTIM}.num_cycles") if schedule is None else math.nan,
        zero_indexed_step=bool(config.get(f"{ACTOR_OPTIM}.zero_indexed_step", True)),
        filters_prompts=bool(config.get("data.filter_overlong_prompts")),
        engine=engine,
        lr_schedule=schedule,
    )


# ----------------------------------------------------------------------------- the LR schedule


def lr_lambda(scheduler_step: int, steps: VerlSteps) -> float:
    """verl's ``lr_lambda`` after ``scheduler_step`` calls of ``scheduler.step()``: the same float
    operations, in the same order, as ``get_constant_schedule_with_warmup`` and
    ``get_cosine_schedule_with_warmup`` (``init_lr_ratio`` 0, as verl's FSDP engine builds it); on
    another engine, its schedule's LR as a fraction of the peak."""
    if steps.lr_schedule is not None:
        return steps.lr_schedule.factor(scheduler_step)
    warmup = steps.warmup_steps
    if steps.scheduler == "constant":
        if scheduler_step < warmup:
            return float(scheduler_step) / float(max(1.0, warmup))
        return 1.0
    current = scheduler_step if steps.zero_indexed_step else scheduler_step + 1
    if current < warmup:
        return 0.0 + (1.0 - 0.0) * (float(current) / float(max(1, warmup)))
    m = steps.min_lr_ratio
    coef, intercept = (1 - m) * 0.5, (1 + m) * 0.5
    progress = float(current - warmup) / float(max(1, steps.scheduler_total - warmup))
    x = math.cos(math.pi * float(steps.num_cycles) * 2.0 * progress)
    return max(m, x * coef + intercept)


def lr_value(scheduler_step: int, steps: VerlSteps) -> float:
    """The LR an update applies after ``scheduler_step`` scheduler steps."""
    if steps.lr_schedule is not None:
        return steps.lr_schedule.lr(scheduler_step)
    return steps.peak_lr * lr_lambda(scheduler_step, steps)


@dataclass(frozen=True)
class VerlStepLR:
    """The LR of one global step."""

    global_step: int
    update: int | None  # 0-based index of the global steps that update the actor; None: no update here
    first_optimizer_step: int  # 1-based, over the run; first > last when the step makes no update
    last_optimizer_step: int
    lr_first: float  # the LR of the step's first local update
    lr_mean: float  # mean over its k local updates (= lr_first when k is 1)
    fraction_of_peak: float  # lr_mean / peak
    actor_lr_logged: float | None  # verl's actor/lr: read after scheduler.step() (None: not modelled, or no update)

    def as_dict(self) -> dict[str, Any]:
        return {"global_step": self.global_step, "actor_update": self.update,
                "first_optimizer_step": self.first_optimizer_step, "last_optimizer_step": self.last_optimizer_step,
                "lr_first": self.lr_first, "lr_mean": self.lr_mean, "fraction_of_peak": self.fraction_of_peak,
                "actor_lr_logged": self.actor_lr_logged}


def lr_for_global_step(global_step: int, steps: VerlSteps) -> VerlStepLR:
    update = steps.update_index(global_step)
    per_step = steps.optimizer_steps_per_global_step
    if update is None:  # critic warm-up: the actor is not updated; its LR would be λ(0)
        lr = lr_value(0, steps)
        return VerlStepLR(global_step, None, 1, 0, lr, lr, _fraction(lr, steps), None)
    k = steps.scheduler_steps_per_global_step
    if steps.lr_schedule is None:
        lambdas = [lr_lambda(update * k + j, steps) for j in range(k)]
        mean = steps.peak_lr * math.fsum(lambdas) / k
        first = steps.peak_lr * lambdas[0]
    else:
        lrs = [lr_value(update * k + j, steps) for j in range(k)]
        mean, first = math.fsum(lrs) / k, lrs[0]
    logged = lr_value(update * k + k, steps) if k == 1 else None
    return VerlStepLR(global_step, update, update * per_step + 1, (update + 1) * per_step,
                      first, mean, _fraction(mean, steps), logged)


def _fraction(lr: float, steps: VerlSteps) -> float:
    return lr / steps.peak_lr if steps.peak_lr else 0.0


def max_fraction_through(global_step: int, steps: VerlSteps) -> float:
    """The highest fraction of peak LR any actor update has applied by the end of ``global_step``."""
    update = steps.update_index(min(global_step, steps.global_steps_total))
    if update is None:
        return 0.0
    last = update * steps.scheduler_steps_per_global_step + steps.scheduler_steps_per_global_step - 1
    # the LR rises through warm-up and falls after (cosine) or stays (constant): the maximum is at
    # the end of warm-up or at the last update, whichever comes first
    return max(lr_lambda(min(last, steps.warmup_steps), steps), lr_lambda(last, steps))


# ----------------------------------------------------------------------------- the engines' schedules


def _megatron(config: Mapping[str, Any], horizon: int) -> Any:
    from rlexp.trainers.verl.megatron_schedule import MegatronConfigError, megatron_lr_schedule

    try:
        return megatron_lr_schedule(config, horizon)
    except MegatronConfigError as exc:
        raise VerlConfigError(exc.key, str(exc)) from None


def _veomni(config: Mapping[str, Any], horizon: int) -> Any:
    from rlexp.trainers.verl.veomni_schedule import SCHEDULE_KEYS, VeOmniScheduleError, veomni_lr_schedule

    try:
        return veomni_lr_schedule(horizon, **{key: config.get(f"{ACTOR_OPTIM}.{key}") for key in SCHEDULE_KEYS})
    except VeOmniScheduleError as exc:
        raise VerlConfigError(f"{ACTOR_OPTIM}.{exc.key}", exc.message) from None


# model_engine -> (resolved config, the scheduler's horizon) -> its schedule: lr(i) and factor(i) after i
# scheduler steps, peak_lr, warmup_steps, decay_style, min_lr_reached, warmup_rule(recipe), as_dict();
# FSDP's (dp) is the LambdaLR math above; another engine verl composes (torchtitan) is refused at plan.
# MindSpeed's engines (verl 0.9.0, workers/engine/mindspeed) subclass the Megatron engine and build its
# scheduler (optim@optim: megatron), so theirs is Megatron's
ENGINE_SCHEDULES: dict[str, Any] = {"megatron": _megatron, "mindspeed": _megatron, "veomni": _veomni}


# ----------------------------------------------------------------------------- validation and saves


@dataclass(frozen=True)
class VerlSchedule:
    """Where verl validates and saves."""

    validation_at_step_0: bool
    evaluated: tuple[int, ...]  # global steps >= 1 that run validation
    saved: tuple[int, ...]  # global steps that save a checkpoint


def _fires(step: int, every: int, steps: VerlSteps) -> bool:
    last = steps.reaches_last_step and step == steps.global_steps_total
    return every > 0 and (last or step % every == 0)


def verl_schedule(config: Mapping[str, Any], steps: VerlSteps) -> VerlSchedule:
    """``trainer.test_freq`` / ``trainer.save_freq``: every multiple and the last step (when the
    frequency is > 0); the legacy trainer saves only at a step that updates the actor."""
    test_freq = config_int(config, "trainer.test_freq")
    save_freq = config_int(config, "trainer.save_freq")
    total = steps.global_steps_total
    evaluated = tuple(g for g in range(1, total + 1) if _fires(g, test_freq, steps))
    saved = tuple(g for g in range(1, total + 1)
                  if _fires(g, save_freq, steps) and (steps.use_v1 or g >= steps.first_update_step))
    return VerlSchedule(bool(config.get("trainer.val_before_train", True)), evaluated, saved)


# ----------------------------------------------------------------------------- the kind of a key

# The one-variable rule's exemptions (docs/plan.md), for verl's dotted keys: a key is
# instrumentation or infrastructure when one of its dotted segments (or the key's start) says so;
# everything else (algorithm, data, optimizer, rollout sampling, lengths) is a training variable.
_INSTRUMENTATION_KEYS = (
    "trainer.test_freq", "trainer.save_freq", "trainer.logger", "trainer.project_name", "trainer.experiment_name",
    "trainer.log_val_generations", "trainer.val_before_train", "trainer.val_only", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", "trainer.rollout_data_dir", "trainer.validation_data_dir",
    "trainer.default_hdfs_dir", "trainer.del_local_ckpt_after_load", "trainer.resume_from_path",
    "trainer.esi_redundant_time", "data.val_files", "data.val_batch_size", "data.validation_shuffle",
    "data.val_max_samples", "trainer.resume_mode", "trainer.default_local_dir", "trainer.checkpoint_callback_class",
)
_INSTRUMENTATION_SEGMENTS = ("val_kwargs", "profiler", "global_profiler", "checkpoint")
_INFRASTRUCTURE_KEYS = (
    "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.device", "trainer.balance_batch",
    "trainer.use_legacy_worker_impl", "data.dataloader_num_workers", "trainer.ray_wait_register_center_timeout",
)
_INFRASTRUCTURE_SEGMENTS = (
    "ray_kwargs", "transfer_queue", "fsdp_config", "fsdp", "megatron", "engine_kwargs", "agent",
    "checkpoint_engine", "nccl_timeout",
)
_INFRASTRUCTURE_WORDS = (
    "micro_batch_size", "max_token_len", "use_dynamic_bsz", "tensor_model_parallel_size", "data_parallel_size",
    "pipeline_model_parallel_size", "expert_parallel_size", "sequence_parallel_size", "gpu_memory_utilization",
    "enforce_eager", "free_cache_engine", "enable_chunked_prefill", "max_num_batched_tokens", "max_num_seqs",
    "enable_gradient_checkpointing", "use_remove_padding", "use_fused_kernels", "load_format", "layered_summon",
    "enable_prefix_caching", "offload", "num_workers", "use_torch_compile", "cudagraph",
)


# Keys whose verl dataclass field is wider than its YAML default's type: RolloutCorrectionConfig's
# `rollout_is_threshold: str | float` (verl/trainer/config/algorithm.py) defaults to 2.0, but
# "LOWER_UPPER" (`0.5_4.0`) is a threshold too, read by rollout_corr_helper._parse_rollout_is_threshold.
NUMBER_OR_BOUNDS = frozenset({"algorithm.rollout_correction.rollout_is_threshold"})


def verl_kind(name: str) -> str:
    """``training``, ``instrumentation`` or ``infrastructure`` for a verl recipe key."""
    segments = name.split(".")
    if name in _INSTRUMENTATION_KEYS or any(s in _INSTRUMENTATION_SEGMENTS for s in segments[:-1]):
        return "instrumentation"
    if (name in _INFRASTRUCTURE_KEYS or any(s in _INFRASTRUCTURE_SEGMENTS for s in segments[:-1])
            or any(word in segments[-1] for word in _INFRASTRUCTURE_WORDS)):
        return "infrastructure"
    return "training"
