"""One way to declare a field of a file a user writes: its type and bounds (a checker), its default,
its description, and the JSON Schema of what it accepts.

The attempt spec (:mod:`rlexp.spec`), the sweep and ladder specs (:mod:`rlexp.spec.sweep`,
:mod:`rlexp.spec.ladder`) and the SOP's types (:mod:`rlexp.spec.sop`) declare their fields with
these; a settings dataclass declares each field once (:func:`declared`) and its section of the
schema is read from the class (:func:`section_of`), so the loader, the error line and the JSON
Schema come from the same declaration (:mod:`rlexp.spec.json_schemas` gathers the schemas).

Checked with the standard library: pydantic would cost ~0.1 s of ``rlexp plan``'s start-up for a
dozen flat sections. A checker returns the value (after coercion) or raises :class:`Invalid` with a
one-line reason; :func:`check` adds the file and the field, as an :class:`~rlexp.errors.InputError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlexp.errors import InputError
from rlexp.spec.recipe import json_number

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"  # the JSON Schema dialect of every schema here

# Bounds of the input gate: every number a spec states is finite and at most this large, so
# no later computation (the schedule, a dataset size) can run out of time or memory on it.
MAX_SPEC_INT = 10**9
MAX_SPEC_FLOAT = 1e12


class Invalid(Exception):
    """A value is wrong; the caller adds file and field. ``at``: where inside the value (a key of a
    :func:`record`, dotted when records nest), added to the field's name."""

    def __init__(self, message: str, at: str | None = None) -> None:
        super().__init__(message)
        self.at = at


def at_field(where: str, exc: Invalid) -> str:
    """The field an :class:`Invalid` names: ``where`` itself, or the key (``.key``) or the list
    index (``[0]``) inside it."""
    return _inside(where, exc.at) if exc.at else where


def _inside(where: str, at: str) -> str:
    return f"{where}{at}" if at.startswith("[") else f"{where}.{at}"


@dataclass(frozen=True)
class Field:
    """A checker and the JSON Schema of the values it accepts."""

    check: Callable[[Any], Any]
    json: dict[str, Any]

    def __call__(self, value: Any) -> Any:
        return self.check(value)

    def described(self, description: str | None) -> Field:
        """The same rule with its description in the JSON Schema (what editors show on hover)."""
        return self if not description else Field(self.check, {"description": description, **self.json})


def check(rule: Field, value: Any, display: Any, where: str) -> Any:
    """``value`` checked by ``rule``; a wrong one is an InputError naming the file and the field."""
    try:
        return rule(value)
    except Invalid as exc:
        raise InputError(display, at_field(where, exc), str(exc)) from None


def integer(minimum: int | None = None, maximum: int = MAX_SPEC_INT) -> Field:
    """An integer from ``minimum``; ``maximum`` other than the input gate's limit is a bound of the
    field itself, and the message says the range."""

    def check_int(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"must be an integer (got {value!r:.60})")
        if maximum != MAX_SPEC_INT and minimum is not None and not minimum <= value <= maximum:
            raise Invalid(f"must be between {minimum} and {maximum} (got {value})")
        if minimum is not None and value < minimum:
            raise Invalid(f"must be > {minimum - 1} (got {value!r})" if minimum == 1 else
                          f"must be >= {minimum} (got {value!r})")  # fmt: skip
        if abs(value) > maximum:
            raise Invalid(f"must be at most {maximum} in size, the limit (got {value})")
        return value

    return Field(check_int, {"type": "integer"} | ({} if minimum is None else {"minimum": minimum})
                 | ({} if maximum == MAX_SPEC_INT else {"maximum": maximum}))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           text: bool = True) -> Field:
    """A finite number in [low, high] (``low_open``: above ``low``); numeric text is read as a number
    unless ``text`` is False (a file rlexp ships, as the SOP, states its numbers as numbers)."""

    def check_number(value: Any) -> float:
        if not text and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise Invalid(f"must be a number (got {value!r:.60})")
        out = to_float(value)
        if low is not None and (out <= low if low_open else out < low):
            raise Invalid(f"must be {'>' if low_open else '>='} {low:g} (got {value!r})")
        if high is not None and out > high:
            raise Invalid(f"must be <= {high:g} (got {value!r})")
        return out

    schema = json_number(low, high, low_open=low_open)
    return Field(check_number, schema if text else schema["anyOf"][0])  # without text: the number alone


def to_float(value: Any) -> float:
    # PyYAML reads 5e-7 (no dot) as a string: accept numeric strings, like a command line would
    if isinstance(value, bool):
        raise Invalid(f"must be a number (got {value!r})")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise Invalid(f"must be a number (got {value!r})") from None
    if not math.isfinite(out):
        raise Invalid(f"must be a finite number (got {value!r:.60})")
    if abs(out) > MAX_SPEC_FLOAT:
        raise Invalid(f"must be at most {MAX_SPEC_FLOAT:g} in size, the limit (got {value!r:.60})")
    return out


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Invalid(f"must be a number (got {value!r:.60})")
    if not 0.0 <= value <= 1.0:
        hint = f" ({value:g}% is {value / 100:g})" if 1 < value <= 100 else ""
        raise Invalid(f"must be a fraction between 0 and 1{hint} (got {value!r})")
    return float(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        hint = ' (quote versions: "0.10")' if isinstance(value, float) else ""
        raise Invalid(f"must be a string (got {value!r}){hint}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false (got {value!r})")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"must be a mapping (got {value!r})")
    return dict(value)


