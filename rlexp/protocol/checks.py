"""The preflight catalogue: every mistake of an attempt spec that arithmetic can catch before launch.

Each check has a stable id, a severity (``error`` blocks the launch, ``warning`` is printed), a
one-line message with the numbers, and a ``ref``: the section of docs/plan.md or sop/README.md
that explains the rule and the incident behind it. Each one has a test reproducing its incident
(tests/test_checks.py). :func:`preflight` runs them all. The attempts A26-A30 named below are
told in docs/plan.md, "Why each check exists".

| id | incident / rule |
|---|---|
| lr.low_early | A26/A27: LR < 6 % of peak for the whole observed run; LR must reach 30 % by global step 20, or by the end of a warm-up within the allowed share of the run |
| lr.warmup_share | A26/A27: warm-up of 25,000 / 6,250 optimizer steps against a ~40-step run |
| lr.warmup_never_ends | a warm-up as long as the run or longer: the LR never reaches its peak (any trainer) |
| lr.min_lr_ratio_fixed | OpenRLHF < 0.10.2 has no min_lr_ratio flag: min LR is 0.1 × peak |
| steps.intent | A28: max_steps counts optimizer steps; 25 global steps instead of 200 |
| steps.empty | pool smaller than one rollout batch: no global step runs |
| steps.partial_batch | a partial last rollout batch: dropped by ≤ 0.10.x, trained by ≥ 0.11 |
| steps.beyond_schedule | more optimizer steps run than max_steps: past its end the cosine rises again |
| batch.train_divisible | train batch not a multiple of micro batch × data-parallel actor GPUs |
| batch.rollout_divisible | rollout × n samples not a multiple of the train batch |
| schedule.final_eval / final_save | A28: no eval at its final step (eval/save fire on multiples only) |
| schedule.mid_* | K=3 selection: the pre-registered mid checkpoint must be saved (and evaluated) |
| diff.* | one training variable per attempt, declared in ``change`` (A27 changed two) |
| gpu.layout | A26: init_kl_coef > 0 creates a reference model; 8 ref GPUs + 4 + 4 on 8 GPUs hung; ``gae`` creates a critic |
| samples.group_of_one | a group-normalised estimator with one sample per prompt: what the trainer then does (refuses, or trains on nothing / the raw score) |
| length.max_len | max_len shorter than prompt_max_len + generate_max_len truncates generations |
| suffix.mismatch | a \\boxed{} suffix on one side moved a baseline ~10 pp; train and baseline prompts must match |
| data.overlap | training pool disjoint by hash from every eval set |
| data.size | the file's line count wins over the stated size |
| eval.lora_rank | vLLM's max_lora_rank defaults to 16; rank-32 adapters are refused |
| disk.budget / disk.hf_ckpt | DeepSpeed shards once filled a 422 GB disk; HF checkpoints are never rotated |
| power.underpowered | the 202-problem monitor could not see 5 pp; MDE above the +3.0 pp win threshold |
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.arithmetic_task import problem_hash
from rlexp.evaluation.engine_table import engine_traits
from rlexp.experiment.files import iter_jsonl
from rlexp.protocol.agentic_checks import check_agentic
from rlexp.protocol.verdict import Verdict, check
from rlexp.spec import (
    EVAL_ROLES,
    RECIPE_KEYS,
    TRAINING,
    Attempt,
    change_value,
    diff_against_parent,
    values_equal,
)
from rlexp.spec.recipe import Recipe
from rlexp.stats import WIN_THRESHOLD_PP, PowerReport, power_report
from rlexp.trainers import rules as trainer_rules
from rlexp.training.schedule import (
    CheckpointPlan,
    Steps,
    checkpoint_plan,
)

ERROR = "error"
WARNING = "warning"

LR_CHECK_GLOBAL_STEP = 20  # abort if the LR at global step 20 is < 30 % of target (docs/plan.md, warm-up and early LR)
LR_CHECK_MIN_FRACTION = 0.30
DEFAULT_MAX_WARMUP_SHARE = 0.10




def has_errors(checks: Iterable[Verdict]) -> bool:
    return any(c.severity == ERROR for c in checks)


# ----------------------------------------------------------------------------- entry point


def steps_for(att: Attempt) -> Steps:
    """The step counts of an attempt (pool size from the file when it exists, else the spec)."""
    pool = att.datasets.get("pool")
    if pool is None or pool.size is None:
        raise InputError(
            att.display_path, "datasets.pool", "the training pool (path or size) is needed to plan"
        )
    steps = trainer_rules(att.trainer.name).steps(att)
    # the LR table and the monitor schedule hold one entry per step: bound them before building them
    for count, limit, what in ((steps.global_steps_total, MAX_GLOBAL_STEPS, "global"),
                               (steps.optimizer_steps_total, MAX_OPTIMIZER_STEPS, "optimizer")):
        if count > limit:
            raise InputError(att.display_path, "recipe.num_episodes",
                             f"the run would take {count} {what} steps, over the limit of {limit} "
                             "(check num_episodes, max_epochs, the batch sizes and datasets.pool.size)")
    return steps


# Upper bounds of a plannable run (far above any real one: 3200 prompts for 1000 episodes is 10^5 steps).
MAX_GLOBAL_STEPS = 10**6
MAX_OPTIMIZER_STEPS = 10**7


def preflight(att: Attempt, steps: Steps | None = None, power: PowerReport | None = None,
              clustered: dict[str, Any] | None = None) -> list[Verdict]:
    """Run the whole catalogue; errors first, then warnings, each group in catalogue order
    (``power`` and ``clustered``: :func:`primary_power` and :func:`clustered_primary_power`, computed
    here when not given)."""
    steps = steps or steps_for(att)
    ckpt = checkpoint_plan(steps, att.recipe, att.checkpoints_mid)
    if power is None:
        power = primary_power(att)
    found: list[Verdict] = []
    for findings in (
        check_lr(att, steps),
        check_step_counts(att, steps),
        trainer_rules(att.trainer.name).batch_checks(att, steps),  # each trainer's own batch rules
        check_schedule(att, steps, ckpt),
        check_single_variable(att),
        check_gpu_layout(att),
        check_group_of_one(att),
        check_lengths(att),
        check_suffix(att),
        check_datasets(att),
        check_lora_rank(att),
        check_disk(att, ckpt),
        check_power(att, power, clustered if clustered is not None else clustered_primary_power(att)),
        check_agentic(att),  # an environment task on a trainer with an agent interface
        check_run_health(att),  # settings that bias or switch off the rollout correction
        check_base_model(att),
    ):
        found.extend(findings)
    return sorted(found, key=lambda c: c.severity != ERROR)


def check_base_model(att: Attempt) -> list[Verdict]:
    """A trainer that loads its base model from disk (the local trainer) and a ``pretrain`` that names
    no directory: a warning here (plan may run before the model is built, as the demo's first plan
    does), where launch and eval would fail on it."""
    from rlexp.trainers import rules as trainer_rules

    if not trainer_rules(att.trainer.name).loads_local_model:
        return []
    try:
        model = att.base_model()
    except InputError:
        return []  # a missing pretrain is the spec's own error
    if isinstance(model, str):
        return [check("model.missing", WARNING,
                      f"recipe.pretrain {model!r} is not a directory (relative paths resolve against the experiment "
                      "directory): the local trainer and engine load a model from disk, so launch and eval will "
                      "refuse it until it exists", "docs/local-trainer.md")]
    if model.is_file() and model.suffix.lower() != ".gguf":
        return [check("model.not_a_directory", WARNING,
                      f"recipe.pretrain {model.name!r} is a file: a base model is a model directory or a .gguf file "
                      "(converted once into a cached directory); launch and eval will refuse anything else",
                      "docs/real-model.md")]
    return []


def check_run_health(att: Attempt) -> list[Verdict]:
    """The trainer's rules on the training-inference mismatch (its rules' ``run_health_checks``):
    settings its own code is known to get wrong silently, each with that code named."""
    from rlexp.trainers import rules as trainer_rules

    return trainer_rules(att.trainer.name).run_health_checks(att.recipe, str(att.trainer.version),
                                                            att.environment)


def primary_power(att: Attempt) -> PowerReport | None:
    ref = att.datasets.get("ood_primary")
    if ref is None or not ref.size:
        return None
    return power_report(ref.size, att.baseline.discordance, att.baseline.accuracy)


# ----------------------------------------------------------------------------- LR


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


# ----------------------------------------------------------------------------- step counts and batches


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
        kept = steps.prompts - steps.partial_batch_prompts
        if steps.drops_partial_batch:
            what = (f"OpenRLHF {steps.trainer_version} drops it every episode (trains {kept:,} of "
                    f"{steps.prompts:,} prompts; ≥ 0.11 would train it as a short global step)")  # fmt: skip
        else:
            what = (f"OpenRLHF {steps.trainer_version} trains it as a short last global step of each episode "
                    f"(≤ 0.10.x would drop it)")  # fmt: skip
        out.append(check(
            "steps.partial_batch", WARNING,
            f"{steps.prompts:,} prompts leave a partial last rollout batch of {steps.partial_batch_prompts} "
            f"(rollout_batch_size {steps.rollout_batch_size}): {what}",
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


# ----------------------------------------------------------------------------- eval / save schedule


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


# ----------------------------------------------------------------------------- one variable per attempt


def _fmt(value: Any) -> str:
    if isinstance(value, str) and "/" in value:
        return Path(value).name
    return repr(value) if isinstance(value, str) else str(value)


def check_single_variable(att: Attempt) -> list[Verdict]:
    ref = "docs/plan.md#one-training-variable-per-attempt"
    if att.parent is None:
        found = check_seed_of(att, ref) if att.raw.get("seed_of") else []
        if att.change:
            found.append(check("diff.root_change", WARNING,
                               f"change {sorted(att.change)} is stated but the attempt has no parent to compare with",
                               ref))  # fmt: skip
        return found
    diffs = diff_against_parent(att)
    training = [d for d in diffs if d.kind == TRAINING]
    diff_keys = {d.key for d in diffs}
    out: list[Verdict] = []
    if att.raw.get("seed_of"):
        # a confirmation seed (Gate-2) replicates a sibling: its seed is the replication, not a variable
        out.extend(check_seed_of(att, ref))
        training = [d for d in training if d.key != "seed"]
    if len(training) > 1:
        listed = ", ".join(f"{d.key} {_fmt(d.parent)} → {_fmt(d.value)}" for d in training)
        out.append(check(
            "diff.training_variables", ERROR,
            f"{len(training)} training variables differ from parent {att.parent_id}: {listed} "
            f"(eval/save cadence, eval sets and logging are exempt)",
            ref,
        ))  # fmt: skip
    for key, declared in att.change.items():
        actual = change_value(att, key)
        if key.endswith(".path") and isinstance(declared, str):
            declared = str((att.experiment_dir / declared).resolve())
        if not values_equal(actual, declared):
            out.append(check("diff.change_value", ERROR,
                             f"change says {key}: {_fmt(declared)} but the resolved value is {_fmt(actual)}",
                             ref))  # fmt: skip
        elif key not in diff_keys:
            out.append(check("diff.change_noop", ERROR,
                             f"change says {key}: {_fmt(declared)} but parent {att.parent_id} has the same value",
                             ref))  # fmt: skip
    if len(training) == 1 and training[0].key not in att.change:
        d = training[0]
        out.append(check(
            "diff.undeclared", ERROR,
            f"{d.key} differs from parent {att.parent_id} ({_fmt(d.parent)} → {_fmt(d.value)}) but `change` "
            f"does not declare it",
            ref,
        ))  # fmt: skip
    if not training and not att.change:
        out.append(check("diff.nothing", WARNING,
                         f"no training variable differs from parent {att.parent_id} (a rerun: state the reason)",
                         ref))  # fmt: skip
    return out


def check_seed_of(att: Attempt, ref: str) -> list[Verdict]:
    """``seed_of: R``: R is a sibling (same parent) whose training values equal this attempt's but the seed."""
    from rlexp.spec import load_attempt

    other_id = att.raw["seed_of"]
    spec = att.experiment_dir / other_id
    if other_id == att.id or not spec.is_dir():
        return [check("diff.seed_of", ERROR, f"seed_of names {other_id!r}: not another attempt of this experiment",
                      ref)]
    other = load_attempt(spec)
    if other.parent_id != att.parent_id:
        return [check("diff.seed_of", ERROR, f"seed_of {other_id} has parent {other.parent_id}, this attempt "
                                             f"{att.parent_id}: a confirmation seed is a sibling", ref)]
    differ = [k for k, meta in RECIPE_KEYS.items() if meta.kind == TRAINING
              and not values_equal(att.recipe.get(k), other.recipe.get(k))]
    if differ != ["seed"]:
        what = ", ".join(differ) if differ else "nothing (the same seed)"
        return [check("diff.seed_of", ERROR, f"a confirmation seed of {other_id} differs from it in the seed only; "
                                             f"here: {what}", ref)]
    return []


