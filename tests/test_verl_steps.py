"""verl's step math and LR schedule (rlexp.trainers.verl.steps) against hand-computed values.

Every expected number below is worked out by hand from the formulas of verl 0.9.1 (quoted in
docs/trainers.md with file and line), not taken from the code under test. The last tests build
verl's own scheduler functions (their source read from the pinned wheel, executed here with
torch's real ``LambdaLR``) and compare the LR at every step.
"""

from __future__ import annotations

import ast
import math

import pytest

from rlexp.trainers.verl import releases as verl_config
from rlexp.trainers.verl.steps import (
    VerlConfigError,
    compute_verl_steps,
    lr_for_global_step,
    lr_lambda,
    max_fraction_through,
    verl_schedule,
)

OPT = "actor_rollout_ref.actor.optim"


def config(**stated):
    """verl 0.9.1's defaults (the committed key table) with ``stated`` over them (``__`` = ``.``)."""
    resolved = {name: key.default for name, key in verl_config.read_table("0.9.1").items()}
    for name, value in stated.items():
        name = name.replace("__", ".")
        assert name in resolved, name
        resolved[name] = value
    return resolved


BASE = {"data__train_batch_size": 64, "trainer__total_epochs": 3, "actor_rollout_ref__actor__ppo_mini_batch_size": 16,
        "actor_rollout_ref__actor__ppo_epochs": 2, "actor_rollout_ref__rollout__n": 8}


def test_defaults_of_the_pinned_release_are_what_the_math_reads():
    c = config()
    # verl 0.9.1's _generated_ppo_trainer.yaml (the wheel): these are the defaults a recipe inherits
    assert c["data.train_batch_size"] == 1024 and c["data.gen_batch_size"] is None
    assert c["trainer.total_epochs"] == 30 and c["trainer.total_training_steps"] is None
    assert c[f"{OPT}.lr"] == 1e-6 and c[f"{OPT}.lr_warmup_steps"] == -1 and c[f"{OPT}.lr_warmup_steps_ratio"] == 0.0
    assert c[f"{OPT}.lr_scheduler_type"] == "constant" and c[f"{OPT}.min_lr_ratio"] == 0.0


def test_steps_drop_the_partial_batch_every_epoch():
    steps = compute_verl_steps(config(**BASE), 1000, "0.9.1")
    # 1000 // 64 = 15 batches (15 × 64 = 960), 40 prompts dropped; × 3 epochs
    assert (steps.batches_per_epoch, steps.partial_batch_prompts, steps.global_steps_total) == (15, 40, 45)
    assert steps.scheduler_total == 45 and steps.reaches_last_step
    # 64 // 16 mini-batches × 2 ppo epochs per global step; the scheduler steps once per global step
    assert steps.optimizer_steps_per_global_step == 8 and steps.actor_updates == 45
    assert steps.optimizer_steps_total == 360


def test_gen_batch_size_counts_only_in_the_legacy_trainer():
    # V1 (trainer.use_v1, the default): steps_per_epoch = len(dataset) // train_batch_size
    v1 = compute_verl_steps(config(**BASE, data__gen_batch_size=96), 1000, "0.9.1")
    assert v1.use_v1 and (v1.batches_per_epoch, v1.partial_batch_prompts, v1.global_steps_total) == (15, 40, 45)
    # legacy RayPPOTrainer: len(dataloader) with batch gen_batch_size, drop_last: 1000 // 96 = 10
    legacy = compute_verl_steps(config(**BASE, data__gen_batch_size=96, trainer__use_v1=False), 1000, "0.9.1")
    assert (legacy.batches_per_epoch, legacy.partial_batch_prompts, legacy.global_steps_total) == (10, 40, 30)


def test_separate_async_steps_the_scheduler_k_times_per_step():
    c = config(**BASE, trainer__v1__trainer_mode="separate_async", **_opt(lr_warmup_steps_ratio=0.1))
    steps = compute_verl_steps(c, 1000, "0.9.1")  # parameter_sync_step 4 (verl's default for the mode)
    assert steps.scheduler_steps_per_global_step == 4 and steps.global_steps_total == 45
    assert steps.scheduler_total == 180 and steps.warmup_steps == 18  # int(0.1 × 180)
    # each local update: 64 / 4 = 16 prompts = one mini-batch of 16, × 2 ppo epochs; 4 updates a step
    assert steps.optimizer_steps_per_global_step == 8
    assert steps.warmup_global_steps == 4.5
    row = lr_for_global_step(2, steps)
    assert row.lr_first == pytest.approx(1e-6 * 4 / 18) and row.actor_lr_logged is None
    assert row.lr_mean == pytest.approx(1e-6 * (4 + 5 + 6 + 7) / 4 / 18)


def test_train_max_samples_truncates_the_pool():
    steps = compute_verl_steps(config(**BASE, data__train_max_samples=500), 1000, "0.9.1")
    assert steps.prompts == 500 and steps.batches_per_epoch == 7 and steps.partial_batch_prompts == 52
    assert compute_verl_steps(config(**BASE, data__train_max_samples=-1), 1000, "0.9.1").prompts == 1000


