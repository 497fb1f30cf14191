"""verl's fully-async trainer (``python -m verl.experimental.fully_async_policy.fully_async_main``): its
config, its step counts and the LR of every actor update, as verl 0.9.0 and 0.9.1 run it (the
module's files are the same in both wheels).

The recipe says which trainer with :data:`ENTRY_KEY` (import sets it from the script's module or its
``--config-name``). Its config is ``fully_async_ppo_trainer`` (``ppo_trainer`` plus the keys below)
or ``fully_async_ppo_megatron_trainer`` (``ppo_megatron_trainer`` plus the same); rlexp's key table
for it is the engine's own table with the keys the fully-async config adds or re-defaults over it
(``async_training.*``, ``rollout.{nnodes,n_gpus_per_node,n,total_rollout_steps}``,
``data.gen_batch_size: 1``, ...: :mod:`rlexp.trainers.verl.fully_async_keys`, generated from the
wheels by :mod:`rlexp.trainers.verl.fully_async_config`). This module is the pure part: the
trainer's names and its counting.

How it counts (verl/experimental/fully_async_policy/, both wheels):

- the rollouter (``fully_async_rollouter.py`` ``__init__``) feeds ``T = min(rollout.total_rollout_steps,
  len(train_dataloader) × trainer.total_epochs)`` prompts, one at a time (``data.gen_batch_size`` must be
  1, ``data.train_batch_size`` 0: it asserts both), across epochs (``_create_continuous_iterator``),
  then a stop signal (``_feed_samples``, ``_streaming_generation_main``);
- the trainer (``fully_async_trainer.py``) takes ``required = actor.ppo_mini_batch_size ×
  async_training.require_batches`` prompts per step (``_get_samples_from_queue``) and stops when the
  stop signal leaves a collection short: ``L = floor(T / required)`` steps, each one ``update_actor``
  (``require_batches × ppo_epochs`` optimizer steps) and one scheduler step; every
  ``async_training.trigger_parameter_sync_step`` steps the parameter version rises by one
  (``_fit_update_local_step``) and the weights go to the rollout: ``V = floor(L / trigger)`` versions;
- L holds when no sample is lost on the way, which is what verl's design aims at, not what it
  guarantees: the rollouter pauses before ``staleness_samples`` reaches ``max_required_samples``, the
  message queue's length (``_should_pause_generation``), and ``reset_staleness`` sets that count to
  the samples in flight plus those queued; but a prompt the processor has taken from its pending
  queue and not yet submitted (it waits for a free generation slot) is in neither, so at a weight
  sync the count can fall one short, and if the trainer then takes nothing for long enough (a
  checkpoint, a validation) the queue can overflow and drop its oldest sample (``message_queue.py``
  ``put_sample``; verl logs ``count/dropped_stale_samples``). Each such drop makes the run
  ``floor((T - drops) / required)`` steps. The plan says so (:data:`COUNTS_ASSUME`);
  ``async_training.staleness_threshold`` changes how far ahead the rollout runs, not the count
  (with ``partial_rollout`` on, verl's default; :data:`UNPLANNED` lists what is refused);
- the actor's LR scheduler is built when the trainer's workers start (``_create_trainer`` →
  ``init_workers``), before ``set_total_train_steps`` writes the rollouter's ``int(T / (required ×
  trigger))`` into the trainer's own copy of the config (``fully_async_main.py``): the workers never
  see it. So the scheduler is built from the optimizer config as composed: on Megatron,
  ``lr_decay_steps`` when stated, else ``optim.total_training_steps`` (-1 unless stated), which
  megatron-core refuses (``lr_decay_steps > 0``) before the first step; plan refuses it the same way;
- validation (``_fit_validate``) runs before training when ``trainer.val_before_train``, then when
  the version reaches a multiple of ``trainer.test_freq``, at that version's sync step (step
  ``v × trigger``); the end of ``fit`` adds none. A checkpoint (``_fit_save_checkpoint``, only with
  ``trainer.save_freq > 0``) is saved at the sync step of every multiple of ``save_freq``, and once
  more after the last step when the last version was not saved (``force``), named after the version;
  an ESI expiry save depends on time and is not planned.

Only the Megatron engine is planned here (the MTP example's); another engine is refused naming
``model_engine`` (rlexp's limit: FSDP's scheduler with a horizon of -1 is not modelled).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlexp.trainers.verl.steps import (
    ACTOR_OPTIM,
    ENGINE_KEY,
    VerlConfigError,
    VerlSchedule,
    VerlSteps,
    compute_verl_steps,
    config_int,
    verl_schedule,
)

ENTRY_KEY = "entry_module"  # the recipe's choice of verl trainer: the module ``python -m`` runs
MAIN_PPO = "verl.trainer.main_ppo"
MODULE = "verl.experimental.fully_async_policy.fully_async_main"
CONFIG_DIR = "verl/experimental/fully_async_policy/config"
# its --config-name choices -> the engine each composes (fully_async_main's default: fully_async_ppo_trainer)
CONFIG_NAMES = {"fully_async_ppo_trainer": "dp", "fully_async_ppo_megatron_trainer": "megatron"}
PLANNED_ENGINES = ("megatron",)
COUNTS_ASSUME = ("no sample dropped by verl's message queue: its pause rule prevents it but for a race at a weight "
                 "sync (a prompt taken but not yet submitted goes uncounted); each drop, logged as "
                 "count/dropped_stale_samples, makes the run floor((prompts_fed - drops) / prompts_per_step) steps")
# settings under which the counts below are not shown to hold (the key, the value planned, why)
UNPLANNED = (
    ("async_training.partial_rollout", True, "without it, llm_server.py gives up a generation the weight sync "
     "aborts ('aborted samples will be dropped'), so what reaches the trainer depends on timing"),
    ("async_training.use_dynamic_resource_scheduling", False, "its hybrid replicas and waits are not modelled"),
)


def is_fully_async(config: Mapping[str, Any]) -> bool:
    return config.get(ENTRY_KEY) == MODULE


def config_name(engine: str) -> str:
    """The fully-async config that composes ``engine`` (both compose any engine with ``model_engine=``):
    the one :data:`CONFIG_NAMES` gives it, else fully_async_main's default."""
    return next((name for name, its in CONFIG_NAMES.items() if its == engine), "fully_async_ppo_trainer")