STRING = Field(_str, {"type": "string"})
BOOLEAN = Field(_bool, {"type": "boolean"})
MAPPING = Field(_mapping, {"type": "object"})
# a fraction as a number (not text): an accuracy, a share; 65 is refused with "65% is 0.65"
FRACTION = Field(_fraction, {"type": "number", "minimum": 0, "maximum": 1})
POSITIVE_INT = integer(1)


def one_of(*choices: str) -> Field:
    def check_choice(value: Any) -> str:
        if value not in choices:
            raise Invalid(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return Field(check_choice, {"enum": list(choices)})


def list_of(item: Field, *, unique: bool = False) -> Field:
    """A list of ``item``; ``unique``: no value twice (a repeated checkpoint step is a typo, not two)."""
    def check_list(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise Invalid(f"must be a list (got {value!r})")
        out = [item(v) for v in value]
        if unique:
            repeated = sorted({repr(v) for v in out if out.count(v) > 1})
            if repeated:
                raise Invalid(f"{', '.join(repeated)} given more than once")
        return out

    schema: dict[str, Any] = {"type": "array", "items": item.json}
    if unique:
        schema["uniqueItems"] = True
    return Field(check_list, schema)


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a field whose ``null`` means "not stated"."""
    if isinstance(schema.get("type"), str) and not {"anyOf", "enum", "const"} & set(schema):
        # the other keywords (minimum, pattern, items, properties...) do not apply to null
        return {**schema, "type": [schema["type"], "null"]}
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def with_input_gate(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the input gate's size limit on every number it leaves unbounded on a side: the
    loaders refuse an integer beyond :data:`MAX_SPEC_INT` and a number beyond :data:`MAX_SPEC_FLOAT`
    in size whatever the field, so the schema says it too (changed in place, and returned)."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kinds = node.get("type")
            kinds = kinds if isinstance(kinds, list) else [kinds]  # nullable: ["integer", "null"]
            # a number field reads an integer as a float too: the float limit is the one it enforces
            limit = MAX_SPEC_FLOAT if "number" in kinds else MAX_SPEC_INT if "integer" in kinds else None
            if limit is not None:
                if "minimum" not in node and "exclusiveMinimum" not in node:
                    node["minimum"] = -limit
                if "maximum" not in node and "exclusiveMaximum" not in node:
                    node["maximum"] = limit
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON Schema as its committed file's text."""
    import json

    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def object_json(rules: dict[str, Any], required: Sequence[str] = (), not_null: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON Schema of a mapping of known keys (a dict value: a nested one), each nullable (null:
    not stated) but the ``required`` ones and those ``not_null``."""
    properties = {}
    for name, rule in rules.items():
        schema = object_json(rule) if isinstance(rule, dict) else rule.json
        properties[name] = schema if name in required or name in not_null else nullable(schema)
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    return out | ({"required": list(required)} if required else {})


def record(rules: dict[str, Field]) -> Field:
    """A mapping of known keys, each checked by its rule (a null value: not stated, dropped); a
    wrong key or value is named by its key (``environment.judge.retries``)."""

    def check_record(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise Invalid(f"must be a mapping (got {value!r})")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid(f"keys must be strings, got {type(key).__name__} {key!r:.40}", at=str(key))
            rule = rules.get(key)
            if rule is None:
                raise Invalid("unknown key" + suggest(key, list(rules)), at=key)
            if item is None:
                continue
            try:
                out[key] = rule(item)
            except Invalid as exc:
                raise Invalid(str(exc), at=at_field(key, exc)) from None
        return out

    return Field(check_record, object_json(rules))


def suggest(word: str, candidates: Sequence[str]) -> str:
    """``; did you mean 'x'?`` for a close candidate, else nothing."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def check_keys(value: Any, display: Any, where: str, keys: Sequence[str]) -> dict[str, Any]:
    """A section that is a mapping of known keys (absent: empty); an unknown key is named with the
    closest known one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(display, where, f"must be a mapping (got {value!r:.60})")
    for key in value:
        field = f"{where}.{key}" if where else str(key)  # where "": the file's top level
        if not isinstance(key, str):
            raise InputError(display, field, f"keys must be strings, got {type(key).__name__}")
        if key not in keys:
            raise InputError(display, field, "unknown key" + suggest(key, keys))
    return value


# --------------------------------------------------------------------------- declared on a dataclass


def declared(default: Any = dataclasses.MISSING, rule: Field | None = None, description: str | None = None, *,
             default_factory: Any = dataclasses.MISSING) -> Any:
    """A settings dataclass field: its default (or ``default_factory``, for a mutable one; neither:
    a required field), the rule a file's value of it must pass, and what it means (the JSON
    Schema's description)."""
    if rule is None:
        raise TypeError("declared() needs the field's rule")
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"rule": rule.described(description)})


def section_of(cls: type) -> dict[str, Field]:
    """The rules of a settings dataclass's fields, in declaration order: its section of the schema."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls)}
