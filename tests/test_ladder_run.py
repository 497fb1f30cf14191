"""A ladder of three rungs on the demo experiment (fast settings), end to end through the CLI:
recorded as an Optuna study (one trial per rung, with its attributes) and as MLflow runs linked by
the lineage tag (not nested); a two-variable rung refused; a second run resumes without redoing."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest


def demo_ladder(root):
    """The fast demo's datasets, supervised base and root attempt d1, with a ladder over eps_clip."""
    import dataclasses

    from rich.console import Console

    from rlexp.stages.demo import EXPERIMENT, DemoConfig, _build_base_model, _build_datasets, attempt_specs

    # the fast demo, with a shorter supervision of the base model: the ladder's plumbing is under
    # test here, not the base model's accuracy (test_demo.py covers that)
    config = dataclasses.replace(DemoConfig.fast(), sft_steps=60)
    exp = root / "experiments" / EXPERIMENT
    datasets = _build_datasets(exp / "data", config)
    _build_base_model(exp / "models", datasets, config, Console(stderr=True))
    (exp / "d1").mkdir(parents=True, exist_ok=True)
    (exp / "d1" / "attempt.yaml").write_text(attempt_specs(config, datasets)["d1"])
    (exp / "ladder.yaml").write_text(
        "root: d1\nvariables:\n  eps_clip: [0.1, 0.3]\n  init_kl_coef: [0.01]\nseeds: [42, 43]\nrungs: 6\n")
    return exp


def cli(*args, cwd, timeout=1800):
    return subprocess.run([sys.executable, "-m", "rlexp.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow
def test_ladder_of_three_rungs_on_the_demo(tmp_path):
    exp = demo_ladder(tmp_path)
    mlflow_db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{mlflow_db}"

    done = cli("ladder", "run", exp, "--rungs", "3", "--tracking-uri", uri, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    ran = [r["attempt"] for r in result["ran"]]
    assert len(ran) == 3 and ran[0] == "d1", ran

    # the Optuna study beside the MLflow store: one trial per rung, each with its attributes
    import optuna

    study = optuna.load_study(study_name="ladder:demo", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    trials = study.get_trials()
    assert [t.user_attrs["attempt_id"] for t in trials] == ran
    decisions = {}
    for trial, rung in zip(trials, result["ran"], strict=True):
        attempt = rung["attempt"]
        decision = json.loads((exp / attempt / "decision.json").read_text())
        decisions[attempt] = decision["decision"]
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert trial.user_attrs["decision"] == decision["decision"]
        primary = decision["checkpoints"][decision["primary_checkpoint"]]
        assert trial.value == pytest.approx(primary["delta_pp"])
        assert trial.user_attrs["mlflow_run_id"] == rung["mlflow_run_id"] != ""
        spec = (exp / attempt / "attempt.yaml").read_text()
        if attempt == "d1":
            assert trial.user_attrs["changed_variable"] == "none"
        elif trial.user_attrs["kind"] == "confirmation":
            assert trial.user_attrs["changed_variable"] == "seed" and "seed_of:" in spec
        else:
            variable, value = trial.user_attrs["changed_variable"], trial.user_attrs["value"]
            assert f"change:\n  {variable}: {value}" in spec and trial.params == {variable: value}
            # the rung's parent: the pinned SOTA attempt when there was one, else the root
            assert trial.user_attrs["parent"] in ("d1", "d1s2")
    # the ladder's rule, checked on what happened to d1: after CONFIRM its confirmation seed; after a
    # CONTINUE whose fault tree names a class, a variable of that class's interventions when the grid
    # has one (the fast demo's d1 is a CONTINUE with class D: init_kl_coef); else the grid's first value
    from rlexp.spec.ladder import FAULT_CLASS_VARIABLES, fault_class_of

    d1 = json.loads((exp / "d1" / "decision.json").read_text())
    fault = fault_class_of(d1)
    second = trials[1].user_attrs
    if d1["decision"] == "CONFIRM":
        assert (second["kind"], second["seed_of"], second["seed"]) == ("confirmation", "d1", 43)
    elif d1["decision"] == "CONTINUE" and fault and "init_kl_coef" in FAULT_CLASS_VARIABLES[fault]:
        assert (second["kind"], second["changed_variable"], second["value"]) == ("fault_tree", "init_kl_coef", 0.01)
    else:
        assert (second["kind"], second["changed_variable"], second["value"]) == ("grid", "eps_clip", 0.1)

    # MLflow: one run per rung, linked by the lineage tag, none nested under another
    db = sqlite3.connect(mlflow_db)
    runs = dict(db.execute("select name, run_uuid from runs where lifecycle_stage = 'active'").fetchall())
    assert set(ran) <= set(runs)
    tags = {(run, key): value for run, key, value in db.execute(
        "select r.name, t.key, t.value from tags t join runs r on r.run_uuid = t.run_uuid")}
    assert not any(key == "mlflow.parentRunId" for _, key in tags)
    for trial in trials:
        parent = trial.user_attrs["parent"]
        attempt = trial.user_attrs["attempt_id"]
        if parent:
            assert tags[(attempt, "rlexp.lineage")] == f"{parent} -> {attempt}"
            assert runs[parent] in tags[(attempt, "rlexp.parent_run")]

    # a second run resumes: nothing finished is redone (the study keeps its three trials)
    again = cli("ladder", "propose", exp, "--dry-run", "--json", "--tracking-uri", uri, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["attempt"] not in ran

    # a rung that changes two training variables is refused: one line, exit 2, nothing written
    before = sorted(p.name for p in exp.iterdir())
    refused = cli("ladder", "propose", exp, "--change", "eps_clip=0.25", "--change", "lora_rank=8",
                  "--tracking-uri", uri, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "one training variable" in line and "eps_clip" in line and "lora_rank" in line
    assert sorted(p.name for p in exp.iterdir()) == before