# ----------------------------------------------------------------------------- GPU layout


@dataclass(frozen=True)
class GpuLayout:
    vllm: int
    actor: int
    reference: int
    reward: int
    critic: int
    notes: tuple[str, ...]

    @property
    def total(self) -> int:
        return self.vllm + self.actor + self.reference + self.reward + self.critic


def gpu_layout(recipe: Recipe) -> GpuLayout:
    """GPUs the Ray placement asks for (train_ppo_ray.py, the same rule from 0.9.3 to 0.11.2)."""
    notes: list[str] = []
    actor = recipe.actor_num_nodes * recipe.actor_num_gpus_per_node
    vllm = (recipe.vllm_num_engines or 0) * recipe.vllm_tensor_parallel_size
    colocate_all = recipe.colocate_all_models
    colocate_ref = recipe.colocate_actor_ref or colocate_all
    if colocate_all:
        notes.append("colocate_all_models: vLLM, reference and reward share the actor GPUs")
        vllm_extra = 0
    else:
        vllm_extra = vllm
    ref = 0
    if recipe.init_kl_coef > 0:
        ref_gpus = recipe.ref_num_nodes * recipe.ref_num_gpus_per_node
        if colocate_ref:
            notes.append("reference co-located with the actor")
        else:
            ref = ref_gpus
            notes.append(
                f"init_kl_coef {recipe.init_kl_coef} > 0 creates a reference model on {ref_gpus} GPUs"
            )
    reward = 0
    if recipe.reward_pretrain and not recipe.remote_rm_url and not colocate_all:
        reward = recipe.reward_num_nodes * recipe.reward_num_gpus_per_node
    critic = 0
    if critic_created(recipe):
        critic_gpus = recipe.critic_num_nodes * recipe.critic_num_gpus_per_node
        if recipe.colocate_critic_reward:
            # its own placement group, which the reward model then shares
            critic, reward = critic_gpus, 0
        elif colocate_all:
            notes.append("colocate_all_models: the critic shares the actor GPUs")
        else:
            critic = critic_gpus
        if not recipe.critic_pretrain:
            notes.append(f"advantage_estimator gae creates a critic on {critic_gpus} GPUs (critic_pretrain unset: "
                         "OpenRLHF starts it from the reward model, or the actor's model with a remote reward)")
    return GpuLayout(vllm_extra, actor, ref, reward, critic, tuple(notes))


