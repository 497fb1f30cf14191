"""TRL's RLOOTrainer (`trl rloo`, recipe `advantage_estimator: rloo`): every figure `rlexp plan` prints
equals what TRL 1.16 computes from its own objects, on real RLOO argument sets; the recipe resolves
to RLOOConfig's own defaults; a field RLOOConfig lacks is refused naming it; the launch writes a
script that runs RLOOTrainer.

The argument sets, with their sources (huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8,
the snapshot tests/data/launch_scripts/README.md cites):

- ``clis``: ``docs/source/clis.md`` lines 70-73, the RLOO command of TRL's CLI docs
  (tests/data/launch_scripts/trl/clis_md__trl_rloo.sh), on its 53,000 prompts;
- ``example``: the ``RLOOConfig(...)`` of ``examples/scripts/rloo.py`` (its ``output_dir``,
  ``run_name`` and ``model_init_kwargs`` left out: rlexp sets the first two, and the dtype does not
  count steps), on 3,622 prompts (NuminaMath-TIR ``train[:5%]``, which the example loads);
- ``trl_test`` and ``trl_test_max_steps``: the ``RLOOConfig(...)`` of ``tests/test_rloo_trainer.py``
  ``test_training`` and of the test that adds ``max_steps=4`` (``report_to`` and ``output_dir`` left
  out), on 17 prompts (the ``trl-internal-testing/zen`` train split those tests load);
- ``iterations``: rlexp's own, for what the real sets leave at their defaults: ``num_iterations``
  2, a ``generation_batch_size``, a cosine schedule with a warm-up ratio, fractional epochs and a
  partial generation batch.

TRL's side runs in the TRL venv: RLOOConfig built from the set (its ``__post_init__`` derives
``steps_per_generation`` and ``generation_batch_size``), the sampler of RLOOTrainer's own
``_get_train_sampler`` (called on an object holding what it reads; no model is loaded), the
generation-batch DataLoader of its ``get_train_dataloader`` (batch ``per_device_train_batch_size ×
steps_per_generation``), transformers' epoch arithmetic (``Trainer.set_initial_training_values``,
transformers 5.24) and ``get_warmup_steps``; the LR at every step is transformers' own scheduler.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from test_trl_run import SPEC
from trl_venv import plan_of, trl_attempt, trl_python_or_skip

from rlexp.cli import main
from rlexp.errors import InputError

REPO = Path(__file__).resolve().parents[1]
CORPUS_SCRIPT = REPO / "tests" / "data" / "launch_scripts" / "trl" / "clis_md__trl_rloo.sh"

# name -> (RLOOConfig keyword arguments as the source writes them, the pool's size)
SETS: dict[str, tuple[dict, int]] = {
    "clis": ({}, 53_000),  # `trl rloo` states only the model, the data and the reward
    "example": ({"learning_rate": 1e-5, "log_completions": True, "num_completions_to_print": 2,
                 "max_completion_length": 1024, "gradient_accumulation_steps": 2, "steps_per_generation": 8,
                 "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.5}, 3_622),
    "trl_test": ({"learning_rate": 0.1, "per_device_train_batch_size": 3, "num_generations": 3,
                  "max_completion_length": 8}, 17),
    "trl_test_max_steps": ({"learning_rate": 0.1, "per_device_train_batch_size": 3, "num_generations": 3,
                            "max_completion_length": 8, "max_steps": 4}, 17),
    "iterations": ({"per_device_train_batch_size": 4, "num_generations": 4, "generation_batch_size": 16,
                    "gradient_accumulation_steps": 2, "num_iterations": 2, "num_train_epochs": 1.5,
                    "learning_rate": 3e-6, "lr_scheduler_type": "cosine", "warmup_steps": 0.1}, 103),
}

TRL_FIGURES = """
import dataclasses, json, math, sys
from types import SimpleNamespace
from torch.utils.data import DataLoader
from trl import GRPOConfig, RLOOConfig, RLOOTrainer

