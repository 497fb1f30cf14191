"""`rlexp plan` and `rlexp launch --dry-run` for a verl attempt, end to end through the CLI.

Expected step counts are worked out by hand from verl 0.9.1's rules (docs/trainers.md#verl).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from rlexp.cli import main
from rlexp.spec import load_attempt

OPT = "actor_rollout_ref.actor.optim"


def write_set(path: Path, n: int, tag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        prompt = f"{tag} problem {i}: what is {i} + 1?"
        lines.append(json.dumps({"problem_hash": hashlib.sha256(prompt.encode()).hexdigest(), "prompt": prompt,
                                 "answer": str(i + 1)}))
    path.write_text("\n".join(lines) + "\n")


RECIPE = {
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-0.5B-Instruct",
    "algorithm.adv_estimator": "grpo",
    "data.train_batch_size": 64,
    "trainer.total_epochs": 3,
    "trainer.test_freq": 5,
    "trainer.save_freq": 5,
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
    f"{OPT}.lr": 1e-6,
    f"{OPT}.lr_warmup_steps_ratio": 0.1,
    f"{OPT}.lr_scheduler_type": "cosine",
    f"{OPT}.min_lr_ratio": 0.1,
}


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    root = tmp_path / "verl-exp"
    write_set(root / "data" / "pool.jsonl", 1000, "pool")
    write_set(root / "data" / "monitor.jsonl", 50, "monitor")
    write_set(root / "data" / "primary.jsonl", 400, "primary")
    return root


def attempt(root: Path, attempt_id: str, recipe: dict | None = None, **top) -> Path:
    spec = {"id": attempt_id, "trainer": {"name": "verl", "version": "0.9.1", "gpus": 8},
            "recipe": dict(RECIPE) if recipe is None else recipe,
            "datasets": {"pool": {"path": "data/pool.jsonl"}, "ood_monitor": {"path": "data/monitor.jsonl"},
                         "ood_primary": {"path": "data/primary.jsonl"}},
            "checkpoints": {"mid": 20}, **top}
    if top.get("parent"):
        del spec["trainer"], spec["datasets"], spec["checkpoints"]
    path = root / attempt_id / "attempt.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path.parent


def plan(attempt_dir: Path, capsys) -> tuple[int, dict, str]:
    code = main(["plan", str(attempt_dir), "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else {}), err


def test_spec_takes_verls_defaults_not_openrlhfs(experiment):
    att = load_attempt(attempt(experiment, "a1"))
    assert att.recipe["data.train_batch_size"] == 64  # stated
    assert att.recipe["data.gen_batch_size"] is None and att.recipe["trainer.critic_warmup"] == 0  # verl's
    assert "rollout_batch_size" not in att.recipe and "actor_learning_rate" not in att.recipe


def test_plan_counts_steps_the_verl_way(experiment, capsys):
    code, data, _ = plan(attempt(experiment, "a1"), capsys)
    s = data["steps"]
    # 1000 // 64 = 15 steps an epoch (40 prompts dropped) × 3 epochs = 45; warm-up int(0.1 × 45) = 4
    assert (s["global_steps_total"], s["partial_batch_prompts"], s["warmup_steps"]) == (45, 40, 4)
    assert s["optimizer_steps_per_global_step"] == 4 and s["optimizer_steps_total"] == 180  # 64 // 16
    assert s["verl"]["total_training_steps"] == 45 and s["verl"]["reaches_last_step"]
    # test_freq / save_freq 5: every multiple, and 45 is one (the last step fires anyway)
    assert data["eval_global_steps"] == list(range(5, 46, 5)) and data["save_global_steps"] == list(range(5, 46, 5))
    assert data["validation_at_step_0"] is True
    assert len(data["lr"]) == 45 and data["lr"][0]["lr_first"] == 0.0  # update 0 applies λ(0) = 0
    assert data["lr"][0]["actor_lr_logged"] == pytest.approx(0.25e-6)  # logged after the scheduler step
    names = {c["name"] for c in data["checks"]}
    assert "steps.partial_batch" in names and "lr.warmup_never_ends" not in names
    assert data["verl_command"]["entrypoint"] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert code == 0, [c for c in data["checks"] if c["severity"] == "error"]


def test_warmup_that_never_ends_is_an_error(experiment, capsys):
    recipe = {**RECIPE, f"{OPT}.lr_warmup_steps": 45}  # 45 updates: u = 0..44 < 45, the peak never comes
    code, data, _ = plan(attempt(experiment, "a2", recipe), capsys)
    errors = {c["name"]: c["rule"] for c in data["checks"] if c["severity"] == "error"}
    assert code == 1 and "lr.warmup_never_ends" in errors
    assert "45 scheduler steps (lr_warmup_steps 45)" in errors["lr.warmup_never_ends"]
    assert "97.8% of peak" in errors["lr.warmup_never_ends"]  # the last step applies λ(44) = 44/45


def test_grpo_with_one_sample_is_flagged_with_what_verl_does(experiment, capsys):
    """Issue #30: verl runs it without a word and trains on the raw score (tests/test_group_of_one.py
    runs verl's own estimators); rlexp refuses to plan it, outside any environment task."""
    recipe = {**RECIPE, "algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 1}
    code, data, _ = plan(attempt(experiment, "a2", recipe), capsys)
    rule = next(c["rule"] for c in data["checks"] if c["name"] == "samples.group_of_one")
    assert code == 1 and "actor_rollout_ref.rollout.n is 1" in rule and "the advantage is the raw score" in rule
    code, data, _ = plan(attempt(experiment, "a3", {**recipe, "actor_rollout_ref.rollout.n": 4}), capsys)
    assert "samples.group_of_one" not in {c["name"] for c in data["checks"]}


def test_intent_and_partial_data(experiment, capsys):
    recipe = {**RECIPE, "trainer.total_training_steps": 100, "trainer.save_freq": 20, "trainer.test_freq": 20}
    code, data, _ = plan(attempt(experiment, "a3", recipe, intent={"global_steps": 100}), capsys)
    names = {c["name"]: c for c in data["checks"]}
    # the data gives 45 steps; the scheduler is built for 100; the run ends at 45 without a last-step save
    assert data["steps"]["global_steps_total"] == 45 and data["steps"]["verl"]["total_training_steps"] == 100
    assert "steps.short_of_schedule" in names and "steps.intent" in names
    assert "schedule.final_save" in names and "trainer.save_freq 20" in names["schedule.final_save"]["rule"]
    assert code == 1


def test_one_variable_rule_uses_verls_keys(experiment, capsys):
    attempt(experiment, "a1")
    child = attempt(experiment, "a4", {f"{OPT}.lr": 2e-6, "trainer.test_freq": 15, "trainer.save_freq": 15},
                    parent="a1", change={f"{OPT}.lr": 2e-6})
    code, data, _ = plan(child, capsys)
    kinds = {d["key"]: d["kind"] for d in data["diff"]}
    assert kinds == {f"{OPT}.lr": "training", "trainer.test_freq": "instrumentation",
                     "trainer.save_freq": "instrumentation"}
    assert not [c for c in data["checks"] if c["name"].startswith("diff.")]
    two = attempt(experiment, "a5", {f"{OPT}.lr": 2e-6, "data.train_batch_size": 32}, parent="a1",
                  change={f"{OPT}.lr": 2e-6})
    _, data, _ = plan(two, capsys)
    assert "diff.training_variables" in {c["name"] for c in data["checks"]}


def test_unknown_key_is_one_line_exit_2(experiment, capsys):
    recipe = {**RECIPE, "data.train_batch_sizes": 64}
    attempt_dir = attempt(experiment, "a6", recipe)
    code, _, err = plan(attempt_dir, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "attempt.yaml" in err and "recipe.data.train_batch_sizes" in err and "did you mean 'data.train_batch_size'" in err
    assert not (attempt_dir / "plan.json").exists()


def test_wrong_type_is_one_line_exit_2(experiment, capsys):
    attempt_dir = attempt(experiment, "a7", {**RECIPE, "trainer.logger": "console"})
    code, _, err = plan(attempt_dir, capsys)
    assert code == 2 and "recipe.trainer.logger" in err and "must be a list" in err


def test_launch_dry_run_argv(experiment, capsys):
    attempt_dir = attempt(experiment, "a8")
    code = main(["launch", str(attempt_dir), "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    argv = json.loads(out)["argv"]
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert "data.train_batch_size=64" in argv and f"{OPT}.lr=1e-06" in argv
    assert "trainer.logger=[console,file]" in argv and "trainer.resume_mode=disable" in argv
    assert f"data.train_files={attempt_dir.resolve()}/launch/data/pool.verl.jsonl" in argv
    assert not (attempt_dir / "launch").exists()  # a dry run writes nothing


def test_launch_dry_run_on_ray(experiment, capsys):
    attempt_dir = attempt(experiment, "a9")
    code = main(["launch", str(attempt_dir), "--dry-run", "--json", "--backend", "ray",
                 "--ray-address", "http://127.0.0.1:8265"])
    out, err = capsys.readouterr()
    assert code == 0, err
    argv = json.loads(out)["argv"]
    assert argv[:3] == ["ray", "job", "submit"]
    env = json.loads(argv[argv.index("--runtime-env-json") + 1])["env_vars"]
    assert env["VERL_FILE_LOGGER_PATH"] == str(attempt_dir.resolve() / "launch" / "verl_metrics.jsonl")
    assert argv[argv.index("--") + 1:][:3] == ["python3", "-m", "verl.trainer.main_ppo"]


def test_unlisted_release_is_refused_on_load(experiment, capsys):
    attempt_dir = attempt(experiment, "a10", trainer={"name": "verl", "version": "0.5.0"})
    code, _, err = plan(attempt_dir, capsys)
    assert code == 2 and "trainer.version" in err and "0.9.1" in err


# A stand-in for `python3 -m verl.trainer.main_ppo` (verl needs GPUs): it writes what verl's file
# logger writes (verl/utils/tracking.py FileLogger: {"step": N, "data": {...}} per line, to
# $VERL_FILE_LOGGER_PATH) — step 0 with the validation before training, then one line per step with
# actor/lr as verl logs it (after the scheduler step, as the plan predicts) and critic/score/mean.
STAND_IN = """
import json, os, sys, time
plan = json.load(open(sys.argv[1]))
out = open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0)
def log(step, data):
    out.write(json.dumps({"step": step, "data": data}).encode() + b"\\n")
log(0, {"val-core/rlexp_ood_monitor/acc/mean@1": 0.2})
for row in plan["lr"][:12]:
    step = row["global_step"]
    data = {"actor/lr": row["actor_lr_logged"], "actor/grad_norm": 0.5, "critic/score/mean": 0.3 + 0.01 * step,
            "timing_s/step": 1.0, "actor/pg_loss": 0.0, "training/global_step": step}
    if step % 5 == 0:
        data["val-core/rlexp_ood_monitor/acc/mean@1"] = 0.2 + 0.01 * step
    log(step, data)
    time.sleep(0.02)
"""


def test_launch_follows_verls_file_logger(experiment, monkeypatch, tmp_path):
    from rlexp.stages import launch as launch_stage
    from rlexp.training.metrics_file import read_metrics

    attempt_dir = attempt(experiment, "a11")
    monkeypatch.chdir(tmp_path)
    prepared = launch_stage.prepare(attempt_dir)
    assert prepared.metrics_source == "verl" and prepared.argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    prepared.argv = [sys.executable, str(script), str(attempt_dir / "plan.json")]
    launch_stage.write_launch_files(prepared)
    pool_row = json.loads((attempt_dir / "launch" / "data" / "pool.verl.jsonl").read_text().splitlines()[0])
    assert pool_row["reward_model"]["ground_truth"] == "1" and pool_row["data_source"] == "rlexp_pool"
    assert "def compute_score" in (attempt_dir / "launch" / "reward_func.py").read_text()
    assert "Qwen/Qwen2.5-0.5B-Instruct" in (attempt_dir / "launch" / "provenance.json").read_text()  # the base model
    result = launch_stage.run(prepared, tracking_uri="off", poll_s=0.05)
    assert result["state"] == "finished" and result["steps"] == 12
    rows = read_metrics(attempt_dir / "metrics.jsonl")
    assert [r["global_step"] for r in rows] == list(range(0, 13))
    assert rows[0] == {"global_step": 0, "monitor_acc": 0.2, "val-core/rlexp_ood_monitor/acc/mean@1": 0.2}
    assert rows[5]["monitor_acc"] == pytest.approx(0.25) and rows[3]["reward"] == pytest.approx(0.33)
    # the in-run monitor: at step 10 the logged actor/lr equals the plan's (verl logs the next update's LR)
    g5 = json.loads((attempt_dir / "guards" / "g5.json").read_text())
    assert g5["passed"] is True, g5
    assert json.loads((attempt_dir / "guards" / "g3.json").read_text())["passed"] is True


def test_a_token_count_is_not_a_credential(experiment, capsys):
    # "token" is a credential word, but verl's ppo_max_token_len_per_gpu (default 16384) counts tokens
    recipe = {**RECIPE, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 8192}
    attempt_dir = attempt(experiment, "a12", recipe)
    assert load_attempt(attempt_dir).recipe["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 8192
    code, data, err = plan(attempt_dir, capsys)
    assert code == 0, err


def test_every_typed_recipe_leaf_defaults_to_each_release_and_engine_that_has_its_key():
    """VerlRecipe's leaves read their defaults from the newest release's FSDP table; every listed release
    and every engine whose composed config has the key gives the same default (so an unstated key reads
    the same whichever engine runs it), and every leaf is a key of every listed release. An unstated recipe
    read by attribute holds the table's defaults, stated keys their stated value."""
    from rlexp.spec.recipe import key_table
    from rlexp.trainers.verl.engine_keys import VERL_ENGINE_KEYS
    from rlexp.trainers.verl.keys import VERL_CONFIG_KEYS
    from rlexp.trainers.verl.recipe import VerlRecipe, leaves

    typed = {f.metadata["key"]: f.default for f in leaves(VerlRecipe)}
    assert "actor_rollout_ref.actor.clip_ratio" in typed and typed["data.max_response_length"] == 512
    for version, rows in VERL_CONFIG_KEYS.items():
        tables = {"dp": rows, **VERL_ENGINE_KEYS.get(version, {})}
        assert set(typed) <= {name for name, _, _ in rows}, version
        for engine, engine_rows in tables.items():
            own = {name: default for name, _, default in engine_rows}
            assert {k: own[k] for k in typed if k in own} == {k: v for k, v in typed.items() if k in own}, (
                version, engine)
    table = key_table("verl")
    unstated = table.recipe({})
    assert {k: table.defaults[k] for k in typed} == typed
    assert unstated.actor_rollout_ref.actor.clip_ratio == table.defaults["actor_rollout_ref.actor.clip_ratio"]
    stated = table.recipe({"actor_rollout_ref.actor.optim.lr_warmup_steps": 7, "trainer.v1.trainer_mode": "x"})
    assert stated.actor_rollout_ref.actor.optim.lr_warmup_steps == 7 and stated.trainer.v1.trainer_mode == "x"
