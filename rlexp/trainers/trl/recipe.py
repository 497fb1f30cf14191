"""TRL's typed recipe: the resolved GRPOConfig/RLOOConfig/AsyncGRPOConfig fields, read by TRL's code as
attributes.

A TRL recipe holds every field of the config class its ``advantage_estimator`` names (GRPOConfig's,
RLOOConfig's for ``rloo``, AsyncGRPOConfig's for ``async_grpo``) and ModelConfig's, each at its stated value or at the class's own
default. Those defaults are written once, in :mod:`rlexp.trainers.trl.fields` (generated from TRL's
own dataclasses and checked against them), and reach the recipe through the key table
(:func:`rlexp.trainers.trl.keys.recipe_defaults`): nothing here states a default. The attributes
below are the fields rlexp's TRL code reads (the step math, the eval and save schedule, the
preflight, the launch); a field not every one of those classes has (``loss_type``: GRPOConfig's
only; ``num_iterations``: not AsyncGRPOConfig's) is None on a recipe whose class has no such field. As a mapping (:class:`rlexp.spec.recipe.RecipeView`) it is every field in the table's
order, as the trainer-neutral code (the one-variable diff, the digest, the plan) reads any recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from rlexp.spec.recipe import NativeRecipe

T = TypeVar("T")


class Field(Generic[T]):
    """A config field of the resolved recipe, read as an attribute of the same name; ``partial``: a
    field not every TRL config class has, None on a recipe whose class has no such field."""

    def __init__(self, *, partial: bool = False):
        self.partial = partial
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, recipe: None, owner: type) -> Field[T]: ...
    @overload
    def __get__(self, recipe: TrlRecipe, owner: type) -> T: ...
    def __get__(self, recipe: TrlRecipe | None, owner: type) -> Field[T] | T:
        if recipe is None:
            return self
        return recipe.values.get(self.name) if self.partial else recipe.values[self.name]


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
        """``grpo`` (GRPOTrainer), ``rloo`` (RLOOTrainer) or ``async_grpo`` (AsyncGRPOTrainer): rlexp's
        ``advantage_estimator``."""
        from rlexp.trainers.trl.keys import estimator_of

        return estimator_of(self.values)

    # ---- batches and steps
    per_device_train_batch_size = Field[int]()
    gradient_accumulation_steps = Field[int]()
    num_generations = Field[int | None]()
    num_iterations = Field[int | None](partial=True)  # AsyncGRPOConfig has none
    steps_per_generation = Field[int | None](partial=True)
    generation_batch_size = Field[int | None](partial=True)
    num_train_epochs = Field[float]()
    max_steps = Field[int]()
    max_completion_length = Field[int | None]()

    # ---- the LR schedule
    learning_rate = Field[float]()
    warmup_steps = Field[float]()
    lr_scheduler_type = Field[str]()
    lr_scheduler_kwargs = Field[dict[str, Any] | str | None]()

    # ---- eval and save schedule
    eval_strategy = Field[str]()
    eval_steps = Field[float | None]()
    eval_delay = Field[float]()
    logging_steps = Field[float]()
    save_strategy = Field[str]()
    save_steps = Field[float]()

    # ---- the loss and the sampler
    epsilon = Field[float]()
    loss_type = Field[str | None](partial=True)  # GRPOConfig's loss aggregation
    importance_sampling_level = Field[str | None](partial=True)  # token, or sequence (GSPO)
    use_vllm = Field[bool | None](partial=True)  # AsyncGRPOConfig has none: it always generates on a vLLM server
    # GRPOConfig's correction of vLLM's sampling by the trainer's log-probs
    vllm_importance_sampling_correction = Field[bool | None](partial=True)
    top_p = Field[float]()
    top_k = Field[int]()
