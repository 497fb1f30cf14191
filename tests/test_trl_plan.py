"""`rlexp plan` for TRL's GRPOTrainer: step counts and warm-up by hand, the LR at every step against
transformers' own scheduler (the release TRL runs with, installed in the main venv too), the eval/save
schedule and the preflight checks that apply, and the spec's validation against GRPOConfig's fields."""

from __future__ import annotations

import json

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.stages.plan import build_plan
from rlexp.trainers.trl.fields import TRANSFORMERS_VERSION


def write_attempt(root, recipe, *, pool=25, gpus=None, intent=None, mid=None, attempt="t1", parent=None,
                  change=None, trainer=True):  # fmt: skip
    spec = {"datasets": {"pool": {"size": pool}, "ood_primary": {"size": 500}}, "recipe": recipe}
    if trainer:
        spec["trainer"] = {"name": "trl", **({"gpus": gpus} if gpus else {})}
    if intent:
        spec["intent"] = {"global_steps": intent}
    if mid:
        spec["checkpoints"] = {"mid": mid}
    if parent:
        spec["parent"] = parent
    if change:
        spec["change"] = change
    d = root / "exp" / attempt
    d.mkdir(parents=True, exist_ok=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    return d


def plan_of(tmp_path, recipe, **kw):
    from rlexp.spec import load_attempt

    return build_plan(load_attempt(write_attempt(tmp_path, recipe, **kw)))


def ids(plan, severity=None):
    return {c["name"] for c in plan["checks"] if severity is None or c["severity"] == severity}


BASE = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4,
        "num_train_epochs": 2, "learning_rate": 1e-5, "warmup_steps": 0.1, "lr_scheduler_type": "cosine",
        "save_strategy": "steps", "save_steps": 10, "eval_strategy": "steps", "eval_steps": 5}  # fmt: skip


# ----------------------------------------------------------------------------- step counts by hand


def test_default_steps_per_generation_and_a_dropped_partial_chunk(tmp_path):
    plan = plan_of(tmp_path, BASE, pool=25)
    trl = plan["trl"]
    # by hand: S = GA = 2; generation batch 4·1·2 = 8 completions = P 2 prompts; floor(25/2) = 12 chunks
    # (1 prompt dropped); L = 12·μ1·S2 = 24 batches; ceil(24/2) = 12 updates/epoch; ceil(2 × 12) = 24;
    # warm-up ceil(24 × 0.1) = ceil(2.4) = 3
    assert (trl["steps_per_generation"], trl["prompts_per_generation_batch"]) == (2, 2)
    assert (trl["prompts_dropped_per_epoch"], trl["batches_per_epoch"], trl["update_steps_per_epoch"]) == (1, 24, 12)
    assert (plan["steps"]["optimizer_steps_total"], plan["steps"]["global_steps_total"]) == (24, 24)
    assert plan["steps"]["warmup_steps"] == 3
    assert "steps.partial_batch" in ids(plan, "warning")


def test_accumulation_that_does_not_divide_iterations_and_fractional_epochs(tmp_path):
    recipe = {**BASE, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 3, "num_generations": 2,
              "steps_per_generation": 2, "num_iterations": 2, "num_train_epochs": 1.5, "warmup_steps": 0.05,
              "eval_steps": 1, "save_steps": 1}  # fmt: skip
    plan = plan_of(tmp_path, recipe, pool=11)
    # by hand: P = 2·1·2/2 = 2; floor(11/2) = 5 chunks; L = 5·2·2 = 20; 20 // 3 + 1 = 7 updates/epoch
    # (the last one accumulates 2 batches); ceil(1.5 × 7) = ceil(10.5) = 11; warm-up ceil(0.55) = 1
    assert plan["trl"]["batches_per_epoch"] == 20 and plan["trl"]["update_steps_per_epoch"] == 7
    assert plan["steps"]["optimizer_steps_total"] == 11 and plan["steps"]["warmup_steps"] == 1


