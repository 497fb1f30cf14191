"""The attempt spec's schema: one declaration per field gives the loader's check, its error line and
the JSON Schema (``docs/attempt.schema.json``)."""

from __future__ import annotations

import re
from typing import Any

from rlexp.errors import InputError
from rlexp.spec.fields import (
    BOOLEAN,
    MAPPING,
    POSITIVE_INT,
    STRING,
    Field,
    Invalid,
    at_field,
    integer,
    list_of,
    nullable,
    number,
    object_json,
    one_of,
    schema_text,
    section_of,
    suggest,
    to_float,
    with_input_gate,
)
from rlexp.spec.fields import MAX_SPEC_FLOAT as MAX_SPEC_FLOAT  # re-exported
from rlexp.spec.fields import MAX_SPEC_INT as MAX_SPEC_INT  # re-exported
from rlexp.spec.fields import SCHEMA_DRAFT as SCHEMA_DRAFT  # re-exported
from rlexp.spec.recipe import (
    ADVANTAGE_ESTIMATORS,
    COMMON_KEYS,
    DOTTED_KEY_PATTERN,
    FLAG_VALUE,
    JSON_VALUE,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    RECIPE_KEYS,
    RecipeKey,
    key_table,
    recipe_json_schema,
    recipe_key_for,
    table_json_schema,
)

from .model import (
    ANSWER_MODES,
    DATASET_FIELDS,
    EVAL_ONLY_DATASET_FIELDS,
    ROLES,
    TRAINER_GRADED_ROLES,
    TRAINERS,
    Baseline,
    Budget,
    EnvironmentSettings,
    EvalSettings,
    TrainerSettings,
)

# ----------------------------------------------------------------------------- schema
#
# Every section is a mapping with a closed set of keys (unknown keys are errors with a "did you
# mean"); leaves are rlexp.spec.fields rules, which check a value and carry the JSON Schema of what
# they accept (for attempt_json_schema). ``None`` means "not stated". The settings dataclasses
# (trainer, eval, budget, baseline, environment) declare their rules on their fields: their
# sections are read from them.


# Recipe keys whose value is a credential: v0.9.x's ``use_wandb`` takes the W&B key itself; any
# key naming an API key, a token, a secret or a password (``hf_token``, ``wandb_api_key``). Whole
# words only: ``max_tokens_per_gpu`` and ``disable_fast_tokenizer`` are not credentials.
CREDENTIAL_RECIPE_KEYS = frozenset({"use_wandb", "wandb_key", "logger.wandb.key"})
_CREDENTIAL_WORD = re.compile(r"(?:^|[._-])(?:api[._-]?key|apikey|token|secret|password|passwd|credentials?)(?:$|[._-])",
                              re.IGNORECASE)


def holds_no_secret(key: Any, value: Any = None) -> bool:
    """Whether ``value`` of a key named like a credential's cannot be one, by the key's default
    (``key``: a recipe key or a trainer's config key, anything with a ``default``; None: unknown).
    A key whose default is a number names a count, never a credential (verl's
    ``ppo_max_token_len_per_gpu`` is a number of tokens); one whose default is a bool switches a
    feature, and a bool value holds no secret (verl's ``data.continuous_token.enable``)."""
    if key is None:
        return False
    if isinstance(key.default, bool):
        return isinstance(value, bool)
    return isinstance(key.default, int | float)


def is_credential_key(key: str) -> bool:
    """Whether a recipe key's value would be a credential (refused in specs)."""
    return key in CREDENTIAL_RECIPE_KEYS or bool(_CREDENTIAL_WORD.search(key))


# Values that are credentials whatever key holds them: a URL with userinfo, and the shapes of the
# common API keys and tokens (OpenAI/Anthropic sk-, Hugging Face hf_, GitHub, GitLab, Slack, AWS access
# key ids, Google API keys, JWTs, an Authorization header's "Bearer ..."). A spec is written to
# plan.json, the records' metadata, the reports and MLflow: a key in it would be written there too.
_KEY_SHAPED = re.compile(
    r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b|\bBearer\s+[A-Za-z0-9._~+/-]{8,}=*")
# a free-form mapping's key that holds a credential: api_key, secret, password, token, access_token...
# (not a tokenizer's stop_token / eos_token / pad_token: text, not a secret)
_CREDENTIAL_NAME = re.compile(r"(?:.*[._-])?(?:api[._-]?key|apikey|secret|password|passwd|credentials?|authorization"
                              r"|(?:access|auth|api|bearer|hf|hub|github|gh|bot|session|refresh|id|private)[._-]?token)"
                              r"|token", re.IGNORECASE)
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]*@")


