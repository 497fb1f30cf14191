"""A ladder: single-variable attempts, each a child of the best so far, chosen by rule.

The ladder spec (``ladder.yaml`` in the experiment directory) names a root attempt, a grid of
values per training variable, the seeds for confirmation runs and the number of rungs::

    root: d1
    variables:
      eps_clip: [0.1, 0.3]
      n_samples_per_prompt: [16]
    seeds: [42, 43, 44]       # the first is the ladder's; the others go to confirmation seeds
    rungs: 6                  # the ladder stops after this many rungs (the root counts)
    seeds_at_once: false      # true: each rung's confirmation seed is proposed with it, not after CONFIRM

:func:`propose` is the rule that picks the next rung from what the ladder has done so far; it is
a pure function of the rungs (with their decisions) and the SOTA pin:

- the root runs first, and nothing else runs before it is decided;
- the next rung's parent is the pinned SOTA attempt when there is one, else the root;
- with ``seeds_at_once``: a rung without a confirmation seed gets one next, decided or not (so a
  second runner runs both seeds at once; the seed decides after its sibling, see
  :func:`rlexp.stages.ladder.run_ladder`);
- after CONFIRM: a confirmation seed (a sibling with the next unused seed, ``seed_of`` the rung);
- after CONTINUE: the next untried grid value from the same parent — values of the variables the
  fault tree points at (:data:`FAULT_CLASS_VARIABLES`) first;
- after DEBUG: stop, and report the fault-tree class; after STOP-3a or STOP-3b: stop.

A rung changes one training variable. :func:`rung_differences` says what a requested change
really changes against its parent (through :class:`rlexp.spec.Difference` and the kinds of
:mod:`rlexp.spec.recipe`), and :func:`check_one_variable` refuses two.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlexp.errors import InputError
from rlexp.spec import _ID_RE, SCHEMA_DRAFT, Attempt, Difference, validate_recipe, values_equal
from rlexp.spec.fields import (
    BOOLEAN,
    STRING,
    Field,
    Invalid,
    check,
    check_keys,
    integer,
    list_of,
    object_json,
    with_input_gate,
)
from rlexp.spec.recipe import (
    FLAG_VALUE,
    RECIPE_KEYS,
    RECIPE_TABLE_TRAINER,
    TRAINING,
    key_json_schema,
    recipe_key,
)

MAX_RUNGS = 1000
MAX_VALUES = 100
STOP_DECISIONS = ("STOP-3a", "STOP-3b")
# The variables each fault-tree class's interventions change (rlexp.protocol.gates.fault_tree lists
# the interventions): a CONTINUE whose fault tree indicates a class tries these variables first.
FAULT_CLASS_VARIABLES: dict[str, tuple[str, ...]] = {
    "A": ("n_samples_per_prompt",),
    "B": ("lora_rank", "lora_alpha", "target_modules"),
    "C": ("prompt_data", "prompt_data_probs"),
    "D": ("min_lr_ratio", "init_kl_coef", "lr_warmup_ratio"),
}


@dataclass(frozen=True)
class LadderSpec:
    root: str
    variables: tuple[tuple[str, tuple[Any, ...]], ...]  # (recipe key, grid values), in the spec's order
    seeds: tuple[int, ...]
    rungs: int
    path: str = ""
    description: str = ""
    seeds_at_once: bool = False   # propose each rung's confirmation seed with the rung, not after CONFIRM

    @property
    def variable_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.variables)


def _attempt_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise Invalid(f"{value!r:.60} is not an attempt id of this experiment")
    return value


def _grid(value: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``variables``: each a training key of the recipe table with its values, checked as an
    ``attempt.yaml``'s recipe checks them."""
    if not isinstance(value, dict) or not value:
        raise Invalid("must be a non-empty mapping {recipe key: [values]}")
    grid: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in value.items():
        key = recipe_key(name) if isinstance(name, str) else None
        if key is None or key.type == FLAG_VALUE:
            raise Invalid("not a recipe key of the recipe table", at=str(name))
        if key.kind != TRAINING:
            raise Invalid(f"a {key.kind} key: a rung changes one training variable", at=name)
        if name == "seed":
            raise Invalid("seeds are replications, not a rung's variable: list them under seeds", at=name)
        if not isinstance(values, list) or not values or len(values) > MAX_VALUES:
            raise Invalid(f"must be a list of 1 to {MAX_VALUES} values", at=name)
        checked = []
        for i, item in enumerate(values):
            try:
                checked.append(validate_recipe({name: item}, "variables", RECIPE_TABLE_TRAINER)[name])  # its message, not its file
            except InputError as exc:
                raise Invalid(exc.message, at=f"{name}[{i}]") from None
        for i, item in enumerate(checked):
            if any(values_equal(item, other) for other in checked[:i]):
                raise Invalid(f"{item!r} is listed twice", at=f"{name}[{i}]")
        grid.append((name, tuple(checked)))
    return tuple(grid)


