"""The preflight's step-math family: the learning rate, the step counts and the eval/save schedule.

Each trainer's step math (rlexp.training.schedule.Steps, or a trainer's own) names its LR unit, its
step counts and when it evaluates and saves; the checks here read only that, so that every trainer's
run is judged by the same rules (its own extra ones come from its rules: ``lr_checks``).
"""

from __future__ import annotations

import math

from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import Attempt
from rlexp.trainers import rules as trainer_rules
from rlexp.training.schedule import CheckpointPlan, Steps

LR_CHECK_GLOBAL_STEP = 20  # abort if the LR at global step 20 is < 30 % of target (docs/plan.md, warm-up and early LR)
LR_CHECK_MIN_FRACTION = 0.30
DEFAULT_MAX_WARMUP_SHARE = 0.10


def check_lr(att: Attempt, steps: Steps) -> list[Verdict]:
    """The LR checks of every trainer: its step math (``steps``: rlexp.training.schedule.Steps or a
    trainer's own) names its LR unit, how many of them the run takes, and the LR at each global step."""
    out: list[Verdict] = []
    total = steps.global_steps_total
    unit, run = steps.lr_unit, steps.lr_steps_run
    if total >= 1 and run >= 1:
        share = att.intent.get("max_warmup_share") or DEFAULT_MAX_WARMUP_SHARE
        horizon = att.intent.get("global_steps") or total
        at = low_early_step(steps.warmup_global_steps, share * horizon, total)
        best = steps.best_fraction_through(at)
        now = steps.lr_at(at).fraction_of_peak
        if best < LR_CHECK_MIN_FRACTION:
            out.append(check(
                "lr.low_early", ERROR,
                f"LR reaches only {best:.1%} of peak by global step {at} ({now:.1%} at step {at}): warm-up is "
                f"{steps.warmup_steps:,} {unit} steps = {steps.warmup_global_steps:,.0f} global steps of "
                f"{total:,} ({steps.lr_horizon}); >= {LR_CHECK_MIN_FRACTION:.0%} required by global step "
                f"{LR_CHECK_GLOBAL_STEP} or by the end of a warm-up of {share:.0%} of the run, whichever is later",
                "docs/plan.md#warm-up-and-early-lr",
            ))  # fmt: skip
        # at most one global step of warm-up is never the A26/A27 incident of docs/plan.md (tiny runs round up to it)
        if steps.warmup_global_steps > max(share * horizon, 1.0):
            out.append(check(
                "lr.warmup_share", ERROR,
                f"warm-up lasts {steps.warmup_global_steps:,.1f} global steps "
                f"({steps.warmup_steps:,} {unit} steps = {steps.warmup_rule(att.recipe)}), more than {share:.0%} of the "
                f"{'intended' if att.intent.get('global_steps') else 'planned'} {horizon:,} global steps",
                "docs/plan.md#warm-up-and-early-lr",
            ))  # fmt: skip
        if steps.warmup_steps >= run:
            out.append(check(
                "lr.warmup_never_ends", ERROR,
                f"warm-up never ends: {steps.warmup_steps:,} {unit} steps ({steps.warmup_rule(att.recipe)}) >= the "
                f"{run:,} {unit} steps of the run: the LR never reaches its peak (the last step trains at "
                f"{steps.lr_at(total).fraction_of_peak:.1%} of peak)",
                "docs/plan.md#warm-up-and-early-lr",
            ))  # fmt: skip
    out.extend(trainer_rules(att.trainer.name).lr_checks(att, steps))  # its own LR rules
    return out


def low_early_step(warmup_global_steps: float, allowed_warmup: float, total: int) -> int:
    """The global step by which the LR must have reached 30 % of its peak: step 20, or later when the
    recipe's warm-up is longer and still within the share of the run a warm-up may take (a 10 %
    warm-up of a 1,000-step run ends at step 100, and is judged there); never past the run's end.
    A warm-up longer than that share is judged at the end of the share: an LR that never leaves its
    warm-up is caught on a long run as on a short one."""
    within = min(warmup_global_steps, allowed_warmup)
    return max(1, min(total, max(LR_CHECK_GLOBAL_STEP, math.ceil(within))))


def check_step_counts(att: Attempt, steps: Steps) -> list[Verdict]:
    """The step checks of every trainer whose step math is a :class:`Steps` (OpenRLHF's, the local
    trainer's, TRL's); the wording is the trainer's own where its step math says so (``step_message``)."""
    out: list[Verdict] = []
    total = steps.global_steps_total
    if total == 0:
        out.append(check(
            "steps.empty", ERROR,
            steps.step_message("steps.empty") or
            f"no global step runs: {steps.prompts:,} prompts < rollout_batch_size {steps.rollout_batch_size}",
            "docs/plan.md#optimizer-steps-and-global-steps",
        ))  # fmt: skip
    if steps.optimizer_steps_run > steps.optimizer_steps_total:
        out.append(check(
            "steps.beyond_schedule", WARNING,
            f"the trainer runs {steps.optimizer_steps_run:,} optimizer steps but max_steps (the LR scheduler's "
            f"horizon) is {steps.optimizer_steps_total:,}: max_steps floors before multiplying by "
            f"num_episodes × max_epochs, and past its end the cosine rises again",
            "docs/plan.md#warm-up-and-early-lr",
        ))  # fmt: skip
    intent = att.intent.get("global_steps")
    if intent and intent != total:
        out.append(check("steps.intent", ERROR,
                         steps.step_message("steps.intent", intent) or _intent_message(intent, steps),
                         "docs/plan.md#optimizer-steps-and-global-steps"))  # fmt: skip
    own = steps.step_message("steps.partial_batch")
    if steps.partial_batch_prompts and total and own:
        out.append(check("steps.partial_batch", WARNING, own, steps.partial_batch_ref))
    elif steps.partial_batch_prompts and total:
        what = trainer_rules(att.trainer.name).partial_batch_note(steps)  # what the trainer does with it
        out.append(check(
            "steps.partial_batch", WARNING,
            f"{steps.prompts:,} prompts leave a partial last rollout batch of {steps.partial_batch_prompts} "
            f"(rollout_batch_size {steps.rollout_batch_size})" + (f": {what}" if what else ""),
            "docs/plan.md#optimizer-steps-and-global-steps",
        ))  # fmt: skip
    return out