def credential_in(value: Any, field: str, *, by_key: bool = False) -> tuple[str, str] | None:
    """``(field, what)`` of the first credential written into ``value`` (walked through mappings and
    lists, ``field`` the dotted path): a URL with userinfo, a key-shaped string, and (``by_key``, for
    free-form mappings such as an environment's ``config``) a non-empty string under a key named
    like a credential (``api_token``, ``password``) other than a ``*_env`` variable name."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{key}"
                if (by_key and isinstance(key, str) and _CREDENTIAL_NAME.fullmatch(key)
                        and isinstance(child, str) and child.strip()):
                    return name, "a credential"
                stack.append((child, name))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            if _URL_USERINFO.search(item):
                return where, "a URL with credentials (user:key@)"
            if _KEY_SHAPED.search(item):
                return where, "a key-shaped value"
    return None


def _column_name(value: Any) -> str:
    """A column of a dataset's rows: a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"must name a column of the set's rows, a non-empty string (got {value!r:.60})")
    return value


_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
STRING = Field(STRING.check, {"type": "string"})
BOOLEAN = BOOLEAN
_ID = Field(STRING.check, {"type": "string", "pattern": _ID_RE.pattern})  # the pattern is checked on load
_DATASET = {"path": STRING, "size": POSITIVE_INT, "prompt_suffix": STRING, "answer_mode": one_of(*ANSWER_MODES),
            "allow_outside": BOOLEAN,  # a path outside the experiment, on purpose
            # a column of the set's rows naming each problem's cluster (see DatasetRef.cluster)
            "cluster": Field(_column_name, {"type": "string", "minLength": 1, "description": (
                "a column of the set's rows; problems sharing its value are one cluster (one document, one "
                "template): decide, the gates and plan's power then use the cluster-robust paired test")}),
            # recorded by rlexp import for data outside the experiment, never read by plan: the files
            # the set was made of (a list of training files) and the content hash of a readable file
            "sources": list_of(STRING), "sha256": STRING}
