"""`rlexp import` beyond the reader: --env/--env-file, unknowns refused only where plan needs them
(naming the line, the variable and the field) and dropped with a note where import drops the flag
anyway, values as each trainer reads them (verl/Hydra lists, mappings and `+key` additions against
the release's composed config; TRL list flags as TRL's own parser reads them, `trl grpo`'s script
arguments), and data outside the experiment recorded as external data that plan accepts."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
import yaml

from rlexp.cli import main
from rlexp.training.launch_script import launch_of, read_script

VERL = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=64 \\\n"
        "  actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\\n")


def run(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def spec_of(attempt):
    return yaml.safe_load((attempt / "attempt.yaml").read_text())


def test_unknown_in_a_needed_value_names_line_variable_and_field(tmp_path, capsys):
    script = tmp_path / "s.sh"
    script.write_text(f"{VERL}  data.train_files=$DATA/train.parquet \\\n  actor_rollout_ref.actor.optim.lr=$LR\n")
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "64",
                        "--env", "DATA=/d"], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "line 4:" in err and "$LR" in err and "actor_rollout_ref.actor.optim.lr" in err and "--env LR=" in err
    assert not (tmp_path / "a").exists()
    rc, _, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "64"], capsys)
    assert rc == 2 and "line 3:" in err and "$DATA" in err and "datasets.pool" in err


def test_env_and_env_file_fill_the_script_and_env_wins(tmp_path, capsys):
    script = tmp_path / "s.sh"
    script.write_text(f"{VERL}  data.train_files=$DATA/train.parquet actor_rollout_ref.actor.optim.lr=$LR\n")
    env_file = tmp_path / "run.env"
    env_file.write_text("# the cluster's\nexport DATA=/cluster/data\nLR=1e-6\n")
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "64",
                        "--env-file", str(env_file), "--env", "LR=3e-6"], capsys)
    assert rc == 0, err
    spec = spec_of(tmp_path / "a")
    assert spec["recipe"]["actor_rollout_ref.actor.optim.lr"] == 3e-6
    # a parquet file elsewhere: recorded as its source, which plan never opens as JSONL
    assert spec["datasets"]["pool"] == {"sources": ["/cluster/data/train.parquet"], "size": 64}
    bad = tmp_path / "bad.env"
    bad.write_text("LR 1\n")
    rc, _, err = run(["import", str(script), str(tmp_path / "b"), "--version", "0.9.1", "--env-file", str(bad)],
                     capsys)
    assert rc == 2 and f"{bad}: line 1" in err
    rc, _, err = run(["import", str(script), str(tmp_path / "b"), "--version", "0.9.1", "--env", "1X=2"], capsys)
    assert rc == 2 and "--env" in err


def test_unknowns_where_import_drops_the_flag_are_notes_and_never_written(tmp_path, capsys):
    script = tmp_path / "s.sh"
    script.write_text("SAVE=/ckpt/$(date +%s)\n"
                      "python3 -m openrlhf.cli.train_ppo_ray --pretrain m --prompt_data data/p.jsonl \\\n"
                      "  --save_path $SAVE --use_wandb $WANDB_API_KEY --wandb_run_name run-$(date +%F) \\\n"
                      "  --n_samples_per_prompt 8\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n' * 16)
    from rlexp.trainers.openrlhf.parser import fetch, listed_releases

    pytest.importorskip("torch")
    [release] = [r for r in listed_releases() if r.version == "0.9.3"]
    try:
        fetch(release)
    except Exception as exc:  # noqa: BLE001  (no wheel and no network here)
        pytest.skip(str(exc))
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.3"], capsys)
    assert rc == 0, err
    text = (tmp_path / "a" / "attempt.yaml").read_text()
    assert "line 1: save_path left out" in out and "line 3: use_wandb left out" in out and "command substitution" in out
    assert "--env WANDB_API_KEY" not in out  # no advice to type a credential for a flag that is dropped
    assert "rlexp-unknown" not in text and "WANDB" not in text.split("# Note")[0].split("\n", 3)[-1]
    assert spec_of(tmp_path / "a")["recipe"] == {"pretrain": "m", "n_samples_per_prompt": 8}


def test_verl_lists_mappings_and_additions_against_the_composed_config(tmp_path, capsys):
    script = tmp_path / "s.sh"
    script.write_text("train_files=\"['/d/gsm8k/train.parquet', '/d/math/train.parquet']\"\n"
                      f"{VERL}  data.train_files=\"$train_files\" data.val_files=\"['/d/test.parquet']\" \\\n"
                      "  +actor_rollout_ref.model.override_config.max_position_embeddings=32768 \\\n"
                      "  +actor_rollout_ref.model.override_config.rope_scaling.factor=2.0 \\\n"
                      "  +reward_model.reward_kwargs.max_resp_len=4096 +trainer.my_own_key=1 \\\n"
                      "  trainer.logger=['console','wandb'] $@\n")
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "14973",
                        "--monitor-size", "1319"], capsys)
    assert rc == 0, err
    spec = spec_of(tmp_path / "a")
    assert spec["datasets"]["pool"] == {"sources": ["/d/gsm8k/train.parquet", "/d/math/train.parquet"],
                                        "size": 14973}
    assert spec["datasets"]["ood_monitor"] == {"sources": ["/d/test.parquet"], "size": 1319}
    assert spec["recipe"]["actor_rollout_ref.model.override_config"] == {
        "max_position_embeddings": 32768, "rope_scaling": {"factor": 2.0}}
    assert "+trainer.my_own_key" in out and "trainer.my_own_key" not in spec["recipe"]
    rc, _, err = run(["plan", str(tmp_path / "a")], capsys)
    assert rc in (0, 1), err
    # adding a key the composed config already has: Hydra refuses it, and so does import
    again = tmp_path / "again.sh"
    again.write_text(f"{VERL}  data.train_files=x.parquet +data.train_batch_size=32\n")
    rc, _, err = run(["import", str(again), str(tmp_path / "b"), "--version", "0.9.1", "--pool-size", "64"], capsys)
    assert rc == 2 and "Could not append to config" in err and "data.train_batch_size=VALUE" in err


def test_external_data_recorded_with_its_hash_and_plan_accepts_it(tmp_path, capsys):
    outside = tmp_path / "shared" / "pool.jsonl"
    outside.parent.mkdir()
    outside.write_text("".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(64)))
    experiment = tmp_path / "exp"
    experiment.mkdir()
    script = tmp_path / "s.sh"
    script.write_text(f"{VERL}  data.train_files={outside} data.val_files=hub/test \\\n  trainer.total_epochs=1\n")
    rc, out, err = run(["import", str(script), str(experiment / "a"), "--version", "0.9.1", "--pool-size", "64",
                        "--monitor-size", "10"], capsys)
    assert rc == 0, err
    spec = spec_of(experiment / "a")
    assert spec["datasets"]["pool"] == {"path": str(outside), "size": 64, "allow_outside": True,
                                        "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}
    assert "external data" in out
    rc, out, err = run(["plan", str(experiment / "a")], capsys)
    assert rc in (0, 1), err
    assert "datasets.pool: external data (" in " ".join(out.split())  # the note (the path may wrap)
    plan = json.loads((experiment / "a" / "plan.json").read_text())
    assert plan["steps"]["global_steps_total"] == 1  # 64 prompts // 64 per batch, one epoch
    assert plan["datasets"]["pool"]["external"] == [str(outside)]
    assert "external" not in plan["datasets"]["ood_monitor"]  # a name under the experiment, stated by size


LIST_FLAGS = ["--model_name_or_path", "Qwen/Qwen3-0.6B", "--dataset_name", "trl-lib/DeepMath-103K",
              "--use_peft", "--lora_target_modules", "q_proj,", "v_proj", "--learning_rate", "1e-5",
              "--reward_funcs", "accuracy_reward", "think_format_reward", "--dataset_train_split", "train",
              "--beta", "0.0", "--log_completions"]


def test_trl_list_flags_read_as_trls_own_parser_reads_them(tmp_path, capsys):
    """`--lora_target_modules "q_proj", "v_proj"` (gspo.py's usage) is two words, the first with its comma:
    TRL's own parser (HfArgumentParser over GRPOScriptArguments, GRPOConfig, ModelConfig) gives the
    same list, in the TRL venv."""
    script = tmp_path / "s.sh"
    quoted = " ".join(f"'{a}'" for a in LIST_FLAGS)
    script.write_text(f"trl grpo {quoted}\n")
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "1.16.0", "--pool-size", "1000"],
                       capsys)
    assert rc == 0, err
    spec = spec_of(tmp_path / "a")
    assert spec["recipe"]["lora_target_modules"] == ["q_proj,", "v_proj"]
    assert spec["recipe"]["use_peft"] is True and spec["recipe"]["log_completions"] is True
    assert "reward_funcs" in out and "reward_funcs" not in spec["recipe"]  # rlexp's reward replaces it
    assert spec["datasets"]["pool"] == {"path": "trl-lib/DeepMath-103K", "size": 1000}
    rc, _, err = run(["plan", str(tmp_path / "a")], capsys)
    assert rc in (0, 1), err
    from trl_venv import trl_python_or_skip

    python = trl_python_or_skip()
    code = ("import json, sys\nfrom trl import GRPOConfig, ModelConfig, TrlParser\n"
            "from trl.scripts.grpo import GRPOScriptArguments\n"
            "s, t, m = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig)).parse_args_and_config("
            "sys.argv[1:] + ['--output_dir', 'o', '--use_cpu', 'True'])\n"
            "print(json.dumps({'lora_target_modules': m.lora_target_modules, 'reward_funcs': s.reward_funcs, "
            "'use_peft': m.use_peft, 'learning_rate': t.learning_rate, 'log_completions': t.log_completions}))\n")
    done = subprocess.run([str(python), "-c", code, *LIST_FLAGS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    trl = json.loads(done.stdout.strip().splitlines()[-1])
    assert trl["lora_target_modules"] == spec["recipe"]["lora_target_modules"]
    assert trl["reward_funcs"] == ["accuracy_reward", "think_format_reward"]
    assert (trl["use_peft"], trl["learning_rate"], trl["log_completions"]) == (True, 1e-5, True)


def test_messages_name_the_construct():
    arithmetic = launch_of(read_script("python3 -m verl.trainer.main_ppo a.b=$(( $(nproc) * 2 ))\n").argv).args[0]
    assert "command substitution" in arithmetic.what and "$(nproc)" in arithmetic.what
    loop = read_script("for i in 1 2; do N=$i; done\npython3 -m verl.trainer.main_ppo a.b=$N\n")
    assert "inside a for loop at line 1" in launch_of(loop.argv).args[0].what
    array = read_script("A=(x y)\npython3 -m verl.trainer.main_ppo a.b=${A[1]}\n")  # an array, not a command
    assert launch_of(array.argv).args == ["a.b=y"]


@pytest.mark.parametrize("module", ["verl.trainer.main_ppo_sync", "verl.experimental.one_step_off_policy.main_ppo"])
def test_a_verl_module_other_than_main_ppo_is_refused_naming_it(tmp_path, capsys, module):
    """verl 0.9.1's one-step-off trainer composes its own config (one_step_off_ppo_trainer) and
    main_ppo_sync is gone from the release: neither is planned as main_ppo. (The fully-async trainer
    is planned as itself: tests/test_verl_fully_async.py.)"""
    script = tmp_path / "s.sh"
    script.write_text(VERL.replace("verl.trainer.main_ppo", module) + "  data.train_files=x.parquet\n")
    rc, out, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "64"], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"line 1: python -m {module}: rlexp plans verl's trainer as verl.trainer.main_ppo" in err
    assert not (tmp_path / "a").exists()


def test_verl_rollout_is_threshold_takes_what_verls_own_parser_takes():
    """verl 0.9.1 types `algorithm.rollout_correction.rollout_is_threshold` as `str | float`: besides
    a number, "LOWER_UPPER" (`0.5_4.0`, as verl's hy_v3 Megatron example passes it) is a threshold.
    rlexp's check accepts exactly what the release's own `_parse_rollout_is_threshold` (read from the
    pinned wheel) accepts, on each value below, and refuses the rest naming the field."""
    from test_agent_verl import release_functions
    from test_verl_backend import pinned_wheel

    from rlexp.errors import InputError
    from rlexp.trainers.verl import hydra

    parse = release_functions(pinned_wheel(), ("_parse_rollout_is_threshold",), "verl/trainer/ppo/rollout_corr_helper.py",
                              {"Optional": __import__("typing").Optional})["_parse_rollout_is_threshold"]
    key = "algorithm.rollout_correction.rollout_is_threshold"
    for value in ("0.5_4.0", 2.0, 3, "2.0", " 0.5_2 ", "4.0_0.5", "0_1", "-1_2", "x", "0.5_x", "", "_", True, -1.0, 0):
        try:
            parse(value)
            verl_takes = True
        except (TypeError, ValueError):
            verl_takes = False
        try:
            hydra.check_recipe({key: value}, "0.9.1", "attempt.yaml")
            rlexp_takes = True
        except InputError as exc:
            assert f"recipe.{key}" in str(exc), exc
            rlexp_takes = False
        assert rlexp_takes == verl_takes, value


@pytest.mark.parametrize(("command", "refused", "estimator"), [
    ("trl sft --model_name_or_path m --dataset_name d", "trl sft", None),
    ("python -m trl.scripts.sft --model_name_or_path m --dataset_name d", "python -m trl.scripts.sft", None),
    ("trl dpo --model_name_or_path m --dataset_name d", "trl dpo", None),
    ("trl rloo --model_name_or_path m --dataset_name d", None, "rloo"),
    ("python -m trl.scripts.rloo --model_name_or_path m --dataset_name d", None, "rloo"),
    ("trl grpo --model_name_or_path m --dataset_name d", None, None),
    ("python -m trl.scripts.grpo --model_name_or_path m --dataset_name d", None, None),
])
def test_a_trl_command_names_its_trainer_and_another_trainers_is_refused(tmp_path, capsys, command, refused,
                                                                         estimator):
    """`trl rloo` and `python -m trl.scripts.rloo` (TRL documents both) run RLOOTrainer: imported with
    advantage_estimator rloo (RLOOConfig's fields and defaults); `trl grpo` is the recipe's default
    (GRPOTrainer); any other TRL trainer (`trl sft`, `trl dpo`) is refused at import naming the
    command, not planned as one of the two."""
    script = tmp_path / "run.sh"
    script.write_text(command + "\n")
    attempt = tmp_path / "exp" / "a"
    rc = main(["import", str(script), str(attempt), "--version", "1.16.0", "--pool-size", "100"])
    err = capsys.readouterr().err
    if refused is None:
        assert rc == 0, err
        recipe = yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"]
        assert recipe.get("advantage_estimator") == estimator
        return
    assert rc == 2 and not attempt.exists(), err
    assert err.strip() == (f"rlexp: {script}: line 1: {refused}: rlexp plans TRL's GRPOTrainer (`trl grpo`) and "
                           f"RLOOTrainer (`trl rloo`); {refused} runs another trainer")


def test_verl_values_are_read_as_hydras_own_grammar_reads_them(tmp_path, capsys):
    """Each override value below is read by Hydra 1.3.2's own override parser (the pinned Hydra, in
    its own process) and by import: the same value of the same type, every one. Underscores between
    digits make numbers (`1_000`, `0.5_2`), `007` and `none` stay strings, inf/nan are floats, and
    `0.5_4.0` (verl's lower_upper threshold) a string."""
    from test_verl_backend import run_hydra

    from rlexp.trainers.verl.script_args import hydra_scalar

    words = ["1_000", "0.5_2", "0.5_4.0", "1e-6", "1_0e1_0", "007", "+5", "-0", "inf", "-inf", "nan", "NaN", "1.",
             ".5", "1__0", "1e5", "1E+5", "0x10", "1_", "_1", "3.14", "True", "TRUE", "null", "NULL", "none", "None",
             "abc", "1.5e-3", "-1.5E-3_0", "0.", "00", "0_0", "1_0.0_1", "+inf", "1e", "e5", ".e5", "1.e5"]
    hydras = run_hydra({"kind": "values", "overrides": [f"k={w}" for w in words]})["values"]
    for word, hydra in zip(words, hydras, strict=True):
        ours = hydra_scalar(word)
        assert type(ours) is type(hydra) and repr(ours) == repr(hydra), (word, hydra, ours)
    # and through import: the batch size of `data.train_batch_size=1_024` is 1024, as verl gets it
    script = tmp_path / "s.sh"
    script.write_text(f"{VERL}  data.train_files=x.parquet data.train_batch_size=1_024\n")
    rc, _, err = run(["import", str(script), str(tmp_path / "a"), "--version", "0.9.1", "--pool-size", "4096"], capsys)
    assert rc == 0, err
    assert spec_of(tmp_path / "a")["recipe"]["data.train_batch_size"] == 1024
