"""The one recipe-key table and what is derived from it: the spec schema and its JSON Schema, the
local trainer's configuration, both OpenRLHF flag dialects."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from rlexp.errors import InputError
from rlexp.spec import attempt_json_schema, attempt_json_schema_text, load_attempt
from rlexp.spec.recipe import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LATER_UNDERSCORE_KEYS,
    RECIPE_KEYS,
    local_trainer_keys,
)
from rlexp.trainers.openrlhf import argv as openrlhf

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILE = REPO / "docs" / "attempt.schema.json"
EXAMPLES = sorted(REPO.glob("experiments/**/attempt.yaml"))
# (argparse action, nargs, type) in OpenRLHF's parser for each value type of the table
FLAG_KIND = {"bool": ("store_true", "", ""), "int": ("value", "", "int"), "float": ("value", "", "float"),
             "str": ("value", "", "str"), "str_list": ("value", "*", "str"),
             "float_pair": ("value", "2", "float")}  # fmt: skip


def flag_kind(spec) -> tuple[str, str, str]:
    return spec.action, spec.nargs, spec.type


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# ----------------------------------------------------------------------------- the table vs OpenRLHF


def test_every_key_is_a_v093_flag_of_its_type_except_the_documented_four():
    # flags/v0.9.3.txt is extracted from OpenRLHF's own parser: an independent reference
    flags = openrlhf.load_flag_table("0.9.3").flags
    missing = {name for name in RECIPE_KEYS if f"--{name}" not in flags}
    assert missing == {"min_lr_ratio", "bf16", "offload", "flash_attn"}  # v0.10.2+ / older releases
    for key in RECIPE_KEYS.values():
        if key.name not in missing:
            assert flag_kind(flags[f"--{key.name}"]) == FLAG_KIND[key.type], key.name
    assert flags["--advantage_estimator"].choices == ADVANTAGE_ESTIMATORS
    assert flags["--kl_estimator"].choices == KL_ESTIMATORS


def test_every_dotted_name_is_a_v0102_flag_of_the_same_type():
    flags = openrlhf.load_flag_table("0.10.2").flags
    dotted = [k for k in RECIPE_KEYS.values() if k.dotted]
    assert len(dotted) == 132  # the 11 others have no flag in the dotted dialect
    for key in dotted:
        kind = FLAG_KIND[key.type]
        if key.name == "max_ckpt_mem":  # --ckpt.max_mem parses a float from 0.10.2; an int is one
            kind = FLAG_KIND["float"]
        assert flag_kind(flags[f"--{key.dotted}"]) == kind, key.name


def test_the_builders_dotted_map_is_the_tables_column():
    for key in RECIPE_KEYS.values():
        assert openrlhf.DOTTED_NAMES.get(key.name) == key.dotted
    table = openrlhf.load_flag_table("0.11.0")
    assert openrlhf.flag_name("eps_clip", table) == "--actor.eps_clip"
    assert openrlhf.flag_name("lora_rank", table) == "--ds.lora.rank"
    assert openrlhf.flag_name("prompt_max_len", table) is None


# ----------------------------------------------------------------------------- the local trainer


def test_local_trainer_config_has_one_field_per_marked_key_and_the_tables_defaults():
    from dataclasses import fields

    from rlexp.trainers.local.config import TrainerConfig

    names = {f.name for f in fields(TrainerConfig)}
    recipe_names = {k.name for k in local_trainer_keys()}
    assert recipe_names <= names
    assert names - recipe_names == {"pool_path", "monitor_path", "prompt_suffix", "monitor_suffix", "base_name",
                                    "eval_max_len", "max_global_steps", "trainer_version", "environment",
                                    "loss_agg_mode"}  # fmt: skip  (a key of every trainer's recipe, no table row)
    cfg = TrainerConfig(pretrain=Path("m"), pool_path=Path("p"))
    assert cfg.loss_agg_mode is None  # unset: the trainer's own aggregation, as before the key existed
    # OpenRLHF v0.9.3 argparse defaults, one per key whichever trainer runs the recipe
    assert (cfg.lora_rank, cfg.advantage_estimator, cfg.rollout_batch_size, cfg.eval_steps) == (0, "gae", 1024, -1)
    assert cfg.target_modules == ("all-linear",) and cfg.adam_betas == (0.9, 0.95)
    # the explicit fields follow the table: its order, its default for each key
    from rlexp.spec.recipe import local_trainer_value

    marked = [k for k in local_trainer_keys() if k.name != "pretrain"]
    assert [f.name for f in fields(TrainerConfig) if f.name in recipe_names and f.name != "pretrain"] == \
        [k.name for k in marked]
    assert {k.name: getattr(cfg, k.name) for k in marked} == {k.name: local_trainer_value(k, k.default) for k in marked}


def test_a_local_spec_reaches_the_trainer_with_the_values_the_plan_shows(tmp_path):
    """No second set of defaults: what load_attempt resolves is what the trainer holds."""
    from rlexp.trainers.local.config import config_from_attempt

    d = tmp_path / "exp" / "a1"
    d.mkdir(parents=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump({
        "trainer": {"name": "local"},
        "recipe": {"pretrain": "models/m", "advantage_estimator": "group_norm", "target_modules": "q_proj,v_proj"},
        "datasets": {"pool": {"path": "data/pool.jsonl", "size": 64}},
    }))  # fmt: skip
    att = load_attempt(d)
    cfg = config_from_attempt(att)
    assert cfg.pretrain == (tmp_path / "exp").resolve() / "models" / "m"
    for key in local_trainer_keys():
        if key.name in ("pretrain", "target_modules", "adam_betas"):
            continue
        assert getattr(cfg, key.name) == att.recipe[key.name], key.name
    assert cfg.target_modules == ("q_proj", "v_proj") and cfg.adam_betas == (0.9, 0.95)
    assert cfg.lora_rank == 0  # unstated: a full fine-tune, as OpenRLHF's default


def test_the_local_trainer_refuses_what_it_does_not_implement(tmp_path):
    from rlexp.trainers.local.config import TrainerConfig

    with pytest.raises(InputError) as info:
        TrainerConfig(pretrain=Path("m"), pool_path=Path("p")).validate("a/attempt.yaml")
    assert info.value.field == "recipe.advantage_estimator"  # OpenRLHF's default gae needs a critic
    with pytest.raises(InputError) as info:
        TrainerConfig(pretrain=Path("m"), pool_path=Path("p"), advantage_estimator="dr_grpo",
                      rollout_batch_size=4, n_samples_per_prompt=4, train_batch_size=8,
                      target_modules=()).validate("a/attempt.yaml")  # fmt: skip
    assert info.value.field == "recipe.target_modules"


def test_the_trainers_step_math_is_the_plans():
    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.training.schedule import compute_steps

    cfg = TrainerConfig(pretrain=Path("m"), pool_path=Path("p"), advantage_estimator="dr_grpo",
                        n_samples_per_prompt=8, rollout_batch_size=16, train_batch_size=64,
                        micro_train_batch_size=16, lr_warmup_ratio=0.05, num_episodes=2)  # fmt: skip
    steps = cfg.steps(1000)
    # by hand: 1000 × 8 // 64 × 2 = 250 optimizer steps; warm-up ceil(12.5) = 13;
    # v0.11 trains the partial last batch: ceil(1000 / 16) = 63 global steps per episode
    assert (steps.optimizer_steps_total, steps.warmup_steps, steps.global_steps_total) == (250, 13, 126)
    assert steps.global_steps_per_episode == 63 and steps.micro_batches_per_optimizer_step == 4
    assert steps == compute_steps(cfg.recipe(), 1000, "0.11.0", trainer="local")


# ----------------------------------------------------------------------------- the JSON Schema


def test_the_committed_schema_is_current():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == attempt_json_schema_text(), (
        "docs/attempt.schema.json is stale: run scripts/write-schemas"
    )


def test_the_schema_validates_every_committed_example():
    assert len(EXAMPLES) >= 5
    check = validator()
    for path in EXAMPLES:
        errors = [e.message for e in check.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8")))]
        assert errors == [], path
        load_attempt(path)  # and the loader agrees


def test_the_schema_lists_every_recipe_key_with_its_default():
    recipe = attempt_json_schema()["allOf"][0]["then"]["properties"]["recipe"]  # OpenRLHF's
    assert set(recipe["properties"]) == set(RECIPE_KEYS) | set(LATER_UNDERSCORE_KEYS) | {"loss_agg_mode"}
    # the key of every trainer's recipe: its modes, and no default (unset: the trainer's own aggregation)
    agg = recipe["properties"]["loss_agg_mode"]
    assert agg["anyOf"][0]["enum"] == ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                       "seq-mean-token-sum-norm"] and "default" not in agg
    assert recipe["properties"]["eps_clip"]["default"] == 0.2
    assert recipe["properties"]["adam_betas"]["default"] == [0.9, 0.95]
    assert "training" in recipe["properties"]["eps_clip"]["description"]


ROOT = {"trainer": {"name": "openrlhf", "version": "0.9.3"}, "datasets": {"pool": {"size": 100}}}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"recipe": {"eps_clipp": 0.1}}, "recipe.eps_clipp"),
        ({"recipe": {"eps_clip": -1}}, "recipe.eps_clip"),
        ({"recipe": {"eps_clip": "abc"}}, "recipe.eps_clip"),
        ({"recipe": {"lora_dropout": 1.5}}, "recipe.lora_dropout"),
        ({"recipe": {"rollout_batch_size": 0}}, "recipe.rollout_batch_size"),
        ({"recipe": {"rollout_batch_size": 0.5}}, "recipe.rollout_batch_size"),  # ge1: not an integer >= 1
        ({"recipe": {"eval_steps": 0}}, "recipe.eval_steps"),
        ({"recipe": {"advantage_estimator": "ppo2"}}, "recipe.advantage_estimator"),
        ({"recipe": {"loss_agg_mode": "token-sum"}}, "recipe.loss_agg_mode"),  # verl's fifth mode: not one of rlexp's
        ({"recipe": {"use_kl_loss": "yes"}}, "recipe.use_kl_loss"),
        ({"recipe": {"pretrain": None, "seed": None}}, "recipe.seed"),
        ({"recipe": {"adam_betas": [0.9]}}, "recipe.adam_betas"),
        ({"eval": {"answer_mode": "fuzzy"}}, "eval.answer_mode"),
        ({"datasets": {"pool": {"size": 100, "answer_mode": "math_verify"}}}, "datasets.pool.answer_mode"),
        ({"datasets": {"ood_primary": {"size": 10, "answer_mode": "sympy"}}}, "datasets.ood_primary.answer_mode"),
        ({"change": {"eps_clipp": 0.1}}, "change.eps_clipp"),
        ({"change": {"datasets.pool.answer_mode": "exact"}}, "change.datasets.pool.answer_mode"),
        ({"trainer": {"name": "nemo-rl", "version": "0.5"}}, "trainer.name"),  # not a trainer rlexp knows
        ({"intent": {"global_steps": 0}}, "intent.global_steps"),
        ({"extra_section": {}}, "extra_section"),
        ({"recipe": {"eval.answer_mode": "math_verify"}}, "recipe.eval.answer_mode"),  # a spec field, not a flag
        ({"recipe": {"actor.loss_agg_mode": {"a": 1}}}, "recipe.actor.loss_agg_mode"),
        ({"recipe": {"partial_rollout": [True]}}, "recipe.partial_rollout"),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(tmp_path, patch, field):
    spec = {**ROOT, **patch}
    d = tmp_path / "exp" / "a1"
    d.mkdir(parents=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as info:
        load_attempt(d)
    assert info.value.field == field
    assert list(validator().iter_errors(yaml.safe_load((d / "attempt.yaml").read_text()))), field


@pytest.mark.parametrize(
    "patch",
    [
        {"recipe": {"actor_learning_rate": "5e-7", "eps_clip": 1, "target_modules": "all-linear"}},
        {"recipe": {"eval_steps": -1, "vllm_num_engines": None, "eps_clip_low_high": [0.2, "0.28"]}},
        {"eval": {"answer_mode": "math_verify", "temperature": 0}, "description": None},
        {"datasets": {"pool": {"size": 100}, "id": {"size": 5, "answer_mode": "exact"}}},
        {"change": {"datasets.ood_primary.answer_mode": "math_verify", "eval.answer_mode": "exact"}},
        {"recipe": {"actor.loss_agg_mode": "seq-mean-token-mean", "partial_rollout": True, "image_key": "images"},
         "change": {"actor.loss_agg_mode": "seq-mean-token-mean"}},
    ],
)
def test_the_schema_accepts_what_the_loader_accepts(tmp_path, patch):
    spec = {**ROOT, **patch}
    d = tmp_path / "exp" / "a1"
    d.mkdir(parents=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    load_attempt(d)
    assert [e.message for e in validator().iter_errors(yaml.safe_load((d / "attempt.yaml").read_text()))] == []


@pytest.mark.parametrize("value, refused", [(0.5, True), (0.999, True), (0, True), (1, False), (1.0, False), (2.5, False)])
def test_ge1_means_at_least_one(value, refused):
    """``ge1`` is >= 1, in the loader's check and in the JSON Schema alike (a float key too: 0.5 is
    above 0 but below 1). By hand: 0.5 < 1 and 0.999 < 1 are refused, 1 and 2.5 pass."""
    from rlexp.spec.fields import Invalid as _Invalid
    from rlexp.spec.recipe import TRAINING, RecipeKey, key_json_schema
    from rlexp.spec.schema import _check_constraint

    key = RecipeKey(name="k", type="float", default=1.0, kind=TRAINING, constraint="ge1")
    if refused:
        with pytest.raises(_Invalid, match=">= 1"):
            _check_constraint(key, value)
    else:
        _check_constraint(key, value)
    errors = list(jsonschema.Draft202012Validator(key_json_schema(key)).iter_errors(value))
    assert bool(errors) is refused



def test_the_token_clip_default_is_each_trainers_own():
    """``EPS_CLIP_DEFAULT`` (written once, rlexp.spec.recipe) is OpenRLHF 0.9.3's --eps_clip default read
    from the release's own parser (its wheel), and the value TRL's GRPOConfig.epsilon and verl's actor
    clip_ratio default to (their fields and keys are generated from their own dataclasses / config): so
    the table's default, the checks' fallback and agent.gspo_clip's warning value are one number."""
    from rlexp.protocol.agentic_checks import check_gspo_clip
    from rlexp.spec.recipe import EPS_CLIP_DEFAULT, key_table
    from rlexp.trainers.openrlhf.parser import ReleaseParser, fetch, listed_releases

    (release,) = [r for r in listed_releases() if r.version == "0.9.3"]
    assert ReleaseParser("0.9.3", fetch(release)).parser.get_default("eps_clip") == EPS_CLIP_DEFAULT
    assert RECIPE_KEYS["eps_clip"].default == EPS_CLIP_DEFAULT
    assert key_table("trl").defaults["epsilon"] == EPS_CLIP_DEFAULT
    verl = key_table("verl").defaults
    assert {verl[f"actor_rollout_ref.actor.clip_ratio{side}"] for side in ("", "_low", "_high")} == {EPS_CLIP_DEFAULT}
    assert [c.name for c in check_gspo_clip("gspo", EPS_CLIP_DEFAULT, "recipe.eps_clip")] == ["agent.gspo_clip"]
    assert check_gspo_clip("gspo", 3e-4, "recipe.eps_clip") == []