def test_generation_batch_size_on_two_processes(tmp_path):
    recipe = {**BASE, "per_device_train_batch_size": 4, "generation_batch_size": 16, "num_generations": 8,
              "gradient_accumulation_steps": 1, "num_train_epochs": 1}  # fmt: skip
    plan = plan_of(tmp_path, recipe, pool=9, gpus=2)
    # by hand: S = 16 / (4·2) = 2; P = 16 / 8 = 2 prompts; floor(9/2) = 4; L = 4·1·2 = 8; GA 1 → 8 steps
    assert (plan["trl"]["steps_per_generation"], plan["trl"]["processes"]) == (2, 2)
    assert plan["steps"]["optimizer_steps_total"] == 8


def test_max_steps_overrides_epochs(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "max_steps": 7, "warmup_steps": 2})
    assert plan["steps"]["optimizer_steps_total"] == 7 and plan["steps"]["warmup_steps"] == 2
    assert [r["global_step"] for r in plan["lr"]] == list(range(1, 8))


@pytest.mark.parametrize(("warmup", "total", "expected"), [
    (0.07, 100, 8),  # 100 × 0.07 = 7.000000000000001 in floats: ceil gives 8, as transformers computes it
    (0.125, 24, 3),  # exactly 3.0: no rounding up
    (0.01, 24, 1),   # ceil(0.24) = 1: any positive ratio warms up at least one step
    (1.0, 24, 1),    # >= 1 is absolute: 1.0 is one step, not the whole run
    (5, 24, 5),
    (0, 24, 0),
])  # fmt: skip
def test_warmup_ratio_rounding_matches_transformers(tmp_path, warmup, total, expected):
    transformers = pytest.importorskip("transformers")
    assert transformers.__version__ == TRANSFORMERS_VERSION  # the release .venv-trl runs
    reference = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), warmup_steps=warmup)
    assert reference.get_warmup_steps(total) == expected
    plan = plan_of(tmp_path, {**BASE, "max_steps": total, "warmup_steps": warmup})
    assert plan["steps"]["warmup_steps"] == expected


# ----------------------------------------------------------------------------- the LR against transformers


SCHEDULES = [
    ("linear", None),
    ("cosine", None),
    ("cosine", {"num_cycles": 1.0}),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", {"min_lr": 2e-6}),
    ("constant", None),
    ("constant_with_warmup", None),
]


@pytest.mark.parametrize(("scheduler", "kwargs"), SCHEDULES)
def test_lr_at_every_step_equals_transformers_scheduler(tmp_path, scheduler, kwargs):
    torch = pytest.importorskip("torch")
    from transformers import TrainingArguments, get_scheduler

    recipe = {**BASE, "lr_scheduler_type": scheduler, "lr_scheduler_kwargs": kwargs, "num_train_epochs": 3,
              "warmup_steps": 0.15}  # fmt: skip
    plan = plan_of(tmp_path, recipe, pool=25)
    total, peak = plan["steps"]["optimizer_steps_total"], 1e-5
    assert total == 36 and plan["lr_rows"] == "all"
    args = TrainingArguments(output_dir=str(tmp_path / "o"), warmup_steps=0.15, lr_scheduler_type=scheduler,
                             lr_scheduler_kwargs=kwargs or {})  # fmt: skip
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler_obj = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(total),
                                  num_training_steps=total, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    rows = {r["global_step"]: r for r in plan["lr"]}
    for step in range(1, total + 1):
        applied = optimizer.param_groups[0]["lr"]  # what optimizer step `step` uses
        optimizer.step()
        logged = scheduler_obj.get_last_lr()[0]  # transformers 5.24 reads the LR it logs before scheduler.step()
        scheduler_obj.step()
        assert rows[step]["lr_first"] == pytest.approx(applied, rel=1e-12, abs=1e-18), step
        assert rows[step]["actor_lr_logged"] == pytest.approx(logged, rel=1e-12, abs=1e-18), step
        if step < total:  # and the next step's LR is what the scheduler holds now
            assert rows[step + 1]["lr_first"] == pytest.approx(scheduler_obj.get_last_lr()[0], rel=1e-12, abs=1e-18)