def _grid_json() -> dict[str, Any]:
    """The keys a rung may change (training keys of the recipe table, not ``seed``), each a list of
    distinct values of its type."""
    return {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": {
        key.name: {"type": "array", "minItems": 1, "maxItems": MAX_VALUES,
                   "uniqueItems": True, "items": {k: v for k, v in key_json_schema(key).items()
                                                  if k not in ("default", "description")}}
        for key in RECIPE_KEYS.values() if key.kind == TRAINING and key.type != FLAG_VALUE and key.name != "seed"}}


def _seeds(value: Any) -> list[int]:
    seeds = list_of(integer(0, 2**31 - 1))(value)
    if not seeds:
        raise Invalid("must be a non-empty list of integer seeds")
    if len(set(seeds)) != len(seeds):
        raise Invalid("a seed is listed twice")
    return seeds


# The ladder file's fields: each rule gives the loader's check, its error line and the JSON Schema
# (ladder_json_schema); the grid's schema is the recipe table's, built when asked for.
LADDER_FIELDS: dict[str, Field] = {
    "root": Field(_attempt_id, {"type": "string", "pattern": _ID_RE.pattern}).described(
        "an attempt of this experiment: the first rung and the default parent"),
    "variables": Field(_grid, {}).described("training keys of the recipe table, each with a grid of values"),
    "seeds": Field(_seeds, {**list_of(integer(0, 2**31 - 1)).json, "minItems": 1, "uniqueItems": True}).described(
        "seeds for confirmation runs (the rungs keep their parent's seed); the first is the ladder's"),
    "rungs": integer(1, MAX_RUNGS).described("the ladder stops after this many rungs (the root counts)"),
    "description": STRING.described("free text"),
    "seeds_at_once": BOOLEAN.described("true: each rung's confirmation seed is proposed with it, not after CONFIRM"),
}
LADDER_KEYS = tuple(LADDER_FIELDS)
_REQUIRED = ("root", "variables", "seeds", "rungs")


def ladder_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``ladder.yaml``, from :data:`LADDER_FIELDS` and the recipe
    table; ``docs/ladder.schema.json`` holds it (``scripts/write-schemas``)."""
    schema = object_json(LADDER_FIELDS, required=_REQUIRED, not_null=("seeds_at_once",))
    schema["properties"]["variables"] = {**schema["properties"]["variables"], **_grid_json()}
    return with_input_gate({"$schema": SCHEMA_DRAFT, "title": "rlexp ladder spec (ladder.yaml)",
                            "description": "single-variable attempts, each a child of the best so far, chosen by "
                                           "rule", **schema})


def parse_ladder_spec(raw: Any, display: str) -> LadderSpec:
    """Validate a ladder spec's content (``yaml.safe_load`` output); InputError names the file and field."""
    if not isinstance(raw, dict):
        what = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise InputError(display, None, f"expected a mapping with {', '.join(LADDER_KEYS)}, got {what}")
    check_keys(raw, display, "", LADDER_KEYS)
    for key in _REQUIRED:
        if raw.get(key) is None:
            raise InputError(display, key, "required")
    root = check(LADDER_FIELDS["root"], raw["root"], display, "root")
    grid = check(LADDER_FIELDS["variables"], raw["variables"], display, "variables")
    seeds = check(LADDER_FIELDS["seeds"], raw["seeds"], display, "seeds")
    rungs = check(LADDER_FIELDS["rungs"], raw["rungs"], display, "rungs")
    description = check(LADDER_FIELDS["description"], raw.get("description") or "", display, "description")
    seeds_at_once = check(LADDER_FIELDS["seeds_at_once"], raw.get("seeds_at_once", False), display, "seeds_at_once")
    if seeds_at_once and len(seeds) < 2:
        raise InputError(display, "seeds_at_once", "needs at least two seeds: the rung's and its confirmation seed's")
    return LadderSpec(root, grid, tuple(seeds), rungs, display, description, seeds_at_once)


