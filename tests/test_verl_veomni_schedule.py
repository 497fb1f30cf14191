"""The VeOmni engine's LR schedule (rlexp.trainers.verl.veomni_schedule) against VeOmni's own
``build_lr_scheduler``, called as verl 0.9.1's VeOmni engine calls it, at every scheduler step.

The reference is VeOmni 0.1.11's wheel (the version verl 0.9.1's ``veomni-sft`` extra pins), sha256-
pinned below and downloaded into ``~/.cache/rlexp/veomni`` (``RLEXP_VEOMNI_CACHE``) with
``pip download --no-deps`` (never installed). Importing the ``veomni`` package runs its
``__init__``, which patches kernels and imports model classes of a newer transformers than the
venv's; the scheduler module needs none of it. So the wheel's ``veomni/optim/lr_scheduler.py`` and
the one module it imports (``veomni/utils/logging.py``, standard library only) are executed whole
and unchanged, under a private package name whose package ``__init__`` files are not run; the
relative import ``from ..utils import logging`` resolves to that real module. torch's ``LambdaLR``
is the real one from the venv.

verl's side (the keys it hands VeOmni, the defaults) is read from the pinned verl 0.9.1 wheel.
"""

from __future__ import annotations

import ast
import json
import math
import os
import sys
import types
from pathlib import Path

import pytest
import yaml

from rlexp.backends import pinned_wheels
from rlexp.trainers.verl import releases as verl_config
from rlexp.trainers.verl.veomni_schedule import (
    IGNORED_KEYS,
    SCHEDULE_KEYS,
    VeOmniScheduleError,
    veomni_lr_schedule,
)

VEOMNI = pinned_wheels.Release("0.1.11", "veomni-0.1.11-py3-none-any.whl",
                               "fe399ead11350fa3d53cc53293cd60d0c1042f2fa15d599aeb89db9aa417b129")
PACKAGE = "_veomni_0_1_11"  # the private name the wheel's modules run under
REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "launch_scripts"
ACTOR_OPTIM = "actor_rollout_ref.actor.optim"


def _veomni_wheel() -> Path:
    dest = pinned_wheels.cache_dir("RLEXP_VEOMNI_CACHE", "veomni")
    try:
        return pinned_wheels.fetch("veomni", VEOMNI, dest, refresh_script="tests/test_verl_veomni_schedule.py")
    except pinned_wheels.ReleaseError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"VeOmni's wheel: {exc}")


