"""`rlexp import SCRIPT ATTEMPT_DIR`: a launch script read (never run) into an attempt.yaml.

The acceptance cases: experiments/seed-a30/train_a30.sh (the A30 recipe written as its launch
script) imports to an attempt whose plan equals the committed a30's; train_a28.sh (A28's 400-prompt
pool meant for 200 global steps) shows the step-count bug at plan. OpenRLHF 0.9.3's own parser reads
the flags (its wheel, fetched into the cache like tests/test_openrlhf_releases.py does)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlexp.cli import main
from rlexp.training.launch_script import ScriptError, launch_of, read_script

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "experiments" / "seed-a30"
IDENTITY = {"attempt", "spec", "spec_sha256", "spec_chain_sha256"}


@pytest.fixture(scope="module")
def wheel_093():
    from rlexp.trainers.openrlhf.parser import fetch, listed_releases

    [release] = [r for r in listed_releases() if r.version == "0.9.3"]
    return fetch(release)


@pytest.fixture
def experiment(tmp_path):
    exp = tmp_path / "seed-a30"
    shutil.copytree(SEED, exp)
    return exp


def cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def plan_of(attempt: Path, capsys) -> dict:
    rc, out, err = cli(["plan", str(attempt)], capsys)
    assert rc in (0, 1), err
    return json.loads((attempt / "plan.json").read_text())


@pytest.mark.openrlhf_wheels
def test_a30_script_imports_to_the_committed_plan(experiment, capsys, wheel_093):
    rc, out, err = cli(["import", str(experiment / "train_a30.sh"), str(experiment / "a30i"), "--version", "0.9.3",
                        "--pool-size", "3200", "--monitor-size", "202", "--parent", "a29b",
                        "--intent-steps", "200"], capsys)
    assert rc == 0, err
    spec = yaml.safe_load((experiment / "a30i" / "attempt.yaml").read_text())
    assert spec["change"] == {"micro_train_batch_size": 2} and spec["recipe"] == {"micro_train_batch_size": 2}
    assert "remote_rm_url" in out and "save_path" in out  # left out: rlexp sets them
    imported, committed = plan_of(experiment / "a30i", capsys), plan_of(experiment / "a30", capsys)
    assert {k: v for k, v in imported.items() if k not in IDENTITY} == \
        {k: v for k, v in committed.items() if k not in IDENTITY}
    assert imported["steps"]["global_steps_total"] == 200


@pytest.mark.openrlhf_wheels
def test_a30_script_as_a_root_attempt_plans_the_same_steps(experiment, capsys, wheel_093):
    rc, _, err = cli(["import", str(experiment / "train_a30.sh"), str(experiment / "root"), "--version", "0.9.3",
                      "--pool-size", "3200", "--monitor-size", "202", "--gpus", "8"], capsys)
    assert rc == 0, err
    spec = yaml.safe_load((experiment / "root" / "attempt.yaml").read_text())
    assert spec["recipe"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert spec["recipe"]["gradient_checkpointing"] is True and spec["recipe"]["actor_learning_rate"] == 5e-7
    assert spec["datasets"] == {"pool": {"path": "data/sft_rl_pool_3200.jsonl", "size": 3200},
                                "ood_monitor": {"path": "data/probe_set_200_ood.jsonl", "size": 202}}
    imported, committed = plan_of(experiment / "root", capsys), plan_of(experiment / "a30", capsys)
    for key in ("steps", "lr", "eval_global_steps", "save_global_steps", "gpu_layout", "openrlhf_command", "trainer"):
        assert imported[key] == committed[key], key


@pytest.mark.openrlhf_wheels
def test_a28_script_shows_the_step_count_bug_at_plan(experiment, capsys, wheel_093):
    rc, _, err = cli(["import", str(experiment / "train_a28.sh"), str(experiment / "a28i"), "--version", "0.9.3",
                      "--pool-size", "400", "--monitor-size", "202", "--parent", "a29b", "--intent-steps", "200"],
                     capsys)
    assert rc == 0, err
    plan = plan_of(experiment / "a28i", capsys)
    assert plan["steps"]["global_steps_total"] == 25 and plan["steps"]["optimizer_steps_total"] == 200
    errors = {c["name"] for c in plan["checks"] if c["severity"] == "error" and not c["passed"]}
    assert {"steps.intent", "schedule.final_eval", "schedule.final_save"} <= errors


@pytest.mark.openrlhf_wheels
def test_what_the_script_cannot_tell_is_asked_for_by_name(experiment, capsys, wheel_093):
    script = experiment / "train_a30.sh"
    target = experiment / "x"
    rc, _, err = cli(["import", str(script), str(target)], capsys)
    assert rc == 2 and "--version" in err and not target.exists()
    rc, _, err = cli(["import", str(script), str(target), "--version", "0.9.3"], capsys)
    assert rc == 2 and "--pool-size" in err and "data/sft_rl_pool_3200.jsonl" in err and "line 14" in err
    assert not (target / "attempt.yaml").exists() and err.count("\n") == 1


@pytest.mark.openrlhf_wheels
def test_flag_the_release_does_not_have_and_secrets(experiment, capsys, wheel_093):
    bad = experiment / "bad.sh"
    bad.write_text("python3 -m openrlhf.cli.train_ppo_ray --pretrain m --prompt_data p.jsonl --no_such_flag 1\n")
    rc, _, err = cli(["import", str(bad), str(experiment / "b"), "--version", "0.9.3", "--pool-size", "10"], capsys)
    assert rc == 2 and "parser refuses" in err and "no_such_flag" in err
    secret = experiment / "wandb.sh"
    secret.write_text("WANDB=wk-0123456789abcdef\n"
                      "python3 -m openrlhf.cli.train_ppo_ray --pretrain m --prompt_data p.jsonl --use_wandb $WANDB \\\n"
                      "  --actor_learning_rate 1e-6\n")
    rc, out, err = cli(["import", str(secret), str(experiment / "w"), "--version", "0.9.3", "--pool-size", "10"],
                       capsys)
    assert rc == 0, err
    text = (experiment / "w" / "attempt.yaml").read_text()
    assert "wk-0123456789abcdef" not in text and "use_wandb" in out
    assert yaml.safe_load(text)["recipe"] == {"pretrain": "m", "actor_learning_rate": 1e-6}


# --- the script reader (pure) ---------------------------------------------------------------------

SCRIPT = """#!/bin/bash
set -x
# a comment
MODEL=Qwen/Qwen2.5-0.5B
export N=8
torchrun --nproc_per_node 4 --master_port=29500 -m openrlhf.cli.train_ppo_ray \\
    --pretrain ${MODEL} --n_samples_per_prompt $N \\
    --prompt_data ${DATA:-data/pool.jsonl} > train.log 2>&1