# ----------------------------------------------------------------------------- rungs and proposals


@dataclass(frozen=True)
class Rung:
    """One rung as the ladder recorded it, with its decision read back from ``decision.json``."""

    attempt: str
    parent: str | None
    variable: str | None          # None for the root and for a confirmation seed's own seed change
    value: Any
    seed: int | None
    seed_of: str | None           # a confirmation seed: the rung it replicates
    decision: str | None = None   # None: not decided yet (running, or its runner was killed)
    fault_class: str | None = None  # the fault tree's indicated class, when decide named one

    def key(self) -> str:
        """What makes two rungs the same rung: two runners never run one twice (the claim's key)."""
        return rung_key(self.parent, self.variable, self.value, self.seed_of, self.seed)


def rung_key(parent: str | None, variable: str | None, value: Any, seed_of: str | None, seed: int | None) -> str:
    if parent is None and variable is None and seed_of is None:
        return "root"
    if seed_of is not None:
        return f"seed_of={seed_of}|seed={seed}"
    return f"parent={parent}|{variable}={json.dumps(value, sort_keys=True, default=str)}"


@dataclass(frozen=True)
class Proposal:
    """What the ladder does next: run a rung (``action == "run"``), wait for a rung being run, or stop."""

    action: str                   # run | wait | stop
    kind: str                     # root | grid | fault_tree | confirmation | complete | exhausted | DEBUG | STOP-3a ...
    reason: str
    attempt: str | None = None
    parent: str | None = None
    variable: str | None = None
    value: Any = None
    seed: int | None = None
    seed_of: str | None = None
    fault_class: str | None = None

    def rung(self) -> Rung:
        return Rung(self.attempt or "", self.parent, self.variable, self.value, self.seed, self.seed_of)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def fault_class_of(decision: Mapping[str, Any] | None) -> str | None:
    """The class the fault tree of a ``decision.json`` points to (its suggestion's letter), or None."""
    tree = (decision or {}).get("fault_tree") or {}
    suggestion = tree.get("suggestion") if isinstance(tree, Mapping) else None
    if isinstance(suggestion, str) and suggestion[:1] in FAULT_CLASS_VARIABLES and suggestion[1:2] == ")":
        return suggestion[0]
    return None


