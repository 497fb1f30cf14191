"""``rlexp plan`` for a verl attempt: verl's step counts, LR at every step, validation and save
schedule, the preflight checks and power, in the shape of ``plan.json`` (rlexp.stages.plan, which
calls it through rlexp.trainers.verl.launch).

The recipe is checked against the pinned release's config first (rlexp.trainers.verl.hydra): an unknown
key or a value of the wrong type is one line naming the spec and the key, exit 2, nothing written.
The ``steps`` section keeps the OpenRLHF plan's field names where the meaning carries over
(global steps, optimizer steps, warm-up, partial batch) and adds verl's own under ``verl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.numbers import jsonable
from rlexp.training.schedule import milestone_steps

if TYPE_CHECKING:
    from rlexp.spec import Attempt


def build_verl_plan(att: Attempt, plan_format: int) -> dict[str, Any]:
    """plan.json for a verl attempt; ``plan_format`` is rlexp.stages.plan.PLAN_FORMAT (handed in:
    the stage plan calls this module)."""
    from rlexp.experiment.files import sha256_file
    from rlexp.protocol.checks import MAX_GLOBAL_STEPS
    from rlexp.protocol.power_checks import primary_power
    from rlexp.spec import diff_against_parent
    from rlexp.trainers.verl import hydra as backend
    from rlexp.trainers.verl.checks import verl_checkpoint_plan, verl_preflight
    from rlexp.trainers.verl.fully_async import (  # main_ppo's, or the fully-async trainer's
        schedule_of,
        steps_of,
    )
    from rlexp.trainers.verl.steps import VerlConfigError, lr_for_global_step
    from rlexp.training.schedule import lr_rows_for_plan

    spec_file = att.display_path or att.spec_path
    version = att.trainer.version
    command = backend.plan_command(att)  # unknown release, key or type: exit 2 here
    config = backend.resolved_config(backend.stated_recipe(att), version, spec_file)
    pool = att.datasets.get("pool")
    if pool is None or pool.size is None:
        raise InputError(spec_file, "datasets.pool", "the training pool (path or size) is needed to plan")
    try:
        steps = steps_of(config, pool.size, version)
    except VerlConfigError as exc:
        raise InputError(spec_file, f"recipe.{exc.key}", str(exc)) from None
    if steps.total_training_steps > MAX_GLOBAL_STEPS:
        raise InputError(spec_file, "recipe.trainer.total_training_steps",
                         f"the run would take {steps.total_training_steps} global steps, over the limit of {MAX_GLOBAL_STEPS}")
    schedule = schedule_of(config, steps)
    ckpt = verl_checkpoint_plan(steps, schedule, att.checkpoints_mid)
    power = primary_power(att)
    checks = verl_preflight(att, steps, schedule, power, config)
    milestones = milestone_steps(att, steps.global_steps_total, steps.warmup_global_steps)
    rows, coverage = lr_rows_for_plan(steps, extra=milestones)  # reads only global_steps_total
    return {
        "format": plan_format,
        "attempt": att.id,
        "parent": att.parent_id,
        "spec": str(att.spec_path),
        "spec_sha256": sha256_file(att.spec_path),
        "spec_chain_sha256": att.chain_sha256(),
        "trainer": {"name": att.trainer.name, "version": version, "gpus": att.trainer.gpus},
        "openrlhf_command": None,
        "verl_command": command,
        "intent": jsonable(att.intent),
        "change": jsonable(att.change),
        "diff": [{"key": d.key, "parent": jsonable(d.parent), "value": jsonable(d.value), "kind": d.kind}
                 for d in diff_against_parent(att)],
        "datasets": {role: ref.plan_row() for role, ref in att.datasets.items()},
        "steps": _steps_section(steps, config),
        "lr_rows": coverage,
        "lr": [lr_for_global_step(g, steps).as_dict() for g in rows],
        "lr_milestones": [lr_for_global_step(g, steps).as_dict() for g in milestones],
        "validation_at_step_0": schedule.validation_at_step_0,
        "eval_global_steps": list(ckpt.evaluated),
        "save_global_steps": list(ckpt.saved),
        "checkpoints": {"final": ckpt.final, "mid": ckpt.mid, "extra": list(att.checkpoints_extra),
                        "best_by_monitor_candidates": list(ckpt.best_by_monitor_candidates)},
        "gpu_layout": None,
        "checks": [c.to_dict() for c in checks],
        "power": _power_section(att, power),
    }


def _steps_section(steps: Any, config: Any) -> dict[str, Any]:
    """plan.json's ``steps`` for verl: the OpenRLHF plan's names with verl's meaning, and verl's own
    figures under ``verl`` (the engine's scheduler and parallelism where it is not FSDP's)."""
    from rlexp.trainers.verl.checks import verl_gpu_layout

    return {
        "pool_size": steps.pool_size,
        "prompts": steps.prompts,
        # the OpenRLHF plan's names, verl's meaning: optimizer steps are mini-batch updates of the
        # actor; the LR scheduler's horizon is total_training_steps (global steps), under "verl"
        "optimizer_steps_total": steps.optimizer_steps_total,
        "optimizer_steps_per_episode": steps.batches_per_epoch * steps.optimizer_steps_per_global_step,
        "optimizer_steps_per_global_step": steps.optimizer_steps_per_global_step,
        "optimizer_steps_run": steps.optimizer_steps_total,
        "global_steps_per_episode": steps.batches_per_epoch,
        "global_steps_total": steps.global_steps_total,
        "partial_batch_prompts": steps.partial_batch_prompts,
        "drops_partial_batch": True,
        "micro_batches_per_optimizer_step": None,
        "data_parallel_size": None,
        "warmup_steps": steps.warmup_steps,
        "warmup_global_steps": steps.warmup_global_steps,
        "peak_lr": steps.peak_lr,
        "min_lr": (steps.lr_schedule.min_lr_reached if steps.lr_schedule is not None else
                   steps.peak_lr * (steps.min_lr_ratio if steps.scheduler == "cosine" else 1.0)),
        "min_lr_ratio": steps.min_lr_ratio,
        "actor_lr_logging": "after_scheduler_step",
        "verl": {
            "batch_prompts": steps.batch_prompts,
            "total_epochs": steps.total_epochs,
            "use_v1": steps.use_v1,
            "total_training_steps": steps.total_training_steps,
            "scheduler_steps_per_global_step": steps.scheduler_steps_per_global_step,
            "scheduler_total": steps.scheduler_total,
            "total_training_steps_stated": steps.total_training_steps_stated,
            "reaches_last_step": steps.reaches_last_step,
            "actor_updates": steps.actor_updates,
            "critic_warmup": steps.critic_warmup,
            "lr_scheduler_type": steps.scheduler,  # FSDP's lr_scheduler_type, or Megatron's lr_decay_style
            **({"num_cycles": steps.num_cycles, "zero_indexed_step": steps.zero_indexed_step}
               if steps.lr_schedule is None else
               {"model_engine": steps.engine, "lr_scheduler": steps.lr_schedule.as_dict(),
                "parallelism": verl_gpu_layout(config)}),
            "filter_overlong_prompts": steps.filters_prompts, **(steps.fully_async or {}),  # its own counts
        },
    }


def _power_section(att: Attempt, power: Any) -> dict[str, Any]:
    """plan.json's ``power``: the primary eval set's, the monitor's, and best-of-k's."""
    from rlexp.spec.sop import load_sop
    from rlexp.stats import power_report
    from rlexp.stats._gate_power import add_best_of_k

    monitor = att.datasets.get("ood_monitor")
    power_json: dict[str, Any] = power.as_dict() if power else {"mde_pp": None, "power_at_win_threshold": None,
                                                                "n": None}  # fmt: skip
    power_json["monitor"] = (power_report(monitor.size, att.baseline.discordance).as_dict()
                             if monitor and monitor.size else None)  # fmt: skip
    add_best_of_k(power_json, load_sop())
    return power_json
