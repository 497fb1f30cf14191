"""The local trainer's own preflight rule — pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.spec.recipe import Recipe


def group_of_one(recipe: Recipe, version: str) -> Any:
    """Both of its estimators (group_norm, dr_grpo) centre a reward on its group's mean
    (rlexp.trainers.local.loss.group_advantages): a group of one sample has advantage 0."""
    from rlexp.protocol.recipe_checks import GroupOfOne

    if recipe.n_samples_per_prompt > 1:
        return None
    return GroupOfOne("advantage_estimator", recipe.advantage_estimator, "n_samples_per_prompt", recipe.n_samples_per_prompt,
                      "the local trainer gives every sample advantage 0: only the KL term moves the policy")