def figures(kwargs, n):
    t = RLOOConfig(output_dir="o", use_cpu=True, report_to="none", **kwargs)
    own = SimpleNamespace(args=t, num_generations=t.num_generations, num_iterations=t.num_iterations,
                          shuffle_dataset=False, train_dataset=range(n))
    loader = DataLoader(list(range(n)), batch_size=t.per_device_train_batch_size * t.steps_per_generation,
                        sampler=RLOOTrainer._get_train_sampler(own, range(n)), drop_last=t.dataloader_drop_last)
    length, ga = len(loader), t.gradient_accumulation_steps
    per_epoch = max(length // ga + int(length % ga > 0), 1)
    steps = math.ceil(t.num_train_epochs * per_epoch) if t.max_steps < 0 else t.max_steps
    return {"max_steps": steps, "warmup": t.get_warmup_steps(steps), "lr": t.learning_rate,
            "scheduler": str(getattr(t.lr_scheduler_type, "value", t.lr_scheduler_type)),
            "kwargs": t.lr_scheduler_kwargs or {}, "num_generations": t.num_generations,
            "steps_per_generation": t.steps_per_generation, "batches_per_epoch": length,
            "prompts_per_generation_batch": t.generation_batch_size // t.num_generations,
            "update_steps_per_epoch": per_epoch, "beta": t.beta, "epsilon": t.epsilon}

def defaults(config):
    out = {}
    for f in dataclasses.fields(config):
        if f.init and f.default is not dataclasses.MISSING:
            try:
                if json.loads(json.dumps(f.default)) == f.default:
                    out[f.name] = f.default
            except (TypeError, ValueError):
                pass
    return out

def launched(kwargs):  # the config a launched script builds (rlexp.trainers.trl.train_runtime)
    c = RLOOConfig(use_cpu=True, **kwargs)
    return [type(c).__name__, c.num_generations, c.beta, c.steps_per_generation]

jobs, launch_config = json.loads(sys.stdin.read())
print(json.dumps({"figures": {name: figures(kwargs, n) for name, (kwargs, n) in jobs.items()},
                  "rloo_defaults": defaults(RLOOConfig), "grpo_defaults": defaults(GRPOConfig),
                  "launched": launched(launch_config)}))
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """TRL's `trl rloo` command imported (`rlexp import`), and the config of the script `rlexp launch`
    would write for it (rloo_config: RLOOConfig's keyword arguments)."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt
    from rlexp.trainers.trl.script import prepare_launch

    attempt = tmp_path_factory.mktemp("rloo") / "exp" / "a"
    assert main(["import", str(CORPUS_SCRIPT), str(attempt), "--version", "1.16.0", "--pool-size", "53000"]) == 0
    built = prepare_launch(load_attempt(attempt), AttemptDir(attempt), resume=False, must_exist=False)
    config = json.loads(built.script_text.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])
    return attempt, built.script_text, config


@pytest.fixture(scope="module")
def trls_own(imported):
    """TRL's own figures of every set, the two config classes' defaults and the RLOOConfig the
    imported attempt's script builds, in one run of the TRL venv."""
    python = trl_python_or_skip()
    done = subprocess.run([str(python), "-c", TRL_FIGURES], input=json.dumps([SETS, imported[2]["rloo_config"]]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rloo_attempt(root: Path, recipe: dict, pool: int, name: str = "r1") -> Path:
    return trl_attempt(root, "rloo", recipe, pool, name)


# the corpus command (`clis`) is checked so by tests/test_import_corpus.py, on TRL's own parser
@pytest.mark.parametrize("name", [name for name in SETS if name != "clis"])
def test_rloo_figures_equal_trls_own(name, tmp_path, trls_own):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from rlexp.spec import load_attempt

    kwargs, pool = SETS[name]
    d = rloo_attempt(tmp_path, kwargs, pool)
    plan, trl = plan_of(d), trls_own["figures"][name]
    total = trl["max_steps"]
    assert plan["steps"]["optimizer_steps_total"] == plan["steps"]["global_steps_total"] == total
    assert plan["steps"]["warmup_steps"] == trl["warmup"]
    assert plan["trl"]["trainer"] == "RLOOTrainer"
    for key in ("num_generations", "steps_per_generation", "batches_per_epoch", "prompts_per_generation_batch",
                "update_steps_per_epoch"):
        assert plan["trl"][key] == trl[key], key
    recipe = load_attempt(d).recipe  # what the run gets: RLOOConfig's own values where the set states none
    assert (recipe["beta"], recipe["epsilon"], recipe["num_generations"]) == (trl["beta"], trl["epsilon"],
                                                                              trl["num_generations"])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=trl["lr"])
    scheduler = transformers.get_scheduler(trl["scheduler"], optimizer, num_warmup_steps=trl["warmup"],
                                           num_training_steps=total, scheduler_specific_kwargs=trl["kwargs"])
    # the LR step k applies, read before its scheduler.step(): LambdaLR's own base_lr × lr_lambda(k - 1)
    # (what optimizer.param_groups holds after k - 1 steps, without stepping through every one)
    lr_lambda, base_lr = scheduler.lr_lambdas[0], scheduler.base_lrs[0]
    assert plan["lr"] and plan["lr"][-1]["global_step"] <= total
    for row in plan["lr"]:
        assert row["lr_first"] == pytest.approx(base_lr * lr_lambda(row["global_step"] - 1), rel=1e-12, abs=1e-18)


def test_the_sets_differ_from_grpos_reading_where_rloos_defaults_differ(tmp_path, trls_own):
    """The corpus command planned as GRPO (the old reading) counts 8 generations per prompt, 1 prompt per
    generation batch: four times RLOO's steps. The RLOO plan is TRL's (test above); this one is not."""
    grpo = tmp_path / "g"
    d = rloo_attempt(grpo, {}, 53_000)
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    del spec["recipe"]["advantage_estimator"]
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert plan_of(d)["steps"]["global_steps_total"] == 4 * trls_own["figures"]["clis"]["max_steps"]


def test_an_rloo_recipe_resolves_to_rloo_configs_defaults_and_grpos_to_grpo_configs(tmp_path, trls_own):
    from rlexp.spec import load_attempt

    rloo = load_attempt(rloo_attempt(tmp_path, {}, 100)).recipe
    for key, default in trls_own["rloo_defaults"].items():
        if key not in ("output_dir", "learning_rate") or key in rloo:
            assert rloo[key] == default, key
    assert not set(trls_own["grpo_defaults"]) - set(trls_own["rloo_defaults"]) & set(rloo)  # no GRPO-only field
    d = rloo_attempt(tmp_path, {}, 100, name="g1")
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    del spec["recipe"]["advantage_estimator"]
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    grpo = load_attempt(d).recipe
    for key, default in trls_own["grpo_defaults"].items():
        assert grpo[key] == default, key
    # a GRPO recipe resolves as before: no RLOO-only field, no estimator key (its digest unchanged)
    assert "advantage_estimator" not in grpo and "normalize_advantages" not in grpo


def test_every_field_rloo_lacks_is_refused_naming_it(tmp_path, trls_own):
    grpo_only = sorted(set(trls_own["grpo_defaults"]) - set(trls_own["rloo_defaults"]))
    assert {"loss_type", "scale_rewards", "importance_sampling_level", "entropy_coef"} <= set(grpo_only)
    for i, key in enumerate(grpo_only):
        d = rloo_attempt(tmp_path, {key: trls_own["grpo_defaults"][key]}, 100, name=f"x{i}")
        with pytest.raises(InputError) as err:
            plan_of(d)
        assert err.value.field == f"recipe.{key}", key
        assert "RLOOConfig (TRL 1.16.0, advantage_estimator rloo) has no such field (a field of GRPOConfig's" in str(
            err.value)  # (and AsyncGRPOConfig's, where it has it too)
    rloo_only = sorted(set(trls_own["rloo_defaults"]) - set(trls_own["grpo_defaults"]))
    assert "normalize_advantages" in rloo_only
    d = rloo_attempt(tmp_path, {"normalize_advantages": True}, 100, name="g2")
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["recipe"]["advantage_estimator"] = "grpo"
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as err:
        plan_of(d)
    assert err.value.field == "recipe.normalize_advantages" and "GRPOConfig" in str(err.value)


def test_an_estimator_trl_has_not_and_one_generation_are_refused_in_one_line(tmp_path, capsys):
    d = rloo_attempt(tmp_path, {}, 100)
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["recipe"]["advantage_estimator"] = "gae"
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert main(["plan", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recipe.advantage_estimator" in err and "rloo (RLOOTrainer" in err
    d = rloo_attempt(tmp_path, {"num_generations": 1}, 100, name="r2")
    assert main(["plan", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recipe.num_generations" in err
    assert "RLOO requires at least 2 generations per prompt" in err  # RLOOConfig.__post_init__'s words
    # a loss aggregation: RLOOTrainer has no loss_type
    d = rloo_attempt(tmp_path, {"loss_agg_mode": "token-mean"}, 100, name="r3")
    assert main(["plan", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recipe.loss_agg_mode" in err and "RLOOTrainer has no loss_type" in err


def test_an_environment_task_on_rloo_is_refused_naming_the_environment(tmp_path, capsys):
    """RLOOTrainer (TRL 1.16) has no rollout_func nor environment_factory: the committed TRL
    environment example (experiments/tools-trl) switched to rloo is refused at plan, in one line."""
    import shutil

    exp = tmp_path / "tools-trl"
    shutil.copytree(REPO / "experiments" / "tools-trl", exp, ignore=shutil.ignore_patterns("launch", "plan.json"))
    spec = yaml.safe_load((exp / "t1" / "attempt.yaml").read_text())
    for grpo_only in ("loss_type", "scale_rewards"):  # the example states two GRPOConfig-only fields
        del spec["recipe"][grpo_only]
    spec["recipe"]["advantage_estimator"] = "rloo"
    (exp / "t1" / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert main(["plan", str(exp / "t1")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ": environment: " in err and "RLOOTrainer takes no rollout_func" in err
    assert not (exp / "t1" / "plan.json").exists()


def test_the_vllm_correction_check_is_grpos_only(tmp_path, trls_own):
    """TRL's vLLM importance-sampling correction is a GRPOConfig field RLOOConfig lacks: top_p 0.9 with
    vLLM warns that it biases the correction on GRPO, and says nothing on RLOO, which has none."""
    assert "vllm_importance_sampling_correction" in set(trls_own["grpo_defaults"]) - set(trls_own["rloo_defaults"])
    d = rloo_attempt(tmp_path, {"use_vllm": True, "top_p": 0.9}, 100)
    assert "health.is_correction_top_p" not in {c["name"] for c in plan_of(d)["checks"]}
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    del spec["recipe"]["advantage_estimator"]
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert "health.is_correction_top_p" in {c["name"] for c in plan_of(d)["checks"]}


def test_a_child_cannot_switch_between_grpo_and_rloo(tmp_path, capsys):
    """Another TRL trainer is another config class (other fields, other defaults): as for a trainer switch,
    a child that changes advantage_estimator is refused; a root attempt for RLOO is the way."""
    parent = rloo_attempt(tmp_path, {"num_generations": 4}, 100, name="p")
    spec = yaml.safe_load((parent / "attempt.yaml").read_text())
    del spec["recipe"]["advantage_estimator"]
    (parent / "attempt.yaml").write_text(yaml.safe_dump(spec))
    child = tmp_path / "exp" / "c"
    child.mkdir()
    (child / "attempt.yaml").write_text(yaml.safe_dump({"parent": "p", "change": {"advantage_estimator": "rloo"},
                                                        "recipe": {"advantage_estimator": "rloo"}}))
    assert main(["plan", str(child)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recipe.advantage_estimator: 'rloo' differs from parent p's 'grpo'" in err


def test_imported_rloo_script_launches_rlootrainer(imported, trls_own, capsys):
    """`rlexp import` of TRL's `trl rloo` command, then `rlexp launch --dry-run` through the CLI (the
    argv: .venv-trl's Python on launch/train_trl.py, nothing written), and the script that launch
    would write: RLOOTrainer on RLOOConfig's keyword arguments, which RLOOConfig itself accepts (in the
    TRL venv: the config the run builds, with 2 generations and beta 0.05 as the plan counted)."""
    attempt, script_text, config = imported
    spec = yaml.safe_load((attempt / "attempt.yaml").read_text())
    assert spec["recipe"] == {"advantage_estimator": "rloo", "model_name_or_path": "Qwen/Qwen2.5-0.5B"}
    capsys.readouterr()
    rc = main(["launch", str(attempt), "--dry-run", "--force", "--reason", "test: no in-run eval set"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    argv = out.out.strip().splitlines()[-1].split()
    assert argv[0].endswith("python") and argv[1] == str(attempt.resolve() / "launch" / "train_trl.py")
    assert not (attempt / "launch").exists()
    assert "TRL RLOOTrainer (trl 1.16.0)" in script_text
    assert "grpo_config" not in config and config["model_config"]["model_name_or_path"] == "Qwen/Qwen2.5-0.5B"
    assert trls_own["launched"] == ["RLOOConfig", 2, 0.05, 1]


# test_trl_run.py's real CPU run, on RLOOTrainer
RUN_SPEC = SPEC.replace("recipe:\n", "recipe:\n  advantage_estimator: rloo\n", 1)


@pytest.mark.slow
def test_launch_runs_rlootrainer_with_the_planned_steps_and_lr(tmp_path):
    """`rlexp launch` for real on CPU (the demo's tiny model): the generated script runs RLOOTrainer, and
    its max_steps (transformers' TrainerState) and the LR it logs at every step equal the plan's."""
    pytest.importorskip("torch")
    trl_python_or_skip()
    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model
    from rlexp.stages.launch import launch

    root = tmp_path / "exp"
    build_task_datasets(root / "data", seed=0, pool_size=9, monitor_size=8, primary_size=16, id_size=8)
    build_tiny_model(root / "models" / "tiny-base", seed=0)
    attempt = root / "r1"
    attempt.mkdir()
    (attempt / "attempt.yaml").write_text(RUN_SPEC)
    result = launch(attempt, tracking_uri=f"sqlite:///{root / 'mlflow.db'}", poll_s=0.2)
    log = (attempt / "launch" / "stdout.log").read_text()
    assert result.state == "finished", log[-3000:]
    assert "TRL RLOOTrainer" in (attempt / "launch" / "train_trl.py").read_text()
    plan = json.loads((attempt / "plan.json").read_text())
    # by hand: S = GA = 2, P = 4·1·2/4 = 2 prompts; floor(9/2) = 4 chunks; L = 8; ceil(8/2) = 4 steps
    assert plan["trl"]["trainer"] == "RLOOTrainer" and plan["steps"]["optimizer_steps_total"] == 4
    assert "rlexp: TRL max_steps=4 warmup_steps=1" in log  # TRL's own count, from its TrainerState
    state = json.loads((attempt / "checkpoints" / "trl" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["max_steps"] == 4 and state["global_step"] == 4
    planned = {r["global_step"]: r for r in plan["lr"]}
    logged = {e["step"]: e["learning_rate"] for e in state["log_history"] if "learning_rate" in e}
    assert sorted(logged) == [1, 2, 3, 4]
    for step, lr in logged.items():
        assert lr == pytest.approx(planned[step]["lr_first"], rel=1e-12, abs=1e-18), step
    # RLOOTrainer's own log keys (its KL term, beta 0.05, is in the reward: "kl" is logged)
    assert any("kl" in e for e in state["log_history"])
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [1, 2, 3, 4]
