"""The preflight catalogue for a verl attempt: verl's own step and LR checks under the catalogue's
ids and thresholds (rlexp.core.checks), then the catalogue's checks that do not depend on how a
trainer counts steps (schedule, one variable, suffix, datasets, power).

Kept apart from rlexp.core.trainers.verl, which the recipe-key table imports (for the kinds of
verl's keys): the catalogue imports the spec, which imports that table.
"""

from __future__ import annotations

from typing import Any

from rlexp.core.trainers.verl import (
    ACTOR_OPTIM,
    VerlSchedule,
    VerlSteps,
    lr_for_global_step,
    max_fraction_through,
)

VERL_REF = "docs/trainers.md#verl"


def verl_checkpoint_plan(steps: VerlSteps, schedule: VerlSchedule, mid: int | None) -> Any:
    """The K=3 view of verl's schedule (:class:`rlexp.core.schedule.CheckpointPlan`)."""
    from rlexp.core.schedule import CheckpointPlan

    saved = set(schedule.saved)
    return CheckpointPlan(steps.global_steps_total, mid, schedule.saved, schedule.evaluated,
                          tuple(g for g in schedule.evaluated if g in saved))


def verl_preflight(att: Any, steps: VerlSteps, schedule: VerlSchedule, power: Any) -> list[Any]:
    """The preflight catalogue for a verl attempt: verl's own step and LR checks under the catalogue's
    ids and thresholds, then the catalogue's trainer-independent checks (rlexp.core.checks)."""
    from rlexp.core import checks as catalogue

    ckpt = verl_checkpoint_plan(steps, schedule, att.checkpoints_mid)
    found = [*_lr_checks(att, steps), *_step_checks(att, steps)]
    found += catalogue.check_schedule(att, steps, ckpt, eval_key="trainer.test_freq", save_key="trainer.save_freq",
                                      fires_rule="every multiple of the frequency and the last step")
    for findings in (catalogue.check_single_variable(att), catalogue.check_suffix(att),
                     catalogue.check_datasets(att), catalogue.check_power(att, power)):  # fmt: skip
        found.extend(findings)
    return sorted(found, key=lambda c: c.severity != catalogue.ERROR)


def _warmup_rule(steps: VerlSteps, att: Any) -> str:
    stated = att.recipe.get(f"{ACTOR_OPTIM}.lr_warmup_steps")
    if isinstance(stated, int) and stated > 0:
        return f"lr_warmup_steps {stated}"
    ratio = att.recipe.get(f"{ACTOR_OPTIM}.lr_warmup_steps_ratio")
    return f"int({ratio} × {steps.scheduler_total:,} scheduler steps)"


def _lr_checks(att: Any, steps: VerlSteps) -> list[Any]:
    from rlexp.core.checks import (
        DEFAULT_MAX_WARMUP_SHARE,
        ERROR,
        LR_CHECK_GLOBAL_STEP,
        LR_CHECK_MIN_FRACTION,
    )
    from rlexp.core.verdict import check

    out = []
    total = steps.global_steps_total
    if total < 1 or steps.actor_updates < 1:
        return out
    if steps.warmup_steps > 0 and steps.warmup_steps >= steps.scheduler_steps_run:
        last = lr_for_global_step(total, steps)
        out.append(check(
            "lr.warmup_never_ends", ERROR,
            f"warm-up never ends: {steps.warmup_steps:,} scheduler steps ({_warmup_rule(steps, att)}) but the run "
            f"steps the scheduler {steps.scheduler_steps_run:,} times: the last step trains at "
            f"{last.fraction_of_peak:.1%} of peak",
            VERL_REF,
        ))  # fmt: skip
    at = min(LR_CHECK_GLOBAL_STEP, total)
    best = max_fraction_through(at, steps)
    if best < LR_CHECK_MIN_FRACTION:
        out.append(check(
            "lr.low_early", ERROR,
            f"LR reaches only {best:.1%} of peak by global step {at}: warm-up is {steps.warmup_steps:,} "
            f"scheduler steps ({_warmup_rule(steps, att)}) of {total:,} global steps; "
            f">= {LR_CHECK_MIN_FRACTION:.0%} required",
            "docs/plan.md#warm-up-and-early-lr",
        ))  # fmt: skip
    share = att.intent.get("max_warmup_share") or DEFAULT_MAX_WARMUP_SHARE
    horizon = att.intent.get("global_steps") or total
    if steps.warmup_global_steps > max(share * horizon, 1.0):
        out.append(check(
            "lr.warmup_share", ERROR,
            f"warm-up lasts {steps.warmup_global_steps:,.0f} global steps ({_warmup_rule(steps, att)}), more than "
            f"{share:.0%} of the {'intended' if att.intent.get('global_steps') else 'planned'} {horizon:,} global steps",
            "docs/plan.md#warm-up-and-early-lr",
        ))  # fmt: skip
    return out


