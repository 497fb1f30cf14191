"""The local trainer's own preflight rule — pure."""

from __future__ import annotations

from typing import Any


def group_of_one(recipe: dict[str, Any], version: str) -> Any:
    """Both of its estimators (group_norm, dr_grpo) centre a reward on its group's mean
    (rlexp.trainers.local.loss.group_advantages): a group of one sample has advantage 0."""
    from rlexp.protocol.recipe_checks import GroupOfOne

    samples = recipe.get("n_samples_per_prompt")
    estimator = str(recipe.get("advantage_estimator") or "group_norm")
    if samples is None or int(samples) > 1:
        return None
    return GroupOfOne("advantage_estimator", estimator, "n_samples_per_prompt", int(samples),
                      "the local trainer gives every sample advantage 0: only the KL term moves the policy")