def critic_created(recipe: Recipe) -> bool:
    """OpenRLHF's rule (train_ppo_ray.py, 0.9.3 to 0.11.2): an estimator other than ``gae`` drops
    ``critic_pretrain``; ``gae`` without one takes the reward model's (or, with a remote reward, the
    actor's): every ``gae`` run has a critic and no other has one."""
    return recipe.advantage_estimator == "gae"


def check_gpu_layout(att: Attempt) -> list[Verdict]:
    if not trainer_rules(att.trainer.name).gpu_layout:
        return []
    r = att.recipe
    assert isinstance(r, Recipe)  # a trainer with OpenRLHF's GPU layout reads OpenRLHF's recipe
    out: list[Verdict] = []
    layout = gpu_layout(r)
    ref = "docs/plan.md#gpu-layout"
    if (
        (r.colocate_actor_ref or r.colocate_all_models)
        and r.init_kl_coef > 0
        and (r.actor_num_nodes != r.ref_num_nodes or r.actor_num_gpus_per_node != r.ref_num_gpus_per_node)
    ):
        out.append(check(
            "gpu.colocate_layout", ERROR,
            f"co-located reference needs the actor's layout: actor {r.actor_num_nodes}×"
            f"{r.actor_num_gpus_per_node} vs reference {r.ref_num_nodes}×{r.ref_num_gpus_per_node} "
            f"(set ref_num_gpus_per_node {r.actor_num_gpus_per_node})",
            ref,
        ))  # fmt: skip
    engines = r.vllm_num_engines or 0
    if r.colocate_all_models and engines and layout.actor != engines * r.vllm_tensor_parallel_size:
        out.append(check(
            "gpu.colocate_all", ERROR,
            f"colocate_all_models needs actor GPUs ({layout.actor}) = vllm_num_engines × "
            f"vllm_tensor_parallel_size ({engines * r.vllm_tensor_parallel_size})",
            ref,
        ))  # fmt: skip
    gpus = att.trainer.gpus
    parts = [f"vLLM {engines}×{r.vllm_tensor_parallel_size}={layout.vllm}", f"actor {layout.actor}"]
    if layout.reference:
        parts.append(f"reference {layout.reference}")
    if layout.reward:
        parts.append(f"reward {layout.reward}")
    if layout.critic:
        parts.append(f"critic {layout.critic}")
    if gpus is None:
        out.append(check("gpu.unknown", WARNING,
                         f"trainer.gpus not stated: the layout needs {layout.total} GPUs ({', '.join(parts)})",
                         ref))  # fmt: skip
    elif layout.total > gpus:
        why = "; ".join(n for n in layout.notes if "creates a" in n)
        out.append(check(
            "gpu.layout", ERROR,
            f"the layout needs {layout.total} GPUs ({', '.join(parts)}) but trainer.gpus is {gpus}"
            + (f": {why}" if why else "")
            + (f" — co-locate the reference (colocate_actor_ref, ref_num_gpus_per_node "
               f"{r.actor_num_gpus_per_node})" if layout.reference else ""),
            ref,
        ))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- groups of one sample


