"""The plan stage: what the trainer will really do, checked before a GPU is touched.

:func:`plan` loads the attempt spec (and its parent chain), computes the step counts, the LR at
every step, the eval/save schedule, the preflight checks and the power of the planned
comparison, and writes ``plan.json`` next to the spec (atomically).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.numbers import jsonable
from rlexp.protocol.plan import PLAN_FORMAT, PlanResult, error_checks  # noqa: F401  (re-exported)
from rlexp.trainers import rules as trainer_rules
from rlexp.trainers.launch import launcher, loss_aggregation_plan
from rlexp.training.schedule import milestone_steps

if TYPE_CHECKING:
    from rlexp.spec import Attempt


def plan(attempt: str | Path) -> PlanResult:
    """Plan an attempt and write its ``plan.json``."""
    from rlexp.experiment.files import atomic_write_text, to_json
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    data = build_plan(att)
    path = AttemptDir(att.attempt_dir).plan
    text = to_json(data)
    atomic_write_text(path, text)
    return PlanResult(att.id, path, data, text)


def check_datasets(att: Attempt) -> None:
    """Every row of every dataset file the attempt names (``plan`` reads them all, so a bad row is
    refused here and not by the trainer after ``launch`` has written its files). The training sets
    of an OpenRLHF-style trainer are read through the recipe's ``input_key``/``label_key``."""
    from rlexp.experiment.datasets import check_dataset_rows
    from rlexp.spec import TRAINER_GRADED_ROLES

    for role, ref in att.datasets.items():
        if ref.path is None or not ref.exists:
            continue
        keys = trainer_rules(att.trainer.name).recipe_reads(att.recipe, role) if role in TRAINER_GRADED_ROLES else {}
        check_dataset_rows(ref.path, **keys)


def build_plan(att: Attempt) -> dict[str, Any]:
    """The plan of an attempt as a JSON-ready dict (what ``plan.json`` holds)."""
    check_datasets(att)
    own = launcher(att.trainer.name).own_plan(att, PLAN_FORMAT)
    if own is not None:  # a trainer that counts its own way writes its own plan (TrainerLaunch.own_plan)
        return with_shared_sections(att, own)
    from rlexp.experiment.files import sha256_file
    from rlexp.protocol.checks import preflight, steps_for
    from rlexp.protocol.power_checks import clustered_primary_power, primary_power
    from rlexp.spec import diff_against_parent
    from rlexp.training.schedule import checkpoint_plan, lr_for_global_step, lr_rows_for_plan

    steps = steps_for(att)
    ckpt = checkpoint_plan(steps, att.recipe, att.checkpoints_mid)
    power = primary_power(att)
    clustered = clustered_primary_power(att)
    checks = preflight(att, steps, power, clustered)
    milestones = milestone_steps(att, steps.global_steps_total, steps.warmup_global_steps)
    rows, coverage = lr_rows_for_plan(steps, extra=milestones)
    monitor_power = _monitor_power(att)
    layout = trainer_rules(att.trainer.name).gpu_layout(att.recipe)
    trainer_plan = trainer_details(att, steps)
    plan = {
        "format": PLAN_FORMAT,
        "attempt": att.id,
        "parent": att.parent_id,
        "spec": str(att.spec_path),
        "spec_sha256": sha256_file(att.spec_path),
        "spec_chain_sha256": att.chain_sha256(),
        "trainer": {"name": att.trainer.name, "version": att.trainer.version, "gpus": att.trainer.gpus},
        **trainer_plan,
        "intent": jsonable(att.intent),
        "change": jsonable(att.change),
        "diff": [
            {"key": d.key, "parent": jsonable(d.parent), "value": jsonable(d.value), "kind": d.kind}
            for d in diff_against_parent(att)
        ],
        "datasets": {role: ref.plan_row() for role, ref in att.datasets.items()},
        "steps": steps_section(steps),
        "lr_rows": coverage,
        "lr": [lr_for_global_step(g, steps).as_dict() for g in rows],
        "lr_milestones": [lr_for_global_step(g, steps).as_dict() for g in milestones],
        "eval_global_steps": list(ckpt.evaluated),
        "save_global_steps": list(ckpt.saved),
        "checkpoints": {
            "final": ckpt.final,
            "mid": ckpt.mid,
            "extra": list(att.checkpoints_extra),
            "best_by_monitor_candidates": list(ckpt.best_by_monitor_candidates),
        },
        "gpu_layout": gpu_layout_section(layout),
        "checks": [c.to_dict() for c in checks],
        "power": power_section(power, monitor_power, clustered),
    }
    return with_shared_sections(att, plan)


def with_shared_sections(att: Attempt, plan: dict[str, Any]) -> dict[str, Any]:
    """``plan`` (the common one, or a trainer's own) with the sections every trainer's plan shows the
    same way: the environment task's settings (single-turn plans stay as they were), the loss
    aggregation and the expected staleness of an asynchronous run."""
    if att.environment is not None:
        plan["environment"] = environment_plan(att)
    plan["loss_aggregation"] = loss_aggregation_plan(att)
    plan.update(run_health_plan(att))
    return plan