def test_unplannable_scheduler_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(InputError) as err:
        plan_of(tmp_path, {**BASE, "lr_scheduler_type": "inverse_sqrt"})
    assert err.value.field == "recipe.lr_scheduler_type"


# ----------------------------------------------------------------------------- eval / save schedule and checks


def test_eval_and_save_follow_transformers_flow_including_the_final_step(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "warmup_steps": 0.05}, pool=25, mid=10)
    # DefaultFlowCallback: multiples of eval_steps/save_steps, and the final step under the "steps" strategy
    assert plan["eval_global_steps"] == [5, 10, 15, 20, 24]
    assert plan["save_global_steps"] == [10, 20, 24]
    assert not ids(plan, "error")


def test_no_eval_or_save_at_the_final_step_is_an_error(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "eval_strategy": "no", "save_strategy": "no"}, mid=10)
    assert {"schedule.final_eval", "schedule.final_save", "schedule.mid_save"} <= ids(plan, "error")


def test_ratio_save_steps_and_mid_beyond_the_run(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "save_steps": 0.25}, mid=30)
    assert plan["save_global_steps"] == [6, 12, 18, 24]  # ceil(24 × 0.25) = 6
    assert "schedule.mid_beyond_run" in ids(plan, "error")


def test_warmup_that_never_ends_is_an_error(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "warmup_steps": 30})
    assert "lr.warmup_never_ends" in ids(plan, "error")
    assert "lr.low_early" not in ids(plan)  # reached 20/30 of peak by step 20: the other check stays quiet
    plan = plan_of(tmp_path, {**BASE, "warmup_steps": 24})  # warm-up as long as the run: still never ends
    assert "lr.warmup_never_ends" in ids(plan, "error")


def test_one_generation_per_prompt_is_flagged_in_trls_words(tmp_path):
    with pytest.raises(InputError, match="recipe.num_generations: 1: GRPO takes its baseline within a prompt's "
                                          "group, and TRL refuses it at start .*GRPO requires at least 2 generations"):
        plan_of(tmp_path, {**BASE, "num_generations": 1})
    assert "samples.group_of_one" not in ids(plan_of(tmp_path / "b", BASE))


def test_low_lr_early_and_intent_versus_actual_steps(tmp_path):
    plan = plan_of(tmp_path, {**BASE, "max_steps": 400, "warmup_steps": 0.5}, intent=200)
    assert {"lr.low_early", "lr.warmup_share", "steps.intent"} <= ids(plan, "error")
    message = next(c["rule"] for c in plan["checks"] if c["name"] == "steps.intent")
    assert "max_steps 400" in message and "intent is 200" in message


def test_an_empty_run_is_an_error(tmp_path):
    plan = plan_of(tmp_path, BASE, pool=1)  # 1 prompt < P = 2: no generation batch
    assert plan["steps"]["optimizer_steps_total"] == 0 and "steps.empty" in ids(plan, "error")


def test_power_is_planned(tmp_path):
    plan = plan_of(tmp_path, BASE)
    assert plan["power"]["n"] == 500 and plan["power"]["mde_pp"] > 0


# ----------------------------------------------------------------------------- spec validation


def test_unknown_trl_key_names_file_field_and_a_close_match(tmp_path):
    from rlexp.spec import load_attempt

    with pytest.raises(InputError) as err:
        load_attempt(write_attempt(tmp_path, {**BASE, "learning_rat": 1e-5}))
    message = str(err.value)
    assert err.value.field == "recipe.learning_rat" and "attempt.yaml" in message
    assert "did you mean 'learning_rate'?" in message and "GRPOConfig" in message