@dataclass(frozen=True)
class GroupOfOne:
    """A group-normalised estimator run with one sample per prompt, as one trainer reads its recipe:
    the keys that name them and what that trainer then does (its own words where it refuses)."""

    estimator_key: str
    estimator: str
    samples_key: str
    samples: int
    outcome: str


def check_group_of_one(att: Attempt) -> list[Verdict]:
    """Every trainer, every attempt (not only environment tasks): a baseline taken within a prompt's
    group needs two samples of the prompt. The trainer's rules say whether its recipe is such a
    case and what the trainer does with it (``TrainerRules.group_of_one``)."""
    found = trainer_rules(att.trainer.name).group_of_one(att.recipe, str(att.trainer.version))
    if found is None:
        return []
    return [check(
        "samples.group_of_one", ERROR,
        f"{found.estimator_key} {found.estimator} takes its baseline within a prompt's group but "
        f"{found.samples_key} is {found.samples}: {found.outcome}",
        "docs/plan.md#one-sample-per-prompt",
    )]  # fmt: skip


# ----------------------------------------------------------------------------- lengths, suffix, LoRA


def check_lengths(att: Attempt) -> list[Verdict]:
    r = att.recipe
    if r.get("max_len") is None:
        return []
    budget = int(r["prompt_max_len"]) + int(r["generate_max_len"])
    if int(r["max_len"]) < budget:
        return [check(
            "length.max_len", ERROR,
            f"max_len {r['max_len']} < prompt_max_len {r['prompt_max_len']} + generate_max_len "
            f"{r['generate_max_len']} = {budget}: generations are cut before their budget",
            "docs/plan.md#generation-length",
        )]  # fmt: skip
    return []