def test_every_recipe_field_is_the_v093_parsers_argument_with_its_type_and_default():
    """Each field of the typed Recipe against OpenRLHF 0.9.3's own ``train_ppo_ray`` parser, loaded from the
    release's wheel: the argument exists, its type is the field's, and its default, converted by the parser's
    own type as argparse would a command-line value, is the field's default."""
    import argparse
    from dataclasses import fields

    from rlexp.spec.recipe import Recipe
    from rlexp.trainers.openrlhf.parser import ReleaseParser, fetch, listed_releases

    (release,) = [r for r in listed_releases() if r.version == "0.9.3"]
    actions = {a.dest: a for a in ReleaseParser("0.9.3", fetch(release)).parser._actions}
    not_in_093 = {"min_lr_ratio", "bf16", "offload", "flash_attn"}  # v0.11's name / releases before 0.9
    element = {"int": int, "float": float, "str": str, "str_list": str, "float_pair": float}
    checked = 0
    for f in fields(Recipe):
        if f.name == "extra" or f.name in not_in_093:
            continue
        action, key = actions[f.name], RECIPE_KEYS[f.name]
        if key.type == "bool":
            assert isinstance(action, argparse._StoreTrueAction) and action.default is False is f.default, f.name
        else:
            assert action.type in (element[key.type], None if key.type == "str" else element[key.type]), f.name
            convert = action.type or str
            if f.name == "wandb_run_name":  # OpenRLHF stamps the parse time ("ppo_%m%dT%H:%M"): unset here
                assert action.default.startswith("ppo_") and f.default is None
            elif action.default is None:
                assert f.default is None, f.name
            elif isinstance(action.default, list | tuple):  # a nargs argument
                assert tuple(convert(v) for v in action.default) == f.default, f.name
            else:
                assert convert(action.default) == f.default and type(f.default) is element[key.type], f.name
        checked += 1
    assert checked == len(RECIPE_KEYS) - len(not_in_093) == 139


