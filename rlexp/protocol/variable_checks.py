"""The preflight's one-variable family: an attempt changes one training variable from its parent,
declared in ``change``; a confirmation seed (``seed_of``) differs from its sibling in the seed only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import RECIPE_KEYS, TRAINING, Attempt, change_value, diff_against_parent, values_equal


def _fmt(value: Any) -> str:
    if isinstance(value, str) and "/" in value:
        return Path(value).name
    return repr(value) if isinstance(value, str) else str(value)


def check_single_variable(att: Attempt) -> list[Verdict]:
    ref = "docs/plan.md#one-training-variable-per-attempt"
    if att.parent is None:
        found = check_seed_of(att, ref) if att.raw.get("seed_of") else []
        if att.change:
            found.append(check("diff.root_change", WARNING,
                               f"change {sorted(att.change)} is stated but the attempt has no parent to compare with",
                               ref))  # fmt: skip
        return found
    diffs = diff_against_parent(att)
    training = [d for d in diffs if d.kind == TRAINING]
    diff_keys = {d.key for d in diffs}
    out: list[Verdict] = []
    if att.raw.get("seed_of"):
        # a confirmation seed (Gate-2) replicates a sibling: its seed is the replication, not a variable
        out.extend(check_seed_of(att, ref))
        training = [d for d in training if d.key != "seed"]
    if len(training) > 1:
        listed = ", ".join(f"{d.key} {_fmt(d.parent)} → {_fmt(d.value)}" for d in training)
        out.append(check(
            "diff.training_variables", ERROR,
            f"{len(training)} training variables differ from parent {att.parent_id}: {listed} "
            f"(eval/save cadence, eval sets and logging are exempt)",
            ref,
        ))  # fmt: skip
    for key, declared in att.change.items():
        actual = change_value(att, key)
        if key.endswith(".path") and isinstance(declared, str):
            declared = str((att.experiment_dir / declared).resolve())
        if not values_equal(actual, declared):
            out.append(check("diff.change_value", ERROR,
                             f"change says {key}: {_fmt(declared)} but the resolved value is {_fmt(actual)}",
                             ref))  # fmt: skip
        elif key not in diff_keys:
            out.append(check("diff.change_noop", ERROR,
                             f"change says {key}: {_fmt(declared)} but parent {att.parent_id} has the same value",
                             ref))  # fmt: skip
    if len(training) == 1 and training[0].key not in att.change:
        d = training[0]
        out.append(check(
            "diff.undeclared", ERROR,
            f"{d.key} differs from parent {att.parent_id} ({_fmt(d.parent)} → {_fmt(d.value)}) but `change` "
            f"does not declare it",
            ref,
        ))  # fmt: skip
    if not training and not att.change:
        out.append(check("diff.nothing", WARNING,
                         f"no training variable differs from parent {att.parent_id} (a rerun: state the reason)",
                         ref))  # fmt: skip
    return out


def check_seed_of(att: Attempt, ref: str) -> list[Verdict]:
    """``seed_of: R``: R is a sibling (same parent) whose training values equal this attempt's but the seed."""
    from rlexp.spec import load_attempt

    other_id = att.raw["seed_of"]
    spec = att.experiment_dir / other_id
    if other_id == att.id or not spec.is_dir():
        return [check("diff.seed_of", ERROR, f"seed_of names {other_id!r}: not another attempt of this experiment",
                      ref)]
    other = load_attempt(spec)
    if other.parent_id != att.parent_id:
        return [check("diff.seed_of", ERROR, f"seed_of {other_id} has parent {other.parent_id}, this attempt "
                                             f"{att.parent_id}: a confirmation seed is a sibling", ref)]
    differ = [k for k, meta in RECIPE_KEYS.items() if meta.kind == TRAINING
              and not values_equal(att.recipe.get(k), other.recipe.get(k))]
    if differ != ["seed"]:
        what = ", ".join(differ) if differ else "nothing (the same seed)"
        return [check("diff.seed_of", ERROR, f"a confirmation seed of {other_id} differs from it in the seed only; "
                                             f"here: {what}", ref)]
    return []
