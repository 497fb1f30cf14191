"""The JSON Schemas of the files a user writes (attempt, ladder, sweep, SOP) are derived from the
same field declarations as their loaders (rlexp.spec.fields): the committed copies are current, a
committed example is valid for both, and what a loader refuses the schema refuses too (an unknown
key, a wrong type, a number out of bounds). The validator is the ``jsonschema`` package's, an
implementation independent of rlexp."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from rlexp.errors import InputError
from rlexp.spec.json_schemas import json_schemas, schema_text

REPO = Path(__file__).resolve().parents[1]
SOP_FILES = sorted((REPO / "sop").glob("sop-*.yaml"))


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict]:
    return json_schemas()


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / "docs" / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(name: str, document) -> list[str]:
    return [e.message for e in validator(name).iter_errors(document)]


def doc_example(page: str) -> dict:
    """The first YAML block of a docs page: the example the page documents."""
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))


def test_every_committed_schema_is_current(schemas):
    assert set(schemas) == {"attempt", "ladder", "sweep", "sop"}
    for name, schema in schemas.items():
        path = REPO / "docs" / f"{name}.schema.json"
        assert path.read_text(encoding="utf-8") == schema_text(schema), f"{path} is stale: run scripts/write-schemas"
        jsonschema.Draft202012Validator.check_schema(schema)


# ----------------------------------------------------------------------------- ladder


def load_ladder(raw):
    from rlexp.spec.ladder import parse_ladder_spec

    return parse_ladder_spec(raw, "ladder.yaml")


LADDER = doc_example("ladders.md")


def test_the_documented_ladder_is_valid_for_schema_and_loader():
    assert schema_errors("ladder", LADDER) == []
    spec = load_ladder(LADDER)
    assert (spec.root, spec.seeds, spec.rungs) == ("d1", (42, 43, 44), 6)


@pytest.mark.parametrize(("patch", "field"), [
    ({"rung": 3}, "rung"),  # unknown key
    ({"rungs": "six"}, "rungs"),  # wrong type
    ({"rungs": 1001}, "rungs"),  # out of bounds (1..1000)
    ({"rungs": 0}, "rungs"),
    ({"seeds": [42, -1]}, "seeds"),
    ({"seeds": [42, 42]}, "seeds"),
    ({"seeds": []}, "seeds"),
    ({"seeds_at_once": "yes"}, "seeds_at_once"),
    ({"root": "../d1"}, "root"),
    ({"variables": {"eps_clipp": [0.1]}}, "variables.eps_clipp"),  # not a recipe key
    ({"variables": {"eval_steps": [10]}}, "variables.eval_steps"),  # not a training key
    ({"variables": {"seed": [1, 2]}}, "variables.seed"),
    ({"variables": {"eps_clip": [-0.1]}}, "variables.eps_clip[0]"),  # the recipe key's own bound
    ({"variables": {"eps_clip": ["wide"]}}, "variables.eps_clip[0]"),
    ({"variables": {"n_samples_per_prompt": [2.5]}}, "variables.n_samples_per_prompt[0]"),
    ({"variables": {"eps_clip": [0.1, 0.1]}}, "variables.eps_clip[1]"),
    ({"variables": {}}, "variables"),
    ({"root": None}, "root"),  # required
    ({"variables": {"eps_clip": [2e12]}}, "variables.eps_clip[0]"),  # beyond the input gate's size limit
])
def test_the_ladder_schema_refuses_what_the_loader_refuses(patch, field):
    raw = {**LADDER, **patch}
    with pytest.raises(InputError) as info:
        load_ladder(raw)
    assert info.value.field == field
    assert schema_errors("ladder", raw), field


@pytest.mark.parametrize("patch", [
    {"description": None, "seeds_at_once": True},
    {"variables": {"eps_clip": [0.1, 1], "n_samples_per_prompt": [8]}, "rungs": 1000},
    {"seeds": [0, 2**31 - 1]},
])
def test_the_ladder_schema_accepts_what_the_loader_accepts(patch):
    raw = {**LADDER, **patch}
    load_ladder(raw)
    assert schema_errors("ladder", raw) == []


# ----------------------------------------------------------------------------- sweep


SWEEP = doc_example("sweeps.md")


@pytest.fixture
def write_sweep(tmp_path):
    """An experiment holding the documented sweep's dataset files; writes sweeps/s1/sweep.yaml."""
    for entry in SWEEP["datasets"].values():
        path = tmp_path / "exp" / entry["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n')

    def write(raw) -> Path:
        path = tmp_path / "exp" / "sweeps" / "s1" / "sweep.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return write


def test_the_documented_sweep_is_valid_for_schema_and_loader(write_sweep):
    from rlexp.spec.sweep import load_sweep

    assert schema_errors("sweep", SWEEP) == []
    spec = load_sweep(write_sweep(SWEEP))
    assert [c.name for c in spec.candidates] == ["qwen-1.5b", "qwen-3b", "local-7b"]
    assert spec.criteria.band == (0.60, 0.70) and spec.truncation.subset == 200


def patched(**sections) -> dict:
    raw = copy.deepcopy(SWEEP)
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(name), dict):
            raw[name] = {**raw[name], **value}
        else:
            raw[name] = value
    return raw


