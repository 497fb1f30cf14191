"""verl's Megatron engine (``model_engine: megatron``): its key table against Hydra's composition of the
wheel's config, and the LR rlexp plans at every step against megatron-core's own OptimizerParamScheduler.

The reference is the real code: verl 0.9.1's ``get_megatron_optimizer_param_scheduler`` (its source read
from the pinned wheel, only that definition executed, unchanged) building megatron-core 0.16.1's
``OptimizerParamScheduler`` (the pinned wheel installed by scripts/fetch-verl, imported as is, with the
venv's torch) over a real torch optimizer, stepped as verl's Megatron engine steps it
(``lr_scheduler_step``: ``step(1)`` once per local update, the LR logged read after it). It runs in a
child process: megatron-core's package import brings its own modules, which the test session must not see.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from rlexp.trainers.verl import releases as verl_config
from rlexp.trainers.verl.steps import VerlConfigError, compute_verl_steps, lr_for_global_step

OPT = "actor_rollout_ref.actor.optim"
MEGATRON = "actor_rollout_ref.actor.megatron"


def megatron_config(**stated):
    """verl 0.9.1's megatron config (the committed table) with ``stated`` over it (``__`` = ``.``)."""
    resolved = {name: key.default for name, key in verl_config.read_table("0.9.1", "megatron").items()}
    resolved["model_engine"] = "megatron"
    for name, value in stated.items():
        name = name.replace("__", ".")
        assert name in resolved, name
        resolved[name] = value
    return resolved


BASE = {"data__train_batch_size": 64, "trainer__total_epochs": 2, "actor_rollout_ref__actor__ppo_mini_batch_size": 16,
        "actor_rollout_ref__actor__ppo_epochs": 1, "actor_rollout_ref__rollout__n": 4}


def _opt(**kw):
    return {f"{OPT}__{k}".replace(".", "__"): v for k, v in kw.items()}


def test_megatron_defaults_of_the_pinned_release():
    c = megatron_config()
    # verl 0.9.1's _generated_ppo_megatron_trainer.yaml (the wheel): what a megatron recipe inherits
    assert c[f"{OPT}._target_"] == "verl.workers.config.McoreOptimizerConfig"
    assert c[f"{OPT}.lr_decay_style"] == "constant" and c[f"{OPT}.lr_decay_steps"] is None
    assert c[f"{OPT}.lr_warmup_init"] == 0.0 and c[f"{OPT}.min_lr"] == 0.0 and c[f"{OPT}.lr_warmup_steps"] == -1
    assert c[f"{MEGATRON}.tensor_model_parallel_size"] == 1 and f"{OPT}.lr_scheduler_type" not in c


def test_step_counts_do_not_depend_on_the_engine():
    from test_verl_steps import config as fsdp_config

    shared = {**BASE, "trainer__total_training_steps": None}
    fsdp = compute_verl_steps(fsdp_config(**shared), 1000, "0.9.1")
    mega = compute_verl_steps(megatron_config(**shared), 1000, "0.9.1")
    for field in ("global_steps_total", "total_training_steps", "scheduler_total", "optimizer_steps_total",
                  "partial_batch_prompts", "batches_per_epoch"):
        assert getattr(fsdp, field) == getattr(mega, field), field
    assert mega.global_steps_total == 1000 // 64 * 2 == 30


def test_veomni_plans_with_veomnis_schedule_not_fsdps():
    """model_engine veomni: the plan's LR is VeOmni's schedule (its values are held against VeOmni's own
    scheduler in tests/test_verl_veomni_schedule.py and the corpus), whose defaults are not FSDP's:
    cosine to lr_min 0 over the run (verl's VeOmni config), and lr_warmup_steps, which FSDP reads, not read."""
    c = {name: key.default for name, key in verl_config.read_table("0.9.1", "veomni").items()}
    c.update({"model_engine": "veomni", "data.train_batch_size": 64, "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
              "actor_rollout_ref.actor.optim.lr_warmup_steps": 5})
    steps = compute_verl_steps(c, 1000, "0.9.1")  # 15 global steps
    assert steps.engine == "veomni" and steps.scheduler == "cosine" and steps.warmup_steps == 0
    lrs = [lr_for_global_step(g, steps).lr_first for g in range(1, 16)]
    assert lrs[0] == c["actor_rollout_ref.actor.optim.lr"] and all(a > b for a, b in zip(lrs, lrs[1:], strict=False))
    with pytest.raises(VerlConfigError, match="VeOmni knows constant, linear, cosine") as err:
        compute_verl_steps({**c, "actor_rollout_ref.actor.optim.lr_scheduler_type": "wsd"}, 1000, "0.9.1")
    assert err.value.key == "actor_rollout_ref.actor.optim.lr_scheduler_type"


