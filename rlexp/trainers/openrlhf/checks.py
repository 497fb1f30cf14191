"""OpenRLHF's plan rules for an environment task (rlexp.protocol.agentic_checks) — pure.

Its ``MultiTurnAgentExecutor`` (``openrlhf/utils/agent.py``) hands every turn the room left in
``max_length``, so the turns' budget is checked against that length, prompt included, and a per-turn
cap is reported as not enforced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlexp.protocol.agentic_checks import (
    ERROR,
    REF,
    WARNING,
    check_gspo_clip,
    check_turn_budget,
    release_key,
)
from rlexp.protocol.verdict import Verdict, check

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.spec.recipe import Recipe

AGENT_API_SINCE = "0.8.7"  # the token-in/token-out MultiTurnAgentExecutor
MASKS_ERRORS_SINCE = "0.11.0"  # PolicyLoss's aggregate_loss: a sample with no action token adds 0


def masks_error_episodes(version: str) -> bool:
    """Whether the agent file leaves an environment-error episode out of the loss on this release
    (rlexp.trainers.openrlhf.agent): from ``MASKS_ERRORS_SINCE`` ``aggregate_loss`` divides by the
    optimizer step's token (or non-empty sample) count, so a sample with no action token adds 0;
    before, ``PolicyLoss`` takes ``masked_mean`` over a micro-batch or a sample, 0/0 for such a sample."""
    return release_key(version) >= release_key(MASKS_ERRORS_SINCE)


def openrlhf_max_length(version: str, recipe: Recipe) -> tuple[int, str]:
    """OpenRLHF's ``max_length`` handed to the agent executor, and how it is named: ``max_len``
    (2048 when unset) from 0.9.8, ``prompt_max_len + generate_max_len`` before."""
    if release_key(version) >= release_key("0.9.8"):
        return int(recipe.max_len or 2048), "max_len"
    prompt, generate = recipe.prompt_max_len, recipe.generate_max_len
    return prompt + generate, f"prompt_max_len {prompt} + generate_max_len {generate}"


def openrlhf_needs_max_new_tokens(version: str) -> bool:
    """0.9.8 made ``max_new_tokens`` optional; the multi-turn executor computes ``max_length -
    max_tokens`` on the initial value and fails on None until 0.10.2 (``... or 1``)."""
    return release_key("0.9.8") <= release_key(version) < release_key("0.10.2")


def check_openrlhf_turn_cap(max_tokens_per_turn: int, max_length: int, limit_name: str) -> list[Verdict]:
    return [check("agent.openrlhf_turn_cap", WARNING,
                  f"environment.max_tokens_per_turn {max_tokens_per_turn} is not enforced on OpenRLHF: its "
                  f"MultiTurnAgentExecutor gives every turn the room left in {limit_name} ({max_length} tokens, "
                  "prompt included) and appends the last feedback without a length check", REF)]


def check_openrlhf_max_new_tokens(version: str, recipe: dict[str, Any]) -> list[Verdict]:
    if not openrlhf_needs_max_new_tokens(version):
        return []
    if recipe.get("generate_max_len") or recipe.get("max_new_tokens"):
        return []
    return [check("agent.openrlhf_max_new_tokens", ERROR,
                  f"OpenRLHF {version}: set recipe.generate_max_len (--max_new_tokens): its MultiTurnAgentExecutor "
                  "computes max_length - max_new_tokens and fails on the default None (fixed in 0.10.2)", REF)]


def check_openrlhf_env_errors(version: str, recipe: Recipe) -> list[Verdict]:
    """What OpenRLHF does with an episode that ended in an environment error (the agent file,
    rlexp.trainers.openrlhf.agent): out of the loss from 0.11.0, in its group's baseline always.
    From 0.11.0 the experience's ``kl`` of such a sample is 0/0 (``masked_mean`` over no action
    token): with the in-reward KL (no ``use_kl_loss``) and an adaptive controller (``kl_target``)
    that NaN reaches the KL coefficient, so that pair is refused."""
    if not masks_error_episodes(version):
        return [check("agent.env_error_baseline", WARNING,
                      f"OpenRLHF {version}: an episode that ends in an environment error is trained as a failure "
                      f"with its return so far (its loss cannot leave one sample out before {MASKS_ERRORS_SINCE}); "
                      "env_errors is logged and the SOP's guardrails.env_errors stop applies", REF)]
    found = [check("agent.env_error_baseline", WARNING,
                   f"OpenRLHF {version}: an episode that ends in an environment error is out of the loss but its "
                   "reward still counts in its group's baseline (experience_maker.py: a plain group mean/std); "
                   "env_errors is logged and the SOP's guardrails.env_errors stop applies; an outage (error episodes "
                   "in a row, half an engine's share of a step) stops the run before a step of masked episodes "
                   "only, whose loss would be 0/0", REF)]
    # either spelling: the dotted one is refused by the argv builder, but a check reads what the spec says
    kl_target = recipe.kl_target or recipe.extra.get("algo.kl.target")
    if kl_target and not (recipe.use_kl_loss or recipe.extra.get("algo.kl.use_loss")):
        found.append(check("agent.env_error_kl_target", ERROR,
                           f"OpenRLHF {version}: kl_target (the adaptive KL controller) without use_kl_loss on an "
                           "environment task: an environment-error episode has no action token, its KL mean is 0/0 "
                           "and the NaN reaches the controller's coefficient; set use_kl_loss or drop kl_target", REF))
    return found


def agentic_checks(env: Any, recipe: Recipe, version: str) -> list[Verdict]:
    max_length, name = openrlhf_max_length(version, recipe)
    found = check_turn_budget("openrlhf", prompt_tokens=recipe.prompt_max_len,
                              max_turns=env.max_turns, max_tokens_per_turn=env.max_tokens_per_turn,
                              limit=max_length, limit_name=name, prompt_included=True)
    found += check_openrlhf_max_new_tokens(version, recipe)
    found += check_openrlhf_turn_cap(env.max_tokens_per_turn, max_length, name)
    found += check_openrlhf_env_errors(version, recipe)
    if env.loss == "gspo":  # rlexp writes the environment's range as eps_clip_low_high (launch.loss_recipe)
        found += check_gspo_clip("gspo", env.gspo_eps_low, "environment.gspo_eps_low")
    else:
        gspo = "gspo" in (recipe.policy_loss_type, recipe.extra.get("actor.policy_loss_type"))
        found += check_gspo_clip("gspo" if gspo else env.loss, recipe.eps_clip, "recipe.eps_clip")
    return found


# ----------------------------------------------------------------------------- groups of one sample

# train_ppo_ray.py asserts ``n_samples_per_prompt > 1`` for these (every release 0.9.3 to 0.11.2) ...
REFUSES_ONE_SAMPLE = ("rloo", "reinforce_baseline", "group_norm")
# ... and for dr_grpo too from 0.11.0; before, experience_maker subtracts the group's mean and runs
DR_GRPO_REFUSED_SINCE = "0.11.0"


def group_of_one(recipe: Recipe, version: str) -> Any:
    """OpenRLHF with one sample per prompt and an estimator that takes its baseline within the group."""
    from rlexp.protocol.recipe_checks import GroupOfOne

    estimator, samples = recipe.advantage_estimator, recipe.n_samples_per_prompt
    if samples > 1:
        return None
    refused = REFUSES_ONE_SAMPLE + (("dr_grpo",) if release_key(version) >= release_key(DR_GRPO_REFUSED_SINCE) else ())
    if estimator in refused:
        outcome = (f"OpenRLHF {version} refuses it at start (train_ppo_ray.py: "
                   f"'AssertionError: {estimator} requires n_samples_per_prompt > 1')")
    elif estimator == "dr_grpo":
        outcome = (f"OpenRLHF {version} runs it: the reward minus its group's mean is 0 for every sample, so every "
                   f"advantage is 0 and only the KL term moves the policy (refused from {DR_GRPO_REFUSED_SINCE})")
    else:
        return None
    return GroupOfOne("advantage_estimator", estimator, "n_samples_per_prompt", samples, outcome)


def vllm_is_correction_on(recipe: Recipe) -> bool:
    """The vLLM importance-sampling correction in any release's spelling: --enable_vllm_is_correction
    (0.9.x-0.10.1), --algo.advantage.is_correction_enable (0.10.2-0.11.1), --algo.advantage.is_correction_level
    other than off (0.11.2)."""
    level = recipe.extra.get("algo.advantage.is_correction_level")
    return bool(recipe.enable_vllm_is_correction or recipe.extra.get("algo.advantage.is_correction_enable")
                or (level is not None and str(level) != "off"))


def run_health_checks(recipe: Recipe, version: str, env: Any = None) -> list[Verdict]:
    """The mismatch settings OpenRLHF gets wrong silently: its PolicyLoss (models/loss.py, every release
    0.9.3-0.11.2) applies the vLLM correction, and logs vllm_kl, only when policy_loss_type is ppo; with
    GSPO the correction asked for is never applied. A top_p below 1 makes vLLM sample from a truncated,
    renormalised distribution the trainer's log-probs never see (the trainer scores the full softmax), so
    the IS weights are biased. Without the correction, vllm_kl is not logged: the mismatch goes unmeasured."""
    gspo = "gspo" in (recipe.policy_loss_type, recipe.extra.get("actor.policy_loss_type"), getattr(env, "loss", None))
    top_p = recipe.top_p  # rollout.top_p from 0.10.2: a recipe states it under its v0.9 name
    found: list[Verdict] = []
    if not vllm_is_correction_on(recipe):
        return found
    if gspo:
        found.append(check(
            "health.is_correction_off_with_gspo", ERROR,
            f"OpenRLHF {version} applies the vLLM importance-sampling correction only when policy_loss_type is ppo "
            "(models/loss.py: `if ... is_correction ... and self.policy_loss_type == \"ppo\"`): with GSPO the "
            "correction asked for is silently off and vllm_kl is never logged; drop the correction or the GSPO loss",
            "docs/run-health.md#plan"))
    if isinstance(top_p, int | float) and not isinstance(top_p, bool) and top_p < 1.0:
        found.append(check(
            "health.is_correction_top_p", WARNING,
            f"top_p {top_p:g} with the vLLM importance-sampling correction: vLLM samples from the renormalised "
            "top-p distribution while the trainer scores the full one, so every IS weight is biased "
            "(set top_p 1.0, or accept a correction that corrects the wrong ratio)",
            "docs/run-health.md#plan"))
    return found


def batch_checks(att: Attempt, steps: Any) -> list[Verdict]:
    """OpenRLHF's batch rules (its DeepSpeed config and trainer/ppo_trainer.py): the train batch a
    multiple of micro batch × data-parallel ranks, the rollout's samples a multiple of the train batch
    (the local trainer keeps them too: its batches are OpenRLHF's)."""
    out: list[Verdict] = []
    train, micro, dp = steps.train_batch_size, steps.micro_train_batch_size, steps.data_parallel_size
    if train % (micro * dp):
        out.append(check(
            "batch.train_divisible", ERROR,
            f"train_batch_size {train} is not a multiple of micro_train_batch_size {micro} × "
            f"{dp} data-parallel actor GPUs = {micro * dp} (gradient accumulation would be {train / (micro * dp):g})",
            "OpenRLHF DeepSpeed config",
        ))  # fmt: skip
    samples = steps.rollout_batch_size * steps.n_samples_per_prompt
    if samples % train:
        out.append(check(
            "batch.rollout_divisible", ERROR,
            f"rollout_batch_size {steps.rollout_batch_size} × n_samples_per_prompt {steps.n_samples_per_prompt} = "
            f"{samples} samples is not a multiple of train_batch_size {train}: "
            f"{samples / train:g} optimizer steps per global step",
            "docs/plan.md#optimizer-steps-and-global-steps",
        ))  # fmt: skip
    return out


def lr_checks(att: Attempt, steps: Any) -> list[Verdict]:
    """OpenRLHF's fixed minimum LR: before 0.10.2 it has no min_lr_ratio flag (0.1 × peak, fixed)."""
    from rlexp.spec.diff import values_equal
    from rlexp.training.schedule import min_lr_is_configurable

    out: list[Verdict] = []
    stated = att.recipe_stated.get("min_lr_ratio")
    if stated is not None and not min_lr_is_configurable(steps.trainer_version) and not values_equal(stated, 0.1):
        out.append(check(
            "lr.min_lr_ratio_fixed", ERROR,
            f"min_lr_ratio {stated} has no flag in OpenRLHF {steps.trainer_version}: min LR is fixed at 0.1 × peak "
            f"(configurable from 0.10.2 as --actor.min_lr_ratio)",
            "docs/plan.md#fixed-minimum-lr",
        ))  # fmt: skip
    return out


# --- its GPU layout (the preflight's gpu.* checks: rlexp.protocol.resource_checks asks its rules) ---

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


def gpu_layout_checks(att: Attempt) -> list[Verdict]:
    """The layout's rules (co-location, the GPUs it needs against ``trainer.gpus``)."""
    from rlexp.spec.recipe import Recipe

    r = att.recipe
    assert isinstance(r, Recipe)  # OpenRLHF's rules read OpenRLHF's recipe
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


def partial_batch_note(steps: Any) -> str:
    """What OpenRLHF does with a partial last rollout batch (``steps.partial_batch``): its dataloader
    drops it before 0.11 (``drop_last``), trains it as a short last global step from 0.11."""
    if steps.drops_partial_batch:
        kept = steps.prompts - steps.partial_batch_prompts
        return (f"OpenRLHF {steps.trainer_version} drops it every episode (trains {kept:,} of "
                f"{steps.prompts:,} prompts; ≥ 0.11 would train it as a short global step)")
    return (f"OpenRLHF {steps.trainer_version} trains it as a short last global step of each episode "
            f"(≤ 0.10.x would drop it)")
