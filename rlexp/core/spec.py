"""The attempt spec (``attempt.yaml``): schema, parent-chain resolution, diff against the parent.

One file per attempt, under ``experiments/<experiment>/<attempt_id>/attempt.yaml``. A child names
its parent (``parent: a29b``), inherits everything and overrides what it states; ``change`` declares
the one training variable it changes, and :func:`diff_against_parent` says what really changed.

Recipe keys are OpenRLHF v0.9.x argument names without the dashes, so a recipe can be pasted from
a training script; :data:`RECIPE_KEYS` (the table of :mod:`rlexp.core.recipe`, re-exported here)
holds each key's type, default and kind: *training* (counts against the one-variable rule),
*instrumentation* or *infrastructure*.

Every bad input is an :class:`~rlexp.errors.InputError` naming the file and the key path. The
schema is declared here and checked with the standard library (see "schema" below for why);
:func:`attempt_json_schema` renders the same schema as a JSON Schema for editors
(``docs/attempt.schema.json``).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.core.recipe import (
    ADVANTAGE_ESTIMATORS,
    DOTTED_KEY_PATTERN,
    FLAG_VALUE,
    INFRASTRUCTURE,
    INSTRUMENTATION,
    JSON_VALUE,
    KL_ESTIMATORS,
    RECIPE_KEYS,
    TRAINING,
    RecipeKey,
    json_number,
    key_table,
    recipe_json_schema,
    recipe_key_for,
    table_json_schema,
)
from rlexp.core.recipe import LATER_UNDERSCORE_KEYS as LATER_UNDERSCORE_KEYS  # re-exported
from rlexp.core.recipe import is_dotted_recipe_key as is_dotted_recipe_key  # re-exported
from rlexp.errors import InputError
from rlexp.storage.files import check_regular_file, load_yaml
from rlexp.storage.layout import SPEC_NAME
from rlexp.trainers import names as trainer_names

ROLES = ("pool", "ood_monitor", "ood_primary", "id", "sanity")
EVAL_ROLES = ("ood_monitor", "ood_primary", "id", "sanity")
TRAINERS = trainer_names()  # the registry rlexp.trainers; each has its key table (rlexp.core.recipe)
ENGINES = ("local", "vllm", "openai")
ANSWER_MODES = ("exact", "math_verify")  # rlexp.core.answers.is_correct's modes
# Sets graded in-run by the trainer's reward (exact match): their grading is not a spec choice.
TRAINER_GRADED_ROLES = ("pool", "ood_monitor")
DATASET_FIELDS = ("path", "size", "prompt_suffix", "answer_mode")  # a dataset's resolved fields

# ----------------------------------------------------------------------------- resolved objects


@dataclass(frozen=True)
class TrainerSettings:
    name: str  # openrlhf | local | trl | verl
    version: str  # "0.9.3", "0.11.0"; the local trainer follows OpenRLHF 0.11 step semantics
    gpus: int | None  # GPUs available to the run (None: not stated)


@dataclass(frozen=True)
class DatasetRef:
    """A dataset of the attempt. ``size`` is the file's line count when the file exists, else the
    stated size; ``stated_size`` keeps what the spec said (a mismatch is a preflight check)."""

    role: str
    path: Path | None  # absolute
    size: int | None
    prompt_suffix: str
    stated_size: int | None = None
    exists: bool = False
    # how rlexp eval and the guards grade this set: the set's own, else eval.answer_mode; always
    # "exact" for the sets the trainer grades in-run (pool, ood_monitor)
    answer_mode: str = "exact"


@dataclass(frozen=True)
class EvalSettings:
    """How checkpoints and baselines are evaluated (one pipeline for all of them)."""

    engine: str = "local"  # local | vllm | openai
    prompt_suffix: str = ""
    answer_mode: str = "exact"  # exact | math_verify: the default grading of ood_primary, id, sanity
    max_tokens: int = 2048
    max_lora_rank: int = 16  # vLLM's default; adapters of a higher rank are refused
    temperature: float = 0.0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int = 0
    batch_size: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_loras: int | None = None
    # vllm engine: the weights' dtype (vLLM's "auto" runs a float32 checkpoint in half precision)
    # and eager mode (no CUDA graphs / torch.compile); None/False leave vLLM's defaults
    dtype: str | None = None
    enforce_eager: bool = False
    base_url: str | None = None  # openai engine: the server (vLLM's OpenAI-compatible API)
    model: str | None = None  # openai engine: served model name
    # openai engine: the NAME of the env var with the key, never the key; None = no Authorization header
    # (the engine's default too: an ambient OPENAI_API_KEY is never sent unless named here)
    api_key_env: str | None = None


ENV_LOSSES = ("grpo", "gspo")  # rlexp.backends.env_trainer.LOSS_TYPES
ENV_ADVANTAGE_MODES = ("return", "token_rewards")  # rlexp.backends.env_trainer.ADVANTAGE_MODES
ENV_PRIMARY_METRICS = ("success", "mean_reward")


@dataclass(frozen=True)
class EnvironmentSettings:
    """An environment task (docs/environments.md): dataset rows play episodes in ``name`` (rows may
    name their own ``env``/``config``), bounded by the budgets, trained with ``loss`` and
    ``advantage_mode``, evaluated on ``primary_metric`` (``success`` = return >= success_threshold,
    McNemar; ``mean_reward`` = the paired mean-score statistics)."""

    name: str = "exact_match"  # the environment of a row that names none (registered name or import path)
    config: dict[str, Any] = field(default_factory=dict)  # that environment's config
    max_turns: int = 4
    max_tokens_per_turn: int = 16
    max_total_tokens: int = 96
    loss: str = "grpo"  # grpo: token-level ratio | gspo: sequence-level ratio, own clip range
    gspo_eps_low: float = 3e-4
    gspo_eps_high: float = 4e-4
    advantage_mode: str = "return"  # return | token_rewards
    primary_metric: str = "success"  # success | mean_reward
    success_threshold: float = 1.0


@dataclass(frozen=True)
class Budget:
    free_disk_gb: float | None = None
    checkpoint_size_gb: float | None = None  # one saved checkpoint (LoRA adapter or full model)


@dataclass(frozen=True)
class Baseline:
    accuracy: float | None = None  # baseline accuracy on the primary set, fraction 0..1
    discordance: float = 0.12  # expected share of discordant problems (11.8% in the campaign's final comparison)


@dataclass(frozen=True)
class Attempt:
    id: str
    parent_id: str | None
    change: dict[str, Any]
    intent: dict[str, Any]
    trainer: TrainerSettings
    recipe: dict[str, Any]  # fully resolved: parent chain merged, defaults applied
    recipe_stated: dict[str, Any]  # only the keys some spec in the chain states
    datasets: dict[str, DatasetRef]
    eval: EvalSettings
    checkpoints_mid: int | None
    checkpoints_extra: tuple[int, ...]
    budget: Budget
    baseline: Baseline
    attempt_dir: Path
    experiment_dir: Path
    spec_path: Path
    parent: Attempt | None = None
    display_path: str = ""  # the spec path as the user wrote it (for messages)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # this file's own content
    merged_raw: dict[str, Any] = field(default_factory=dict, repr=False)  # chain-merged sections
    environment: EnvironmentSettings | None = None  # an environment task (None: single-turn prompts)

    def chain(self) -> list[Attempt]:
        """This attempt and its ancestors, nearest first."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def chain_sha256(self) -> str:
        """One digest of every spec file in the chain: editing a parent changes the child's plan."""
        from rlexp.storage.files import sha256_file, sha256_text

        return sha256_text("\n".join(f"{a.id}:{sha256_file(a.spec_path)}" for a in self.chain()))

    def base_model(self) -> Path | str:
        """The base model (``recipe.pretrain``; the trainer's model key, TRL's ``model_name_or_path``),
        resolved once for every stage: a directory (a relative path resolves against the experiment
        directory) when it exists, else the name as written (a hub id, which vLLM, an
        OpenAI-compatible server or the trainer resolve themselves)."""
        model_key = key_table(self.trainer.name).model_key  # pretrain; TRL: model_name_or_path
        pretrain = self.recipe.get(model_key)
        if not isinstance(pretrain, str) or not pretrain:
            raise InputError(self.spec_path, f"recipe.{model_key}", "missing: the base model (a directory or a hub id)")
        path = Path(pretrain)
        if not path.is_absolute():
            path = self.experiment_dir / path
        return path if path.exists() else pretrain


