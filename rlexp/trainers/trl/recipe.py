"""TRL's typed recipe: the resolved GRPOConfig/RLOOConfig fields, read by TRL's code as attributes.

A TRL recipe holds every field of the config class its ``advantage_estimator`` names (GRPOConfig's,
or RLOOConfig's for ``rloo``) and ModelConfig's, each at its stated value or at the class's own
default. Those defaults are written once, in :mod:`rlexp.trainers.trl.fields` (generated from TRL's
own dataclasses and checked against them), and reach the recipe through the key table
(:func:`rlexp.trainers.trl.keys.recipe_defaults`): nothing here states a default. The attributes
below are the fields rlexp's TRL code reads (the step math, the eval and save schedule, the
preflight, the launch); a field only GRPOConfig has is None on an RLOO recipe, whose class has no
such field. As a mapping (:class:`rlexp.spec.recipe.RecipeView`) it is every field in the table's
order, as the trainer-neutral code (the one-variable diff, the digest, the plan) reads any recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlexp.spec.recipe import NativeRecipe


@dataclass(frozen=True, eq=False)
class TrlRecipe(NativeRecipe):
    """A resolved TRL recipe (see the module docstring)."""

    @classmethod
    def of(cls, stated: Mapping[str, Any]) -> TrlRecipe:
        """The recipe of the ``stated`` fields, every other field at its config class's default."""
        from rlexp.trainers.trl.keys import recipe_defaults

        return cls({**recipe_defaults(stated), **stated})

    # ---- which trainer
    @property
    def estimator(self) -> str:
        """``grpo`` (GRPOTrainer) or ``rloo`` (RLOOTrainer): rlexp's ``advantage_estimator``."""
        from rlexp.trainers.trl.keys import estimator_of

        return estimator_of(self.values)

    # ---- batches and steps
    @property
    def per_device_train_batch_size(self) -> int:
        return self.values["per_device_train_batch_size"]

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.values["gradient_accumulation_steps"]

    @property
    def num_generations(self) -> int | None:
        return self.values["num_generations"]

    @property
    def num_iterations(self) -> int:
        return self.values["num_iterations"]

    @property
    def steps_per_generation(self) -> int | None:
        return self.values["steps_per_generation"]

    @property
    def generation_batch_size(self) -> int | None:
        return self.values["generation_batch_size"]

    @property
    def num_train_epochs(self) -> float:
        return self.values["num_train_epochs"]

    @property
    def max_steps(self) -> int:
        return self.values["max_steps"]

    @property
    def max_completion_length(self) -> int | None:
        return self.values["max_completion_length"]

    # ---- the LR schedule
    @property
    def learning_rate(self) -> float:
        return self.values["learning_rate"]

    @property
    def warmup_steps(self) -> float:
        return self.values["warmup_steps"]

    @property
    def lr_scheduler_type(self) -> str:
        return self.values["lr_scheduler_type"]

    @property
    def lr_scheduler_kwargs(self) -> dict[str, Any] | str | None:
        return self.values["lr_scheduler_kwargs"]

    # ---- eval and save schedule
    @property
    def eval_strategy(self) -> str:
        return self.values["eval_strategy"]

    @property
    def eval_steps(self) -> float | None:
        return self.values["eval_steps"]

    @property
    def eval_delay(self) -> float:
        return self.values["eval_delay"]

    @property
    def logging_steps(self) -> float:
        return self.values["logging_steps"]

    @property
    def save_strategy(self) -> str:
        return self.values["save_strategy"]

    @property
    def save_steps(self) -> float:
        return self.values["save_steps"]

    # ---- the loss and the sampler
    @property
    def epsilon(self) -> float:
        return self.values["epsilon"]

    @property
    def loss_type(self) -> str | None:
        """GRPOConfig's loss aggregation (None on an RLOO recipe)."""
        return self.values.get("loss_type")

    @property
    def importance_sampling_level(self) -> str | None:
        """``token`` or ``sequence`` (GSPO) on GRPOConfig (None on an RLOO recipe)."""
        return self.values.get("importance_sampling_level")

    @property
    def use_vllm(self) -> bool:
        return self.values["use_vllm"]

    @property
    def vllm_importance_sampling_correction(self) -> bool | None:
        """GRPOConfig's correction of vLLM's sampling by the trainer's log-probs (None on an RLOO recipe)."""
        return self.values.get("vllm_importance_sampling_correction")

    @property
    def top_p(self) -> float:
        return self.values["top_p"]

    @property
    def top_k(self) -> int:
        return self.values["top_k"]
