"""The preflight catalogue for a verl attempt: the catalogue's LR checks (rlexp.protocol.step_checks.check_lr,
one implementation for every trainer) on verl's step math, verl's own step checks under the
catalogue's ids, then the catalogue's checks that do not depend on how a
trainer counts steps (schedule, one variable, suffix, datasets, power, groups of one sample).

Kept apart from rlexp.trainers.verl.steps, which the recipe-key table imports (for the kinds of
verl's keys): the catalogue imports the spec, which imports that table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlexp.trainers.verl.recipe import as_verl_recipe
from rlexp.trainers.verl.steps import VerlSchedule, VerlSteps

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

VERL_REF = "docs/trainers.md#verl"


def verl_checkpoint_plan(steps: VerlSteps, schedule: VerlSchedule, mid: int | None) -> Any:
    """The K=3 view of verl's schedule (:class:`rlexp.training.schedule.CheckpointPlan`)."""
    from rlexp.training.schedule import CheckpointPlan

    saved = set(schedule.saved)
    return CheckpointPlan(steps.global_steps_total, mid, schedule.saved, schedule.evaluated,
                          tuple(g for g in schedule.evaluated if g in saved))


def verl_preflight(att: Attempt, steps: VerlSteps, schedule: VerlSchedule, power: Any,
                   config: Mapping[str, Any] | None = None) -> list[Any]:
    """The preflight catalogue for a verl attempt: the catalogue's LR checks on verl's step math,
    verl's own step checks under the catalogue's ids, then the catalogue's trainer-independent checks
    (rlexp.protocol.checks)."""
    from rlexp.protocol.agentic_checks import check_agentic
    from rlexp.protocol.checks import check_run_health
    from rlexp.protocol.data_checks import check_datasets, check_suffix
    from rlexp.protocol.power_checks import check_power
    from rlexp.protocol.recipe_checks import check_group_of_one
    from rlexp.protocol.step_checks import check_lr, check_schedule
    from rlexp.protocol.variable_checks import check_single_variable
    from rlexp.protocol.verdict import ERROR

    ckpt = verl_checkpoint_plan(steps, schedule, att.checkpoints_mid)
    found = [*check_lr(att, steps), *_step_checks(att, steps)]
    if config is not None:
        found += megatron_layout_checks(config)
    found += check_schedule(att, steps, ckpt, eval_key="trainer.test_freq", save_key="trainer.save_freq",
                            fires_rule="every multiple of the frequency and the last step")
    for findings in (check_single_variable(att), check_suffix(att),
                     check_datasets(att), check_power(att, power), check_group_of_one(att),
                     check_agentic(att), check_run_health(att)):  # fmt: skip
        found.extend(findings)
    return sorted(found, key=lambda c: c.severity != ERROR)


def _step_checks(att: Attempt, steps: VerlSteps) -> list[Any]:
    from rlexp.protocol.verdict import ERROR, WARNING, check

    out = []
    total = steps.global_steps_total
    gen_batch = as_verl_recipe(att.recipe).data.gen_batch_size
    batch_key = "data.gen_batch_size" if not steps.use_v1 and gen_batch else "data.train_batch_size"
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


# ----------------------------------------------------------------------------- the Megatron engine's layout

MEGATRON = "actor_rollout_ref.actor.megatron"