def test_stated_total_training_steps_wins_and_may_outrun_the_data():
    shorter = compute_verl_steps(config(**BASE, trainer__total_training_steps=20), 1000, "0.9.1")
    assert (shorter.scheduler_total, shorter.global_steps_total, shorter.reaches_last_step) == (20, 20, True)
    longer = compute_verl_steps(config(**BASE, trainer__total_training_steps=100), 1000, "0.9.1")
    # the loop ends with the epochs at 45; the scheduler was built for 100 and is_last_step never comes
    assert (longer.scheduler_total, longer.global_steps_total, longer.reaches_last_step) == (100, 45, False)


@pytest.mark.parametrize(("stated", "ratio", "total_steps", "expected"), [
    (-1, 0.1, 45, 4),    # int(4.5) truncates
    (-1, 0.07, 45, 3),   # int(3.15); ceil would give 4
    (-1, 0.29, 100, 28),  # 0.29 × 100 = 28.999999999999996 in binary floating point: int() gives 28
    (0, 0.5, 45, 22),    # 0 is not > 0: the ratio applies
    (5, 0.5, 45, 5),     # lr_warmup_steps > 0 wins over the ratio
])  # fmt: skip
def test_warmup_rounding(stated, ratio, total_steps, expected):
    c = config(**BASE, trainer__total_training_steps=total_steps, **{f"{OPT}.lr_warmup_steps".replace(".", "__"): stated,
               f"{OPT}.lr_warmup_steps_ratio".replace(".", "__"): ratio})
    assert compute_verl_steps(c, 10_000, "0.9.1").warmup_steps == expected


def _opt(**values):
    return {f"{OPT}.{k}".replace(".", "__"): v for k, v in values.items()}


def test_constant_schedule_applied_and_logged_lr():
    c = config(**BASE, trainer__total_training_steps=10, **_opt(lr=1e-6, lr_warmup_steps=4))
    steps = compute_verl_steps(c, 10_000, "0.9.1")
    # update u applies λ(u) = u / 4 while u < 4: global step 1 trains at LR 0; actor/lr is λ(u + 1)
    applied = [lr_for_global_step(g, steps).lr_first for g in range(1, 7)]
    assert applied == pytest.approx([0.0, 0.25e-6, 0.5e-6, 0.75e-6, 1e-6, 1e-6], rel=1e-12, abs=0)
    logged = [lr_for_global_step(g, steps).actor_lr_logged for g in range(1, 6)]
    assert logged == pytest.approx([0.25e-6, 0.5e-6, 0.75e-6, 1e-6, 1e-6], rel=1e-12)


def test_cosine_schedule_hand_values():
    c = config(**BASE, trainer__total_training_steps=10,
               **_opt(lr=2e-6, lr_warmup_steps=2, lr_scheduler_type="cosine", min_lr_ratio=0.1, num_cycles=0.5))
    steps = compute_verl_steps(c, 10_000, "0.9.1")
    # coef = 0.45, intercept = 0.55; progress = (u − 2) / 8
    assert lr_lambda(1, steps) == 0.5
    assert lr_lambda(2, steps) == pytest.approx(1.0)
    assert lr_lambda(6, steps) == pytest.approx(0.55)  # cos(π/2) = 0
    assert lr_lambda(10, steps) == pytest.approx(0.1)  # cos(π) = −1: the floor
    assert lr_for_global_step(7, steps).lr_first == pytest.approx(2e-6 * 0.55)


def test_critic_warmup_delays_the_actor_and_its_scheduler():
    c = config(**BASE, trainer__total_training_steps=10, trainer__critic_warmup=3, **_opt(lr=1e-6, lr_warmup_steps=2))
    steps = compute_verl_steps(c, 10_000, "0.9.1")
    assert [steps.update_index(g) for g in (1, 2, 3, 4)] == [None, None, 0, 1]
    assert steps.actor_updates == 8
    assert lr_for_global_step(2, steps).actor_lr_logged is None
    assert lr_for_global_step(4, steps).lr_first == pytest.approx(0.5e-6)


def test_max_fraction_through():
    c = config(**BASE, trainer__total_training_steps=100, **_opt(lr_warmup_steps=50))
    steps = compute_verl_steps(c, 100_000, "0.9.1")
    assert max_fraction_through(20, steps) == pytest.approx(19 / 50)  # step 20 applies λ(19)