# ----------------------------------------------------------------------------- the step counts


def steps_of(config: Mapping[str, Any], pool_size: int, version: str) -> VerlSteps:
    """The step counts of the trainer the recipe runs: ``main_ppo``'s, or the fully-async trainer's."""
    if is_fully_async(config):
        return fully_async_steps(config, pool_size, version)
    return compute_verl_steps(config, pool_size, version)


def schedule_of(config: Mapping[str, Any], steps: VerlSteps) -> VerlSchedule:
    """Where the trainer the recipe runs validates and saves."""
    return fully_async_schedule(config, steps) if steps.fully_async is not None else verl_schedule(config, steps)



def fully_async_steps(config: Mapping[str, Any], pool_size: int, version: str) -> VerlSteps:
    """The fully-async trainer's counts as :class:`VerlSteps`: a global step is one trainer step (one
    actor update, one scheduler step; verl's ``training/global_step``); ``fully_async`` holds its own."""
    from rlexp.trainers.verl.megatron_schedule import MegatronConfigError, megatron_lr_schedule

    engine = config.get(ENGINE_KEY) or "dp"
    if engine not in PLANNED_ENGINES:
        raise VerlConfigError(ENGINE_KEY, f"{engine!r}: rlexp plans verl's fully-async trainer on the Megatron "
                              "engine only (rlexp's limit)")
    for key, planned, why in UNPLANNED:
        if config.get(key) != planned:
            raise VerlConfigError(key, f"{config.get(key)!r}: rlexp plans the fully-async trainer with {planned} only "
                                  f"(rlexp's limit: {why})")
    if config.get("data.train_batch_size") != 0:  # the rollouter asserts both
        raise VerlConfigError("data.train_batch_size", "must be 0 for the fully-async trainer (verl asserts it)")
    if config.get("data.gen_batch_size") != 1:
        raise VerlConfigError("data.gen_batch_size", "must be 1 for the fully-async trainer (verl asserts it)")
    epochs = config_int(config, "trainer.total_epochs", minimum=1)
    n = config_int(config, "actor_rollout_ref.rollout.n", minimum=1)
    mini = config_int(config, "actor_rollout_ref.actor.ppo_mini_batch_size", minimum=1)
    ppo_epochs = config_int(config, "actor_rollout_ref.actor.ppo_epochs", minimum=1)
    require = config_int(config, "async_training.require_batches", minimum=1)
    trigger = config_int(config, "async_training.trigger_parameter_sync_step", minimum=1)
    critic_warmup = config_int(config, "trainer.critic_warmup", minimum=0)
    max_samples = config.get("data.train_max_samples")
    prompts = min(pool_size, max_samples) if isinstance(max_samples, int) and max_samples > 0 else pool_size
    stated_rollouts = config.get("rollout.total_rollout_steps")
    fed = prompts * epochs
    if stated_rollouts is not None:
        fed = min(config_int(config, "rollout.total_rollout_steps", minimum=0), fed)
    required = mini * require
    updates = fed // required
    try:  # built from the optimizer config as composed (see the module's docstring)
        schedule = megatron_lr_schedule(config, config.get(f"{ACTOR_OPTIM}.total_training_steps"))
    except MegatronConfigError as exc:
        raise VerlConfigError(exc.key, f"{exc} (the fully-async trainer builds its scheduler before it knows "
                              "its steps: state lr_decay_steps)") from None
    return VerlSteps(
        version=version, pool_size=pool_size, prompts=prompts, use_v1=False,
        batch_prompts=required, train_batch_size=required, n_samples_per_prompt=n,
        batches_per_epoch=prompts // required,  # an epoch's prompts fill this many steps (the stream runs on)
        partial_batch_prompts=0,  # one prompt per dataloader batch: nothing is dropped per epoch
        # total_training_steps: the scheduler's horizon, the role it has for main_ppo (no is_last_step here)
        total_epochs=epochs, total_training_steps_stated=None, total_training_steps=schedule.decay_steps,
        scheduler_steps_per_global_step=1, scheduler_total=schedule.decay_steps,
        global_steps_total=updates, reaches_last_step=True, ppo_mini_batch_size=mini, ppo_epochs=ppo_epochs,
        optimizer_steps_per_global_step=require * ppo_epochs, critic_warmup=critic_warmup,
        warmup_steps=max(schedule.warmup_steps, 0), peak_lr=schedule.peak_lr, scheduler=schedule.decay_style,
        min_lr_ratio=schedule.min_lr_reached / schedule.peak_lr if schedule.peak_lr else 0.0,
        num_cycles=float("nan"), zero_indexed_step=True,
        filters_prompts=bool(config.get("data.filter_overlong_prompts")), engine=engine, lr_schedule=schedule,
        fully_async={"fully_async": {
            "module": MODULE, "counts_assume": COUNTS_ASSUME, "prompts_fed": fed, "prompts_per_step": required,
            "prompts_not_trained": fed % required, "trigger_parameter_sync_step": trigger,
            "parameter_versions": updates // trigger,
            "verl_total_train_steps": int(fed / (required * trigger)),  # its progress bar; the scheduler never sees it
            "scheduler_built_with": {"lr_decay_steps": schedule.decay_steps, "lr_warmup_steps": schedule.warmup_steps},
        }},
    )