def verl_gpu_layout(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The actor's Megatron parallelism over the trainer's GPUs (None unless ``actor.strategy`` is
    ``megatron``, the branch verl's ``validate_config`` (verl/utils/config.py) takes: it divides
    ``trainer.n_gpus_per_node × trainer.nnodes`` by these sizes; MindSpeed's ``mindspeed_megatron``
    takes the other branch)."""
    if config.get("actor_rollout_ref.actor.strategy") != "megatron":
        return None
    sizes = {name: config.get(f"{MEGATRON}.{name}") for name in
             ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")}
    nodes, per_node = config.get("trainer.nnodes"), config.get("trainer.n_gpus_per_node")
    numbers = [*sizes.values(), nodes, per_node]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in numbers):
        return {"n_gpus": None, **sizes, "data_parallel_size": None}
    n_gpus = nodes * per_node
    model_parallel = sizes["tensor_model_parallel_size"] * sizes["pipeline_model_parallel_size"]
    split = model_parallel * sizes["context_parallel_size"]
    return {"n_gpus": n_gpus, **sizes, "data_parallel_size": n_gpus // split if n_gpus % split == 0 else None}


def megatron_layout_checks(config: Mapping[str, Any]) -> list[Any]:
    """What verl 0.9.1's ``validate_config`` asserts for the Megatron actor before training (only without
    ``actor.use_dynamic_bsz``, as there): the GPUs divide by tensor × pipeline × context parallel sizes,
    and ``train_batch_size × rollout.n`` by the data-parallel size × ``ppo_micro_batch_size_per_gpu``."""
    from rlexp.protocol.checks import ERROR
    from rlexp.protocol.verdict import check

    layout = verl_gpu_layout(config)
    if layout is None or config.get("actor_rollout_ref.actor.use_dynamic_bsz") or layout["n_gpus"] is None:
        return []
    n_gpus = layout["n_gpus"]
    model_parallel = layout["tensor_model_parallel_size"] * layout["pipeline_model_parallel_size"]
    cp = layout["context_parallel_size"]
    if layout["data_parallel_size"] is None:
        return [check(
            "gpu.layout", ERROR,
            f"verl stops before training: n_gpus ({n_gpus} = trainer.n_gpus_per_node × trainer.nnodes) must be "
            f"divisible by model_parallel_size ({model_parallel} = {MEGATRON}.tensor_model_parallel_size × "
            f"pipeline_model_parallel_size) times context_parallel_size ({cp}) (verl's validate_config)",
            VERL_REF)]  # fmt: skip
    micro = config.get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    train_batch, n = config.get("data.train_batch_size"), config.get("actor_rollout_ref.rollout.n")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (micro, train_batch, n)):
        return []  # verl's own arithmetic on a null micro batch is not a check (the plan does not guess it)
    minimal = layout["data_parallel_size"] * micro
    if minimal > 0 and (train_batch * n) % minimal:
        return [check(
            "batch.train_divisible", ERROR,
            f"verl stops before training: real_train_batch_size ({train_batch * n} = data.train_batch_size × "
            f"actor_rollout_ref.rollout.n) must be divisible by minimal possible batch size ({minimal} = Megatron "
            f"data-parallel size {layout['data_parallel_size']} × actor.ppo_micro_batch_size_per_gpu {micro}) "
            "(verl's validate_config)", VERL_REF)]  # fmt: skip
    return []


# ----------------------------------------------------------------------------- environment tasks

AGENT_API_SINCE = "0.6.0"  # AgentLoopBase

# rlexp's GRPO for an environment task (rlexp.trainers.verl.advantage writes its module): the error
# episodes (no response) out of the group baseline
ESTIMATOR = "rlexp_grpo"
ESTIMATOR_MODULE = "rlexp_verl_advantage"
ESTIMATOR_KEY = "algorithm.adv_estimator"
IMPORT_KEY = "actor_rollout_ref.model.external_lib"  # verl imports it in the driver, where advantages are computed


def estimator_keys(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The Hydra keys that make verl use rlexp's estimator for an environment task: only where the
    recipe's estimator is ``grpo`` and it names no ``external_lib`` of its own (rlexp would have to
    replace it); none otherwise (verl's estimator, and the plan's ``agent.env_error_baseline``)."""
    typed = as_verl_recipe(recipe)
    if typed.algorithm.adv_estimator != "grpo" or typed.actor_rollout_ref.model.external_lib is not None:
        return {}
    return {ESTIMATOR_KEY: ESTIMATOR, IMPORT_KEY: ESTIMATOR_MODULE}