def check_suffix(att: Attempt) -> list[Verdict]:
    pool = att.datasets.get("pool")
    if pool is None:
        return []
    differing = []
    if att.eval.prompt_suffix != pool.prompt_suffix:
        differing.append(f"eval.prompt_suffix {att.eval.prompt_suffix!r}")
    for role in EVAL_ROLES:
        ref = att.datasets.get(role)
        if ref is not None and ref.prompt_suffix != pool.prompt_suffix:
            differing.append(f"{role} {ref.prompt_suffix!r}")
    if not differing:
        return []
    return [check(
        "suffix.mismatch", ERROR,
        f"training pool prompt suffix {pool.prompt_suffix!r} differs from " + ", ".join(differing)
        + ": baseline and trained model would be scored on different prompts",
        "docs/plan.md#prompt-suffix-parity",
    )]  # fmt: skip


def check_lora_rank(att: Attempt) -> list[Verdict]:
    rank = int(att.recipe.get("lora_rank") or 0)
    traits = engine_traits(att.eval.engine)
    if traits is None or not traits.serves_lora_up_to_max_rank or rank == 0:
        return []
    if rank > att.eval.max_lora_rank:
        return [check(
            "eval.lora_rank", ERROR,
            f"lora_rank {rank} > eval.max_lora_rank {att.eval.max_lora_rank} ({att.eval.engine} engine; vLLM's "
            f"default is 16 and it refuses larger adapters): set eval.max_lora_rank: {rank}",
            "docs/plan.md#same-eval-pipeline",
        )]  # fmt: skip
    return []


