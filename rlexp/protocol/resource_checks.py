"""The preflight's hardware family: the GPUs a run's Ray placement asks for, and the disk its
checkpoints fill.
"""

from __future__ import annotations

from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import Attempt
from rlexp.trainers import rules as trainer_rules
from rlexp.training.schedule import CheckpointPlan


def check_gpu_layout(att: Attempt) -> list[Verdict]:
    """The GPUs its trainer's placement asks for against ``trainer.gpus`` (its rules' ``gpu_layout_checks``:
    none for a trainer that states no layout)."""
    return trainer_rules(att.trainer.name).gpu_layout_checks(att)


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