@pytest.mark.parametrize(("raw", "field"), [
    (patched(surprise=1), "surprise"),  # unknown key
    (patched(criteria={"bnad": [0.1, 0.2]}), "criteria.bnad"),
    (patched(candidates=[{"name": "a", "model": "m", "size": 3}]), "candidates[0].size"),
    (patched(datasets={"pool": {"path": "data/ood_primary_1000.jsonl"}}), "datasets.pool"),
    (patched(eval={"engin": "vllm"}), "eval.engin"),
    (patched(truncation_check={"seeed": 1}), "truncation_check.seeed"),
    (patched(description=5), "description"),  # wrong type
    (patched(candidates=[{"name": "a", "model": 7}]), "candidates[0].model"),
    (patched(candidates=[{"name": "a b", "model": "m"}]), "candidates[0].name"),
    (patched(candidates=[{"name": "a", "model": "m", "params": 1.5}]), "candidates[0].params"),
    (patched(stages={"stage2": {"sets": "id"}}), "stages.stage2.sets"),
    (patched(eval={"temperature": "hot"}), "eval.temperature"),
    (patched(criteria={"format_tolerance_pp": True}), "criteria.format_tolerance_pp"),
    (patched(candidates=[]), "candidates"),
    (patched(criteria={"band": [60, 70]}), "criteria.band[0]"),  # out of bounds
    (patched(criteria={"band": [0.6]}), "criteria.band"),
    (patched(criteria={"format_tolerance_pp": 101}), "criteria.format_tolerance_pp"),
    (patched(criteria={"min_sanity_acc": 1.5}), "criteria.min_sanity_acc"),
    (patched(truncation_check={"resamples": 99}), "truncation_check.resamples"),
    (patched(truncation_check={"max_tokens": [0, 4096]}), "truncation_check.max_tokens[0]"),
    (patched(truncation_check={"seed": -1}), "truncation_check.seed"),
    (patched(truncation_check={"set": "pool"}), "truncation_check.set"),
    (patched(stages={"stage1": {"limit": 0}}), "stages.stage1.limit"),
    (patched(stages={"stage2": {"finalists": 0}}), "stages.stage2.finalists"),
    (patched(stages={"stage2": {"sets": ["id", "id"]}}), "stages.stage2.sets"),
    (patched(eval={"max_tokens": 0}), "eval.max_tokens"),
    (patched(datasets={"id": {"size": 200}}), "datasets.id.path"),  # required
    (patched(criteria=None), "criteria.band"),
    (patched(eval={"max_tokens": 10**9 + 1}), "eval.max_tokens"),  # beyond the input gate's size limit
])
def test_the_sweep_schema_refuses_what_the_loader_refuses(write_sweep, raw, field):
    from rlexp.spec.sweep import load_sweep

    path = write_sweep(raw)
    with pytest.raises(InputError) as info:
        load_sweep(path)
    assert info.value.field == field
    assert schema_errors("sweep", yaml.safe_load(path.read_text())), field


@pytest.mark.parametrize("raw", [
    patched(description=None, eval={"prompt_suffix": None, "max_tokens": None}, truncation_check=None),
    patched(stages={"stage1": {"set": "ood_primary", "limit": None}}, criteria={"min_sanity_acc": None}),
    patched(candidates=[{"name": "a", "model": "hub/a", "params": None}], stages={"stage2": {"finalists": 1}},
            truncation_check={"max_tokens": [4096, 2048], "candidate": None}),
])
def test_the_sweep_schema_accepts_what_the_loader_accepts(write_sweep, raw):
    from rlexp.spec.sweep import load_sweep

    path = write_sweep(raw)
    load_sweep(path)
    assert schema_errors("sweep", yaml.safe_load(path.read_text())) == []


# ----------------------------------------------------------------------------- SOP


def test_every_committed_sop_is_valid_for_schema_and_loader():
    from rlexp.spec.sop import load_sop

    assert SOP_FILES
    for path in SOP_FILES:
        assert schema_errors("sop", yaml.safe_load(path.read_text(encoding="utf-8"))) == [], path
        load_sop(path)