def test_an_openrlhf_key_is_refused_for_trl_and_a_trl_key_for_openrlhf(tmp_path):
    from rlexp.spec import load_attempt

    with pytest.raises(InputError, match="recipe.actor_learning_rate: unknown key"):
        load_attempt(write_attempt(tmp_path, {**BASE, "actor_learning_rate": 1e-5}))
    d = tmp_path / "exp" / "o1"
    d.mkdir(parents=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump({"trainer": {"name": "openrlhf", "version": "0.9.3"},
                                                    "recipe": {"num_generations": 8},
                                                    "datasets": {"pool": {"size": 8}}}))  # fmt: skip
    with pytest.raises(InputError, match="recipe.num_generations: unknown key"):
        load_attempt(d)


def test_trl_types_versions_and_defaults(tmp_path):
    from rlexp.spec import load_attempt

    with pytest.raises(InputError, match="recipe.per_device_train_batch_size: must be an integer"):
        load_attempt(write_attempt(tmp_path, {**BASE, "per_device_train_batch_size": "four"}))
    att = load_attempt(write_attempt(tmp_path, BASE))
    assert att.trainer.version == "1.16.0"
    assert att.recipe["beta"] == 0.0 and att.recipe["loss_type"] == "dapo"  # GRPOConfig's defaults
    d = write_attempt(tmp_path, BASE)
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["trainer"]["version"] = "0.29.0"
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match="trainer.version"):
        load_attempt(d)


def test_one_variable_rule_uses_trl_kinds(tmp_path):
    from rlexp.spec import load_attempt

    write_attempt(tmp_path, BASE, attempt="p")
    child = write_attempt(tmp_path, {"beta": 0.04, "logging_steps": 1, "dataloader_num_workers": 2}, attempt="c",
                          parent="p", change={"beta": 0.04}, trainer=False)  # fmt: skip
    plan = build_plan(load_attempt(child))
    kinds = {d["key"]: d["kind"] for d in plan["diff"]}
    assert kinds == {"beta": "training", "logging_steps": "instrumentation", "dataloader_num_workers": "infrastructure"}
    assert not {i for i in ids(plan, "error") if i.startswith("diff.")}
    child = write_attempt(tmp_path, {"beta": 0.04, "learning_rate": 2e-5}, attempt="c2", parent="p",
                          change={"beta": 0.04}, trainer=False)  # fmt: skip
    assert "diff.training_variables" in ids(build_plan(load_attempt(child)), "error")


def test_a_child_cannot_switch_trainer(tmp_path):
    from rlexp.spec import load_attempt

    write_attempt(tmp_path, BASE, attempt="p")
    d = tmp_path / "exp" / "c"
    d.mkdir(parents=True)
    (d / "attempt.yaml").write_text(yaml.safe_dump({"parent": "p", "trainer": {"name": "openrlhf",
                                                                               "version": "0.9.3"}}))  # fmt: skip
    with pytest.raises(InputError, match="trainer.name"):
        load_attempt(d)


def test_json_schema_accepts_a_trl_recipe_and_refuses_a_typo(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from rlexp.spec import attempt_json_schema

    schema = attempt_json_schema()
    spec = yaml.safe_load((write_attempt(tmp_path, BASE) / "attempt.yaml").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(spec)) == []
    spec["recipe"]["learning_rat"] = 1
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(spec))


