"""The preflight's recipe family: a group-normalised estimator with one sample per prompt, generation
lengths that cut the budget, and a LoRA rank the eval engine refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlexp.evaluation.engine_table import engine_traits
from rlexp.protocol.verdict import ERROR, Verdict, check
from rlexp.spec import Attempt
from rlexp.trainers import rules as trainer_rules


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