"""


def test_script_reader_fills_variables_and_joins_lines():
    script = read_script(SCRIPT)
    assert script.line == 6
    launch = launch_of(script.argv)
    assert launch.trainer == "openrlhf" and launch.args == [
        "--pretrain", "Qwen/Qwen2.5-0.5B", "--n_samples_per_prompt", "8", "--prompt_data", "data/pool.jsonl"]
    assert any("train.log" in n for n in script.notes)


@pytest.mark.parametrize(("argv", "trainer", "module", "first"), [
    (["deepspeed", "--module", "openrlhf.cli.train_ppo_ray", "--pretrain", "m"], "openrlhf", "openrlhf.cli.train_ppo_ray",
     "--pretrain"),
    (["ray", "job", "submit", "--address=x", "--", "python3", "-m", "verl.trainer.main_ppo", "a.b=1"], "verl",
     "verl.trainer.main_ppo", "a.b=1"),
    (["accelerate", "launch", "--num_processes", "4", "train_grpo.py", "--learning_rate", "1e-6"], "trl",
     "train_grpo.py", "--learning_rate"),
    (["python", "-m", "openrlhf.cli.train_ppo_ray"], "openrlhf", "openrlhf.cli.train_ppo_ray", None),
])
def test_launchers(argv, trainer, module, first):
    launch = launch_of(argv)
    assert (launch.trainer, launch.module) == (trainer, module)
    assert (launch.args[0] if launch.args else None) == first


@pytest.mark.parametrize(("text", "line", "words"), [
    ("for s in 1 2; do\n  python -m openrlhf.cli.train_ppo_ray --seed $s\ndone\n", 2, "inside a for loop"),
    ("python -m openrlhf.cli.train_ppo_ray --seed 1\npython -m openrlhf.cli.train_ppo_ray --seed 2\n", 2,
     "second launch command"),
    ("python -m openrlhf.cli.train_ppo_ray \\\n  --seed 'open\n", 2, "not bash"),
    ("echo hello\n", None, "no launch command"),
])
def test_refused_naming_the_line(text, line, words):
    with pytest.raises(ScriptError) as info:
        read_script(text)
    assert info.value.line == line and words in info.value.message


def test_refusal_through_the_verb_names_file_and_line(tmp_path, capsys):
    script = tmp_path / "loop.sh"
    script.write_text("#!/bin/bash\nfor s in 1 2; do\n  python -m openrlhf.cli.train_ppo_ray --seed $s\ndone\n")
    rc, out, err = cli(["import", str(script), str(tmp_path / "a"), "--version", "0.9.3"], capsys)
    assert rc == 2 and out == "" and f"{script}: line 3:" in err and "for loop" in err
    assert not (tmp_path / "a").exists()


def test_verl_overrides_and_trl_fields(tmp_path, capsys):
    verl = tmp_path / "verl.sh"
    verl.write_text("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=64 \\\n"
                    "  data.train_files=data/pool.parquet actor_rollout_ref.actor.optim.lr=1e-6 \\\n"
                    "  trainer.logger=['console','wandb'] trainer.total_epochs=3\n")
    rc, _, err = cli(["import", str(verl), str(tmp_path / "v"), "--version", "0.9.1", "--pool-size", "640"], capsys)
    assert rc == 0, err
    spec = yaml.safe_load((tmp_path / "v" / "attempt.yaml").read_text())
    assert spec["trainer"] == {"name": "verl", "version": "0.9.1"}
    assert spec["recipe"] == {"algorithm.adv_estimator": "grpo", "data.train_batch_size": 64,
                              "actor_rollout_ref.actor.optim.lr": 1e-6, "trainer.total_epochs": 3}
    assert spec["datasets"]["pool"] == {"path": "data/pool.parquet", "size": 640}
    trl = tmp_path / "trl.sh"
    trl.write_text("accelerate launch --num_processes 2 train_grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B \\\n"
                   "  --dataset_name data/pool.jsonl --learning_rate 1e-6 --num_generations 8 --bf16 \\\n"
                   "  --output_dir out --hub_token hf_secret\n")
    rc, out, err = cli(["import", str(trl), str(tmp_path / "t"), "--version", "1.16.0", "--pool-size", "100"], capsys)
    assert rc == 0, err
    text = (tmp_path / "t" / "attempt.yaml").read_text()
    spec = yaml.safe_load(text)
    assert spec["recipe"] == {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "learning_rate": 1e-6,
                              "num_generations": 8, "bf16": True}
    assert "hf_secret" not in text and "hub_token" in out and "output_dir" in out


# --- an existing run's logs and checkpoints ----------------------------------------------------------

def test_existing_run_brought_into_the_protocol(eval_experiment, tmp_path, capsys):
    """A run made outside rlexp (its OpenRLHF console log, its checkpoint folder) -> eval, decide, report."""
    att = eval_experiment(steps=(2, 4), mid=2)
    run = tmp_path / "old_run"
    shutil.move(str(att / "checkpoints"), str(run / "ckpt") if run.mkdir() is None else "")
    (att / "metrics.jsonl").unlink()
    lines = []
    for step in (1, 2, 3, 4):
        lines.append(f"INFO 02-23 06:3{step}:01 ppo_trainer.py:551] ✨ Global step {step}: "
                     f"{{'policy_loss': {0.01 * step}, 'actor_lr': 1e-06, 'reward': 0.5, 'kl': {'nan' if step == 3 else 0.1}}}")
        if step % 2 == 0:
            lines.append(f"INFO 02-23 06:3{step}:30 ppo_trainer.py:598] ✨ Evaluation completed in 0:00:05, "
                         f"global_step {step}, eval_metrics: {{'eval_probe_pass1': {0.1 * step}}}")
        if step == 2:
            lines.append("INFO 02-23 06:32:40 ppo_trainer.py:551] ✨ Global step 2: <lost in a copy>")
    log = run / "train.log"
    log.write_text("\n".join(lines) + "\n")
    rc, out, err = cli(["import-run", str(att), "--logs", str(log), "--format", "openrlhf-console",
                        "--checkpoints", str(run / "ckpt")], capsys)
    assert rc == 0, err
    assert "4 steps into metrics.jsonl, 2 checkpoints (global steps 2, 4)" in out
    assert "1 log line(s) not understood: 4" in out and "NaN/inf kept in metrics.jsonl (flagged) at steps 3" in out
    rows = [json.loads(x) for x in (att / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [1, 2, 3, 4] and rows[3]["monitor_acc"] == pytest.approx(0.4)
    assert rows[2]["kl"] == "NaN"  # the step where kl diverged still shows it (strict JSON's spelling)
    assert (att / "checkpoints" / "global_step4_hf").resolve() == (run / "ckpt" / "global_step4_hf").resolve()
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.report import report

    out_eval = evaluate(att, show_progress=False)
    assert {f.checkpoint for f in out_eval.files} == {"baseline_s0", "global_step4", "global_step2"}
    decision = decide(att)
    assert decision.decision
    assert report(att, reports_dir=tmp_path / "reports")
    rc, _, err = cli(["import-run", str(att), "--logs", str(log)], capsys)  # never twice
    assert rc == 2 and "already exists" in err


def test_run_log_with_two_runs_is_refused_naming_them(eval_experiment, tmp_path, capsys):
    att = eval_experiment(steps=(2,), mid=2)
    (att / "metrics.jsonl").unlink()
    log = tmp_path / "train.log"
    log.write_text("✨ Global step 1: {'reward': 0.1}\n✨ Global step 2: {'reward': 0.2}\n"
                   "✨ Global step 1: {'reward': 0.3}\n")
    rc, _, err = cli(["import-run", str(att), "--logs", str(log), "--format", "openrlhf-console"], capsys)
    assert rc == 2 and "2 runs in one file" in err and "line 3" in err and not (att / "metrics.jsonl").exists()


def test_import_fuzz_any_bytes_one_line(tmp_path, capsys):
    import random

    rng = random.Random(23)
    seeds = [b"", b"\\\n", b"python -m openrlhf.cli.train_ppo_ray '\n", b"A=\"\npython -m x\n", b"${" * 1000,
             b"ray job submit\n", b"torchrun -m\n", b"accelerate\n", b"\xff\xfe", b"x=1 y=2\n", b"# only\n"]
    for i in range(60):
        data = seeds[i] if i < len(seeds) else bytes(rng.randrange(256) for _ in range(rng.choice([1, 30, 500])))
        script = tmp_path / f"s{i}.sh"
        script.write_bytes(data)
        rc, out, err = cli(["import", str(script), str(tmp_path / f"a{i}"), "--version", "0.9.3"], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("rlexp: "), (data[:40], err)
        assert not (tmp_path / f"a{i}").exists()