# ----------------------------------------------------------------------------- megatron-core's scheduler

_CHILD = r"""
import ast, json, math, sys, warnings
warnings.simplefilter("ignore")
import torch
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
request = json.load(sys.stdin)
tree = ast.parse(request["verl_source"])
defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_megatron_optimizer_param_scheduler"]
namespace = {"OptimizerParamScheduler": OptimizerParamScheduler}
exec(compile(ast.Module(body=defs, type_ignores=[]), "verl/utils/megatron/optimizer.py", "exec"), namespace)

class Config(dict):  # what verl hands it: an OmegaConf node, read by attribute and by .get
    __getattr__ = dict.__getitem__

answers = []
for case in request["cases"]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=case["lr"])
    try:
        scheduler = namespace["get_megatron_optimizer_param_scheduler"](optimizer, Config(case))
    except Exception as exc:
        answers.append({"error": f"{type(exc).__name__}: {exc}"})
        continue
    applied, logged = [], []
    for _ in range(case["updates"]):
        applied.append(optimizer.param_groups[0]["lr"])  # what the update's optimizer steps use
        scheduler.step(1)  # verl: Engine.lr_scheduler_step, once per local update (it only sets the LR)
        logged.append(optimizer.param_groups[0]["lr"])  # get_megatron_last_lr: what verl logs
    answers.append({"applied": applied, "logged": logged, "warmup": scheduler.lr_warmup_steps,
                    "decay": scheduler.lr_decay_steps})
print(json.dumps(answers))
"""


def megatron_core_dir():
    if os.environ.get("CI"):
        return verl_config.fetch_megatron_core()
    path = verl_config.megatron_core_dir()
    if not (path / "megatron" / "core" / "optimizer_param_scheduler.py").exists():
        pytest.skip(f"megatron-core is not in {path}: run {verl_config.FETCH_SCRIPT}")
    return path


def run_megatron(cases: list[dict], version: str = "0.9.1") -> list[dict]:
    """Each case (verl's optimizer config, with ``total_training_steps`` as the trainer sets it, and
    ``updates``) through verl ``version``'s and megatron-core's own code."""
    from test_verl_backend import pinned_wheel

    pytest.importorskip("torch")
    source = verl_config.read_wheel_text(pinned_wheel(version), "verl/utils/megatron/optimizer.py")
    env = {**os.environ, "PYTHONPATH": str(megatron_core_dir())}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps({"verl_source": source, "cases": cases}),
                          env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# every decay style megatron-core has (the corpus's examples use constant; the others are what a recipe
# may state), both warm-up branches (steps; the ratio of lr_decay_steps), a stated lr_decay_steps shorter
# than the run (min_lr after it), a warm-up from lr_warmup_init, and V1's separate_async (2 scheduler
# steps per global step)
CASES = [
    {"lr_decay_style": "constant", "lr_warmup_steps": 10},
    {"lr_decay_style": "constant", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.1},
    {"lr_decay_style": "constant", "lr_warmup_steps": 0},
    {"lr_decay_style": "linear", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.2, "min_lr": 1e-7},
    {"lr_decay_style": "cosine", "lr_warmup_steps": 4, "min_lr": 3e-7, "lr_warmup_init": 1e-7},
    {"lr_decay_style": "cosine", "lr_warmup_steps": 3, "lr_decay_steps": 20, "min_lr": 2e-7},
    {"lr_decay_style": "inverse-square-root", "lr_warmup_steps": 5, "min_lr": 1e-7},
    {"lr_decay_style": "WSD", "lr_warmup_steps": 2, "lr_wsd_decay_steps": 10, "lr_wsd_decay_style": "linear"},
    {"lr_decay_style": "WSD", "lr_warmup_steps": 2, "lr_wsd_decay_steps": 8, "lr_wsd_decay_style": "cosine",
     "min_lr": 1e-7},
    {"lr_decay_style": "WSD", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.05, "lr_wsd_decay_steps": 12,
     "lr_wsd_decay_style": "exponential"},
    {"lr_decay_style": "WSD", "lr_warmup_steps": 0, "lr_wsd_decay_steps": 6, "lr_wsd_decay_style": "minus_sqrt"},
    {"lr_decay_style": "cosine", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.07, "min_lr": 1e-7,
     "trainer.v1.trainer_mode": "separate_async", "trainer.v1.separate_async.parameter_sync_step": 2},
]  # fmt: skip


