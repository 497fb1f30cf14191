"""Step math and LR schedule against the logged numbers of the attempts in docs/plan.md and the real
transformers scheduler."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlexp.training.schedule import (
    checkpoint_plan,
    compute_steps,
    drops_partial_batch,
    firing_steps,
    logged_actor_lr,
    lr_at,
    lr_for_global_step,
    lr_lambda,
    max_fraction_through,
    parse_version,
)

# The recipe shared by attempts A26-A30 of docs/plan.md ("Why each check exists"): 4 actor GPUs.
SEED = {
    "n_samples_per_prompt": 8,
    "rollout_batch_size": 16,
    "train_batch_size": 16,
    "micro_train_batch_size": 1,
    "max_epochs": 1,
    "num_episodes": 1,
    "actor_learning_rate": 5e-7,
    "lr_warmup_ratio": 0.05,
    "actor_num_nodes": 1,
    "actor_num_gpus_per_node": 4,
    "eval_steps": 10,
    "save_steps": 10,
}


def steps_of(pool: int, version: str = "0.9.3", **overrides):
    return compute_steps({**SEED, **overrides}, pool, version, trainer="openrlhf")


# ----------------------------------------------------------------------------- acceptance numbers


def test_a26_50k_pool_20_episodes_is_500k_optimizer_steps():
    s = steps_of(50_000, num_episodes=20)
    assert s.optimizer_steps_total == 500_000
    assert s.warmup_steps == 25_000
    assert s.optimizer_steps_per_global_step == 8
    assert s.global_steps_total == 62_500


def test_a27_5_episodes_is_125k_and_lr_at_step_46_is_5_8_percent():
    s = steps_of(50_000, num_episodes=5)
    assert s.optimizer_steps_total == 125_000
    assert s.warmup_steps == 6_250  # 5 % of 125,000 optimizer steps
    row = lr_for_global_step(46, s)
    assert round(row.fraction_of_peak * 100, 1) == 5.8
    assert row.fraction_of_peak < 0.06  # A27 stayed under 6 % of target for its whole observed run


def test_a28_400_pool_is_200_optimizer_steps_25_global_steps():
    s = steps_of(400)
    assert (s.optimizer_steps_total, s.global_steps_total, s.warmup_steps) == (200, 25, 10)


def test_a29_3200_pool_is_1600_optimizer_steps_200_global_steps_and_lr_table():
    s = steps_of(3_200)
    assert (s.optimizer_steps_total, s.global_steps_total, s.warmup_steps) == (1_600, 200, 80)
    # the LR table recorded for A29 before its launch: 91% / 59% / 25% / 10% of target
    for global_step, percent in ((50, 91), (100, 59), (150, 25), (200, 10)):
        assert round(lr_for_global_step(global_step, s).fraction_of_peak * 100) == percent
    assert s.warmup_global_steps == 10  # 80 optimizer steps = 10 global steps


def test_recorded_per_gradient_step_table_is_the_scheduler_lambda():
    # The LR table recorded for A28 numbers gradient steps k and quotes the LR after k scheduler steps.
    s = steps_of(400)
    table = {1: 10, 10: 100, 50: 91, 100: 59, 150: 25, 200: 10}
    for k, percent in table.items():
        assert round(lr_lambda(k, s) * 100) == percent
    # ... so the optimizer step k itself applies one step earlier: step 1 trains at LR 0.
    assert lr_at(1, s) == 0.0
    assert lr_at(11, s) == pytest.approx(5e-7)


def test_a28a_logged_actor_lr_matches_the_observed_log():
    # The actor_lr that A28 logged at global steps 1..25: v0.9.3 logs the mean of get_last_lr()
    # over micro-batches; 4 data-parallel actor GPUs, micro batch 1 -> 4 micro-batches per step.
    s = steps_of(400)
    assert s.micro_batches_per_optimizer_step == 4
    observed = {1: 37.5, 3: 99.4, 10: 75.9, 20: 21.5, 25: 10.1}
    for global_step, percent in observed.items():
        assert round(logged_actor_lr(global_step, s) / 5e-7 * 100, 1) == percent
    # and the step-1 value quoted in the instrumentation check: 1.875e-7
    assert logged_actor_lr(1, s) == pytest.approx(1.875e-7)


def test_v011_logs_the_lr_after_the_last_micro_batch():
    s = steps_of(3_200, version="0.11.0")
    assert s.actor_lr_logging == "last"
    assert logged_actor_lr(1, s) == pytest.approx(5e-7 * 8 / 80)


# ----------------------------------------------------------------------------- the real scheduler


@pytest.mark.parametrize(
    ("pool", "version", "extra"),
    [
        (400, "0.9.3", {}),
        (3_200, "0.9.3", {}),
        (3_208, "0.11.0", {"min_lr_ratio": 0.2, "lr_warmup_ratio": 0.03}),
    ],
)
def test_lr_equals_transformers_cosine_with_min_lr_step_by_step(pool, version, extra):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    s = steps_of(pool, version=version, **extra)
    lr = s.peak_lr
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=lr)
    # ppo_actor.py of v0.9.3 passes min_lr; deepspeed.py of v0.11.0 passes min_lr_rate
    kwargs = {"min_lr": lr * 0.1} if version == "0.9.3" else {"min_lr_rate": extra["min_lr_ratio"]}
    scheduler = transformers.get_scheduler(
        "cosine_with_min_lr",
        optimizer,
        num_warmup_steps=math.ceil(s.optimizer_steps_total * s_ratio(extra)),
        num_training_steps=s.optimizer_steps_total,
        scheduler_specific_kwargs=kwargs,
    )
    assert s.warmup_steps == math.ceil(s.optimizer_steps_total * s_ratio(extra))
    for k in range(1, s.optimizer_steps_total + 1):
        applied = optimizer.param_groups[0]["lr"]  # what optimizer.step() number k uses
        assert lr_at(k, s) == pytest.approx(applied, rel=1e-12, abs=1e-20), k
        optimizer.step()
        scheduler.step()


def s_ratio(extra: dict) -> float:
    return extra.get("lr_warmup_ratio", SEED["lr_warmup_ratio"])


# ----------------------------------------------------------------------------- floor vs ceil


def test_partial_last_batch_dropped_by_v093_trained_by_v011():
    old, new = steps_of(3_208, "0.9.3"), steps_of(3_208, "0.11.0")
    assert old.optimizer_steps_total == new.optimizer_steps_total == 1_604  # max_steps ignores batches
    assert old.partial_batch_prompts == new.partial_batch_prompts == 8
    assert (old.global_steps_total, old.optimizer_steps_run) == (200, 1_600)
    assert (new.global_steps_total, new.optimizer_steps_run) == (201, 1_604)
    assert new.optimizer_range(201) == (1_601, 1_604)  # the short last global step: 8 prompts × 8 / 16
    # the dropped batch means v0.9.3 never reaches the end of its own cosine
    assert lr_for_global_step(200, old).lr_mean > old.min_lr


def test_version_boundaries_checked_against_openrlhf_tags():
    assert drops_partial_batch("0.9.3") and drops_partial_batch("0.10.4")
    assert not drops_partial_batch("0.11.0")
    assert parse_version("0.10.1.post1") == (0, 10, 1)
    assert parse_version("v0.11") == (0, 11, 0)
    with pytest.raises(ValueError):
        parse_version("latest")


def test_local_trainer_uses_v011_semantics():
    s = compute_steps({**SEED}, 3_208, "ignored", trainer="local")
    assert s.global_steps_total == 201 and s.data_parallel_size == 1


def test_max_samples_and_episodes_and_epochs():
    s = steps_of(50_000, max_samples=3_200, num_episodes=2, max_epochs=2)
    assert s.prompts == 3_200
    assert s.optimizer_steps_total == 3_200 * 8 // 16 * 2 * 2
    assert s.global_steps_total == 400
    assert s.optimizer_steps_per_global_step == 16
    assert s.optimizer_steps_run == s.optimizer_steps_total


# ----------------------------------------------------------------------------- eval / save schedule


def test_eval_and_save_fire_on_multiples_only():
    assert firing_steps(10, 25) == [10, 20]
    assert firing_steps(-1, 25) == [] and firing_steps(0, 25) == []
    plan = checkpoint_plan(steps_of(400), SEED, mid=None)
    assert plan.final == 25 and not plan.final_saved and not plan.final_evaluated  # the A28 incident
    plan = checkpoint_plan(steps_of(3_200), SEED, mid=100)
    assert plan.final_saved and plan.final_evaluated and len(plan.best_by_monitor_candidates) == 20


def test_max_fraction_through_step_20():
    assert max_fraction_through(20, steps_of(400)) == 1.0  # A28 peaks at global step 2
    assert max_fraction_through(20, steps_of(50_000, num_episodes=20)) == pytest.approx(
        160 / 25_000 - 1 / 25_000
    )


# ----------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    pool=st.integers(1, 5_000),
    n=st.sampled_from([1, 2, 4, 8, 16]),
    rollout=st.sampled_from([1, 4, 8, 16, 32, 64]),
    train=st.sampled_from([4, 8, 16, 32, 64]),
    episodes=st.integers(1, 3),
    epochs=st.integers(1, 2),
    warmup=st.floats(0.0, 0.5),
    version=st.sampled_from(["0.9.3", "0.11.0"]),
)
def test_optimizer_steps_partition_the_run(pool, n, rollout, train, episodes, epochs, warmup, version):
    recipe = {**SEED, "n_samples_per_prompt": n, "rollout_batch_size": rollout, "train_batch_size": train,
              "micro_train_batch_size": 1, "num_episodes": episodes, "max_epochs": epochs,
              "lr_warmup_ratio": warmup, "actor_num_gpus_per_node": 1}  # fmt: skip
    s = compute_steps(recipe, pool, version, trainer="openrlhf")
    counted = sum(
        max(0, last - first + 1) for first, last in map(s.optimizer_range, range(1, s.global_steps_total + 1))
    )
    assert counted == s.optimizer_steps_run
    # DeepSpeed counts micro-batches over the whole run; max_steps floors before multiplying
    assert s.optimizer_steps_run <= pool * n * episodes * epochs // train
    if drops_partial_batch(version) and (rollout * n) % train == 0:
        assert s.optimizer_steps_run <= s.optimizer_steps_total  # the scheduler never runs past its end
    if drops_partial_batch(version):
        assert s.global_steps_total == pool // rollout * episodes
    else:
        assert s.global_steps_total == -(-pool // rollout) * episodes
    for k in range(1, min(s.optimizer_steps_total, 50) + 1):
        assert 0.0 <= lr_at(k, s) <= s.peak_lr * (1 + 1e-12)
