"""The spec's environment section in the protocol's bookkeeping: ``change`` may name
``environment.*`` keys, the diff against the parent sees them (training or instrumentation), the
recipe digest includes the training ones, and ``rlexp plan`` shows the loss (GSPO's own clip and
what selects it on each trainer)."""

from __future__ import annotations

import pytest
from test_env_launch import write_attempt

from rlexp.errors import InputError
from rlexp.spec import attempt_recipe_sha256, diff_against_parent, load_attempt


def child(root, attempt_id, text):
    d = root / attempt_id
    d.mkdir()
    (d / "attempt.yaml").write_text("parent: a1\n" + text)
    return load_attempt(d)


def verdicts(att):
    from rlexp.protocol.variable_checks import check_single_variable

    return {v.name: v for v in check_single_variable(att)}


def test_change_names_an_environment_field_and_the_diff_agrees(tmp_path):
    write_attempt(tmp_path, "a1")  # loss gspo, config {max_calls: 1}
    att = child(tmp_path, "a2", "change: {environment.loss: grpo}\nenvironment: {loss: grpo}\n")
    diff = diff_against_parent(att)
    assert [(d.key, d.parent, d.value, d.kind) for d in diff] == [("environment.loss", "gspo", "grpo", "training")]
    assert not {k for k, v in verdicts(att).items() if v.severity == "error"}

    att = child(tmp_path, "a3", "change: {environment.config.max_calls: 2}\nenvironment: {config: {max_calls: 2}}\n")
    assert [(d.key, d.parent, d.value) for d in diff_against_parent(att)] == [("environment.config.max_calls", 1, 2)]
    assert not {k for k, v in verdicts(att).items() if v.severity == "error"}

    att = child(tmp_path, "a4", "change: {seed: 8}\nrecipe: {seed: 8}\nenvironment: {max_turns: 3}\n")
    found = verdicts(att)
    assert found["diff.training_variables"].severity == "error"  # seed and environment.max_turns

    att = child(tmp_path, "a5", "environment: {max_turns: 3}\n")
    assert verdicts(att)["diff.undeclared"].severity == "error"

    att = child(tmp_path, "a6", "change: {environment.max_turns: 4}\nenvironment: {max_turns: 3}\n")
    assert verdicts(att)["diff.change_value"].severity == "error"


def test_eval_side_environment_fields_are_instrumentation(tmp_path):
    write_attempt(tmp_path, "a1")
    att = child(tmp_path, "a2", "environment: {primary_metric: mean_reward, success_threshold: 0.5}\n")
    assert {(d.key, d.kind) for d in diff_against_parent(att)} == {
        ("environment.primary_metric", "instrumentation"), ("environment.success_threshold", "instrumentation")}
    assert "diff.undeclared" not in verdicts(att)


def test_unknown_environment_change_key_is_one_line(tmp_path):
    write_attempt(tmp_path, "a1")
    with pytest.raises(InputError) as info:
        child(tmp_path, "a2", "change: {environment.max_turn: 3}\n")
    assert ": change.environment.max_turn: " in info.value.one_line()


def test_recipe_digest_includes_the_environment_training_fields(tmp_path):
    from rlexp.protocol.decision import recipe_sha256
    from rlexp.spec import TRAINING
    from rlexp.spec.recipe import key_table

    base = load_attempt(write_attempt(tmp_path, "a1"))
    turns = child(tmp_path, "a2", "environment: {max_turns: 3}\n")
    config = child(tmp_path, "a3", "environment: {config: {max_calls: 2}}\n")
    metric = child(tmp_path, "a4", "environment: {primary_metric: mean_reward}\n")
    digests = {a.id: attempt_recipe_sha256(a) for a in (base, turns, config, metric)}
    assert len({digests["a1"], digests["a2"], digests["a3"]}) == 3  # a training setting: another recipe
    assert digests["a4"] == digests["a1"]  # what is evaluated is not the recipe
    # a single-turn attempt's digest is the recipe keys' alone, as before environment tasks existed
    plain = load_attempt(write_attempt(tmp_path, "b1", environment=""))
    table = key_table("local")
    keys = [k for k, meta in table.keys.items() if meta.kind == TRAINING]
    assert attempt_recipe_sha256(plain) == recipe_sha256(plain.recipe, keys, ("local", plain.trainer.version))
    assert attempt_recipe_sha256(plain) != digests["a1"]


def test_plan_shows_gspo_and_its_trainer_settings(tmp_path, capsys):
    from rlexp.cli import main
    from rlexp.stages.plan import environment_plan

    att = load_attempt(write_attempt(tmp_path, "a1"))
    env = environment_plan(att)
    assert env["loss"] == "gspo" and env["gspo"]["clip"] == [0.001, 0.002]
    mapped = env["gspo"]["trainer_settings"]
    assert mapped["verl"]["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    assert mapped["verl"]["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert (mapped["trl"]["importance_sampling_level"], mapped["trl"]["loss_type"]) == ("sequence", "grpo")
    assert mapped["openrlhf"].get("--actor.policy_loss_type") == "gspo"  # 0.11.0: the actor.-prefixed flag
    main(["plan", str(tmp_path / "a1")])
    out = capsys.readouterr().out
    assert "GSPO" in out and "loss_mode=gspo" in out and "importance_sampling_level=sequence" in out
    grpo = load_attempt(write_attempt(tmp_path, "a2", environment="environment: {name: calculator}\n"))
    assert "gspo" not in environment_plan(grpo)
