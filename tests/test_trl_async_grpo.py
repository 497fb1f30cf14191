"""TRL's AsyncGRPOTrainer (``trl.experimental.async_grpo``, recipe ``advantage_estimator: async_grpo``):
with ``max_steps > 0`` stated, every figure ``rlexp plan`` prints (steps, warm-up, the LR at every step,
the checkpoint steps) equals what TRL 1.16 and transformers 5.24 compute from their own objects; without
it, the plan refuses it in one line naming ``recipe.max_steps``; the recipe resolves to AsyncGRPOConfig's
own defaults; a field AsyncGRPOConfig lacks is refused naming it; the launch refuses it.

The sets are rlexp's own (the corpus's real one, ``examples/scripts/async_grpo.py``, is checked by
tests/test_import_corpus.py): what that example leaves at its defaults, a warm-up as a ratio and as a
count, the decaying schedules AsyncGRPOConfig's docstring says to pair with ``max_steps``, and a
fractional ``save_steps``.

TRL's side runs in the TRL venv: AsyncGRPOConfig built from the set, transformers' own
``Trainer.set_initial_training_values`` on a DataLoader over an IterableDataset (AsyncGRPOTrainer's
``get_train_dataloader`` serves its rollout queue so: no length), ``get_warmup_steps``, and
transformers' own ``DefaultFlowCallback`` stepped over the run (its ``on_step_end`` at each step and,
the loader's one "epoch" being ``max_steps`` steps long, its ``on_epoch_end`` at the last) for the
save steps; the LR at every step is transformers' own scheduler.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from trl_venv import plan_of, trl_attempt, trl_python_or_skip

from rlexp.cli import main
from rlexp.errors import InputError

# name -> (AsyncGRPOConfig keyword arguments, the pool's size)
SETS: dict[str, tuple[dict, int]] = {
    "defaults": ({"max_steps": 40}, 7_473),
    "cosine_ratio": ({"max_steps": 37, "lr_scheduler_type": "cosine", "warmup_steps": 0.1, "learning_rate": 3e-6,
                      "per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "save_steps": 10}, 103),
    "linear_count": ({"max_steps": 12, "lr_scheduler_type": "linear", "warmup_steps": 3, "save_steps": 0.25}, 9),
    "min_lr": ({"max_steps": 50, "lr_scheduler_type": "cosine_with_min_lr", "warmup_steps": 5,
                "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "save_strategy": "no"}, 500),
    "constant_warmup": ({"max_steps": 20, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0.3,
                         "num_train_epochs": 7}, 64),
}

TRL_FIGURES = """
import dataclasses, json, os, sys
from types import SimpleNamespace
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
import torch
import transformers
from torch.utils.data import DataLoader
from transformers import TrainerControl, TrainerState
from transformers.trainer_callback import DefaultFlowCallback
from trl.experimental.async_grpo import AsyncGRPOConfig

class Queue(torch.utils.data.IterableDataset):  # AsyncGRPOTrainer's rollout queue: no length
    def __iter__(self):
        return iter(())

def figures(kwargs):
    t = AsyncGRPOConfig(output_dir="o", use_cpu=True, report_to="none", **kwargs)
    own = SimpleNamespace(get_total_train_batch_size=lambda args: 0, get_sp_size=lambda: 1)
    values = transformers.Trainer.set_initial_training_values(own, t, DataLoader(Queue()))
    steps, per_epoch = values[-1], values[1]
    state, flow, saved = TrainerState(), DefaultFlowCallback(), []
    state.max_steps = steps
    state.compute_steps(t, steps)
    for step in range(1, steps + 1):
        state.global_step, state.epoch, control = step, step / per_epoch, TrainerControl()
        flow.on_step_end(t, state, control)
        if step % per_epoch == 0:
            flow.on_epoch_end(t, state, control)
        if control.should_save:
            saved.append(step)
    return {"max_steps": steps, "update_steps_per_epoch": per_epoch, "micro_batches_per_epoch": values[5],
            "warmup": t.get_warmup_steps(steps), "lr": t.learning_rate,
            "scheduler": str(getattr(t.lr_scheduler_type, "value", t.lr_scheduler_type)),
            "kwargs": t.lr_scheduler_kwargs or {}, "saved": saved, "num_generations": t.num_generations}

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

jobs = json.loads(sys.stdin.read())
print(json.dumps({"figures": {name: figures(kwargs) for name, (kwargs, n) in jobs.items()},
                  "async_defaults": defaults(AsyncGRPOConfig)}))