# ----------------------------------------------------------------------------- datasets


def problem_hashes(path: Path) -> set[str]:
    """Content hashes of a dataset, recomputed: sha256(prompt.strip()) of each line. A stated
    ``problem_hash`` must equal it: a problem listed under a false hash would slip past the
    leakage check (the trainer and G0 hash the prompt itself)."""
    hashes: set[str] = set()
    for number, record in iter_jsonl(path):
        value = record.get("problem_hash")
        prompt = record.get("prompt")
        if value is not None and not isinstance(value, str):
            raise InputError(path, f"line {number}: problem_hash", f"must be a string, got {value!r}")
        if not isinstance(prompt, str):
            if value is None:
                raise InputError(path, f"line {number}", "record has neither problem_hash nor a prompt string")
        else:
            computed = problem_hash(prompt)
            if value is not None and value != computed:
                raise InputError(path, f"line {number}: problem_hash",
                                 f"is not sha256(prompt.strip()) = {computed[:12]}...")
            value = computed
        hashes.add(value)
    return hashes


def check_datasets(att: Attempt) -> list[Verdict]:
    out: list[Verdict] = []
    for ref in att.datasets.values():
        if ref.exists and ref.stated_size is not None and ref.stated_size != ref.size:
            out.append(check(
                "data.size", WARNING,
                f"datasets.{ref.role}: {ref.path.name if ref.path else ''} has {ref.size:,} records, spec says "
                f"{ref.stated_size:,} (the file wins)",
                "docs/plan.md#datasets-provenance-and-leakage",
            ))  # fmt: skip
    pool = att.datasets.get("pool")
    eval_sets = [att.datasets[r] for r in EVAL_ROLES if r in att.datasets]
    if pool is None or not eval_sets:
        return out
    unchecked = [r.role for r in eval_sets if not r.exists]
    if not pool.exists:
        unchecked = [r.role for r in eval_sets]
    if unchecked:
        why = "pool file missing" if not pool.exists else "files missing"
        out.append(check(
            "data.overlap_unchecked", WARNING,
            f"pool/eval overlap not checked for {', '.join(unchecked)} ({why}); check before launch",
            "docs/plan.md#datasets-provenance-and-leakage",
        ))  # fmt: skip
    if not pool.exists or pool.path is None:
        return out
    pool_hashes = problem_hashes(pool.path)
    for ref in eval_sets:
        if not ref.exists or ref.path is None:
            continue
        hashes = problem_hashes(ref.path)
        shared = pool_hashes & hashes
        if shared:
            out.append(check(
                "data.overlap", ERROR,
                f"{len(shared):,} of {len(hashes):,} {ref.role} problems are in the training pool "
                f"({pool.path.name}) by content hash",
                "docs/plan.md#datasets-provenance-and-leakage",
            ))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- disk


