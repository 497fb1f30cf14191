"""TRL's typed recipe (rlexp.trainers.trl.recipe.TrlRecipe): each attribute is the config field of its
name, and its default is the one TRL's own dataclass declares (read in the TRL venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlexp.trainers.trl.recipe import Field, TrlRecipe

REPO = Path(__file__).resolve().parents[1]


def typed_fields() -> list[str]:
    """The attributes TrlRecipe declares over its fields (``estimator`` is rlexp's key, not a field)."""
    return [name for name, member in vars(TrlRecipe).items() if isinstance(member, Field)]


def test_each_attribute_reads_the_field_of_its_name():
    from rlexp.trainers.trl.fields import GRPO_CONFIG_FIELDS

    names = {row[0] for row in GRPO_CONFIG_FIELDS}
    assert set(typed_fields()) <= names
    # a distinct stated value per field: the attribute must return that field's, not another's
    stated = {name: f"value-of-{name}" for name in typed_fields()}
    recipe = TrlRecipe.of(stated)
    for name in typed_fields():
        assert getattr(recipe, name) == f"value-of-{name}", name
    assert recipe.estimator == "grpo" and TrlRecipe.of({"advantage_estimator": "rloo"}).estimator == "rloo"


def test_an_rloo_recipe_has_no_grpo_only_field():
    recipe = TrlRecipe.of({"advantage_estimator": "rloo"})
    assert "loss_type" not in recipe and recipe.loss_type is None
    assert recipe.importance_sampling_level is None and recipe.vllm_importance_sampling_correction is None


def test_a_loaded_trl_attempt_holds_a_trl_recipe(tmp_path):
    from test_trl_plan import BASE, write_attempt

    from rlexp.spec import load_attempt

    att = load_attempt(write_attempt(tmp_path, {**BASE, "epsilon": 0.3}))
    assert isinstance(att.recipe, TrlRecipe)
    assert att.recipe.epsilon == 0.3 and att.recipe["epsilon"] == 0.3


def test_the_defaults_are_trls_own(tmp_path):
    """TrlRecipe.of({}) (GRPO) and of an RLOO recipe against the defaults GRPOConfig and RLOOConfig
    declare, read from TRL's dataclasses in the TRL venv."""
    python = REPO / ".venv-trl" / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(".venv-trl is missing: scripts/run-tests builds it with scripts/setup-trl")
        pytest.skip(".venv-trl not built (scripts/setup-trl)")
    code = (
        "import dataclasses, json, sys\n"
        "from trl import GRPOConfig, RLOOConfig\n"
        "names = json.loads(sys.argv[1])\n"
        "out = {}\n"
        "for cls in (GRPOConfig, RLOOConfig):\n"
        "    fields = {f.name: f for f in dataclasses.fields(cls)}\n"
        "    out[cls.__name__] = {n: (fields[n].default if fields[n].default is not dataclasses.MISSING\n"
        "                             else fields[n].default_factory()) for n in names if n in fields}\n"
        "print(json.dumps(out, default=str))\n"
    )
    names = typed_fields()
    result = subprocess.run([str(python), "-c", code, json.dumps(names)], capture_output=True, text=True,
                            check=True, cwd=tmp_path)  # fmt: skip
    reference = json.loads(result.stdout)
    grpo, rloo = TrlRecipe.of({}), TrlRecipe.of({"advantage_estimator": "rloo"})
    for name in names:
        assert json.loads(json.dumps(getattr(grpo, name), default=str)) == reference["GRPOConfig"][name], name
        if name in reference["RLOOConfig"]:
            assert json.loads(json.dumps(getattr(rloo, name), default=str)) == reference["RLOOConfig"][name], name
    assert reference["RLOOConfig"]["num_generations"] != reference["GRPOConfig"]["num_generations"]
