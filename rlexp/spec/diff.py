"""What a child attempt changes against its parent: the one-variable rule's evidence."""

from __future__ import annotations

import math
from typing import Any

from rlexp.spec.recipe import (
    INFRASTRUCTURE,
    INSTRUMENTATION,
    TRAINING,
    key_table,
    recipe_key_for,
)

from .model import (
    DATASET_FIELDS,
    ENV_EVAL_FIELDS,
    ROLES,
    Attempt,
    Difference,
    EvalSettings,
)
from .schema import ENV_MAPPINGS

# ----------------------------------------------------------------------------- diff against parent


def _dataset_kind(role: str) -> str:
    return TRAINING if role == "pool" else INSTRUMENTATION


def attempt_recipe_sha256(att: Attempt) -> str:
    """What "the same recipe" means (Gate-2 seeds, STOP-3b, MLflow's seed groups): the digest of
    the training keys without the seed and the pool path, with the trainer and its version."""
    from rlexp.protocol.decision import recipe_sha256
    from rlexp.spec.recipe import key_table

    table = key_table(att.trainer.name)
    training_keys = [k for k, meta in table.keys.items() if meta.kind == TRAINING]
    # newer releases' flags stated under their own names (a recipe without them keeps its digest)
    training_keys += sorted(k for k in att.recipe if k not in table.keys and table.lookup(k).kind == TRAINING)
    # an environment task's training settings are part of the recipe (a single-turn recipe keeps its digest)
    env = {k: v for k, v in _environment_values(att).items() if _environment_kind(k) == TRAINING}
    return recipe_sha256({**att.recipe, **env}, [*training_keys, *sorted(env)], (att.trainer.name, att.trainer.version))


def _environment_values(att: Attempt) -> dict[str, Any]:
    """The attempt's environment settings as dotted keys (``environment.max_turns``,
    ``environment.config.max_calls``); empty without an environment task."""
    if att.environment is None:
        return {}
    out: dict[str, Any] = {}
    for fname, value in att.environment.recorded().items():
        if fname in ENV_MAPPINGS:
            out.update({f"environment.{fname}.{k}": v for k, v in value.items()})
        else:
            out[f"environment.{fname}"] = value
    return out


def _environment_kind(key: str) -> str:
    return INSTRUMENTATION if key.split(".")[1] in ENV_EVAL_FIELDS else TRAINING


def diff_against_parent(att: Attempt) -> list[Difference]:
    """Every resolved value that differs from the parent's, with its kind (empty for a root)."""
    par = att.parent
    if par is None:
        return []
    out: list[Difference] = []
    table = key_table(att.trainer.name)  # parent and child share their key table (checked on load)
    dotted = sorted({k for k in (*par.recipe, *att.recipe) if k not in table.keys})
    for key in (*table.keys, *dotted):
        a, b = par.recipe.get(key), att.recipe.get(key)
        if not values_equal(a, b):
            out.append(Difference(key, a, b, table.lookup(key).kind))  # type: ignore[union-attr]
    for fname in ("name", "version"):
        a, b = getattr(par.trainer, fname), getattr(att.trainer, fname)
        if a != b:
            out.append(Difference(f"trainer.{fname}", a, b, TRAINING))
    if par.trainer.gpus != att.trainer.gpus:
        out.append(Difference("trainer.gpus", par.trainer.gpus, att.trainer.gpus, INFRASTRUCTURE))
    for role in ROLES:
        da, db = par.datasets.get(role), att.datasets.get(role)
        for fname in DATASET_FIELDS:
            a = getattr(da, fname) if da else None
            b = getattr(db, fname) if db else None
            if fname == "path":
                a, b = (str(a) if a else None), (str(b) if b else None)
            if a != b:
                out.append(Difference(f"datasets.{role}.{fname}", a, b, _dataset_kind(role)))
    for fname in EvalSettings.__dataclass_fields__:
        a, b = getattr(par.eval, fname), getattr(att.eval, fname)
        if a != b:
            out.append(Difference(f"eval.{fname}", a, b, INSTRUMENTATION))
    env_a, env_b = _environment_values(par), _environment_values(att)
    for key in sorted({*env_a, *env_b}):
        if not values_equal(env_a.get(key), env_b.get(key)):
            out.append(Difference(key, env_a.get(key), env_b.get(key), _environment_kind(key)))
    return out


def values_equal(a: Any, b: Any) -> bool:
    """Recipe values compared as the trainer sees them (5e-7 == 5.0e-7; lists == tuples)."""
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def change_value(att: Attempt, key: str) -> Any:
    """The resolved value of a ``change`` key (recipe key or dotted datasets/trainer/eval/environment field)."""
    if key.startswith("environment."):  # before the recipe: a dotted name would read as a trainer flag
        return _environment_values(att).get(key)
    if recipe_key_for(att.trainer.name, key) is not None:
        return att.recipe.get(key)
    parts = key.split(".")
    if parts[0] == "datasets":
        ref = att.datasets.get(parts[1])
        value = getattr(ref, parts[2]) if ref else None
        if parts[2] == "path" and value is not None:
            return str(value)
        return value
    if parts[0] == "trainer":
        return getattr(att.trainer, parts[1])
    return getattr(att.eval, parts[1])