def check_disk(att: Attempt, ckpt: CheckpointPlan) -> list[Verdict]:
    out: list[Verdict] = []
    saves = len(ckpt.saved)
    r = att.recipe
    deepspeed = trainer_rules(att.trainer.name).deepspeed_checkpoints
    if deepspeed and saves and not r.get("save_hf_ckpt"):
        out.append(check(
            "disk.hf_ckpt", WARNING,
            f"save_hf_ckpt is off: the {saves} saves write DeepSpeed checkpoints only, no "
            f"global_step{{N}}_hf directory for the K=3 eval",
            "sop/README.md#k3-checkpoints",
        ))  # fmt: skip
    free, size = att.budget.free_disk_gb, att.budget.checkpoint_size_gb
    if free is None:
        return out
    if size is None:
        out.append(check("disk.unsized", WARNING,
                         f"budget.free_disk_gb {free:g} stated but not budget.checkpoint_size_gb: "
                         f"{saves} saves not sized", "docs/plan.md#disk"))  # fmt: skip
        return out
    need = saves * size
    ds_note = ""
    if deepspeed and not r.get("disable_ds_ckpt"):
        ds_note = f" plus up to max_ckpt_num {r['max_ckpt_num']} DeepSpeed checkpoints (rotated, not sized)"
    if need > free:
        out.append(check(
            "disk.budget", ERROR,
            f"{saves} HF checkpoints × {size:g} GB = {need:,.1f} GB > free disk {free:,.1f} GB{ds_note}; "
            f"HF checkpoints are never rotated by the trainer (max_ckpt_num prunes only DeepSpeed ones)",
            "docs/plan.md#disk",
        ))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- power