def _intent_message(intent: int, steps: Steps) -> str:
    rollout = steps.rollout_batch_size
    head = (
        f"trainer will run {steps.global_steps_total:,} global steps ({steps.optimizer_steps_total:,} optimizer "
        f"steps = {steps.prompts:,} prompts × {steps.n_samples_per_prompt} // {steps.train_batch_size} × "
        f"{steps.num_episodes} episodes × {steps.max_epochs} epochs, "
        f"{steps.optimizer_steps_per_global_step} per global step), intent is {intent:,}"
    )
    fixes = [f"a pool of {intent * rollout:,} prompts with num_episodes 1"]
    per_episode = steps.global_steps_per_episode
    if per_episode and intent % per_episode == 0:
        fixes.append(
            f"num_episodes {intent // per_episode} with this pool ({per_episode:,} global steps each)"
        )
    elif per_episode:
        fixes.append(
            f"no whole num_episodes gives it with this pool ({per_episode:,} global steps per episode)"
        )
    return f"{head}: for {intent:,} global steps use " + ", or ".join(fixes)


def check_schedule(att: Attempt, steps: Steps, ckpt: CheckpointPlan, *, eval_key: str = "eval_steps",
                   save_key: str = "save_steps", fires_rule: str = "global_step % eval_steps == 0 only") -> list[Verdict]:
    """The K=3 schedule checks; the keys and the firing rule name the trainer's own (e.g. a trainer package's own eval_key and save_key)."""
    out: list[Verdict] = []
    final = ckpt.final
    if final < 1:
        return out
    eval_label = f"{eval_key} {att.recipe.get(eval_key)}"
    save_label = f"{save_key} {att.recipe.get(save_key)}"
    if not ckpt.final_evaluated:
        out.append(check(
            "schedule.final_eval", ERROR,
            f"no in-run eval at the final global step {final:,}: {eval_label} fires at "
            f"{_fires(ckpt.evaluated)} ({fires_rule})",
            "docs/plan.md#eval-and-save-at-the-final-step",
        ))  # fmt: skip
    if not ckpt.final_saved:
        out.append(check(
            "schedule.final_save", ERROR,
            f"no checkpoint saved at the final global step {final:,}: {save_label} fires at "
            f"{_fires(ckpt.saved)}; the K=3 'final' checkpoint would not exist",
            "sop/README.md#k3-checkpoints",
        ))  # fmt: skip
    mid = ckpt.mid
    if mid is None:
        out.append(check(
            "schedule.mid_missing", WARNING,
            "no pre-registered mid checkpoint (checkpoints.mid): the K=3 selection is fixed before looking at results",
            "sop/README.md#k3-checkpoints",
        ))  # fmt: skip
    elif mid > final:
        out.append(check(
            "schedule.mid_beyond_run", ERROR,
            f"the pre-registered mid checkpoint {mid:,} is beyond the run's final global step {final:,}",
            "sop/README.md#k3-checkpoints",
        ))  # fmt: skip
    else:
        if mid not in ckpt.saved:
            out.append(check(
                "schedule.mid_save", ERROR,
                f"no checkpoint saved at the pre-registered mid step {mid:,} ({save_label})",
                "sop/README.md#k3-checkpoints",
            ))  # fmt: skip
        if mid not in ckpt.evaluated:
            out.append(check(
                "schedule.mid_eval", WARNING,
                f"no in-run eval at the pre-registered mid step {mid:,} ({eval_label})",
                "sop/README.md#k3-checkpoints",
            ))  # fmt: skip
    for extra in att.checkpoints_extra:
        if extra > final or extra not in ckpt.saved:
            out.append(check(
                "schedule.extra_save", ERROR,
                f"pre-registered checkpoint {extra:,} will not be saved (final {final:,}, {save_label})",
                "sop/README.md#k3-checkpoints",
            ))  # fmt: skip
    if not ckpt.best_by_monitor_candidates:
        out.append(check(
            "schedule.no_monitor_candidates", WARNING,
            "no global step is both evaluated in-run and saved: best-by-monitor has no candidate",
            "sop/README.md#k3-checkpoints",
        ))  # fmt: skip
    return out


def _fires(points: tuple[int, ...]) -> str:
    if not points:
        return "no step"
    if len(points) <= 4:
        return ", ".join(f"{p:,}" for p in points)
    return f"{points[0]:,}, {points[1]:,}, … {points[-1]:,}"