@dataclass(frozen=True)
class Difference:
    key: str  # recipe key, or datasets.<role>.<field>, trainer.<field>, eval.<field>
    parent: Any
    value: Any
    kind: str  # training | instrumentation | infrastructure


# ----------------------------------------------------------------------------- schema
#
# A small declarative schema, checked with the standard library: pydantic would cost ~0.1 s of
# `rlexp plan`'s start-up for a dozen flat sections (the SOP file is read the same way, rlexp.core.sop). Every section is a mapping
# with a closed set of keys (unknown keys are errors with a "did you mean"); leaves are
# checkers that return the value or raise with a one-line reason, and carry the JSON Schema of
# what they accept (for attempt_json_schema). ``None`` means "not stated".


# Recipe keys whose value is a credential: v0.9.x's ``use_wandb`` takes the W&B key itself; any
# key naming an API key, a token, a secret or a password (``hf_token``, ``wandb_api_key``). Whole
# words only: ``max_tokens_per_gpu`` and ``disable_fast_tokenizer`` are not credentials.
CREDENTIAL_RECIPE_KEYS = frozenset({"use_wandb", "wandb_key", "logger.wandb.key"})
_CREDENTIAL_WORD = re.compile(r"(?:^|[._-])(?:api[._-]?key|apikey|token|secret|password|passwd|credentials?)(?:$|[._-])",
                              re.IGNORECASE)