def _steps_of(case: dict):
    trainer = {k.replace(".", "__"): v for k, v in case.items() if k.startswith("trainer.")}
    optim = {k: v for k, v in case.items() if not k.startswith("trainer.")}
    c = megatron_config(**BASE, trainer__total_training_steps=40, **trainer, **_opt(lr=3e-6, **optim))
    return c, compute_verl_steps(c, 10_000, "0.9.1")


# configs megatron-core refuses before the first step: rlexp refuses each at plan, naming the key
REFUSED = [
    ({"lr_decay_style": "constant", "lr_warmup_steps": 40}, "lr_warmup_steps", "AssertionError"),
    ({"lr_decay_style": "cosine", "lr_warmup_steps": 2, "min_lr": 5e-6}, "min_lr", "AssertionError"),
    ({"lr_decay_style": "linear", "lr_warmup_steps": 2, "lr_warmup_init": 4e-6}, "lr_warmup_init", "AssertionError"),
    ({"lr_decay_style": "WSD", "lr_warmup_steps": 2}, "lr_wsd_decay_steps", "AssertionError"),
    ({"lr_decay_style": "cosine", "lr_warmup_steps": 2, "lr_decay_steps": 0}, "lr_decay_steps", "AssertionError"),
    ({"lr_decay_style": "inverse_square_root", "lr_warmup_steps": 0}, "lr_decay_style", "Exception"),
]  # fmt: skip


def _refused_config(case: dict) -> dict:
    return megatron_config(**BASE, trainer__total_training_steps=40, **_opt(lr=3e-6, **case))


@pytest.fixture(scope="module")
def megatron_answers():
    """megatron-core's answers to CASES then REFUSED (one child process: its import takes ~15 s)."""
    requests = []
    for case in CASES:
        c, steps = _steps_of(case)
        optim = {key[len(OPT) + 1:]: value for key, value in c.items() if key.startswith(OPT + ".")}
        # the trainer writes its scheduler horizon into the optimizer config (trainer_base.py)
        optim["total_training_steps"] = steps.scheduler_total
        requests.append({**optim, "updates": steps.scheduler_steps_run})
    for case, _, _ in REFUSED:
        optim = {key[len(OPT) + 1:]: value for key, value in _refused_config(case).items() if key.startswith(OPT + ".")}
        requests.append({**optim, "total_training_steps": 40, "updates": 1})
    return run_megatron(requests)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c['lr_decay_style']}-{i}" for i, c in enumerate(CASES)])
def test_lr_equals_megatron_cores_scheduler_at_every_step(megatron_answers, index):
    _, steps = _steps_of(CASES[index])
    answer = megatron_answers[index]
    assert "error" not in answer, answer
    assert steps.warmup_steps == max(answer["warmup"], 0) and steps.lr_schedule.decay_steps == answer["decay"]
    k = steps.scheduler_steps_per_global_step
    assert len(answer["applied"]) == steps.global_steps_total * k == steps.scheduler_steps_run
    for global_step in range(1, steps.global_steps_total + 1):
        planned = lr_for_global_step(global_step, steps)
        applied = answer["applied"][(global_step - 1) * k: global_step * k]
        assert applied[0] == pytest.approx(planned.lr_first, rel=1e-12, abs=1e-30), global_step
        assert math.fsum(applied) / k == pytest.approx(planned.lr_mean, rel=1e-12, abs=1e-30), global_step
        if k == 1:  # verl's logged LR: the optimizer's after step(1)
            assert answer["logged"][global_step - 1] == pytest.approx(planned.actor_lr_logged, rel=1e-12, abs=1e-30)


@pytest.mark.parametrize("index", range(len(REFUSED)), ids=[r[1] for r in REFUSED])
def test_what_megatron_core_refuses_plan_refuses(megatron_answers, index):
    case, key, error = REFUSED[index]
    with pytest.raises(VerlConfigError) as err:
        compute_verl_steps(_refused_config(case), 10_000, "0.9.1")
    assert err.value.key == f"{OPT}.{key}"
    answer = megatron_answers[len(CASES) + index]
    assert answer.get("error", "").startswith(error + ":"), answer