def sop_with(tmp_path, key: str, value) -> Path:
    raw = yaml.safe_load(SOP_FILES[0].read_text(encoding="utf-8"))
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        node = node[part]
    node[last] = value
    path = tmp_path / "sop.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("key", "value", "field"), [
    ("bootstrap.resampels", 100, "bootstrap.resampels"),  # unknown key
    ("guardrails.g6", {}, "guardrails.g6"),
    ("bootstrap.resamples", 5.0, "bootstrap.resamples"),  # wrong type: an integer, not a float
    ("bootstrap.resamples", True, "bootstrap.resamples"),
    ("bootstrap.confidence", "0.95", "bootstrap.confidence"),  # no numeric text in a SOP
    ("bootstrap.method", "bootstrap", "bootstrap.method"),
    ("version", None, "version"),
    ("bootstrap.resamples", 99, "bootstrap.resamples"),  # out of bounds
    ("bootstrap.resamples", 1_000_001, "bootstrap.resamples"),
    ("bootstrap.confidence", 1.0, "bootstrap.confidence"),
    ("bootstrap.seed", -1, "bootstrap.seed"),
    ("bootstrap.seed", 2**31, "bootstrap.seed"),  # above the input gate's limit (10**9)
    ("gate_1a.max_mcnemar_p", 0.0, "gate_1a.max_mcnemar_p"),
    ("early_stop.patience_evals", 0, "early_stop"),
    ("guardrails.g2.min_boxed", 98.0, "guardrails.g2.min_boxed"),
    ("guardrails.g3.step_time_max_ratio", 0.5, "guardrails.g3.step_time_max_ratio"),
    ("guardrails.g4.temperature", 0.0, "guardrails.g4.temperature"),
    ("guardrails.g0.samples", 10_001, "guardrails.g0.samples"),
    ("gate_1a.min_delta_pp", 2e12, "gate_1a.min_delta_pp"),  # beyond the input gate's size limit
    ("gate_1a.min_ci_low_pp", -2e12, "gate_1a.min_ci_low_pp"),
])
def test_the_sop_schema_refuses_what_the_loader_refuses(tmp_path, key, value, field):
    from rlexp.spec.sop import load_sop

    path = sop_with(tmp_path, key, value)
    with pytest.raises(InputError) as info:
        load_sop(path)
    assert info.value.field == field
    assert schema_errors("sop", yaml.safe_load(path.read_text())), field


@pytest.mark.parametrize(("key", "value"), [
    ("bootstrap.resamples", 100), ("bootstrap.resamples", 1_000_000), ("bootstrap.confidence", 0.51),
    ("gate_1a.max_mcnemar_p", 1.0), ("guardrails.g3.step_time_max_ratio", 1), ("guardrails.g1.max_discordant", 0),
    ("bootstrap.seed", 10**9),
    ("gate_1a.min_delta_pp", 2),  # an integer where a float is declared
])
def test_the_sop_schema_accepts_what_the_loader_accepts_at_the_bounds(tmp_path, key, value):
    from rlexp.spec.sop import load_sop

    path = sop_with(tmp_path, key, value)
    load_sop(path)
    assert schema_errors("sop", yaml.safe_load(path.read_text())) == []


# ----------------------------------------------------------------------------- attempt: the environment


@pytest.mark.parametrize(("environment", "field"), [
    ({"reward": {"exact": 1}}, "environment.reward.exact"),  # unknown key of a nested mapping
    ({"judge": {"bse_url": "http://x"}}, "environment.judge.bse_url"),
    ({"reward": {"env": "heavy"}}, "environment.reward.env"),  # wrong type
    ({"judge": {"model": 5}}, "environment.judge.model"),
    ({"reward": 3}, "environment.reward"),
    ({"reward": {"env": -1}}, "environment.reward.env"),  # out of bounds
    ({"judge": {"retries": 11}}, "environment.judge.retries"),
    ({"judge": {"timeout_s": 0}}, "environment.judge.timeout_s"),
    ({"max_turns": 0}, "environment.max_turns"),
    ({"loss": "ppo"}, "environment.loss"),
    ({"success_threshold": 2e12}, "environment.success_threshold"),  # beyond the input gate's size limit
    ({"max_total_tokens": 10**9 + 1}, "environment.max_total_tokens"),
])
def test_the_attempt_schema_refuses_a_bad_environment_as_the_loader_does(tmp_path, environment, field):
    from rlexp.spec import load_attempt

    raw = {"trainer": {"name": "local", "version": "0.11.0"}, "recipe": {"pretrain": "m"}, "environment": environment}
    att = tmp_path / "exp" / "a1"
    att.mkdir(parents=True)
    (att / "attempt.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as info:
        load_attempt(att)
    assert info.value.field == field
    assert schema_errors("attempt", raw), field