def _step_checks(att: Any, steps: VerlSteps) -> list[Any]:
    from rlexp.core.checks import ERROR, WARNING
    from rlexp.core.verdict import check

    out = []
    total = steps.global_steps_total
    batch_key = "data.gen_batch_size" if not steps.use_v1 and att.recipe.get("data.gen_batch_size") else "data.train_batch_size"
    if total == 0:
        out.append(check(
            "steps.empty", ERROR,
            f"no global step runs: {steps.prompts:,} prompts < {batch_key} {steps.batch_prompts} (verl's dataloader "
            f"drops the partial batch; verl itself stops with 'Train dataloader is empty!')",
            VERL_REF,
        ))  # fmt: skip
    intent = att.intent.get("global_steps")
    if intent and intent != total:
        data_total = steps.batches_per_epoch * steps.total_epochs
        fixes = [f"trainer.total_training_steps: {intent}" if intent <= data_total else
                 f"more data: {intent} steps need {intent * steps.batch_prompts:,} prompts per epoch, or more "
                 "trainer.total_epochs"]  # fmt: skip
        if steps.batches_per_epoch and intent % steps.batches_per_epoch == 0 and steps.total_training_steps_stated is None:
            fixes.append(f"trainer.total_epochs: {intent // steps.batches_per_epoch}")
        out.append(check(
            "steps.intent", ERROR,
            f"verl will run {total:,} global steps ({'trainer.total_training_steps ' + str(steps.total_training_steps_stated) if steps.total_training_steps_stated else f'{steps.prompts:,} prompts // {steps.batch_prompts} × {steps.total_epochs} epochs'}), "
            f"intent is {intent:,}: use " + ", or ".join(fixes),
            "docs/plan.md#optimizer-steps-and-global-steps",
        ))  # fmt: skip
    if steps.partial_batch_prompts and total:
        out.append(check(
            "steps.partial_batch", WARNING,
            f"{steps.prompts:,} prompts leave a partial last batch of {steps.partial_batch_prompts} ({batch_key} "
            f"{steps.batch_prompts}): verl's dataloader drops it every epoch (drop_last=True)",
            VERL_REF,
        ))  # fmt: skip
    if not steps.reaches_last_step and total:
        out.append(check(
            "steps.short_of_schedule", WARNING,
            f"trainer.total_training_steps {steps.total_training_steps:,} is more than the data gives "
            f"({steps.batches_per_epoch:,} × {steps.total_epochs} epochs = {total:,}): the run ends at step {total:,}, "
            f"the LR schedule was built for {steps.total_training_steps:,}, and verl's last-step save and validation "
            "never fire",
            VERL_REF,
        ))  # fmt: skip
    if steps.train_batch_size % steps.ppo_mini_batch_size:
        out.append(check(
            "batch.mini_divisible", ERROR,
            f"data.train_batch_size {steps.train_batch_size} is not a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size {steps.ppo_mini_batch_size}",
            VERL_REF,
        ))  # fmt: skip
    if steps.filters_prompts:
        out.append(check(
            "steps.filtered_prompts", WARNING,
            "data.filter_overlong_prompts is on: verl drops prompts longer than data.max_prompt_length tokens "
            "before batching, so the run may be shorter than planned (the plan counts every prompt)",
            VERL_REF,
        ))  # fmt: skip
    return out