# ----------------------------------------------------------------------------- verl's Megatron layout checks


def _layout(**stated):
    return megatron_config(**{"trainer__n_gpus_per_node": 8, "trainer__nnodes": 1, "data__train_batch_size": 64,
                              "actor_rollout_ref__rollout__n": 4,
                              "actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": 4, **stated})


def test_megatron_layout_checks_are_verls_validate_config():
    """verl/utils/config.py validate_config (0.9.1), Megatron branch, worked by hand: 8 GPUs split by
    tp × pp × cp; then train_batch_size × n (256) divisible by dp × ppo_micro_batch_size_per_gpu."""
    from rlexp.trainers.verl.checks import megatron_layout_checks, verl_gpu_layout

    tp = f"{MEGATRON.replace('.', '__')}__tensor_model_parallel_size"
    cp = f"{MEGATRON.replace('.', '__')}__context_parallel_size"
    assert megatron_layout_checks(_layout(**{tp: 2})) == []  # dp 4, 4 × 4 = 16 divides 256
    assert verl_gpu_layout(_layout(**{tp: 2}))["data_parallel_size"] == 4
    [found] = megatron_layout_checks(_layout(**{tp: 3}))
    assert found.name == "gpu.layout" and found.severity == "error"
    assert "n_gpus (8" in found.rule and "model_parallel_size (3" in found.rule
    [found] = megatron_layout_checks(_layout(**{tp: 2, cp: 2, "actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": 3}))
    assert found.name == "batch.train_divisible"  # dp 2, minimal 6: 256 % 6 = 4
    assert "real_train_batch_size (256" in found.rule and "minimal possible batch size (6" in found.rule
    # verl checks neither with dynamic batch sizes
    assert megatron_layout_checks(_layout(**{tp: 3, "actor_rollout_ref__actor__use_dynamic_bsz": True})) == []
    fsdp = {name: key.default for name, key in verl_config.read_table("0.9.1").items()}
    assert verl_gpu_layout(fsdp) is None


# ----------------------------------------------------------------------------- import: the engine a script chooses


def test_import_reads_the_engine_and_adds_as_hydra_does(tmp_path):
    """`--config-name ppo_megatron_trainer` is `model_engine: megatron`; `+key` is checked against that
    engine's config as Hydra 1.3 adds (over a null default, into an interpolated mapping; refused over a
    value); a key of another engine is refused at plan, naming the engine that has it."""
    from rlexp.errors import InputError
    from rlexp.trainers.verl import hydra
    from rlexp.trainers.verl.script_args import read_args

    script = tmp_path / "run.sh"
    args = ["--config-name=ppo_megatron_trainer.yaml", "data.train_files=/d/train.parquet",
            f"+{MEGATRON}.override_transformer_config.recompute_method=uniform",  # null in the config: Hydra adds
            "+actor_rollout_ref.ref.megatron.override_transformer_config.use_flash_attn=True",  # an interpolation
            f"{MEGATRON}.tensor_model_parallel_size=2"]
    recipe, datasets, _, notes = read_args(script, "line 3", args, "0.9.1")
    assert recipe["model_engine"] == "megatron" and any("model_engine megatron" in n for n in notes)
    assert recipe[f"{MEGATRON}.override_transformer_config.recompute_method"] == "uniform"
    assert recipe["actor_rollout_ref.ref.megatron.override_transformer_config"] == {"use_flash_attn": True}
    assert hydra.check_recipe(recipe, "0.9.1", "a.yaml")[f"{MEGATRON}.tensor_model_parallel_size"] == 2
    with pytest.raises(InputError, match=r"\+actor_rollout_ref.actor.megatron.use_mbridge: verl 0.9.1's config already"):
        read_args(script, "line 3", ["model_engine=megatron", "data.train_files=x", f"+{MEGATRON}.use_mbridge=false"],
                  "0.9.1")
    with pytest.raises(InputError, match="ppo_megatron_lite"):  # a config rlexp has no table for
        read_args(script, "line 3", ["--config-name=ppo_megatron_lite", "data.train_files=x"], "0.9.1")
    assert datasets["pool"]