@pytest.fixture(scope="module")
def veomni():
    """(torch, VeOmni 0.1.11's ``veomni.optim.lr_scheduler`` module, as the wheel ships it)."""
    torch = pytest.importorskip("torch")
    wheel = _veomni_wheel()
    added = []

    def package(name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__path__ = []  # a package: its __init__ is not run
        sys.modules[name] = module
        added.append(name)
        return module

    def run(member: str, name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__package__ = name.rsplit(".", 1)[0]
        module.__file__ = member
        sys.modules[name] = module
        added.append(name)
        source = verl_config.read_wheel_text(wheel, member)
        exec(compile(source, member, "exec"), module.__dict__)  # noqa: S102  (the wheel's own module, whole)
        return module

    try:
        package(PACKAGE)
        utils = package(f"{PACKAGE}.utils")
        package(f"{PACKAGE}.optim")
        utils.logging = run("veomni/utils/logging.py", f"{PACKAGE}.utils.logging")
        scheduler = run("veomni/optim/lr_scheduler.py", f"{PACKAGE}.optim.lr_scheduler")
        yield torch, scheduler
    finally:
        for name in added:
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def verl_wheel():
    from test_verl_backend import pinned_wheel

    return pinned_wheel()


def _veomni_scheduler(veomni, n: int, optim: dict):
    """VeOmni's scheduler as verl 0.9.1's ``VeOmniEngine._build_lr_scheduler`` builds it."""
    torch, module = veomni
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=optim["lr"])  # build_optimizer's lr
    scheduler = module.build_lr_scheduler(
        optimizer,
        train_steps=n,
        lr=optim["lr"],
        lr_min=optim["lr_min"],
        lr_decay_style=optim["lr_scheduler_type"],
        lr_decay_ratio=optim["lr_decay_ratio"],
        lr_warmup_ratio=optim["lr_warmup_steps_ratio"],
        lr_start=optim["lr_start"],
    )
    return optimizer, scheduler


def _assert_every_step_equal(veomni, n: int, optim: dict) -> list[float]:
    planned = veomni_lr_schedule(n, **optim)
    optimizer, scheduler = _veomni_scheduler(veomni, n, optim)
    lrs = planned.lrs()
    assert len(lrs) == n + 1
    applied = []
    for update in range(n):  # verl: one scheduler.step() per actor update, after its last mini-batch
        applied.append(optimizer.param_groups[0]["lr"])  # what the update's optimizer steps use
        assert applied[-1] == pytest.approx(lrs[update], rel=1e-12, abs=1e-30), (update, optim)
        optimizer.step()
        scheduler.step()
        # what verl logs as actor/lr with this update: get_last_lr()[0] after the step
        assert scheduler.get_last_lr()[0] == pytest.approx(lrs[update + 1], rel=1e-12, abs=1e-30), (update, optim)
    return applied


DEFAULTS = {"lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.0, "lr_decay_ratio": 1.0, "lr_min": 0.0,
            "lr_start": 0.0}

# every style x the warm-up branches (none; a ramp from 0 and from lr_start; a ratio whose product
# truncates: 0.29 x 100 = 28.999... is 28 steps; a ramp longer than the decay; the whole run warm-up)
# and the decay's (lr_min as a floor, a decay that ends early, one step, no steps)
CASES = [
    (40, {"lr": 3e-6, "lr_scheduler_type": "constant"}),
    (40, {"lr": 3e-6, "lr_scheduler_type": "constant", "lr_warmup_steps_ratio": 0.1}),
    (100, {"lr": 1e-5, "lr_scheduler_type": "constant", "lr_warmup_steps_ratio": 0.29, "lr_start": 2e-6}),
    (40, {"lr": 1e-6}),
    (40, {"lr": 1e-6, "lr_warmup_steps_ratio": 0.07, "lr_min": 1e-7}),
    (100, {"lr": 5e-6, "lr_warmup_steps_ratio": 0.29, "lr_start": 1e-6, "lr_min": 5e-7, "lr_decay_ratio": 0.6}),
    (50, {"lr": 2e-6, "lr_warmup_steps_ratio": 0.5, "lr_decay_ratio": 0.3, "lr_min": 1e-7}),
    (7, {"lr": 1e-6, "lr_warmup_steps_ratio": 1.0}),
    (1, {"lr": 1e-6, "lr_min": 1e-8}),
    (0, {"lr": 1e-6}),
    (40, {"lr": 3e-6, "lr_scheduler_type": "linear"}),
    (40, {"lr": 3e-6, "lr_scheduler_type": "linear", "lr_warmup_steps_ratio": 0.25, "lr_min": 6e-7}),
    (100, {"lr": 1e-5, "lr_scheduler_type": "linear", "lr_warmup_steps_ratio": 0.29, "lr_start": 5e-6,
           "lr_decay_ratio": 0.5}),
    (300, {"lr": 1e-6, "lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.03, "lr_min": 1e-7,
           "lr_decay_ratio": 1.7}),
]


@pytest.mark.parametrize(("n", "optim"), CASES)
def test_every_step_equals_veomnis_own_scheduler(veomni, n, optim):
    optim = {**DEFAULTS, **optim}
    applied = _assert_every_step_equal(veomni, n, optim)
    schedule = veomni_lr_schedule(n, **optim)
    warmup = schedule.warmup_steps
    assert warmup == int(n * optim["lr_warmup_steps_ratio"])
    if warmup and n:  # the ramp starts at lr_start and reaches lr one step after it ends ...
        assert applied[0] == pytest.approx(optim["lr_start"], abs=1e-30)
        if warmup < n:  # ... unless cosine's decay ended before the ramp did: lr_min from there on
            past_decay = optim["lr_scheduler_type"] == "cosine" and warmup > schedule.decay_steps
            expected = optim["lr_min"] if past_decay else optim["lr"]
            assert applied[warmup] == pytest.approx(expected, rel=1e-12)


def test_the_truncated_warm_up_is_veomnis():
    # 0.29 x 100 is 28.999999999999996 in floats: 28 warm-up steps, not 29
    assert veomni_lr_schedule(100, lr=1e-6, lr_warmup_steps_ratio=0.29).warmup_steps == 28


def test_verl_hands_veomni_these_keys_and_these_defaults(verl_wheel):
    """The keys verl 0.9.1's VeOmni engine passes (its source, parsed), and its VeOmni config's defaults."""
    source = verl_config.read_wheel_text(verl_wheel, "verl/workers/engine/veomni/transformer_impl.py")
    build = next(node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef) and node.name == "_build_lr_scheduler")
    call = next(node for node in ast.walk(build) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "build_lr_scheduler")
    passed = {kw.arg: kw.value.attr for kw in call.keywords if isinstance(kw.value, ast.Attribute)}
    assert passed == {"train_steps": "total_training_steps", "lr": "lr", "lr_min": "lr_min",
                      "lr_decay_style": "lr_scheduler_type", "lr_decay_ratio": "lr_decay_ratio",
                      "lr_warmup_ratio": "lr_warmup_steps_ratio", "lr_start": "lr_start"}
    assert set(passed.values()) - {"total_training_steps"} == set(SCHEDULE_KEYS)
    config = yaml.safe_load(verl_config.read_wheel_text(verl_wheel,
                                                        "verl/trainer/config/_generated_ppo_veomni_trainer.yaml"))
    for optim in (config["actor_rollout_ref"]["actor"]["optim"], config["critic"]["optim"]):
        assert all(key in optim for key in IGNORED_KEYS)  # there, but never handed to VeOmni
        assert {key: optim[key] for key in DEFAULTS} == DEFAULTS
    import inspect

    signature = inspect.signature(veomni_lr_schedule).parameters
    assert {key: signature[key].default for key in DEFAULTS} == DEFAULTS


