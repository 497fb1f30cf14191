"""The preflight's hardware family: the GPUs a run's Ray placement asks for, and the disk its
checkpoints fill.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import Attempt
from rlexp.spec.recipe import Recipe
from rlexp.trainers import rules as trainer_rules
from rlexp.training.schedule import CheckpointPlan


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