def test_the_committed_field_list_is_grpo_config(tmp_path):
    """The committed list is what the generator writes from TRL's own dataclasses, where .venv-trl
    exists (CI builds it)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    python = repo / ".venv-trl" / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(".venv-trl is missing: scripts/run-tests builds it with scripts/setup-trl")
        pytest.skip(".venv-trl not built (scripts/setup-trl)")
    code = "import sys; from rlexp.trainers.trl.write_fields import module_text; sys.stdout.write(module_text())"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo)})  # fmt: skip
    committed = repo / "rlexp" / "trainers" / "trl" / "fields.py"
    assert out.stdout == committed.read_text(), "stale: run scripts/refresh-trl-fields"
    from rlexp.trainers.trl.fields import GRPO_CONFIG_FIELDS, MODEL_CONFIG_FIELDS

    names = {row[0] for row in GRPO_CONFIG_FIELDS}
    assert {"num_generations", "steps_per_generation", "warmup_steps", "max_steps"} <= names
    assert {"model_name_or_path", "use_peft", "lora_r"} <= {row[0] for row in MODEL_CONFIG_FIELDS}


# ----------------------------------------------------------------------------- launch (dry run: nothing written)


def test_dry_run_is_the_trl_venv_running_the_generated_script(tmp_path):
    from rlexp.stages.launch import launch

    d = write_attempt(tmp_path, {**BASE, "model_name_or_path": "models/m", "warmup_steps": 0.05}, mid=10)
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["datasets"]["pool"] = {"path": "data/pool.jsonl", "size": 25}
    spec["datasets"]["ood_monitor"] = {"path": "data/monitor.jsonl", "size": 10}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    result = launch(d, dry_run=True)
    assert result.backend == "process" and result.argv[1] == str(d.resolve() / "launch" / "train_trl.py")
    assert result.argv[0].endswith("python")
    assert not (d / "launch").exists() and not (d / "plan.json").exists()
    with pytest.raises(InputError, match="trainer 'trl' runs on the process backend"):
        launch(d, dry_run=True, backend="ray", ray_address="http://127.0.0.1:8265")


def test_the_generated_script_holds_the_stated_fields_and_rlexp_paths(tmp_path):
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt
    from rlexp.trainers.trl.script import prepare_launch

    d = write_attempt(tmp_path, {**BASE, "model_name_or_path": "models/m", "use_peft": True, "lora_r": 4,
                                 "report_to": "none"})  # fmt: skip
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["datasets"]["pool"] = {"path": "data/pool.jsonl"}
    spec["datasets"]["ood_monitor"] = {"path": "data/monitor.jsonl", "size": 10}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "exp" / "data").mkdir()
    (tmp_path / "exp" / "data" / "pool.jsonl").write_text("")
    built = prepare_launch(load_attempt(d), AttemptDir(d), resume=False, must_exist=False)
    text = built.script_text
    compile(text, str(built.script), "exec")  # valid Python
    config = json.loads(text.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])
    assert config["grpo_config"]["gradient_accumulation_steps"] == 2 and config["grpo_config"]["report_to"] == [
        "tensorboard"]
    assert config["grpo_config"]["output_dir"] == str(d.resolve() / "checkpoints" / "trl")
    assert "use_peft" not in config["grpo_config"] and config["model_config"]["lora_r"] == 4
    assert config["model_config"]["model_name_or_path"] == "models/m"  # not a directory: the name as written
    assert config["checkpoint_pattern"].endswith("checkpoints/global_step{N}_hf")
    spec["recipe"]["output_dir"] = "/tmp/elsewhere"
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as err:
        prepare_launch(load_attempt(d), AttemptDir(d), resume=False, must_exist=False)
    assert err.value.field == "recipe.output_dir"


def test_a_trl_resume_continues_from_transformers_checkpoint_folders(tmp_path):
    from rlexp.experiment.layout import AttemptDir, Checkpoint
    from rlexp.trainers import rules

    trl_rules, local_rules = rules("trl"), rules("local")
    ad = AttemptDir(tmp_path / "a")
    for name in ("checkpoint-2", "checkpoint-10", "checkpoint-x", "global_step4_hf"):
        (ad.checkpoint_files.resume_state_dir(trl_rules) / name).mkdir(parents=True)
    assert ad.checkpoint_files.resume_state_dir(trl_rules) == tmp_path / "a" / "checkpoints" / "trl"
    assert ad.checkpoint_files.latest_resume_state(trl_rules) == Checkpoint(10, path=ad.checkpoint_files.resume_state_dir(trl_rules) / "checkpoint-10")
    assert ad.checkpoint_files.latest_resume_state(local_rules) is None  # other trainers keep their own naming