def clustered_primary_power(att: Attempt) -> dict[str, Any] | None:
    """The power of the planned comparison on a primary set that declares a cluster column (None
    otherwise), from the cluster-robust model decide will test with: SE = sqrt(discordance / n ·
    design effect), the design effect 1 + (m̃ − 1)·ICC (:func:`rlexp.stats.design_effect`) over the
    set's own cluster sizes where its file is there (else ``baseline.cluster_size`` clusters of equal
    size, stated as assumed), ICC ``baseline.cluster_icc`` (unset: 1, the worst case), t with G − 1
    df (:func:`rlexp.stats.clustered_gate_figures`: MDE, the test's power, Gate-1b's pass rates)."""
    ref = att.datasets.get("ood_primary")
    if ref is None or ref.cluster is None or not ref.size:
        return None
    out: dict[str, Any] = {"column": ref.cluster, "n": ref.size, "discordance": att.baseline.discordance}
    if ref.cluster_sizes:
        sizes, out["clusters_from"] = list(ref.cluster_sizes), "the set's rows"
    elif att.baseline.cluster_size is not None:
        g = max(2, round(ref.size / att.baseline.cluster_size))
        sizes, out["clusters_from"] = [ref.size / g] * g, "assumed (baseline.cluster_size)"
    else:
        out.update(clusters_from=None, n_clusters=None, mde_pp=None,
                   note=f"{ref.cluster!r} clusters unknown until the set's file is there (or state "
                        "baseline.cluster_size): no clustered power")
        return out
    from rlexp.spec.sop import load_sop
    from rlexp.stats import clustered_gate_figures, design_effect

    icc = att.baseline.cluster_icc
    out["icc"], out["icc_from"] = (1.0, "worst case (baseline.cluster_icc unset)") if icc is None else (
        icc, "assumed (baseline.cluster_icc)")
    deff = design_effect(sizes, out["icc"])
    g = len(sizes)
    out.update(n_clusters=g, mean_cluster_size=sum(m * m for m in sizes) / sum(sizes), design_effect=deff,
               effective_n=ref.size / deff)
    sop = load_sop()
    se_pp = 100.0 * math.sqrt(att.baseline.discordance / ref.size * deff)
    out.update(clustered_gate_figures(se_pp, g - 1, min_delta_pp=sop.gate_1b.min_delta_pp,
                                      max_p=sop.gate_1b.max_mcnemar_p, k=sop.checkpoints.k))
    return out


def check_power(att: Attempt, power: PowerReport | None, clustered: dict[str, Any] | None = None) -> list[Verdict]:
    if clustered is not None and clustered.get("mde_pp") is not None:
        if clustered["mde_pp"] <= WIN_THRESHOLD_PP:
            return []
        return [check(
            "power.underpowered", WARNING,
            f"MDE {clustered['mde_pp']:.2f} pp at 80% power on ood_primary clustered by {clustered['column']} "
            f"({clustered['n_clusters']} clusters, design effect {clustered['design_effect']:.2f} at ICC "
            f"{clustered['icc']:g}, {clustered['icc_from']}) is above the +{WIN_THRESHOLD_PP:.1f} pp win threshold: "
            f"power to see +{WIN_THRESHOLD_PP:.1f} pp is {clustered['power_at_win_threshold']:.0%} (cluster-robust "
            f"t, {clustered['df']} df)",
            "docs/plan.md#power-of-the-planned-comparison",
        )]  # fmt: skip
    if power is None:
        return [check("power.no_primary", WARNING,
                      "no datasets.ood_primary: the power of the planned comparison is unknown",
                      "sop/README.md#primary-metric")]  # fmt: skip
    if power.mde_pp > power.win_threshold_pp:
        return [check(
            "power.underpowered", WARNING,
            f"MDE {power.mde_pp:.2f} pp at {power.power_target:.0%} power on ood_primary (n={power.n:,}, "
            f"{power.discordance:.1%} discordance) is above the +{power.win_threshold_pp:.1f} pp win threshold: power to "
            f"see +{power.win_threshold_pp:.1f} pp is {power.power_at_win_threshold:.0%}; "
            f"n >= {power.n_for_win_threshold:,} needed (z approximation; the exact McNemar test: MDE "
            + (f"{power.mde_exact_pp:.2f} pp" if power.mde_exact_pp is not None else "beyond the discordance")
            + (f", power {power.power_exact_at_win_threshold:.0%}" if power.power_exact_at_win_threshold is not None
               else "") + ")",
            "docs/plan.md#power-of-the-planned-comparison",
        )]  # fmt: skip
    return []
