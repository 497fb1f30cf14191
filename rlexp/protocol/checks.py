"""The preflight catalogue: every mistake of an attempt spec that arithmetic can catch before launch.

Each check has a stable id, a severity (``error`` blocks the launch, ``warning`` is printed), a
one-line message with the numbers, and a ``ref``: the section of docs/plan.md or sop/README.md
that explains the rule and the incident behind it. Each one has a test reproducing its incident
(tests/test_checks.py). :func:`preflight` runs them all; the families live in
:mod:`.step_checks`, :mod:`.variable_checks`, :mod:`.resource_checks`, :mod:`.recipe_checks`,
:mod:`.data_checks` and :mod:`.power_checks`, each trainer's own parts in its rules. The attempts A26-A30 named below are
told in docs/plan.md, "Why each check exists".

| id | incident / rule |
|---|---|
| lr.low_early | A26/A27: LR < 6 % of peak for the whole observed run; LR must reach 30 % by global step 20, or by the end of a warm-up within the allowed share of the run |
| lr.warmup_share | A26/A27: warm-up of 25,000 / 6,250 optimizer steps against a ~40-step run |
| lr.warmup_never_ends | a warm-up as long as the run or longer: the LR never reaches its peak (any trainer) |
| lr.min_lr_ratio_fixed | OpenRLHF < 0.10.2 has no min_lr_ratio flag: min LR is 0.1 × peak |
| steps.intent | A28: max_steps counts optimizer steps; 25 global steps instead of 200 |
| steps.empty | pool smaller than one rollout batch: no global step runs |
| steps.partial_batch | a partial last rollout batch: dropped by ≤ 0.10.x, trained by ≥ 0.11 |
| steps.beyond_schedule | more optimizer steps run than max_steps: past its end the cosine rises again |
| batch.train_divisible | train batch not a multiple of micro batch × data-parallel actor GPUs |
| batch.rollout_divisible | rollout × n samples not a multiple of the train batch |
| schedule.final_eval / final_save | A28: no eval at its final step (eval/save fire on multiples only) |
| schedule.mid_* | K=3 selection: the pre-registered mid checkpoint must be saved (and evaluated) |
| diff.* | one training variable per attempt, declared in ``change`` (A27 changed two) |
| gpu.layout | A26: init_kl_coef > 0 creates a reference model; 8 ref GPUs + 4 + 4 on 8 GPUs hung; ``gae`` creates a critic |
| samples.group_of_one | a group-normalised estimator with one sample per prompt: what the trainer then does (refuses, or trains on nothing / the raw score) |
| length.max_len | max_len shorter than prompt_max_len + generate_max_len truncates generations |
| suffix.mismatch | a \\boxed{} suffix on one side moved a baseline ~10 pp; train and baseline prompts must match |
| data.overlap | training pool disjoint by hash from every eval set |
| data.size | the file's line count wins over the stated size |
| eval.lora_rank | vLLM's max_lora_rank defaults to 16; rank-32 adapters are refused |
| disk.budget / disk.hf_ckpt | DeepSpeed shards once filled a 422 GB disk; HF checkpoints are never rotated |
| power.underpowered | the 202-problem monitor could not see 5 pp; MDE above the +3.0 pp win threshold |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlexp.errors import InputError
from rlexp.protocol.agentic_checks import check_agentic
from rlexp.protocol.data_checks import check_datasets, check_suffix
from rlexp.protocol.power_checks import check_power, clustered_primary_power, primary_power
from rlexp.protocol.recipe_checks import check_group_of_one, check_lengths, check_lora_rank
from rlexp.protocol.resource_checks import check_disk, check_gpu_layout
from rlexp.protocol.step_checks import check_lr, check_schedule, check_step_counts
from rlexp.protocol.variable_checks import check_single_variable
from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import Attempt
from rlexp.stats import PowerReport
from rlexp.trainers import rules as trainer_rules
from rlexp.training.schedule import Steps, checkpoint_plan


def has_errors(checks: Iterable[Verdict]) -> bool:
    return any(c.severity == ERROR for c in checks)


def steps_for(att: Attempt) -> Steps:
    """The step counts of an attempt (pool size from the file when it exists, else the spec)."""
    pool = att.datasets.get("pool")
    if pool is None or pool.size is None:
        raise InputError(
            att.display_path, "datasets.pool", "the training pool (path or size) is needed to plan"
        )
    steps = trainer_rules(att.trainer.name).steps(att)
    # the LR table and the monitor schedule hold one entry per step: bound them before building them
    for count, limit, what in ((steps.global_steps_total, MAX_GLOBAL_STEPS, "global"),
                               (steps.optimizer_steps_total, MAX_OPTIMIZER_STEPS, "optimizer")):
        if count > limit:
            raise InputError(att.display_path, "recipe.num_episodes",
                             f"the run would take {count} {what} steps, over the limit of {limit} "
                             "(check num_episodes, max_epochs, the batch sizes and datasets.pool.size)")
    return steps


# Upper bounds of a plannable run (far above any real one: 3200 prompts for 1000 episodes is 10^5 steps).
MAX_GLOBAL_STEPS = 10**6
MAX_OPTIMIZER_STEPS = 10**7


def preflight(att: Attempt, steps: Steps | None = None, power: PowerReport | None = None,
              clustered: dict[str, Any] | None = None) -> list[Verdict]:
    """Run the whole catalogue; errors first, then warnings, each group in catalogue order
    (``power`` and ``clustered``: :func:`primary_power` and :func:`clustered_primary_power`, computed
    here when not given)."""
    steps = steps or steps_for(att)
    ckpt = checkpoint_plan(steps, att.recipe, att.checkpoints_mid)
    if power is None:
        power = primary_power(att)
    found: list[Verdict] = []
    for findings in (
        check_lr(att, steps),
        check_step_counts(att, steps),
        trainer_rules(att.trainer.name).batch_checks(att, steps),  # each trainer's own batch rules
        check_schedule(att, steps, ckpt),
        check_single_variable(att),
        check_gpu_layout(att),
        check_group_of_one(att),
        check_lengths(att),
        check_suffix(att),
        check_datasets(att),
        check_lora_rank(att),
        check_disk(att, ckpt),
        check_power(att, power, clustered if clustered is not None else clustered_primary_power(att)),
        check_agentic(att),  # an environment task on a trainer with an agent interface
        check_run_health(att),  # settings that bias or switch off the rollout correction
        check_base_model(att),
    ):
        found.extend(findings)
    return sorted(found, key=lambda c: c.severity != ERROR)


def check_base_model(att: Attempt) -> list[Verdict]:
    """A trainer that loads its base model from disk (the local trainer) and a ``pretrain`` that names
    no directory: a warning here (plan may run before the model is built, as the demo's first plan
    does), where launch and eval would fail on it."""
    if not trainer_rules(att.trainer.name).loads_local_model:
        return []
    try:
        model = att.base_model()
    except InputError:
        return []  # a missing pretrain is the spec's own error
    if isinstance(model, str):
        return [check("model.missing", WARNING,
                      f"recipe.pretrain {model!r} is not a directory (relative paths resolve against the experiment "
                      "directory): the local trainer and engine load a model from disk, so launch and eval will "
                      "refuse it until it exists", "docs/local-trainer.md")]
    if model.is_file() and model.suffix.lower() != ".gguf":
        return [check("model.not_a_directory", WARNING,
                      f"recipe.pretrain {model.name!r} is a file: a base model is a model directory or a .gguf file "
                      "(converted once into a cached directory); launch and eval will refuse anything else",
                      "docs/real-model.md")]
    return []


def check_run_health(att: Attempt) -> list[Verdict]:
    """The trainer's rules on the training-inference mismatch (its rules' ``run_health_checks``):
    settings its own code is known to get wrong silently, each with that code named."""
    return trainer_rules(att.trainer.name).run_health_checks(att.recipe, str(att.trainer.version),
                                                            att.environment)