def test_the_typed_recipe_is_the_resolved_mapping_it_replaces(tmp_path):
    """``att.recipe`` read by key is what the loader resolved before the recipe was typed, key for key and
    in the same order (the plan, the digest and the tracked parameters iterate it): the table's defaults
    in table order with the stated values in, then the keys outside the table as stated. Read by
    attribute it is the same value, and it cannot be changed."""
    import dataclasses

    from rlexp.spec.recipe import RECIPE_DEFAULTS, NativeRecipe, Recipe, key_table

    d = tmp_path / "exp" / "a1"
    d.mkdir(parents=True)
    stated = {"actor.loss_agg_mode": "token-mean", "eps_clip": 0.1, "pretrain": "m", "partial_rollout": True}
    (d / "attempt.yaml").write_text(yaml.safe_dump({"trainer": {"name": "openrlhf", "version": "0.11.2"},
                                                    "recipe": stated}, sort_keys=False))
    att = load_attempt(d)
    assert isinstance(att.recipe, Recipe)
    assert list(att.recipe.items()) == list({**RECIPE_DEFAULTS, **stated}.items())
    assert att.recipe.eps_clip == 0.1 and att.recipe.seed == 42 and att.recipe.pretrain == "m"
    assert dict(att.recipe.extra) == {"actor.loss_agg_mode": "token-mean", "partial_rollout": True}
    assert att.recipe == {**RECIPE_DEFAULTS, **stated} and att.recipe.get("not_a_key") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        att.recipe.eps_clip = 0.3  # type: ignore[misc]
    with pytest.raises(ValueError, match="eps_clip"):
        Recipe(extra={"eps_clip": 0.3})  # a described key has one home: its field
    trl = key_table("trl").recipe({"epsilon": 3e-4})
    assert isinstance(trl, NativeRecipe) and trl == {**key_table("trl").defaults, "epsilon": 3e-4}
