"""`rlexp import` of a training script that builds its TRL config in its own code, and of the processes a
TRL launch command starts (rlexp.trainers.trl.script_args: read_source, processes).

The real cases are the corpus's (tests/test_import_corpus.py: TRL's OpenEnv, Harbor and OpenReward
examples and rloo.py, each checked against the example's own code run in the TRL venv). The scripts
here are small ones written for one behaviour each: what is read, what is refused, in one line naming
the file and the line, and that nothing is written then."""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest
import yaml

from rlexp.cli import main

CORPUS = Path(__file__).resolve().parent / "data" / "launch_scripts"

TRAIN = '''\
import argparse
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--no-vllm", action="store_true")
    return parser.parse_args()


def main():
    args = parse_args()
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]] * args.prompts})
    accumulation = 2 if args.group > 4 else 8
    config = GRPOConfig(
        output_dir=f"out-{args.model.split('/')[-1]}",
        learning_rate=args.lr,
        num_generations=args.group,
        per_device_train_batch_size=args.group,
        gradient_accumulation_steps=accumulation,
        use_vllm=not args.no_vllm,
        {extra}
    )
    config.warmup_steps = 3
    trainer = GRPOTrainer(model=args.model, args=config, train_dataset=dataset, reward_funcs=[])
    trainer.train()


if __name__ == "__main__":
    main()
'''


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _import(tmp_path: Path, command: str, *, extra: str = "", more: list[str] | None = None,
            train: str | None = None) -> tuple[int, str, str, Path]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(train if train is not None else TRAIN.replace("{extra}", extra))
    script = tmp_path / "run.sh"
    script.write_text(command)
    attempt = tmp_path / "exp" / "a1"
    rc, out, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--workdir", str(work),
                         *(more or [])])
    return rc, out, err, attempt


def test_the_config_a_script_builds_from_its_own_flags_is_read_as_its_code_computes_it(tmp_path):
    rc, out, err, attempt = _import(tmp_path, "python train.py --lr 2e-6 --group 8 --no-vllm\n")
    assert rc == 0, err
    spec = yaml.safe_load((attempt / "attempt.yaml").read_text())
    # what Python computes from these words: lr 2e-6, 8 generations, batch 8, accumulation 2 (group > 4),
    # use_vllm False; the attribute set after the call counts too; output_dir is rlexp's own
    assert spec["recipe"] == {"learning_rate": 2e-6, "num_generations": 8, "per_device_train_batch_size": 8,
                              "gradient_accumulation_steps": 2, "use_vllm": False, "warmup_steps": 3,
                              "model_name_or_path": "Qwen/Qwen3-0.6B"}
    assert spec["datasets"]["pool"]["size"] == 300  # [prompt] * args.prompts, counted from the code
    assert "output_dir" in out and "GRPOConfig(…) on line 20 of train.py" in out
    rc, _, err = _run(["plan", str(attempt)])
    assert rc in (0, 1), err


def test_a_stated_pool_size_that_differs_from_the_count_in_the_code_is_refused(tmp_path):
    rc, _, err, attempt = _import(tmp_path, "python train.py --prompts 120\n", more=["--pool-size", "100"])
    assert rc == 2 and not attempt.exists()
    assert "--pool-size 100, but the script's code builds 120 prompts" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("extra", "field", "why"), [
    ("max_steps=int(open('steps.txt').read()),", "max_steps", "the value of open("),
    ("lr_scheduler_type=SCHEDULE,", "lr_scheduler_type", "SCHEDULE (not assigned"),
])
def test_an_unknown_value_reaching_a_field_plan_needs_is_refused_naming_the_line(tmp_path, extra, field, why):
    rc, _, err, attempt = _import(tmp_path, "python train.py\n", extra=extra)
    assert rc == 2 and not attempt.exists(), err
    assert len(err.strip().splitlines()) == 1 and "train.py: line 27" in err, err
    assert f"GRPOConfig({field}=…), which plan needs" in err and why in err


def test_an_unknown_value_of_a_field_plan_does_not_read_is_left_out_with_a_note(tmp_path):
    rc, out, err, attempt = _import(tmp_path, "python train.py\n", extra="hub_revision=open('rev').read(),")
    assert rc == 0, err
    assert "hub_revision" not in yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"]
    assert "line 27 of train.py: hub_revision left out, its value is not known" in out


def test_an_unknown_word_of_the_launch_script_is_refused_where_it_reaches_a_needed_field(tmp_path):
    rc, _, err, attempt = _import(tmp_path, "python train.py --lr $LR\n")
    assert rc == 2 and not attempt.exists()
    assert "$LR" in err and "line 1 of run.sh" in err and "GRPOConfig(learning_rate=…), which plan needs" in err
    rc, _, err, _ = _import(tmp_path, "python train.py --lr $LR\n", more=["--env", "LR=1e-6"])
    assert rc == 0, err