def _counts_something(key: RecipeKey | None) -> bool:
    """A trainer's key whose default is a number names a count, never a credential (verl's
    ``ppo_max_token_len_per_gpu`` is a number of tokens)."""
    return key is not None and isinstance(key.default, int | float) and not isinstance(key.default, bool)


def is_credential_key(key: str) -> bool:
    """Whether a recipe key's value would be a credential (refused in specs)."""
    return key in CREDENTIAL_RECIPE_KEYS or bool(_CREDENTIAL_WORD.search(key))


class _Invalid(Exception):
    """A leaf value is wrong; the caller adds file and key path."""


# Bounds of the input gate: every number a spec states is finite and at most this large, so
# no later computation (the schedule, a dataset size) can run out of time or memory on it.
MAX_SPEC_INT = 10**9
MAX_SPEC_FLOAT = 1e12


@dataclass(frozen=True)
class _Leaf:
    """A checker and the JSON Schema of the values it accepts."""

    check: Callable[[Any], Any]
    json: dict[str, Any]

    def __call__(self, value: Any) -> Any:
        return self.check(value)


def _int(minimum: int | None = None, maximum: int = MAX_SPEC_INT) -> _Leaf:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be an integer (got {value!r:.60})")
        if minimum is not None and value < minimum:
            raise _Invalid(f"must be > {minimum - 1} (got {value!r})" if minimum == 1 else
                           f"must be >= {minimum} (got {value!r})")  # fmt: skip
        if abs(value) > maximum:
            raise _Invalid(f"must be at most {maximum} in size, the limit (got {value})")
        return value

    return _Leaf(check, {"type": "integer"} | ({} if minimum is None else {"minimum": minimum}))


def _number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> _Leaf:
    def check(value: Any) -> float:
        number = _to_float(value)
        if low is not None and (number <= low if low_open else number < low):
            raise _Invalid(f"must be {'>' if low_open else '>='} {low:g} (got {value!r})")
        if high is not None and number > high:
            raise _Invalid(f"must be <= {high:g} (got {value!r})")
        return number

    return _Leaf(check, json_number(low, high, low_open=low_open))


