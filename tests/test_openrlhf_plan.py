"""`rlexp plan` checks the OpenRLHF command: listed releases only, every key valid for the release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlexp.cli import main
from rlexp.spec import TRAINING, diff_against_parent, load_attempt

EXAMPLE = Path(__file__).resolve().parent.parent / "experiments" / "seed-a30"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    dest = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("plan.json"))
    return dest


def with_root(example: Path, version: str, **recipe) -> Path:
    """a29b at ``version`` with recipe additions (a30 inherits them)."""
    spec = example / "a29b" / "attempt.yaml"
    content = yaml.safe_load(spec.read_text())
    content["trainer"]["version"] = version
    content["recipe"].update(recipe)
    spec.write_text(yaml.safe_dump(content, sort_keys=False))
    return example / "a30"


def plan(attempt: Path, capsys) -> tuple[int, str, str]:
    code = main(["plan", str(attempt), "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, out: str, err: str, attempt: Path) -> str:
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlexp: "), err
    assert not (attempt / "plan.json").exists()
    return lines[0]


@pytest.mark.parametrize(("version", "words"), [
    ("0.12.0", "0.12.0: newer than 0.11.2, the newest listed release: run scripts/refresh-openrlhf-flags"),
    ("0.8.0", "newest 0.11.2; scripts/refresh-openrlhf-flags adds newer ones"),
    ("0.9.3.post1", "not a listed OpenRLHF release"),
])
def test_unknown_version_is_a_plan_error(example, capsys, version, words):
    attempt = with_root(example, version)
    line = one_line_error(*plan(attempt, capsys), attempt)
    assert "trainer.version" in line and words in line
    assert str(example / "a30" / "attempt.yaml") in line  # the attempt being planned


def test_every_listed_release_plans_the_seed(example, capsys):
    from rlexp.trainers.openrlhf.argv import known_versions

    for version in known_versions():
        attempt = with_root(example, version)
        code, out, err = plan(attempt, capsys)
        command = json.loads(out)["openrlhf_command"]
        assert command["version"] == version, err
        dotted = version in ("0.10.2", "0.10.3", "0.10.4", "0.11.0", "0.11.1", "0.11.2")
        assert command["dialect"] == ("dotted" if dotted else "underscore")
        dropped = [] if version in ("0.9.3", "0.9.4", "0.9.5", "0.9.6", "0.9.7") else ["prompt_max_len"]
        assert command["dropped_recipe_keys"] == dropped
        (attempt / "plan.json").unlink()


def test_a_training_key_the_release_lacks_is_a_plan_error(example, capsys):
    attempt = with_root(example, "0.9.3", partial_rollout=True)  # 0.9.7 added --partial_rollout
    line = one_line_error(*plan(attempt, capsys), attempt)
    assert "recipe.partial_rollout: OpenRLHF 0.9.3 has no flag for this key" in line


def test_newer_only_flag_under_its_dotted_name(example, capsys):
    attempt = with_root(example, "0.11.2", **{"actor.loss_agg_mode": "seq-mean-token-mean"})
    code, out, err = plan(attempt, capsys)
    assert json.loads(out)["openrlhf_command"]["version"] == "0.11.2", err
    (attempt / "plan.json").unlink()
    attempt = with_root(example, "0.11.1")
    line = one_line_error(*plan(attempt, capsys), attempt)
    assert "recipe.actor.loss_agg_mode: OpenRLHF 0.11.1 has no --actor.loss_agg_mode" in line
    attempt = with_root(example, "0.11.2", **{"actor.loss_agg_mode": "seq-mean"})
    line = one_line_error(*plan(attempt, capsys), attempt)
    assert "takes one of token-mean, seq-mean-token-mean in OpenRLHF 0.11.2" in line


def test_a_dotted_key_counts_as_a_training_change(example):
    with_root(example, "0.11.2")
    child = example / "a31"
    child.mkdir()
    (child / "attempt.yaml").write_text(
        "id: a31\nparent: a29b\nchange: {actor.loss_agg_mode: seq-mean-token-mean}\n"
        "recipe: {actor.loss_agg_mode: seq-mean-token-mean, vllm.enable_prefix_caching: true}\n")
    att = load_attempt(child)
    diff = {d.key: d.kind for d in diff_against_parent(att)}
    assert diff == {"actor.loss_agg_mode": TRAINING, "vllm.enable_prefix_caching": "infrastructure"}


@pytest.mark.parametrize(("recipe", "words"), [
    ("{actor.loss_agg_mode: {a: 1}}", "recipe.actor.loss_agg_mode: must be a switch, a number"),
    ("{Actor.Loss: 1}", "recipe.Actor.Loss: unknown key"),
    ("{trainer.version: 1}", "recipe.trainer.version: unknown key"),
])
def test_bad_dotted_keys_are_spec_errors(example, capsys, recipe, words):
    with_root(example, "0.11.2")
    child = example / "a31"
    child.mkdir()
    (child / "attempt.yaml").write_text(f"id: a31\nparent: a29b\nrecipe: {recipe}\n")
    line = one_line_error(*plan(child, capsys), child)
    assert words in line


def test_later_underscore_keys_are_the_tables_underscore_flags_not_in_the_v093_table():
    from rlexp.spec import LATER_UNDERSCORE_KEYS, RECIPE_KEYS
    from rlexp.trainers.openrlhf.argv import known_versions, load_flag_table

    underscore = set()
    for version in known_versions():
        table = load_flag_table(version)
        if table.dialect == "underscore":
            underscore |= {flag[2:] for flag in table.flags}
    assert set(LATER_UNDERSCORE_KEYS) == underscore - set(RECIPE_KEYS) - {"max_new_tokens"}
    # and the v0.9.3 table is exactly 0.9.3's parser
    assert set(RECIPE_KEYS) == {flag[2:] for flag in load_flag_table("0.9.3").flags} | {
        "offload", "flash_attn", "bf16",  # flags of releases before 0.9 that the table keeps
        "min_lr_ratio"}  # 0.10.2's --actor.min_lr_ratio; 0.9.x fixes it at 0.1