def steps_section(steps: Any) -> dict[str, Any]:
    """The step counts of the trainer's step math (rlexp.training.schedule.Steps) as ``plan.json``'s ``steps``."""
    return {
        "pool_size": steps.pool_size,
        "prompts": steps.prompts,
        "optimizer_steps_total": steps.optimizer_steps_total,
        "optimizer_steps_per_episode": steps.optimizer_steps_per_episode,
        "optimizer_steps_per_global_step": steps.optimizer_steps_per_global_step,
        "optimizer_steps_run": steps.optimizer_steps_run,
        "global_steps_per_episode": steps.global_steps_per_episode,
        "global_steps_total": steps.global_steps_total,
        "partial_batch_prompts": steps.partial_batch_prompts,
        "drops_partial_batch": steps.drops_partial_batch,
        "micro_batches_per_optimizer_step": steps.micro_batches_per_optimizer_step,
        "data_parallel_size": steps.data_parallel_size,
        "warmup_steps": steps.warmup_steps,
        "warmup_global_steps": steps.warmup_global_steps,
        "peak_lr": steps.peak_lr,
        "min_lr": steps.min_lr,
        "min_lr_ratio": steps.min_lr_ratio,
        "actor_lr_logging": steps.actor_lr_logging,
    }


def _monitor_power(att: Attempt) -> dict[str, Any] | None:
    """The power of the in-run monitor set's comparison (None without one, or without its size)."""
    from rlexp.stats import power_report

    monitor = att.datasets.get("ood_monitor")
    return power_report(monitor.size, att.baseline.discordance).as_dict() if monitor and monitor.size else None


def power_section(power: Any, monitor_power: dict[str, Any] | None, clustered: Any) -> dict[str, Any]:
    """``plan.json``'s ``power``: the primary comparison's, the monitor's, the claim's probability
    beside them (best of K) and, where the primary set declares clusters, the cluster-robust one."""
    from rlexp.spec.sop import load_sop
    from rlexp.stats._gate_power import add_best_of_k

    power_json: dict[str, Any] = (
        power.as_dict() if power else {"mde_pp": None, "power_at_win_threshold": None, "n": None}
    )
    power_json["monitor"] = monitor_power
    add_best_of_k(power_json, load_sop())   # and the claim's probability beside it
    if clustered is not None:  # the primary set declares clusters: decide tests it cluster-robust
        power_json["clustered"] = clustered
    return power_json


def gpu_layout_section(layout: Any) -> dict[str, Any] | None:
    """The GPUs the trainer's placement asks for, by role (its rules' ``gpu_layout``; None: it states none)."""
    if not layout:
        return None
    return {
        "vllm": layout.vllm,
        "actor": layout.actor,
        "reference": layout.reference,
        "reward": layout.reward,
        "critic": layout.critic,
        "total": layout.total,
        "notes": list(layout.notes),
    }


def run_health_plan(att: Attempt) -> dict[str, Any]:
    """The expected off-policy staleness of an asynchronous launch (rlexp.protocol.run_health.expected_lag
    from the trainer's launch settings), as ``run_health.expected_lag``; nothing for a synchronous one,
    so its plan stays as it was."""
    from rlexp.protocol.run_health import expected_lag
    from rlexp.trainers import rules as trainer_rules

    lag = expected_lag(trainer_rules(att.trainer.name).async_lag(att.recipe))
    return {} if lag["max_versions"] == 0 else {"run_health": {"expected_lag": lag}}


def environment_plan(att: Attempt) -> dict[str, Any]:
    """An environment task's settings as the plan shows them: the environment, budgets, loss and
    advantages, the primary metric and the eval reward; with GSPO, its clip range and the settings
    that select it on each trainer (the attempt's own where it is not the local trainer)."""
    from rlexp.trainers.launch import gspo_trainer_settings

    env = att.environment
    out = {k: jsonable(v) for k, v in env.recorded().items() if k != "judge"}
    out["judge_model"] = env.judge.get("model") if env.reward.get("judge") else None
    if env.loss == "gspo":
        mapped: dict[str, Any] = {}
        from rlexp.trainers import names as trainer_names

        # a trainer with an agent interface: its own settings; the local trainer (whose release numbers
        # are OpenRLHF's): how each of those trainers would take the same GSPO
        trainers = ([att.trainer.name] if trainer_rules(att.trainer.name).agent_api_since is not None
                    else [n for n in trainer_names() if trainer_rules(n).agent_api_since is not None])
        for name in trainers:
            try:
                mapped[name] = gspo_trainer_settings(name, att.trainer.version, eps_low=env.gspo_eps_low,
                                                     eps_high=env.gspo_eps_high)  # fmt: skip
            except ValueError as exc:
                mapped[name] = {"unavailable": str(exc)}
        out["gspo"] = {"ratio": "sequence-level: exp(mean over agent tokens of the token log-ratios)",
                       "clip": [env.gspo_eps_low, env.gspo_eps_high], "trainer_settings": mapped}
    return out


def trainer_details(att: Attempt, steps: Any) -> dict[str, Any]:
    """What only one trainer's plan holds, by ``trainer.name``: OpenRLHF's argv checked against the
    release's flag table (an unknown release or a key it has no flag for exits 2 here), TRL's step
    quantities (rlexp.trainers.trl.steps)."""
    details: dict[str, Any] = {"openrlhf_command": None}
    details.update(launcher(att.trainer.name).plan_details(att, steps))
    return details
