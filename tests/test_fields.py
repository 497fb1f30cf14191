"""One way to declare a field (rlexp.spec.fields): the declaration gives the loader's check, the
error line and the JSON Schema, for every file a user writes."""

from __future__ import annotations

import dataclasses

import pytest

from rlexp.errors import InputError
from rlexp.spec.fields import (
    FRACTION,
    STRING,
    check,
    check_keys,
    declared,
    integer,
    number,
    one_of,
    record,
    section_of,
)


def test_a_settings_class_declares_each_field_once_for_loader_and_schema():
    from rlexp.spec import Baseline, Budget, EvalSettings, attempt_json_schema

    schema = attempt_json_schema()["properties"]
    for section, cls in (("eval", EvalSettings), ("budget", Budget), ("baseline", Baseline)):
        rules = section_of(cls)
        assert list(rules) == [f.name for f in dataclasses.fields(cls)]
        assert list(schema[section]["properties"]) == list(rules)
    # the declaration's bounds and description are the schema's, and the input gate's size limit
    assert schema["eval"]["properties"]["max_tokens"] == {
        "description": "the completion budget of every eval sample", "type": ["integer", "null"], "minimum": 1,
        "maximum": 10**9}
    assert EvalSettings().max_tokens == 2048 and Baseline().discordance == 0.12  # the declared defaults


def test_the_attempt_and_the_sweep_refuse_a_bad_eval_field_with_the_same_line(tmp_path):
    from rlexp.spec import load_attempt, validate_spec_section

    att = tmp_path / "exp" / "a1"
    att.mkdir(parents=True)
    (att / "attempt.yaml").write_text("id: a1\ntrainer: {name: local, version: '0.11.0'}\n"
                                      "recipe: {pretrain: m}\neval: {max_tokens: 0}\n")
    with pytest.raises(InputError) as from_attempt:
        load_attempt(att)
    with pytest.raises(InputError) as from_sweep:
        validate_spec_section({"max_tokens": 0}, "eval", "sweep.yaml")
    assert from_attempt.value.field == from_sweep.value.field == "eval.max_tokens"
    assert from_attempt.value.message == from_sweep.value.message == "must be > 0 (got 0)"


@pytest.mark.parametrize(("rule", "value", "message"), [
    (integer(1), True, "must be an integer (got True)"),
    (integer(1, 8), 9, "must be between 1 and 8 (got 9)"),
    (integer(0), -1, "must be >= 0 (got -1)"),
    (integer(), 10**10, "must be at most 1000000000 in size, the limit (got 10000000000)"),
    (number(0, 1, low_open=True), 0, "must be > 0 (got 0)"),
    (number(text=False), "5e-7", "must be a number (got '5e-7')"),
    (FRACTION, 65, "must be a fraction between 0 and 1 (65% is 0.65) (got 65)"),
])
def test_a_rule_refuses_with_one_line_naming_file_and_field(rule, value, message):
    with pytest.raises(InputError) as err:
        check(rule, value, "x.yaml", "a.b")
    assert (err.value.file, err.value.field, err.value.message) == ("x.yaml", "a.b", message)


def test_rules_accept_what_they_declare():
    assert check(number(0), "5e-7", "x.yaml", "lr") == 5e-7  # YAML reads 5e-7 as text
    assert check(integer(1, 8), 8, "x.yaml", "k") == 8
    assert check_keys({"band": 1}, "x.yaml", "criteria", ("band",)) == {"band": 1}
    with pytest.raises(InputError, match="criteria.bnad: unknown key; did you mean 'band'"):
        check_keys({"bnad": 1}, "x.yaml", "criteria", ("band",))

    @dataclasses.dataclass(frozen=True)
    class Settings:
        k: int = declared(3, integer(1))

    assert Settings().k == 3 and section_of(Settings)["k"].json == {"type": "integer", "minimum": 1}

    @dataclasses.dataclass(frozen=True)
    class Described:
        k: int = declared(3, integer(1), "how many")

    assert section_of(Described)["k"].json == {"description": "how many", "type": "integer", "minimum": 1}


def test_a_mutable_default_is_declared_with_a_factory_on_a_frozen_class():
    from rlexp.spec.fields import MAPPING

    @dataclasses.dataclass(frozen=True)
    class Settings:
        name: str = declared(rule=one_of("a", "b"), description="required: no default")
        config: dict = declared(rule=MAPPING, description="its config", default_factory=dict)

    first, second = Settings("a"), Settings("b")
    assert first.config == {} and first.config is not second.config  # one dict each, not a shared one
    with pytest.raises(TypeError):
        Settings()  # no default declared: required
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.config = {"x": 1}
    assert section_of(Settings)["config"].json == {"description": "its config", "type": "object"}
    with pytest.raises(TypeError, match="rule"):
        declared(3)


def test_a_record_names_the_key_inside_it_and_states_its_keys_in_the_schema():
    rule = record({"retries": integer(0, 10), "model": STRING})
    assert check(rule, {"retries": 2, "model": None}, "x.yaml", "judge") == {"retries": 2}  # null: not stated
    for value, field, message in [
        ({"retries": 11}, "judge.retries", "must be between 0 and 10 (got 11)"),
        ({"modle": "m"}, "judge.modle", "unknown key; did you mean 'model'?"),
        ({1: "m"}, "judge.1", "keys must be strings, got int 1"),
        ("m", "judge", "must be a mapping (got 'm')"),
    ]:
        with pytest.raises(InputError) as err:
            check(rule, value, "x.yaml", "judge")
        assert (err.value.field, err.value.message) == (field, message)
    assert rule.json == {"type": "object", "additionalProperties": False, "properties": {
        "retries": {"type": ["integer", "null"], "minimum": 0, "maximum": 10},
        "model": {"type": ["string", "null"]}}}
    nested = record({"judge": rule})
    with pytest.raises(InputError) as err:
        check(nested, {"judge": {"retries": -1}}, "x.yaml", "environment")
    assert err.value.field == "environment.judge.retries"


def test_environment_settings_is_the_one_declaration_of_the_environment_section():
    from rlexp.spec import EnvironmentSettings, attempt_json_schema

    rules = section_of(EnvironmentSettings)
    env = attempt_json_schema()["properties"]["environment"]
    assert list(env["properties"]) == list(rules) == [f.name for f in dataclasses.fields(EnvironmentSettings)]
    assert set(env["properties"]["reward"]["properties"]) == {"env", "judge", "ndcg"}
    assert env["properties"]["judge"]["additionalProperties"] is False
    assert EnvironmentSettings().reward == {} and EnvironmentSettings().max_turns == 4
