"""verl's recipe, typed: :class:`VerlRecipe`, the dotted Hydra keys rlexp's own code reads as nested
frozen dataclasses that mirror verl's config tree (``recipe.actor_rollout_ref.actor.clip_ratio``,
``recipe.data.max_response_length``). Each leaf names its key once (:func:`key`), and its default is
not written here: it is read from the newest listed release's composed config
(:mod:`rlexp.trainers.verl.keys`, generated from the wheel), the table whose defaults an unstated key
resolves to, so a key that table lacks fails at import. tests/test_verl_plan.py checks every leaf's
default against every listed release and every engine (:mod:`rlexp.trainers.verl.engine_keys`) that has
the key.

As a mapping (:class:`rlexp.spec.recipe.RecipeView`) it is the resolved recipe exactly as before (the
table's defaults, then the stated keys, in that order): the one-variable diff, the digest, the plan,
the tracked parameters and the Hydra argv read it by key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from rlexp.spec.recipe import NativeRecipe
from rlexp.trainers.verl.keys import VERL_CONFIG_KEYS

# the listed releases, newest first: its keys and defaults are the key table's (rlexp.trainers.verl.VerlRules)
LISTED_VERSIONS: tuple[str, ...] = tuple(
    sorted(VERL_CONFIG_KEYS, key=lambda v: tuple(int(p) for p in v.split(".")[:3]), reverse=True))
NEWEST_DEFAULTS: dict[str, Any] = {name: default for name, _, default in VERL_CONFIG_KEYS[LISTED_VERSIONS[0]]}


def key(name: str) -> Any:
    """A leaf: the dotted key ``name``, defaulting to the newest listed release's default (FSDP's, verl's
    default engine): what the key resolves to when no spec states it."""
    return field(default=NEWEST_DEFAULTS[name], metadata={"key": name})


def node(cls: type) -> Any:
    """A subtree of the config: its leaves at their defaults."""
    return field(default_factory=cls, metadata={"node": cls})


@dataclass(frozen=True)
class Optim:
    lr: float = key("actor_rollout_ref.actor.optim.lr")
    lr_warmup_steps: int = key("actor_rollout_ref.actor.optim.lr_warmup_steps")  # -1 or less: the ratio's
    lr_warmup_steps_ratio: float = key("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio")


@dataclass(frozen=True)
class PolicyLoss:
    loss_mode: str = key("actor_rollout_ref.actor.policy_loss.loss_mode")


@dataclass(frozen=True)
class Actor:
    optim: Optim = node(Optim)
    policy_loss: PolicyLoss = node(PolicyLoss)
    clip_ratio: float = key("actor_rollout_ref.actor.clip_ratio")
    clip_ratio_low: float | None = key("actor_rollout_ref.actor.clip_ratio_low")  # null: clip_ratio
    clip_ratio_high: float | None = key("actor_rollout_ref.actor.clip_ratio_high")
    loss_agg_mode: str = key("actor_rollout_ref.actor.loss_agg_mode")
    loss_scale_factor: float | None = key("actor_rollout_ref.actor.loss_scale_factor")


@dataclass(frozen=True)
class Rollout:
    n: int = key("actor_rollout_ref.rollout.n")
    top_p: float = key("actor_rollout_ref.rollout.top_p")


@dataclass(frozen=True)
class Model:
    external_lib: str | None = key("actor_rollout_ref.model.external_lib")


@dataclass(frozen=True)
class ActorRolloutRef:
    actor: Actor = node(Actor)
    rollout: Rollout = node(Rollout)
    model: Model = node(Model)


@dataclass(frozen=True)
class Data:
    train_batch_size: int = key("data.train_batch_size")
    gen_batch_size: int | None = key("data.gen_batch_size")
    max_response_length: int = key("data.max_response_length")


@dataclass(frozen=True)
class RolloutCorrection:
    rollout_is: str | None = key("algorithm.rollout_correction.rollout_is")
    rollout_rs: str | None = key("algorithm.rollout_correction.rollout_rs")


@dataclass(frozen=True)
class Algorithm:
    adv_estimator: str = key("algorithm.adv_estimator")
    rollout_correction: RolloutCorrection = node(RolloutCorrection)


@dataclass(frozen=True)
class SeparateAsync:
    parameter_sync_step: int = key("trainer.v1.separate_async.parameter_sync_step")


@dataclass(frozen=True)
class TrainerV1:
    trainer_mode: str = key("trainer.v1.trainer_mode")
    separate_async: SeparateAsync = node(SeparateAsync)


@dataclass(frozen=True)
class Trainer:
    v1: TrainerV1 = node(TrainerV1)


def _tree(cls: type, resolved: Mapping[str, Any], **given: Any) -> Any:
    """An instance of ``cls`` whose leaves hold the resolved values (their defaults where a key is absent);
    ``given``: its other fields."""
    values = dict(given)
    for f in fields(cls):
        if "node" in f.metadata:
            values[f.name] = _tree(f.metadata["node"], resolved)
        elif "key" in f.metadata and f.metadata["key"] in resolved:
            values[f.name] = resolved[f.metadata["key"]]
    return cls(**values)


def leaves(cls: type) -> Iterator[Field[Any]]:
    """The leaf fields of ``cls``'s tree (each with its ``key`` in its metadata)."""
    for f in fields(cls):
        if "node" in f.metadata:
            yield from leaves(f.metadata["node"])
        elif "key" in f.metadata:
            yield f


@dataclass(frozen=True, eq=False)
class VerlRecipe(NativeRecipe):
    """A resolved verl recipe: every key by its dotted name (the mapping, ``values``), and the keys rlexp
    reads as a tree of attributes."""

    actor_rollout_ref: ActorRolloutRef = node(ActorRolloutRef)
    data: Data = node(Data)
    algorithm: Algorithm = node(Algorithm)
    trainer: Trainer = node(Trainer)

    @classmethod
    def of(cls, resolved: Mapping[str, Any]) -> VerlRecipe:
        """The typed recipe of a resolved mapping (the table's defaults, then the stated keys)."""
        return _tree(cls, resolved, values=dict(resolved))

    @classmethod
    def resolve(cls, stated: Mapping[str, Any], defaults: Mapping[str, Any]) -> VerlRecipe:
        return cls.of({**defaults, **stated})


def as_verl_recipe(recipe: Mapping[str, Any]) -> VerlRecipe:
    """``recipe`` typed: a :class:`VerlRecipe` as it is; a mapping (a test's or a caller's few keys) over
    the newest release's defaults, as the spec loader resolves a recipe."""
    if isinstance(recipe, VerlRecipe):
        return recipe
    return VerlRecipe.of({**NEWEST_DEFAULTS, **recipe})