"""


@pytest.fixture(scope="module")
def trls_own():
    python = trl_python_or_skip()
    done = subprocess.run([str(python), "-c", TRL_FIGURES], input=json.dumps(SETS), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def async_attempt(root: Path, recipe: dict, pool: int, name: str = "a1") -> Path:
    return trl_attempt(root, "async_grpo", recipe, pool, name)


@pytest.mark.parametrize("name", list(SETS))
def test_async_grpo_figures_equal_trls_own(name, tmp_path, trls_own):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    kwargs, pool = SETS[name]
    plan, trl = plan_of(async_attempt(tmp_path, kwargs, pool)), trls_own["figures"][name]
    total = trl["max_steps"]
    assert total == kwargs["max_steps"]  # transformers runs the stated max_steps over a loader without a length
    assert plan["steps"]["optimizer_steps_total"] == plan["steps"]["global_steps_total"] == total
    assert plan["steps"]["global_steps_per_episode"] == trl["update_steps_per_epoch"]
    assert plan["steps"]["micro_batches_per_optimizer_step"] * total == trl["micro_batches_per_epoch"]
    assert plan["steps"]["warmup_steps"] == trl["warmup"]
    assert plan["save_global_steps"] == trl["saved"] and plan["eval_global_steps"] == []
    assert plan["trl"]["trainer"] == "AsyncGRPOTrainer" and plan["trl"]["lr_scheduler_type"] == trl["scheduler"]
    assert plan["trl"]["num_generations"] == trl["num_generations"]
    # what the plan cannot know is stated as such, not computed
    assert plan["trl"]["prompts_per_optimizer_step"] is None and plan["trl"]["num_train_epochs"] is None
    assert any("token_budget" in line for line in plan["trl"]["not_known_before_the_run"])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=trl["lr"])
    scheduler = transformers.get_scheduler(trl["scheduler"], optimizer, num_warmup_steps=trl["warmup"],
                                           num_training_steps=total, scheduler_specific_kwargs=trl["kwargs"])
    lr_lambda, base_lr = scheduler.lr_lambdas[0], scheduler.base_lrs[0]
    assert plan["lr"] and plan["lr"][-1]["global_step"] == total
    for row in plan["lr"]:  # the LR step k applies: base_lr × lr_lambda(k - 1), read before its scheduler.step()
        assert row["lr_first"] == pytest.approx(base_lr * lr_lambda(row["global_step"] - 1), rel=1e-12, abs=1e-18)


def test_an_async_grpo_recipe_resolves_to_async_grpo_configs_defaults(tmp_path, trls_own):
    from rlexp.spec import load_attempt

    recipe = load_attempt(async_attempt(tmp_path, {"max_steps": 5}, 100)).recipe
    own = trls_own["async_defaults"]
    assert (own["lr_scheduler_type"], own["logging_steps"], own["learning_rate"]) == ("constant", 1, 1e-6)
    for key, default in own.items():
        if key not in ("output_dir", "max_steps"):
            assert recipe[key] == default, key


@pytest.mark.parametrize("max_steps", [-1, 0])
def test_without_max_steps_the_plan_refuses_in_one_line(max_steps, tmp_path, capsys):
    d = async_attempt(tmp_path, {"max_steps": max_steps} if max_steps else {}, 7_473)
    assert main(["plan", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recipe.max_steps" in err and "not known before the run" in err, err
    assert not (d / "plan.json").exists()


def test_an_intent_other_than_max_steps_is_an_error_naming_max_steps_only(tmp_path):
    d = async_attempt(tmp_path, {"max_steps": 30, "num_train_epochs": 2}, 100)
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["intent"] = {"global_steps": 40}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    found = [c for c in plan_of(d)["checks"] if c["name"] == "steps.intent"]
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert "max_steps 30" in found[0]["rule"] and found[0]["rule"].endswith("intent is 40: state max_steps: 40")


def test_an_in_run_eval_is_refused_naming_eval_strategy(tmp_path):
    with pytest.raises(InputError) as err:
        plan_of(async_attempt(tmp_path, {"max_steps": 10, "eval_strategy": "steps", "eval_steps": 5}, 100))
    assert err.value.field == "recipe.eval_strategy" and "no eval_dataset" in str(err.value)


def test_fields_async_grpo_config_lacks_are_refused_and_its_own_are_not_grpos(tmp_path):
    for i, key in enumerate(("loss_type", "num_iterations", "steps_per_generation", "use_vllm")):
        value = {"loss_type": "grpo", "num_iterations": 1, "steps_per_generation": 2, "use_vllm": True}[key]
        with pytest.raises(InputError) as err:
            plan_of(async_attempt(tmp_path, {"max_steps": 10, key: value}, 100, name=f"x{i}"))
        assert err.value.field == f"recipe.{key}"
        assert "AsyncGRPOConfig (TRL 1.16.0, advantage_estimator async_grpo) has no such field" in str(err.value)
    d = async_attempt(tmp_path, {"max_staleness": 2}, 100, name="g")
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["recipe"]["advantage_estimator"] = "grpo"
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as err:
        plan_of(d)
    assert err.value.field == "recipe.max_staleness" and "a field of AsyncGRPOConfig's" in str(err.value)


def test_the_launch_refuses_async_grpo(tmp_path):
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt
    from rlexp.trainers.trl.script import prepare_launch

    d = async_attempt(tmp_path, {"max_steps": 10}, 100)
    with pytest.raises(InputError) as err:
        prepare_launch(load_attempt(d), AttemptDir(d), resume=False, must_exist=False)
    assert err.value.field == "recipe.advantage_estimator" and "does not launch it" in str(err.value)