VEOMNI_SCRIPTS = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("verl/*veomni*.sh"))


def test_the_corpus_has_the_veomni_examples():
    assert len(VEOMNI_SCRIPTS) == 6


@pytest.mark.parametrize("rel", VEOMNI_SCRIPTS)
def test_every_veomni_example_s_schedule_equals_veomnis(veomni, verl_wheel, rel, tmp_path, capsys):
    """Each example imported as written (its facts), its optimizer values over verl's VeOmni
    defaults, for its scheduler's length: the trainer's ``total_training_steps`` (stated in every one
    of them), else ``floor(pool / train_batch_size) × total_epochs`` (verl's drop_last dataloader)."""
    from rlexp.cli import main

    facts = json.loads((CORPUS / "facts.json").read_text())[rel]
    attempt = tmp_path / "exp" / "a"
    args = ["import", str(CORPUS / rel), str(attempt), "--version", facts["version"],
            "--pool-size", str(facts["pool_size"]), "--monitor-size", str(facts["monitor_size"])]
    for name, value in facts.get("env", {}).items():
        args += ["--env", f"{name}={value}"]
    assert main(args) == 0, capsys.readouterr().err
    recipe = yaml.safe_load((attempt / "attempt.yaml").read_text())["recipe"]
    assert recipe.get("model_engine") == "veomni" or "actor_rollout_ref.actor.veomni.param_offload" in recipe
    config = yaml.safe_load(verl_config.read_wheel_text(verl_wheel,
                                                        "verl/trainer/config/_generated_ppo_veomni_trainer.yaml"))
    defaults = config["actor_rollout_ref"]["actor"]["optim"]
    optim = {key: recipe.get(f"{ACTOR_OPTIM}.{key}", defaults[key]) for key in SCHEDULE_KEYS}
    n = recipe.get("trainer.total_training_steps") or \
        facts["pool_size"] // recipe["data.train_batch_size"] * recipe["trainer.total_epochs"]
    assert "trainer.v1.trainer_mode" not in recipe  # sync mode: one scheduler step per global step
    applied = _assert_every_step_equal(veomni, n, optim)
    if optim["lr_scheduler_type"] == "cosine":  # verl's VeOmni default: from lr down to lr_min over the run
        assert applied[0] == optim["lr"] and applied[-1] < optim["lr"] * 1e-3
    else:
        assert set(applied) == {optim["lr"]}


def test_what_veomni_refuses_is_refused_naming_the_key(veomni):
    torch, module = veomni
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-6)
    with pytest.raises(ValueError, match="Unknown learning rate decay style"):
        module.build_lr_scheduler(optimizer, train_steps=10, lr=1e-6, lr_decay_style="wsd")
    with pytest.raises(VeOmniScheduleError) as err:
        veomni_lr_schedule(10, lr=1e-6, lr_scheduler_type="wsd")
    assert err.value.key == "lr_scheduler_type"
    # lr 0: VeOmni divides by it when the scheduler is built, except constant without warm-up
    for style, ratio in (("cosine", 0.0), ("linear", 0.0), ("constant", 0.2)):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
        with pytest.raises(ZeroDivisionError):
            module.build_lr_scheduler(optimizer, train_steps=10, lr=0.0, lr_decay_style=style, lr_warmup_ratio=ratio)
        with pytest.raises(VeOmniScheduleError) as err:
            veomni_lr_schedule(10, lr=0.0, lr_scheduler_type=style, lr_warmup_steps_ratio=ratio)
        assert err.value.key == "lr"
    _assert_every_step_equal(veomni, 10, {**DEFAULTS, "lr": 0.0, "lr_scheduler_type": "constant"})
    for bad in ({"lr": "1e-6"}, {"lr": 1e-6, "lr_min": math.nan}, {"lr": 1e-6, "lr_start": True}):
        with pytest.raises(VeOmniScheduleError):
            veomni_lr_schedule(10, **bad)
    with pytest.raises(VeOmniScheduleError) as err:
        veomni_lr_schedule(-1, lr=1e-6)
    assert err.value.key == "total_training_steps"