def agentic_checks(env: Any, recipe: dict[str, Any], version: str) -> list[Any]:
    """verl's plan rules for an environment task (rlexp.protocol.agentic_checks): the turns against
    ``data.max_response_length`` (the prompt has its own), GSPO's clip range."""
    from rlexp.protocol.agentic_checks import (
        REF,
        WARNING,
        check_gspo_clip,
        check_turn_budget,
    )
    from rlexp.protocol.verdict import check

    typed = as_verl_recipe(recipe)
    actor = typed.actor_rollout_ref.actor
    found = []
    if not estimator_keys(recipe):  # on grpo, rlexp's estimator leaves them out of the baseline (launch)
        found.append(check(
            "agent.env_error_baseline", WARNING,
            f"verl {version}: an episode that ends in an environment error is out of the loss (no response) "
            f"but its reward still counts in its group's baseline (algorithm.adv_estimator "
            f"{typed.algorithm.adv_estimator}; rlexp replaces only grpo, and only without "
            "actor_rollout_ref.model.external_lib); env_errors is logged (response/aborted_ratio) and the SOP's "
            "guardrails.env_errors stop applies", REF))  # fmt: skip
    limit = typed.data.max_response_length
    if limit is not None:
        found += check_turn_budget("verl", prompt_tokens=0, max_turns=env.max_turns,
                                   max_tokens_per_turn=env.max_tokens_per_turn, limit=int(limit),
                                   limit_name="data.max_response_length (rollout.response_length)",
                                   prompt_included=False)
    # verl's GSPO loss clips with clip_ratio_low/high (clip_ratio when they are null)
    if env.loss == "gspo":  # rlexp writes the environment's range as clip_ratio_low/high (launch.loss_recipe)
        return found + check_gspo_clip("gspo", env.gspo_eps_low, "environment.gspo_eps_low")
    loss = "gspo" if actor.policy_loss.loss_mode == "gspo" else env.loss
    for side, clip in (("low", actor.clip_ratio_low), ("high", actor.clip_ratio_high)):
        key = f"actor_rollout_ref.actor.clip_ratio_{side}"
        if clip is None:
            key, clip = "actor_rollout_ref.actor.clip_ratio", actor.clip_ratio
        found += check_gspo_clip(loss, clip, key)
    return found


# ----------------------------------------------------------------------------- groups of one sample

# What verl's estimators (verl/trainer/ppo/core_algos.py, 0.9.1) do with a group of one sample: the
# loops give it mean 0 (and std 1), so the advantage is the raw score; the vectorised ones and
# pass@k do otherwise. No check refuses it before the first step.
_RAW_SCORE = ("verl runs it without a word: a group of one gets mean 0 and std 1 in core_algos, so the "
              "advantage is the raw score (REINFORCE on the reward, no baseline)")
VERL_GROUP_OF_ONE = {
    "grpo": _RAW_SCORE,
    "rloo": _RAW_SCORE,
    "opo": _RAW_SCORE,
    "gpg": _RAW_SCORE,
    "reinforce_plus_plus_baseline": ("verl runs it without a word: a group of one gets mean 0 in core_algos, so "
                                     "the advantage is the raw score whitened over the batch (no group baseline)"),
    "grpo_vectorized": ("verl runs it without a word: the group's mean is the sample's own score, so every "
                        "advantage is 0 (no learning signal)"),
    "rloo_vectorized": "verl runs it without a word: core_algos masks groups of one, so every advantage is 0",
    "grpo_passk": ("verl stops at the first step: 'ValueError: Pass@k requires at least 2 samples per group' "
                   "(core_algos)"),
}


def group_of_one(recipe: dict[str, Any], version: str) -> Any:
    """verl with ``actor_rollout_ref.rollout.n`` 1 and an estimator that takes its baseline within the group."""
    from rlexp.protocol.recipe_checks import GroupOfOne

    typed = as_verl_recipe(recipe)
    estimator = str(typed.algorithm.adv_estimator)
    samples = typed.actor_rollout_ref.rollout.n
    if samples is None or int(samples) > 1 or estimator not in VERL_GROUP_OF_ONE:
        return None
    return GroupOfOne("algorithm.adv_estimator", estimator, "actor_rollout_ref.rollout.n", int(samples),
                      VERL_GROUP_OF_ONE[estimator])

def run_health_checks(recipe: dict[str, Any], version: str) -> list[Any]:
    """verl's rollout correction (algorithm.rollout_correction.rollout_is / rollout_rs, rollout_corr_helper.py)
    weighs tokens by exp(old_log_prob - rollout_log_prob); with actor_rollout_ref.rollout.top_p below 1 vLLM
    samples from the renormalised top-p distribution while the actor scores the full softmax, so the weights
    are biased (a warning)."""
    from rlexp.protocol.verdict import WARNING, check

    typed = as_verl_recipe(recipe)
    correction = typed.algorithm.rollout_correction
    corrected = correction.rollout_is is not None or correction.rollout_rs is not None
    top_p = typed.actor_rollout_ref.rollout.top_p
    if corrected and isinstance(top_p, int | float) and not isinstance(top_p, bool) and top_p < 1:
        return [check(
            "health.is_correction_top_p", WARNING,
            f"actor_rollout_ref.rollout.top_p {top_p:g} with verl {version}'s rollout correction: vLLM samples from "
            "the renormalised top-p distribution while the actor scores the full one, so every IS weight is biased",
            "docs/run-health.md#plan")]
    return []