def propose(spec: LadderSpec, rungs: Sequence[Rung], *, sota: str | None,
            value_of: Callable[[str, str], Any]) -> Proposal:
    """The next rung of the ladder (pure). ``rungs`` in the order they were claimed; ``sota`` the
    pinned SOTA attempt; ``value_of(attempt, key)`` a recipe value of an attempt (a parent's)."""
    by_id = {r.attempt: r for r in rungs}
    root = by_id.get(spec.root)
    if root is None:
        return Proposal("run", "root", f"the ladder starts with its root {spec.root}", attempt=spec.root,
                        seed=value_of(spec.root, "seed"))
    stopped = any(r.decision in STOP_DECISIONS or r.decision == "DEBUG" for r in rungs)
    if spec.seeds_at_once and not stopped and len(rungs) < spec.rungs:
        for rung in rungs:
            if rung.seed_of is None and not any(r.seed_of == rung.attempt for r in rungs):
                free = [s for s in spec.seeds if s != rung.seed]
                return Proposal("run", "confirmation", f"seeds_at_once: {rung.attempt}'s confirmation seed {free[0]} "
                                                       f"runs with it (it decides after {rung.attempt})",
                                attempt=f"{rung.attempt}s2", parent=rung.parent, variable=rung.variable,
                                value=rung.value, seed=free[0], seed_of=rung.attempt)
    if root.decision is None:
        return Proposal("wait", "root", f"the root {spec.root} is not decided yet: every rung depends on it")
    for rung in rungs:
        if rung.decision in STOP_DECISIONS:
            return Proposal("stop", rung.decision, f"{rung.attempt} decided {rung.decision}: the ladder stops")
        if rung.decision == "DEBUG":
            where = f"; fault-tree class {rung.fault_class}" if rung.fault_class else ""
            return Proposal("stop", "DEBUG", f"{rung.attempt} decided DEBUG: fix the parser first{where}",
                            attempt=rung.attempt, fault_class=rung.fault_class)
    if len(rungs) >= spec.rungs:
        return Proposal("stop", "complete", f"the ladder has its {spec.rungs} rungs")
    for rung in rungs:
        if rung.decision != "CONFIRM":
            continue
        base = by_id.get(rung.seed_of) if rung.seed_of else rung
        if base is None:
            continue
        family = [base, *(r for r in rungs if r.seed_of == base.attempt)]
        if len(family) > 1:
            continue  # a confirmation seed exists (run, running, or decided)
        used = {r.seed for r in family}
        free = [s for s in spec.seeds if s not in used]
        if not free:
            return Proposal("stop", "exhausted", f"{base.attempt} asks for a confirmation seed and every seed of "
                                                 f"the ladder spec is used: add one to seeds")
        return Proposal("run", "confirmation", f"{base.attempt} decided CONFIRM: its confirmation seed {free[0]}",
                        attempt=f"{base.attempt}s{len(family) + 1}", parent=base.parent, variable=base.variable,
                        value=base.value, seed=free[0], seed_of=base.attempt)
    parent = sota or spec.root
    preferred: tuple[str, ...] = ()
    fault_class = None
    for rung in reversed(rungs):
        if parent in (rung.parent, rung.attempt) and rung.decision == "CONTINUE" and rung.fault_class:
            fault_class = rung.fault_class
            preferred = tuple(v for v in FAULT_CLASS_VARIABLES[fault_class] if v in spec.variable_names)
            break
    taken = {r.key() for r in rungs}
    order = [*preferred, *(v for v in spec.variable_names if v not in preferred)]
    grid = dict(spec.variables)
    for variable in order:
        current = value_of(parent, variable)
        for value in grid[variable]:
            if values_equal(current, value) or rung_key(parent, variable, value, None, None) in taken:
                continue
            kind = "fault_tree" if variable in preferred else "grid"
            why = (f"fault-tree class {fault_class} points at {variable}" if kind == "fault_tree"
                   else f"next grid value of {variable}")
            return Proposal("run", kind, f"{why}: {_fmt(current)} -> {_fmt(value)} from {parent}",
                            attempt=next_attempt_id(spec.root, rungs), parent=parent, variable=variable, value=value,
                            seed=value_of(parent, "seed"), fault_class=fault_class if kind == "fault_tree" else None)
    return Proposal("stop", "exhausted", f"every grid value has been tried from {parent}")


def next_attempt_id(root: str, rungs: Sequence[Rung]) -> str:
    """``<root>-r<N>``, N one past the highest rung number the ladder has used."""
    prefix = f"{root}-r"
    numbers = [int(r.attempt[len(prefix):]) for r in rungs
               if r.attempt.startswith(prefix) and r.attempt[len(prefix):].isdigit()]
    return f"{prefix}{max(numbers, default=0) + 1}"


def _fmt(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return str(value)


# ----------------------------------------------------------------------------- one variable per rung


def rung_differences(parent: Attempt, change: Mapping[str, Any], display: str | None,
                     field: str = "change") -> list[Difference]:
    """The recipe values ``change`` really changes against ``parent`` (no-ops dropped), with their kinds."""
    out: list[Difference] = []
    for key, value in change.items():
        meta = recipe_key(key) if isinstance(key, str) else None
        if meta is None or meta.type == FLAG_VALUE:
            raise InputError(display, f"{field} {key}", "a rung changes a recipe key of the recipe table")
        try:
            checked = validate_recipe({key: value}, str(display), parent.trainer.name)[key]
        except InputError as exc:
            raise InputError(display, f"{field} {key}", exc.message) from None
        if not values_equal(parent.recipe.get(key), checked):
            out.append(Difference(key, parent.recipe.get(key), checked, meta.kind))
    return out


def check_one_variable(parent: Attempt, change: Mapping[str, Any], display: str | None,
                       field: str = "change") -> Difference:
    """The one training variable a rung changes; InputError (``display``, ``field``) when it changes
    none or more than one."""
    training = [d for d in rung_differences(parent, change, display, field) if d.kind == TRAINING]
    if len(training) > 1:
        listed = ", ".join(f"{d.key} {_fmt(d.parent)} -> {_fmt(d.value)}" for d in training)
        raise InputError(display, field, f"a rung changes one training variable; this one changes "
                                         f"{len(training)} from {parent.id}: {listed}")
    if not training:
        raise InputError(display, field, f"changes no training variable of {parent.id}")
    return training[0]