@pytest.mark.parametrize(("train", "words"), [
    ("from trl import GRPOConfig\nimport os\nif os.environ.get('FLAG'):\n    c = GRPOConfig(learning_rate=1.0)\n",
     "GRPOConfig(…) is built on a path rlexp cannot follow"),
    ("from trl import GRPOConfig\na = GRPOConfig(learning_rate=1.0)\nb = GRPOConfig(learning_rate=2.0)\n",
     "lines 2, 3: train.py builds 2 configs"),
    ("from trl import GRPOConfig\nkw = load()\nc = GRPOConfig(**kw)\n", "fields passed as **kw"),
    ("from trl import GRPOTrainer\nprint('no config here')\n",
     "builds no GRPOConfig, RLOOConfig or AsyncGRPOConfig that rlexp can follow"),
    ("import argparse\nfrom trl import GRPOConfig\np = argparse.ArgumentParser()\np.add_argument('--n', type=int)\n"
     "p.parse_args()\n",
     "the script's own argument parser refuses the command"),
    ("def f(:\n", "not Python that parses"),
])
def test_a_script_whose_config_cannot_be_followed_is_refused_in_one_line(tmp_path, train, words):
    rc, _, err, attempt = _import(tmp_path, "python train.py --n x\n", train=train)
    assert rc == 2 and not attempt.exists(), err
    assert words in err and len(err.strip().splitlines()) == 1 and "train.py" in err, err


def test_a_script_naming_no_trl_config_is_read_by_its_flags(tmp_path):
    """A script that hands its flags to a module of its own (it names no TRL config or trainer) is read
    as a script whose source is not found: its flags are GRPOConfig's fields."""
    train = "from mylib import main\nmain()\n"
    rc, _, err, attempt = _import(tmp_path, "python train.py --learning_rate 3e-6 --dataset_name d\n", train=train,
                                  more=["--pool-size", "50"])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"] == {"learning_rate": 3e-6}


def test_a_script_parsing_its_config_with_trlparser_is_read_by_its_flags(tmp_path):
    train = ("from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser\n"
             "parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig))\n")
    rc, _, err, attempt = _import(tmp_path, "python train.py --learning_rate 3e-6 --dataset_name d\n", train=train,
                                  more=["--pool-size", "50"])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"] == {"learning_rate": 3e-6}


def test_a_trl_example_that_builds_its_config_needs_its_source(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("python examples/scripts/openenv/echo.py\n")
    rc, _, err = _run(["import", str(script), str(tmp_path / "exp" / "a"), "--version", "1.16.0",
                       "--workdir", str(tmp_path)])
    assert rc == 2 and "builds its GRPOConfig in its own code" in err and "--workdir" in err
    rc, _, err = _run(["import", str(script), str(tmp_path / "exp" / "a"), "--version", "1.16.0",
                       "--workdir", str(CORPUS / "trl" / "src")])
    assert rc == 0, err


@pytest.mark.parametrize(("launcher", "gpus"), [
    ("accelerate launch --num_processes 4", 4),
    ("accelerate launch --num_processes=3 --config_file examples/accelerate_configs/deepspeed_zero3.yaml", 3),
    ("accelerate launch --config_file examples/accelerate_configs/deepspeed_zero2.yaml", 8),  # its num_processes
    ("torchrun --nproc_per_node 2 --nnodes 2", 4),
    ("deepspeed --num_gpus 2", 2),
    ("python", None),
])
def test_the_processes_the_launcher_starts_become_trainer_gpus(tmp_path, launcher, gpus):
    work = CORPUS / "trl" / "src"
    script = tmp_path / "run.sh"
    script.write_text(f"{launcher} examples/scripts/openenv/echo.py\n")
    attempt = tmp_path / "exp" / "a"
    rc, out, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--workdir", str(work)])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["trainer"].get("gpus") == gpus


@pytest.mark.parametrize(("launcher", "words"), [
    ("accelerate launch", "accelerate without --num_processes or --config_file"),
    ("accelerate launch --config_file missing.yaml", "--config_file missing.yaml: not found"),
    ("accelerate launch --num_processes $N", "--num_processes"),
    ("deepspeed", "deepspeed without --num_gpus"),
])
def test_processes_that_cannot_be_known_are_refused_unless_given(tmp_path, launcher, words):
    script = tmp_path / "run.sh"
    script.write_text(f"{launcher} train.py --dataset_name d\n")
    attempt = tmp_path / "exp" / "a"
    base = ["import", str(script), str(attempt), "--version", "1.16.0", "--pool-size", "10", "--workdir",
            str(tmp_path)]
    rc, _, err = _run(base)
    assert rc == 2 and not attempt.exists() and words in err and "--gpus" in err, err
    rc, _, err = _run([*base, "--gpus", "2"])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["trainer"]["gpus"] == 2


def test_gpus_given_by_name_win_over_the_launcher_with_a_note(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("accelerate launch --num_processes 4 train.py --dataset_name d\n")
    attempt = tmp_path / "exp" / "a"
    rc, out, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--pool-size", "10",
                         "--gpus", "2", "--workdir", str(tmp_path)])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["trainer"]["gpus"] == 2
    assert "trainer.gpus: 2 as given with --gpus; the command states 4" in out