def test_schedule_fires_on_multiples_and_the_last_step():
    c = config(**BASE, trainer__test_freq=10, trainer__save_freq=20)
    steps = compute_verl_steps(c, 1000, "0.9.1")  # 45 steps
    schedule = verl_schedule(c, steps)
    assert schedule.evaluated == (10, 20, 30, 40, 45) and schedule.saved == (20, 40, 45)
    assert schedule.validation_at_step_0
    # a stated total beyond the data: the last step is never "last", so only multiples fire
    c = config(**BASE, trainer__test_freq=10, trainer__save_freq=20, trainer__total_training_steps=100)
    steps = compute_verl_steps(c, 1000, "0.9.1")
    assert verl_schedule(c, steps).saved == (20, 40)
    c = config(**BASE, trainer__test_freq=-1, trainer__save_freq=-1)
    assert verl_schedule(c, compute_verl_steps(c, 1000, "0.9.1")).saved == ()


def test_bad_values_name_their_key():
    with pytest.raises(VerlConfigError) as err:
        compute_verl_steps(config(**BASE, **_opt(lr_scheduler_type="linear")), 1000, "0.9.1")
    assert err.value.key == f"{OPT}.lr_scheduler_type"
    with pytest.raises(VerlConfigError) as err:
        compute_verl_steps(config(**{**BASE, "data__train_batch_size": 0}), 1000, "0.9.1")
    assert err.value.key == "data.train_batch_size"


# ----------------------------------------------------------------------------- verl's own scheduler


@pytest.fixture(scope="module")
def verl_schedulers():
    """verl 0.9.1's ``get_constant_schedule_with_warmup`` and ``get_cosine_schedule_with_warmup``.

    ``verl/utils/torch_functional.py`` imports tensordict, transformers' tokenizer and verl's device
    helpers at its top, which the main venv does not have; the two functions need only ``math``
    and torch's ``LambdaLR``. So their source is read from the pinned wheel (fetched by
    scripts/fetch-verl) and only those two definitions are executed here, unchanged."""
    from test_verl_backend import pinned_wheel

    torch = pytest.importorskip("torch")
    wheel = pinned_wheel()
    source = verl_config.read_wheel_text(wheel, "verl/utils/torch_functional.py")
    tree = ast.parse(source)
    wanted = ("get_constant_schedule_with_warmup", "get_cosine_schedule_with_warmup")
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    assert sorted(d.name for d in defs) == sorted(wanted)
    namespace = {"math": math, "LambdaLR": torch.optim.lr_scheduler.LambdaLR, "Optimizer": torch.optim.Optimizer}
    exec(compile(ast.Module(body=defs, type_ignores=[]), "verl/utils/torch_functional.py", "exec"), namespace)  # noqa: S102
    return torch, namespace


@pytest.mark.parametrize("case", [
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.07, "min_lr_ratio": 0.05,
     "trainer.v1.trainer_mode": "separate_async", "trainer.v1.separate_async.parameter_sync_step": 2},
    {"lr_scheduler_type": "constant", "lr_warmup_steps": 7},
    {"lr_scheduler_type": "constant", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.29},
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": 5, "min_lr_ratio": 0.1, "num_cycles": 0.5},
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.1, "min_lr_ratio": 0.0,
     "num_cycles": 1.5},
    {"lr_scheduler_type": "cosine", "lr_warmup_steps": 3, "min_lr_ratio": 0.2, "zero_indexed_step": False},
])  # fmt: skip
def test_lr_equals_verls_own_scheduler_at_every_step(verl_schedulers, case):
    torch, verl = verl_schedulers
    trainer = {k.replace(".", "__"): v for k, v in case.items() if k.startswith("trainer.")}
    optim = {k: v for k, v in case.items() if not k.startswith("trainer.")}
    c = config(**BASE, trainer__total_training_steps=40, **trainer, **_opt(lr=3e-6, **optim))
    steps = compute_verl_steps(c, 10_000, "0.9.1")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=steps.peak_lr)
    if steps.scheduler == "constant":
        scheduler = verl["get_constant_schedule_with_warmup"](optimizer=optimizer, num_warmup_steps=steps.warmup_steps)
    else:
        scheduler = verl["get_cosine_schedule_with_warmup"](
            optimizer=optimizer, num_warmup_steps=steps.warmup_steps, num_training_steps=steps.scheduler_total,
            min_lr_ratio=steps.min_lr_ratio, num_cycles=steps.num_cycles, zero_indexed_step=steps.zero_indexed_step)
    k = steps.scheduler_steps_per_global_step
    for global_step in range(1, steps.global_steps_total + 1):
        planned = lr_for_global_step(global_step, steps)
        applied = []
        for _ in range(k):  # verl: one scheduler step per local update, after its last mini-batch
            applied.append(optimizer.param_groups[0]["lr"])  # what the update's optimizer steps use
            optimizer.step()
            scheduler.step()
        assert applied[0] == pytest.approx(planned.lr_first, rel=1e-12, abs=1e-30)
        assert math.fsum(applied) / k == pytest.approx(planned.lr_mean, rel=1e-12, abs=1e-30)
        if k == 1:  # what verl logs as actor/lr: get_last_lr() after the step
            assert scheduler.get_last_lr()[0] == pytest.approx(planned.actor_lr_logged, rel=1e-12, abs=1e-30)