def fully_async_schedule(config: Mapping[str, Any], steps: VerlSteps) -> VerlSchedule:
    """Validation and saves, at the global steps (trainer steps) where the version they name is reached."""
    trigger = steps.fully_async["fully_async"]["trigger_parameter_sync_step"]
    versions = steps.global_steps_total // trigger
    test_freq, save_freq = config.get("trainer.test_freq"), config.get("trainer.save_freq")
    if not isinstance(test_freq, int) or isinstance(test_freq, bool) or test_freq == 0:
        raise VerlConfigError("trainer.test_freq", f"must be a non-zero integer for the fully-async trainer (got "
                              f"{test_freq!r}: its end of training takes the version modulo it)")
    if not isinstance(save_freq, int) or isinstance(save_freq, bool):
        raise VerlConfigError("trainer.save_freq", f"must be an integer (got {save_freq!r})")
    evaluated = tuple(v * trigger for v in range(1, versions + 1) if test_freq > 0 and v % test_freq == 0)
    saved = [v * trigger for v in range(1, versions + 1) if save_freq > 0 and v % save_freq == 0]
    if save_freq > 0 and versions % save_freq:  # fit()'s forced save of the last version
        saved.append(steps.global_steps_total)
    return VerlSchedule(bool(config.get("trainer.val_before_train", True)), evaluated, tuple(saved))