_SCHEMA: dict[str, Any] = {
    "id": _ID,
    "parent": _ID,
    "seed_of": _ID,
    "description": STRING,
    "change": MAPPING,  # keys checked by _check_change_key
    "intent": {"global_steps": POSITIVE_INT, "max_warmup_share": number(0, 1, low_open=True), "note": STRING},
    "trainer": section_of(TrainerSettings),
    "recipe": "recipe",  # checked against RECIPE_KEYS
    "datasets": {role: _DATASET for role in ROLES},
    "eval": section_of(EvalSettings),
    "checkpoints": {"mid": POSITIVE_INT, "extra": list_of(POSITIVE_INT, unique=True)},
    "budget": section_of(Budget),
    "baseline": section_of(Baseline),
    "environment": section_of(EnvironmentSettings),
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


def attempt_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``attempt.yaml``, derived from :data:`_SCHEMA` and the
    recipe table: editors complete and check keys with it. It accepts what :func:`load_attempt`
    accepts, except what JSON Schema cannot say: the bounds of a number written as text, an id
    matching its directory, the parent chain, the files. ``docs/attempt.schema.json`` holds it
    (regenerate with ``scripts/write-schemas``; a test checks it is current)."""
    top = object_json({k: v for k, v in _SCHEMA.items() if k != "recipe"})
    properties: dict[str, Any] = {}
    for name in _SCHEMA:
        if name == "recipe":  # its keys depend on trainer.name: see allOf below
            properties[name] = {"description": "the trainer's own key names (trainer.name picks the table)",
                                "type": ["object", "null"]}
            continue
        properties[name] = top["properties"][name]
        if name == "change":
            names = {"anyOf": [{"enum": change_keys()}, {"pattern": DOTTED_KEY_PATTERN}]}
            properties[name] = nullable({"type": "object", "propertyNames": names})
        if name == "datasets":  # the sets the trainer grades in-run take no answer_mode, no cluster
            for role in TRAINER_GRADED_ROLES:
                for fname in EVAL_ONLY_DATASET_FIELDS:
                    properties[name]["properties"][role]["properties"].pop(fname)
        if _DESCRIPTIONS[name]:
            properties[name] = {"description": _DESCRIPTIONS[name], **properties[name]}
    # each trainer has its own recipe keys: the recipe's schema follows trainer.name (a child that
    # inherits its trainer without stating it is checked as OpenRLHF's by editors; rlexp plan knows)
    others = [t for t in TRAINERS if key_table(t).keys is not RECIPE_KEYS]
    by_trainer = [_when_trainer([t], table_json_schema(key_table(t))) for t in others]
    recipe_table = _when_trainer([t for t in TRAINERS if t not in others], recipe_json_schema(), negate=others)
    return with_input_gate({
        "$schema": SCHEMA_DRAFT,
        "title": "rlexp attempt spec (attempt.yaml)",
        "description": "One attempt of an experiment: its directory holds this spec and what the stages write",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "allOf": [recipe_table, *by_trainer],
    })


def _when_trainer(names: list[str], recipe: dict[str, Any], negate: list[str] | None = None) -> dict[str, Any]:
    """``recipe`` applies when trainer.name is one of ``names`` (or, with ``negate``, none of those)."""
    if negate is not None:
        condition = {"not": {"properties": {"trainer": {"properties": {"name": {"enum": negate}},
                                                        "required": ["name"]}}, "required": ["trainer"]}}
    else:
        condition = {"properties": {"trainer": {"properties": {"name": {"enum": names}}, "required": ["name"]}},
                     "required": ["trainer"]}
    return {"if": condition, "then": {"properties": {"recipe": nullable(recipe)}}}


def attempt_json_schema_text() -> str:
    """:func:`attempt_json_schema` as the committed file's text."""
    return schema_text(attempt_json_schema())


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
            raise InputError(display, where, "unknown key" + suggest(str(name), list(schema)))
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
            except Invalid as exc:
                raise InputError(display, at_field(where, exc), str(exc)) from None
    return out


def validate_recipe(recipe: dict[str, Any], display: str, trainer: str) -> dict[str, Any]:
    """Check recipe keys and values as a spec's ``recipe`` section for ``trainer`` (a ``trainer.name``)
    does; returns them coerced."""
    return _validate_recipe(recipe, display, trainer)


def _validate_recipe(recipe: dict[str, Any], display: str, trainer: str) -> dict[str, Any]:
    """Check each recipe key against ``trainer``'s key table (:data:`RECIPE_KEYS` for OpenRLHF and
    the local trainer); return the values, coerced."""
    table = key_table(trainer)
    out: dict[str, Any] = {}
    for name, value in recipe.items():
        where = f"recipe.{name}"
        if not isinstance(name, str):
            raise InputError(display, where, f"keys must be strings, got {type(name).__name__} {name!r:.40}")
        if (is_credential_key(name) and value is not None and value is not False
                and not holds_no_secret(table.lookup(name), value)):
            raise InputError(display, where, "a credential does not go in a spec (it would reach plan.json, the "
                                             "report and MLflow): set it in an environment variable instead "
                                             "(e.g. WANDB_API_KEY, HF_TOKEN)")
        key = table.lookup(name)
        if key is None:
            spelling = "" if table.keys is RECIPE_KEYS else f" (trainer {trainer}: {table.spelling})"
            raise InputError(display, where, "unknown key" + suggest(str(name), list(table.keys)) + spelling)
        if value is None:
            if not key.nullable:
                raise InputError(display, where, f"must not be null (a {key.type.replace('_', ' ')})")
            out[name] = None
            continue
        try:
            value = _coerce(key, value)
            _check_constraint(key, value)
        except Invalid as exc:
            raise InputError(display, where, str(exc)) from None
        out[name] = value
    return out


def _coerce(key: RecipeKey, value: Any) -> Any:
    if key.type == "int":
        return integer()(value)
    if key.type == "float":
        return to_float(value)
    if key.type == "bool":
        return BOOLEAN(value)
    if key.type == "str":
        return STRING(value)
    if key.type == JSON_VALUE:  # a composite TRL field (a dict, a union): TRL's own config checks it at launch
        return value
    if key.type == FLAG_VALUE:  # a newer release's flag: the argv builder checks it against that parser
        scalar = bool | int | float | str
        if isinstance(value, scalar) or (isinstance(value, list) and value and all(
                isinstance(v, scalar) and not isinstance(v, bool) for v in value)):
            return value
        raise Invalid(f"must be a switch, a number, a string or a list of them (got {value!r})")
    if key.type == "str_list":
        return _names(value)
    # float_pair
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise Invalid(f"must be a list of two numbers (got {value!r})")
    return tuple(to_float(v) for v in value)


def _names(value: Any) -> str | list[str]:
    """A ``str_list`` value (``target_modules``): one name (or a pattern, ``all-linear``) or a list of
    distinct names, none empty — an empty list or name would reach the trainer as "no module" or a
    peft error, and a repeated one is a typo."""
    if isinstance(value, str):
        if not value.strip():
            raise Invalid("must not be empty (a module name, a pattern such as all-linear, or a list of names)")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid(f"must be a string or a list of strings (got {value!r:.80})")
    if not value:
        raise Invalid("must name at least one module (an empty list trains nothing)")
    if any(not v.strip() for v in value):
        raise Invalid(f"an empty module name in {value!r:.80}")
    repeated = sorted({v for v in value if value.count(v) > 1})
    if repeated:
        raise Invalid(f"names {', '.join(repeated)} more than once")
    return value


def _check_constraint(key: RecipeKey, value: Any) -> None:
    rule = key.constraint
    if rule == "advantage" and value not in ADVANTAGE_ESTIMATORS:
        raise Invalid(f"must be one of {', '.join(ADVANTAGE_ESTIMATORS)} (got {value!r})")
    if rule == "loss_agg_mode" and value not in LOSS_AGG_MODES:
        raise Invalid(f"must be one of {', '.join(LOSS_AGG_MODES)} (got {value!r})")
    if rule == "kl_estimator" and value not in KL_ESTIMATORS:
        raise Invalid(f"must be one of {', '.join(KL_ESTIMATORS)} (got {value!r})")
    if rule == "gt0" and not value > 0:
        raise Invalid(f"must be > 0 (got {value!r})")
    if rule == "ge1" and not value >= 1:
        raise Invalid(f"must be >= 1 (got {value!r})")
    if rule == "ge0" and not value >= 0:
        raise Invalid(f"must be >= 0 (got {value!r})")
    if rule == "ratio" and not 0 <= value <= 1:
        raise Invalid(f"must be between 0 and 1 (got {value!r})")
    if rule == "steps" and not (value == -1 or value >= 1):
        raise Invalid(f"must be -1 (never) or >= 1 (got {value!r})")


def change_keys() -> list[str]:
    """Every key ``change`` may name: a recipe key or a datasets/trainer/eval field, dotted."""
    return [
        *RECIPE_KEYS,
        *COMMON_KEYS,
        *(f"datasets.{role}.{fname}" for role in ROLES for fname in DATASET_FIELDS
          if not (fname in EVAL_ONLY_DATASET_FIELDS and role in TRAINER_GRADED_ROLES)),
        *(f"trainer.{fname}" for fname in TrainerSettings.__dataclass_fields__),
        *(f"eval.{fname}" for fname in EvalSettings.__dataclass_fields__),
        *(f"environment.{fname}" for fname in EnvironmentSettings.__dataclass_fields__),
    ]


# environment fields holding a mapping: change and the diff name their keys (environment.config.max_calls)
ENV_MAPPINGS = ("config", "reward", "judge")


def _check_change_key(ckey: str, display: str, trainer: str) -> None:
    parts = ckey.split(".")
    if len(parts) == 3 and parts[0] == "environment" and parts[1] in ENV_MAPPINGS and parts[2]:
        return  # a key of the environment's config, reward weights or judge
    if parts[0] == "environment" and ckey not in change_keys():  # never a trainer flag
        raise InputError(display, f"change.{ckey}", "not an environment field" + suggest(
            ckey, [k for k in change_keys() if k.startswith("environment.")]))
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
            "not a recipe key or datasets/trainer/eval/environment field" + suggest(ckey, candidates),
        )