def _to_float(value: Any) -> float:
    # PyYAML reads 5e-7 (no dot) as a string: accept numeric strings, like a command line would
    if isinstance(value, bool):
        raise _Invalid(f"must be a number (got {value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _Invalid(f"must be a number (got {value!r})") from None
    if not math.isfinite(number):
        raise _Invalid(f"must be a finite number (got {value!r:.60})")
    if abs(number) > MAX_SPEC_FLOAT:
        raise _Invalid(f"must be at most {MAX_SPEC_FLOAT:g} in size, the limit (got {value!r:.60})")
    return number


def _str(value: Any) -> str:
    if not isinstance(value, str):
        hint = ' (quote versions: "0.10")' if isinstance(value, float) else ""
        raise _Invalid(f"must be a string (got {value!r}){hint}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false (got {value!r})")
    return value


def _one_of(*choices: str) -> _Leaf:
    def check(value: Any) -> str:
        if value not in choices:
            raise _Invalid(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return _Leaf(check, {"enum": list(choices)})


def _list_of(item: _Leaf) -> _Leaf:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _Invalid(f"must be a list (got {value!r})")
        return [item(v) for v in value]

    return _Leaf(check, {"type": "array", "items": item.json})


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"must be a mapping (got {value!r})")
    return dict(value)


_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_STR = _Leaf(_str, {"type": "string"})
_BOOL = _Leaf(_bool, {"type": "boolean"})
_ID = _Leaf(_str, {"type": "string", "pattern": _ID_RE.pattern})  # the pattern is checked on load
_POS_INT = _int(1)
_DATASET = {"path": _STR, "size": _POS_INT, "prompt_suffix": _STR, "answer_mode": _one_of(*ANSWER_MODES),
            "allow_outside": _Leaf(_bool, {"type": "boolean"})}  # a path outside the experiment, on purpose
_SCHEMA: dict[str, Any] = {
    "id": _ID,
    "parent": _ID,
    "seed_of": _ID,
    "description": _STR,
    "change": _Leaf(_mapping, {"type": "object"}),  # keys checked by _check_change_key
    "intent": {"global_steps": _POS_INT, "max_warmup_share": _number(0, 1, low_open=True), "note": _STR},
    "trainer": {"name": _one_of(*TRAINERS), "version": _STR, "gpus": _int(0)},
    "recipe": "recipe",  # checked against RECIPE_KEYS
    "datasets": {role: _DATASET for role in ROLES},
    "eval": {
        "engine": _one_of(*ENGINES),
        "prompt_suffix": _STR,
        "answer_mode": _one_of(*ANSWER_MODES),
        "max_tokens": _POS_INT,
        "max_lora_rank": _POS_INT,
        "temperature": _number(0),
        "top_p": _number(0, 1, low_open=True),
        "num_samples": _POS_INT,
        "seed": _int(),
        "batch_size": _POS_INT,
        "max_model_len": _POS_INT,
        "tensor_parallel_size": _POS_INT,
        "gpu_memory_utilization": _number(0, 1, low_open=True),
        "max_loras": _POS_INT,
        "dtype": _one_of("auto", "float32", "float16", "bfloat16"),
        "enforce_eager": _BOOL,
        "base_url": _STR,
        "model": _STR,
        "api_key_env": _STR,
    },
    "checkpoints": {"mid": _POS_INT, "extra": _list_of(_POS_INT)},
    "budget": {"free_disk_gb": _number(0), "checkpoint_size_gb": _number(0, low_open=True)},
    "baseline": {"accuracy": _number(0, 1), "discordance": _number(0, 1, low_open=True)},
    "environment": {
        "name": _STR,
        "config": _Leaf(_mapping, {"type": "object"}),
        "max_turns": _POS_INT,
        "max_tokens_per_turn": _POS_INT,
        "max_total_tokens": _POS_INT,
        "loss": _one_of(*ENV_LOSSES),
        "gspo_eps_low": _number(0, 1, low_open=True),
        "gspo_eps_high": _number(0, 1, low_open=True),
        "advantage_mode": _one_of(*ENV_ADVANTAGE_MODES),
        "primary_metric": _one_of(*ENV_PRIMARY_METRICS),
        "success_threshold": _number(),
    },
}


_DESCRIPTIONS = {
    "id": "the attempt id; must equal the directory name (defaults to it)",
    "parent": "the id of the parent attempt in the same experiment; everything is inherited",
    "seed_of": "a confirmation seed of this sibling attempt (same parent and change, another recipe.seed)",
    "description": "free text",
    "change": "the one training variable this attempt changes: {key: value}",
    "intent": "what you mean to run",
    "trainer": "which trainer runs the recipe",
    "recipe": None,  # the recipe table's own
    "datasets": "paths relative to the experiment directory; a file's line count wins over size",
    "eval": "how checkpoints and baselines are evaluated (one pipeline for all of them)",
    "checkpoints": "the pre-registered mid checkpoint and extra ones",
    "budget": "disk budget of the checkpoints",
    "baseline": "expected baseline accuracy and discordance, for the power section",
    "environment": "an environment task (docs/environments.md): default environment, budgets, loss, primary metric",
}
SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``None`` means "not stated" in every section but the recipe."""
    if isinstance(schema.get("type"), str) and not {"anyOf", "enum", "const"} & set(schema):
        # the other keywords (minimum, pattern, items, properties...) do not apply to null
        return {**schema, "type": [schema["type"], "null"]}
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def _section_json(section: dict[str, Any]) -> dict[str, Any]:
    properties = {}
    for name, rule in section.items():
        if isinstance(rule, dict):
            properties[name] = _nullable(_section_json(rule))
        else:
            properties[name] = _nullable(rule.json)
    return {"type": "object", "additionalProperties": False, "properties": properties}


def attempt_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``attempt.yaml``, derived from :data:`_SCHEMA` and the
    recipe table: editors complete and check keys with it. It accepts what :func:`load_attempt`
    accepts, except what JSON Schema cannot say: the bounds of a number written as text, an id
    matching its directory, the parent chain, the files. ``docs/attempt.schema.json`` holds it
    (regenerate with ``scripts/write-attempt-schema``; a test checks it is current)."""
    top = _section_json({k: v for k, v in _SCHEMA.items() if k != "recipe"})
    properties: dict[str, Any] = {}
    for name in _SCHEMA:
        if name == "recipe":  # its keys depend on trainer.name: see allOf below
            properties[name] = {"description": "the trainer's own key names (trainer.name picks the table)",
                                "type": ["object", "null"]}
            continue
        properties[name] = top["properties"][name]
        if name == "change":
            names = {"anyOf": [{"enum": change_keys()}, {"pattern": DOTTED_KEY_PATTERN}]}
            properties[name] = _nullable({"type": "object", "propertyNames": names})
        if name == "datasets":  # the sets the trainer grades in-run take no answer_mode
            for role in TRAINER_GRADED_ROLES:
                properties[name]["properties"][role]["properties"].pop("answer_mode")
        if _DESCRIPTIONS[name]:
            properties[name] = {"description": _DESCRIPTIONS[name], **properties[name]}
    # each trainer has its own recipe keys: the recipe's schema follows trainer.name (a child that
    # inherits its trainer without stating it is checked as OpenRLHF's by editors; rlexp plan knows)
    others = [t for t in TRAINERS if key_table(t).keys is not RECIPE_KEYS]
    by_trainer = [_when_trainer([t], table_json_schema(key_table(t))) for t in others]
    openrlhf = _when_trainer([t for t in TRAINERS if t not in others], recipe_json_schema(), negate=others)
    return {
        "$schema": SCHEMA_DRAFT,
        "title": "rlexp attempt spec (attempt.yaml)",
        "description": "One attempt of an experiment: its directory holds this spec and what the stages write",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "allOf": [openrlhf, *by_trainer],
    }


def _when_trainer(names: list[str], recipe: dict[str, Any], negate: list[str] | None = None) -> dict[str, Any]:
    """``recipe`` applies when trainer.name is one of ``names`` (or, with ``negate``, none of those)."""
    if negate is not None:
        condition = {"not": {"properties": {"trainer": {"properties": {"name": {"enum": negate}},
                                                        "required": ["name"]}}, "required": ["trainer"]}}
    else:
        condition = {"properties": {"trainer": {"properties": {"name": {"enum": names}}, "required": ["name"]}},
                     "required": ["trainer"]}
    return {"if": condition, "then": {"properties": {"recipe": _nullable(recipe)}}}


def attempt_json_schema_text() -> str:
    """:func:`attempt_json_schema` as the committed file's text."""
    import json

    return json.dumps(attempt_json_schema(), indent=2, ensure_ascii=False) + "\n"


def _suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _validate(raw: Any, display: str) -> dict[str, Any]:
    """Validate one file's content; return the keys it states (nested, after coercion)."""
    if not isinstance(raw, dict):
        what = "empty file" if raw is None else f"a {type(raw).__name__}"
        raise InputError(display, None, f"expected a mapping of spec keys at the top level, got {what}")
    return _validate_section(raw, _SCHEMA, display, "")


def _validate_section(
    raw: dict[Any, Any], schema: dict[str, Any], display: str, prefix: str
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in raw.items():
        where = f"{prefix}{name}"
        if not isinstance(name, str):
            raise InputError(display, where, f"keys must be strings, got {type(name).__name__} {name!r:.40}")
        rule = schema.get(name)
        if rule is None:
            raise InputError(display, where, "unknown key" + _suggest(str(name), list(schema)))
        if value is None:
            continue  # not stated
        if rule == "recipe":  # checked by _load once the trainer (maybe a parent's) is known
            if not isinstance(value, dict):
                raise InputError(display, where, f"must be a mapping (got {value!r})")
            out[name] = dict(value)
        elif isinstance(rule, dict):
            if not isinstance(value, dict):
                raise InputError(display, where, f"must be a mapping (got {value!r})")
            out[name] = _validate_section(value, rule, display, f"{where}.")
        else:
            try:
                out[name] = rule(value)
            except _Invalid as exc:
                raise InputError(display, where, str(exc)) from None
    return out


def validate_recipe(recipe: dict[str, Any], display: str, trainer: str = "openrlhf") -> dict[str, Any]:
    """Check recipe keys and values as a spec's ``recipe`` section does; returns them coerced."""
    return _validate_recipe(recipe, display, trainer)


def _validate_recipe(recipe: dict[str, Any], display: str, trainer: str = "openrlhf") -> dict[str, Any]:
    """Check each recipe key against ``trainer``'s key table (:data:`RECIPE_KEYS` for OpenRLHF and
    the local trainer); return the values, coerced."""
    table = key_table(trainer)
    out: dict[str, Any] = {}
    for name, value in recipe.items():
        where = f"recipe.{name}"
        if not isinstance(name, str):
            raise InputError(display, where, f"keys must be strings, got {type(name).__name__} {name!r:.40}")
        if (is_credential_key(name) and value is not None and value is not False
                and not _counts_something(table.lookup(name))):
            raise InputError(display, where, "a credential does not go in a spec (it would reach plan.json, the "
                                             "report and MLflow): set it in an environment variable instead "
                                             "(e.g. WANDB_API_KEY, HF_TOKEN)")
        key = table.lookup(name)
        if key is None:
            spelling = "" if table.keys is RECIPE_KEYS else f" (trainer {trainer}: {table.spelling})"
            raise InputError(display, where, "unknown key" + _suggest(str(name), list(table.keys)) + spelling)
        if value is None:
            if not key.nullable:
                raise InputError(display, where, f"must not be null (a {key.type.replace('_', ' ')})")
            out[name] = None
            continue
        try:
            value = _coerce(key, value)
            _check_constraint(key, value)
        except _Invalid as exc:
            raise InputError(display, where, str(exc)) from None
        out[name] = value
    return out


def _coerce(key: RecipeKey, value: Any) -> Any:
    if key.type == "int":
        return _int()(value)
    if key.type == "float":
        return _to_float(value)
    if key.type == "bool":
        return _bool(value)
    if key.type == "str":
        return _str(value)
    if key.type == JSON_VALUE:  # a composite TRL field (a dict, a union): TRL's own config checks it at launch
        return value
    if key.type == FLAG_VALUE:  # a newer release's flag: the argv builder checks it against that parser
        scalar = bool | int | float | str
        if isinstance(value, scalar) or (isinstance(value, list) and value and all(
                isinstance(v, scalar) and not isinstance(v, bool) for v in value)):
            return value
        raise _Invalid(f"must be a switch, a number, a string or a list of them (got {value!r})")
    if key.type == "str_list":
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return value
        raise _Invalid(f"must be a string or a list of strings (got {value!r})")
    # float_pair
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _Invalid(f"must be a list of two numbers (got {value!r})")
    return tuple(_to_float(v) for v in value)


def _check_constraint(key: RecipeKey, value: Any) -> None:
    rule = key.constraint
    if rule == "advantage" and value not in ADVANTAGE_ESTIMATORS:
        raise _Invalid(f"must be one of {', '.join(ADVANTAGE_ESTIMATORS)} (got {value!r})")
    if rule == "kl_estimator" and value not in KL_ESTIMATORS:
        raise _Invalid(f"must be one of {', '.join(KL_ESTIMATORS)} (got {value!r})")
    if rule == "gt0" and not value > 0:
        raise _Invalid(f"must be > 0 (got {value!r})")
    if rule == "ge1" and not value >= 1:
        raise _Invalid(f"must be >= 1 (got {value!r})")
    if rule == "ge0" and not value >= 0:
        raise _Invalid(f"must be >= 0 (got {value!r})")
    if rule == "ratio" and not 0 <= value <= 1:
        raise _Invalid(f"must be between 0 and 1 (got {value!r})")
    if rule == "steps" and not (value == -1 or value >= 1):
        raise _Invalid(f"must be -1 (never) or >= 1 (got {value!r})")


# ----------------------------------------------------------------------------- loading


def resolve_spec_path(path: str | Path) -> Path:
    """``ATTEMPT`` arguments are the attempt directory or its ``attempt.yaml``."""
    path = Path(path)
    if path.is_dir():
        return path / SPEC_NAME
    return path


def load_attempt(path: str | Path) -> Attempt:
    """Load an attempt spec, resolve its parent chain and apply defaults (InputError on bad input)."""
    spec_path = resolve_spec_path(path)
    return _load(spec_path, seen=())


def _load(spec_path: Path, seen: tuple[str, ...]) -> Attempt:
    display = str(spec_path)
    if not spec_path.exists():
        raise InputError(display, None, "file not found (an attempt is a directory holding attempt.yaml)")
    own = _validate(load_yaml(spec_path), display)
    attempt_dir = spec_path.parent
    dir_id = attempt_dir.resolve().name
    attempt_id = own.get("id") or dir_id
    if not _ID_RE.match(attempt_id):
        raise InputError(display, "id", f"{attempt_id!r} is not a valid attempt id (letters, digits, _ . -)")
    if attempt_id != dir_id:
        raise InputError(display, "id", f"{attempt_id!r} does not match its directory name {dir_id!r}")
    key = str(spec_path.resolve())

    parent: Attempt | None = None
    parent_id = own.get("parent")
    if parent_id is not None:
        if not _ID_RE.match(parent_id):  # a bare id: no paths, no other experiment
            raise InputError(display, "parent", f"{parent_id!r} is not an attempt id of this experiment")
        parent_spec = attempt_dir.parent / parent_id / SPEC_NAME
        if not parent_spec.exists():
            raise InputError(display, "parent", f"attempt {parent_id!r} not found (no {parent_spec})")
        if str(parent_spec.resolve()) in (*seen, key):
            chain = [Path(s).parent.name for s in (*seen, key)] + [parent_id]
            raise InputError(display, "parent", "cyclic parent chain: " + " -> ".join(chain))
        parent = _load(parent_spec, seen=(*seen, key))

    if "recipe" in own:
        trainer = (own.get("trainer") or {}).get("name") or (parent.trainer.name if parent else None)
        if trainer is None:
            raise InputError(display, "trainer.name", f"required ({', '.join(TRAINERS)}) in this spec or a parent")
        own["recipe"] = _validate_recipe(own["recipe"], display, trainer)
    return _resolve(own, parent, spec_path, attempt_id, display)


def _merge(parent: dict[str, Any] | None, child: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(parent or {})
    for k, v in (child or {}).items():
        out[k] = _merge(out.get(k), v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _resolve(
    own: dict[str, Any], parent: Attempt | None, spec_path: Path, attempt_id: str, display: str
) -> Attempt:
    p_raw: dict[str, Any] = parent.merged_raw if parent is not None else {}
    merged: dict[str, Any] = {}
    for section in ("intent", "trainer", "recipe", "datasets", "eval", "checkpoints", "budget", "baseline",
                    "environment"):
        merged[section] = _merge(p_raw.get(section), own.get(section))
    # A child pointing a dataset at another file must not inherit the old file's size.
    for role, entry in (own.get("datasets") or {}).items():
        inherited = (p_raw.get("datasets") or {}).get(role) or {}
        if entry and "path" in entry and "size" not in entry and entry["path"] != inherited.get("path"):
            merged["datasets"][role].pop("size", None)

    trainer_raw = merged["trainer"]
    if not trainer_raw.get("name"):
        raise InputError(display, "trainer.name", f"required ({', '.join(TRAINERS)}) in this spec or a parent")
    if parent is not None and key_table(trainer_raw["name"]).keys is not key_table(parent.trainer.name).keys:
        # each trainer has its own recipe keys: the parent's recipe means nothing to another trainer
        # (openrlhf and local share OpenRLHF's, so a child may move between them)
        raise InputError(display, "trainer.name", f"{trainer_raw['name']!r} differs from parent {parent.id}'s "
                                                  f"{parent.trainer.name!r}: start a new root attempt instead")
    table = key_table(trainer_raw["name"])
    version = trainer_raw.get("version")
    if version is None:
        from rlexp.trainers import rules as trainer_rules

        version = trainer_rules(trainer_raw["name"]).default_version  # local: OpenRLHF 0.11's step semantics
        if version is None and table.versions:
            version = table.versions[0]  # the one release whose keys the table lists
        elif version is None:
            raise InputError(display, "trainer.version", 'required for openrlhf (e.g. "0.9.3" or "0.11.0")')
    if not re.match(r"^\d+\.\d+", version):
        raise InputError(display, "trainer.version", f'{version!r} is not a version like "0.9.3"')
    if table.versions and version not in table.versions:
        raise InputError(display, "trainer.version", f"{trainer_raw['name']} {version} is not a listed release: the "
                                                     f"recipe keys were read from {', '.join(table.versions)}")
    trainer = TrainerSettings(name=trainer_raw["name"], version=version, gpus=trainer_raw.get("gpus"))

    recipe_stated = dict(merged["recipe"])
    recipe = {**table.defaults, **recipe_stated}

    experiment_dir = spec_path.parent.parent
    eval_raw = merged["eval"]
    defaults = EvalSettings()
    eval_settings = EvalSettings(
        **{k: eval_raw.get(k, getattr(defaults, k)) for k in EvalSettings.__dataclass_fields__}
    )

    datasets: dict[str, DatasetRef] = {}
    for role in ROLES:
        entry = merged["datasets"].get(role)
        if entry is None:
            continue
        datasets[role] = _dataset_ref(role, entry, experiment_dir, eval_settings, display)

    change = own.get("change") or {}
    for ckey, cvalue in change.items():
        if not isinstance(ckey, str):
            raise InputError(display, f"change.{ckey}",
                             f"keys must be strings, got {type(ckey).__name__} {ckey!r:.40}")
        _check_change_key(ckey, display, trainer.name)
        if (is_credential_key(ckey) and cvalue is not None and cvalue is not False
                and not _counts_something(recipe_key_for(trainer.name, ckey))):
            raise InputError(display, f"change.{ckey}", "a credential does not go in a spec: set it in an "
                                                         "environment variable instead (e.g. WANDB_API_KEY)")

    ck = merged["checkpoints"]
    budget = Budget(**merged["budget"])
    baseline_raw = {k: v for k, v in merged["baseline"].items() if v is not None}
    attempt = Attempt(
        id=attempt_id,
        parent_id=own.get("parent"),
        change=dict(change),
        intent=dict(merged["intent"]),
        trainer=trainer,
        recipe=recipe,
        recipe_stated=recipe_stated,
        datasets=datasets,
        eval=eval_settings,
        checkpoints_mid=ck.get("mid"),
        checkpoints_extra=tuple(ck.get("extra") or ()),
        budget=budget,
        baseline=Baseline(**baseline_raw),
        attempt_dir=spec_path.parent.resolve(),
        experiment_dir=experiment_dir.resolve(),
        spec_path=spec_path.resolve(),
        parent=parent,
        display_path=display,
        raw=own,
        merged_raw=merged,
        environment=_environment(merged["environment"], display),
    )
    return attempt


def _environment(merged: dict[str, Any], display: str) -> EnvironmentSettings | None:
    """The attempt's environment task, or None when no spec of the chain has an ``environment:``."""
    if not merged:
        return None
    settings = EnvironmentSettings(**merged)
    if settings.max_tokens_per_turn > settings.max_total_tokens:
        raise InputError(display, "environment.max_tokens_per_turn",
                         f"{settings.max_tokens_per_turn} exceeds max_total_tokens {settings.max_total_tokens}")
    if not settings.name.strip():
        raise InputError(display, "environment.name", "empty: a registered name or an import path")
    return settings


def _dataset_ref(
    role: str, entry: dict[str, Any], experiment_dir: Path, eval_settings: EvalSettings, display: str
) -> DatasetRef:
    stated = entry.get("size")
    answer_mode = entry.get("answer_mode")
    if answer_mode is not None and role in TRAINER_GRADED_ROLES:
        raise InputError(
            display,
            f"datasets.{role}.answer_mode",
            "this set is graded in-run by the trainer's exact-match reward; "
            "answer_mode applies to ood_primary, id and sanity",
        )
    if role in TRAINER_GRADED_ROLES:
        answer_mode = "exact"
    path = None
    exists = False
    size = stated
    if entry.get("path"):
        where = f"datasets.{role}.path"
        if "\0" in entry["path"]:
            raise InputError(display, where, "a NUL byte in the path")
        path = Path(entry["path"])
        if not path.is_absolute():
            path = experiment_dir / path
        if os.path.lexists(path) and not path.is_dir():  # a FIFO, a device, a symlink loop: refused now,
            try:  # not when launch's trainer blocks on it (and before resolve() trips on a loop)
                check_regular_file(path)
            except InputError as exc:
                raise InputError(display, where, f"{entry['path']}: {exc.message}") from None
        path = path.resolve()
        if not entry.get("allow_outside") and not path.is_relative_to(experiment_dir.resolve()):
            raise InputError(display, where, f"{entry['path']} is outside the experiment directory; state "
                                             f"datasets.{role}.allow_outside: true to use it")
        if path.is_dir():
            raise InputError(
                display, f"datasets.{role}.path", f"{path} is a directory, expected a JSONL file"
            )
        exists = path.is_file()
        if exists:
            size = count_records(path)
    if size is None and not exists:
        raise InputError(display, f"datasets.{role}", "state a size, or a path to an existing file")
    suffix = entry.get("prompt_suffix")
    return DatasetRef(
        role=role,
        path=path,
        size=size,
        prompt_suffix=eval_settings.prompt_suffix if suffix is None else suffix,
        stated_size=stated,
        exists=exists,
        answer_mode=eval_settings.answer_mode if answer_mode is None else answer_mode,
    )


def count_records(path: Path) -> int:
    """Non-blank lines of a JSONL file (its record count; validity is read by the checks)."""
    count = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                count += 1
    return count


def change_keys() -> list[str]:
    """Every key ``change`` may name: a recipe key or a datasets/trainer/eval field, dotted."""
    return [
        *RECIPE_KEYS,
        *(f"datasets.{role}.{fname}" for role in ROLES for fname in DATASET_FIELDS
          if not (fname == "answer_mode" and role in TRAINER_GRADED_ROLES)),  # always exact there
        *(f"trainer.{fname}" for fname in TrainerSettings.__dataclass_fields__),
        *(f"eval.{fname}" for fname in EvalSettings.__dataclass_fields__),
    ]


def _check_change_key(ckey: str, display: str, trainer: str = "openrlhf") -> None:
    if recipe_key_for(trainer, ckey) is None and ckey not in change_keys():
        candidates = [
            *key_table(trainer).keys,
            *(f"datasets.pool.{f}" for f in ("path", "size", "prompt_suffix")),
            "trainer.version",
            "trainer.name",
        ]
        raise InputError(
            display,
            f"change.{ckey}",
            "not a recipe key or datasets/trainer/eval field" + _suggest(ckey, candidates),
        )


# ----------------------------------------------------------------------------- diff against parent


def _dataset_kind(role: str) -> str:
    return TRAINING if role == "pool" else INSTRUMENTATION


def attempt_recipe_sha256(att: Attempt) -> str:
    """What "the same recipe" means (Gate-2 seeds, STOP-3b, MLflow's seed groups): the digest of
    the training keys without the seed and the pool path, with the trainer and its version."""
    from rlexp.core.decision import recipe_sha256
    from rlexp.core.recipe import key_table

    table = key_table(att.trainer.name)
    training_keys = [k for k, meta in table.keys.items() if meta.kind == TRAINING]
    # newer releases' flags stated under their own names (a recipe without them keeps its digest)
    training_keys += sorted(k for k in att.recipe if k not in table.keys and table.lookup(k).kind == TRAINING)
    return recipe_sha256(att.recipe, training_keys, (att.trainer.name, att.trainer.version))


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
    """The resolved value of a ``change`` key (recipe key or dotted datasets/trainer/eval field)."""
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


# ----------------------------------------------------------------------------- sections shared with other specs


def validate_spec_section(raw: Any, section: str, display: str, where: str | None = None) -> dict[str, Any]:
    """One section of the attempt schema (``eval``, ``datasets``) checked exactly as in
    ``attempt.yaml``, for another spec that shares it (the sweep spec of :mod:`rlexp.core.sweep`):
    one format for datasets and eval settings, one set of messages."""
    where = where or section
    if not isinstance(raw, dict):
        raise InputError(display, where, f"must be a mapping (got {raw!r:.60})")
    return _validate_section(raw, _SCHEMA[section], display, f"{where}.")


def resolve_eval_settings(stated: dict[str, Any]) -> EvalSettings:
    """Validated ``eval`` keys (:func:`validate_spec_section`) with the defaults applied."""
    defaults = EvalSettings()
    return EvalSettings(**{k: stated.get(k, getattr(defaults, k)) for k in EvalSettings.__dataclass_fields__})


def resolve_dataset(role: str, entry: dict[str, Any], experiment_dir: Path, eval_settings: EvalSettings,
                    display: str) -> DatasetRef:
    """A validated dataset entry resolved as the attempt spec resolves it (paths inside the
    experiment unless ``allow_outside``, the set's suffix and grading defaulting to ``eval``'s)."""
    return _dataset_ref(role, entry, experiment_dir, eval_settings, display)