def test_a_bad_accelerate_config_is_refused_naming_its_field(tmp_path):
    (tmp_path / "acc.yaml").write_text(textwrap.dedent("""\
        num_processes: eight
        """))
    script = tmp_path / "run.sh"
    script.write_text("accelerate launch --config_file acc.yaml train.py --dataset_name d\n")
    attempt = tmp_path / "exp" / "a"
    rc, _, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--pool-size", "10",
                       "--workdir", str(tmp_path)])
    assert rc == 2 and not attempt.exists()
    assert "acc.yaml: num_processes: 'eight'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("extra", "field"), [
    ("model_init_kwargs={'token': 'hf_' + 'a' * 30},", "model_init_kwargs"),
    ("vllm_server_base_url='http://user:pw123@host:8000',", "vllm_server_base_url"),
    ("hub_model_id=__import__('os').environ.get('HF_TOKEN'),", "hub_model_id"),
])
def test_a_credential_the_code_passes_never_reaches_the_attempt(tmp_path, extra, field):
    rc, out, err, attempt = _import(tmp_path, "python train.py\n", extra=extra,
                                    more=["--env", "HF_TOKEN=secret-value-123"])
    assert rc == 0, err
    text = (attempt / "attempt.yaml").read_text()
    assert field not in yaml.safe_load(text)["recipe"]
    assert "pw123" not in text and "hf_aaaa" not in text and "secret-value-123" not in text


@pytest.mark.parametrize(("launcher", "gpus"), [
    ("uv run accelerate launch --num_processes 8", 8),
    ("ray job submit --address http://h:8265 -- torchrun --nproc_per_node 4", 4),
])
def test_the_processes_are_read_behind_a_wrapper(tmp_path, launcher, gpus):
    script = tmp_path / "run.sh"
    script.write_text(f"{launcher} examples/scripts/openenv/echo.py\n")
    attempt = tmp_path / "exp" / "a"
    rc, out, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--workdir",
                         str(CORPUS / "trl" / "src")])
    assert rc == 0, err
    assert yaml.safe_load((attempt / "attempt.yaml").read_text())["trainer"]["gpus"] == gpus


@pytest.mark.parametrize("launcher", ["accelerate launch --num_processes ²", "torchrun --nnodes 99999999999999",
                                      "deepspeed --hostfile hosts --num_gpus 8"])
def test_a_process_count_rlexp_cannot_read_is_refused_in_one_line(tmp_path, launcher):
    script = tmp_path / "run.sh"
    script.write_text(f"{launcher} train.py --dataset_name d\n")
    attempt = tmp_path / "exp" / "a"
    rc, _, err = _run(["import", str(script), str(attempt), "--version", "1.16.0", "--pool-size", "10",
                       "--workdir", str(tmp_path)])
    assert rc == 2 and not attempt.exists() and len(err.strip().splitlines()) == 1 and "--gpus" in err, err


def test_a_config_built_beside_a_trlparser_is_read_from_the_code(tmp_path):
    train = ("from trl import GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments, TrlParser\n"
             "script_args, model_args = TrlParser((ScriptArguments, ModelConfig)).parse_args_and_config()\n"
             "config = GRPOConfig(num_generations=16, per_device_train_batch_size=16, learning_rate=3e-6)\n")
    rc, _, err, attempt = _import(tmp_path, "python train.py --model_name_or_path m\n", train=train,
                                  more=["--pool-size", "50"])
    assert rc == 0, err
    recipe = yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"]
    assert (recipe["num_generations"], recipe["learning_rate"]) == (16, 3e-6)


def test_a_workdir_that_is_not_a_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    script = tmp_path / "run.sh"
    script.write_text("python train.py --dataset_name d\n")
    rc, _, err = _run(["import", str(script), str(tmp_path / "exp" / "a"), "--version", "1.16.0", "--pool-size", "5",
                       "--workdir", str(tmp_path / "f")])
    assert rc == 2 and "--workdir: not a folder" in err
