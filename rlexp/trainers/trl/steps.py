"""TRL ``GRPOTrainer`` and ``RLOOTrainer`` step math and learning rate, read from the released code
(docs/trainers.md cites the lines of TRL 1.16.0 and transformers 5.24.0), without importing either.

The two trainers batch alike: RLOOConfig.__post_init__ derives ``steps_per_generation`` and
``generation_batch_size`` as GRPOConfig's does, and RLOOTrainer's ``get_train_dataloader`` and
``_get_train_sampler`` are GRPOTrainer's (the same RepeatSampler, the same generation-batch
DataLoader); what differs is the config's fields and defaults (:mod:`.keys`: the class the recipe's
``advantage_estimator`` names) and the loss.

With per-process batch ``B`` (``per_device_train_batch_size``), processes ``W`` (``trainer.gpus``,
1 on a CPU), gradient accumulation ``GA``, generations per prompt ``G`` (``num_generations``),
iterations ``μ`` (``num_iterations``) and ``S = steps_per_generation`` (default ``GA``; or
``generation_batch_size / (B·W)``):

- one generation batch holds ``P = B·W·S / G`` prompts; the sampler keeps whole chunks of ``P``
  prompts only, so ``N mod P`` prompts are dropped every epoch;
- each process sees ``L = floor(N / P) · μ · S`` batches per epoch; transformers makes
  ``max(ceil(L / GA), 1)`` optimizer steps of them, and ``max_steps = ceil(num_train_epochs ×
  that)`` unless ``max_steps > 0`` is stated;
- warm-up ``warmup_steps`` when it is ≥ 1, else ``ceil(max_steps × warmup_steps)``;
- the scheduler (``get_scheduler(lr_scheduler_type, ...)``) steps once per optimizer step, so a
  "global step" here is one optimizer step: the trainer's ``state.global_step``;
- the ``learning_rate`` TRL logs at a step is read by transformers' training loop *before*
  ``scheduler.step()`` (transformers 5.24.0, ``trainer.py`` "get leaning rate before update"): the
  LR that step applied, ``peak × λ(step − 1)`` — the ``applied`` logging of
  :mod:`rlexp.training.schedule`. (transformers releases that read it after the scheduler step logged
  the *next* step's LR; the pinned one does not, and the CPU run checks which.)

AsyncGRPOTrainer (``trl.experimental.async_grpo``, ``advantage_estimator: async_grpo``) trains on a
rollout queue a vLLM server fills while it trains: its DataLoader is an IterableDataset without a
length, so transformers' ``set_initial_training_values`` takes ``max_steps`` as it is stated (one
"epoch" of ``max_steps`` optimizer steps of ``GA`` micro-batches each) and builds the scheduler over
it; warm-up and the LR are the rule above. How many prompts a step trains is not known before the
run (a token-budgeted micro-batch holds as many samples as fit ``token_budget``; a multi-turn
conversation forks into a varying number of rows; samples older than ``max_staleness`` weight
updates are discarded), and neither are the passes over the prompts. Without ``max_steps`` the
trainer sets its own from those unknowns (a "safety ceiling" of ``num_train_epochs × prompts ×
num_generations × rows per conversation / samples per step``) and stops by counting prompts
trained: its step count is not known before the run, and the plan refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlexp.spec.recipe import COMMON_KEYS
from rlexp.trainers.trl.fields import MODEL_CONFIG_FIELDS
from rlexp.trainers.trl.keys import ASYNC_GRPO, ESTIMATOR_KEY, TRAINERS, config_field_names, estimator_of
from rlexp.training.schedule import Steps

if TYPE_CHECKING:
    from rlexp.trainers.trl.recipe import TrlRecipe

# transformers' schedulers this module reproduces (name -> the lambda below)
SCHEDULERS = ("linear", "cosine", "cosine_with_min_lr", "constant", "constant_with_warmup")


class TrlRecipeError(ValueError):
    """A TRL recipe that cannot be planned; ``field`` names the recipe key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class TrlSteps(Steps):
    """:class:`~rlexp.training.schedule.Steps` of a TRL run: one global step is one optimizer step.

    The OpenRLHF-named fields hold their TRL counterparts: ``rollout_batch_size`` is ``P`` (prompts
    per generation batch), ``train_batch_size`` the samples per optimizer step ``B·W·GA``,
    ``micro_train_batch_size`` ``B``, ``n_samples_per_prompt`` ``G``, ``max_epochs`` ``μ``."""

    per_device_train_batch_size: int = 1
    processes: int = 1
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 1
    num_iterations: int = 1
    num_train_epochs: float = 1.0
    max_steps_stated: int = -1
    batches_per_epoch: int = 0  # L, per process
    update_steps_per_epoch: int = 1
    lr_scheduler_type: str = "linear"
    num_cycles: float = 0.5
    warmup_rule_text: str = ""  # how warmup_steps was computed, for messages
    trainer_class: str = "GRPOTrainer"  # the TRL trainer the recipe's advantage_estimator names

    def optimizer_steps_through(self, global_step: int) -> int:
        return max(0, min(global_step, self.global_steps_total))

    def lambda_at(self, scheduler_step: int) -> float:
        return trl_lambda(scheduler_step, self)

    def warmup_rule(self, recipe: Mapping[str, Any]) -> str:
        return self.warmup_rule_text

    def eval_save_steps(self, recipe: TrlRecipe) -> tuple[list[int], list[int]]:  # type: ignore[override]
        return eval_save_steps(recipe, self)

    partial_batch_ref = "docs/trainers.md#trl-grpotrainer"

    def step_message(self, check_id: str, intent: int | None = None) -> str | None:
        """TRL's wording of the catalogue's step checks (its quantities: P, B, W, GA, L)."""
        if check_id == "steps.intent":
            return intent_message(intent or 0, self)
        message = {"steps.empty": empty_message, "steps.partial_batch": partial_batch_message}.get(check_id)
        return message(self) if message else None

    def as_dict(self) -> dict[str, Any]:
        """The TRL quantities of ``plan.json`` (``steps.trl``); AsyncGRPOTrainer's state what is not known
        before the run (None, and why) instead of the generation batches it does not form."""
        head = {
            "trainer": self.trainer_class,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "processes": self.processes,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "num_generations": self.n_samples_per_prompt,
        }
        schedule = {
            "max_steps_stated": self.max_steps_stated,
            "max_steps": self.optimizer_steps_total,
            "warmup_steps": self.warmup_steps,
            "warmup_rule": self.warmup_rule_text,
            "lr_scheduler_type": self.lr_scheduler_type,
            "logged_learning_rate": "the LR the step applied (read before scheduler.step())",
        }
        if self.trainer_class == TRAINERS[ASYNC_GRPO][0]:
            return {**head, "micro_batches_per_optimizer_step": self.gradient_accumulation_steps, **schedule,
                    "prompts_per_optimizer_step": None, "num_train_epochs": None,
                    "not_known_before_the_run": list(ASYNC_NOT_KNOWN)}
        return {
            **head,
            "steps_per_generation": self.steps_per_generation,
            "num_iterations": self.num_iterations,
            "prompts_per_generation_batch": self.rollout_batch_size,
            "prompts_dropped_per_epoch": self.partial_batch_prompts,
            "batches_per_epoch": self.batches_per_epoch,
            "update_steps_per_epoch": self.update_steps_per_epoch,
            "num_train_epochs": self.num_train_epochs,
            **schedule,
        }


# what AsyncGRPOTrainer decides while it runs (async_grpo_trainer.py of TRL 1.16.0), so the plan states no figure
ASYNC_NOT_KNOWN = (
    "prompts per optimizer step: a micro-batch holds as many samples as fit token_budget (by default the vLLM "
    "server's max_model_len, read at train start), or B × processes samples with token_budget <= 0, and a "
    "multi-turn conversation forks into a varying number of rows",
    "passes over the prompts: max_steps stops the run, whatever number of prompts it has trained; samples more "
    "than max_staleness weight updates old are discarded",
)


# TRL's GRPO (and GSPO: the same group advantages) takes its baseline within a prompt's group, and
# its GRPOConfig refuses one generation per prompt before training, in these words
ONE_GENERATION = ("1: GRPO takes its baseline within a prompt's group, and TRL refuses it at start (GRPOConfig: "
                  "'ValueError: GRPO requires at least 2 generations per prompt to calculate the advantages. "
                  "You provided 1, which is less than the minimum required.')")


def one_generation(estimator: str) -> str:
    """The refusal of one generation per prompt, in the words of the config class that refuses it."""
    if estimator == "rloo":
        return ("1: RLOO's leave-one-out baseline is the mean of a prompt's other completions, and TRL refuses it at "
                "start (RLOOConfig: 'ValueError: RLOO requires at least 2 generations per prompt to calculate the "
                "advantages. You provided 1, which is less than the minimum required.')")
    return ONE_GENERATION


def check_class_fields(recipe: Mapping[str, Any], version: str) -> str:
    """The TRL trainer the recipe names (``grpo``, ``rloo`` or ``async_grpo``), after checking that every key it
    holds is a field of that trainer's config class (or ModelConfig's, or rlexp's own): a GRPOConfig
    field on an RLOO recipe (``loss_type``, ``scale_rewards``, ...) is refused naming it, and so is
    an RLOOConfig-only one (``normalize_advantages``) on a GRPO recipe."""
    estimator = estimator_of(recipe)
    if estimator not in TRAINERS:
        raise TrlRecipeError(ESTIMATOR_KEY, f"{estimator!r}: TRL {version} runs grpo (GRPOTrainer, `trl grpo`), "
                                            "rloo (RLOOTrainer, `trl rloo`) or async_grpo (AsyncGRPOTrainer of "
                                            "trl.experimental.async_grpo)")
    own = config_field_names(estimator) | {row[0] for row in MODEL_CONFIG_FIELDS} | {ESTIMATOR_KEY, *COMMON_KEYS}
    config = TRAINERS[estimator][1]
    for key in recipe:
        if key not in own:
            others = [f"{TRAINERS[e][1]}'s" for e in TRAINERS if e != estimator and key in config_field_names(e)]
            whose = f" (a field of {' and '.join(others)})" if others else ""
            raise TrlRecipeError(key, f"{config} (TRL {version}, advantage_estimator {estimator}) has no such "
                                      f"field{whose}: {TRAINERS[estimator][0]} would not take it")
    return estimator


def _int(key: str, value: Any, minimum: int) -> int:
    """``value`` (the recipe's ``key``) as a whole number of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TrlRecipeError(key, f"must be an integer >= {minimum} (got {value!r})")
    return value


def scheduler_kwargs(recipe: TrlRecipe) -> dict[str, Any]:
    """``lr_scheduler_kwargs`` as a mapping (TRL accepts a dict or its JSON text)."""
    raw = recipe.lr_scheduler_kwargs
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str):
        import json

        try:
            raw = json.loads(raw)
        except ValueError:
            raise TrlRecipeError("lr_scheduler_kwargs", f"not a JSON object: {raw!r:.60}") from None
    if not isinstance(raw, dict):
        raise TrlRecipeError("lr_scheduler_kwargs", f"must be a mapping (got {raw!r:.60})")
    return dict(raw)


def trl_steps(recipe: TrlRecipe, pool_size: int, version: str, processes: int = 1) -> TrlSteps:
    """The step counts and LR schedule of a resolved TRL recipe (GRPOConfig field names) over a pool
    of ``pool_size`` prompts on ``processes`` processes. TrlRecipeError names a bad key."""
    if pool_size < 0:
        raise ValueError(f"pool_size must be >= 0, got {pool_size}")
    estimator = check_class_fields(recipe, version)
    if estimator == ASYNC_GRPO:
        return async_grpo_steps(recipe, pool_size, version, processes)
    config = TRAINERS[estimator][1]
    b = _int("per_device_train_batch_size", recipe.per_device_train_batch_size, 1)
    ga = _int("gradient_accumulation_steps", recipe.gradient_accumulation_steps, 1)
    if recipe.num_generations == 1 and not isinstance(recipe.num_generations, bool):
        raise TrlRecipeError("num_generations", one_generation(estimator))
    g = _int("num_generations", recipe.num_generations, 2)  # GRPOConfig and RLOOConfig refuse fewer than 2
    mu = _int("num_iterations", recipe.num_iterations, 1)
    w = max(1, int(processes))
    s = _steps_per_generation(recipe, b, w, ga, config)
    generation_batch = b * w * s
    if generation_batch % g:
        raise TrlRecipeError("num_generations", f"the generation batch {b} × {w} × {s} = {generation_batch} "
                                                f"completions is not a multiple of num_generations {g}")
    prompts_per_generation = generation_batch // g  # P
    chunks = pool_size // prompts_per_generation
    batches = chunks * mu * s  # L: RepeatSampler's length / (B·S) per process
    update_steps = max(batches // ga + int(batches % ga > 0), 1)
    epochs = float(recipe.num_train_epochs)
    stated_max = int(recipe.max_steps)
    if stated_max > 0:
        max_steps = stated_max
    elif batches == 0:
        max_steps = 0  # transformers refuses an empty dataloader without max_steps: nothing runs
    else:
        max_steps = math.ceil(epochs * update_steps)

    warmup, rule = _warmup(recipe, max_steps)
    scheduler, peak, num_cycles, rate = _lr_schedule(recipe)
    return TrlSteps(
        trainer_version=version,
        pool_size=pool_size,
        prompts=pool_size,
        n_samples_per_prompt=g,
        rollout_batch_size=prompts_per_generation,
        train_batch_size=b * w * ga,
        micro_train_batch_size=b,
        data_parallel_size=w,
        num_episodes=1,
        max_epochs=mu,
        optimizer_steps_total=max_steps,
        optimizer_steps_per_episode=update_steps,
        optimizer_steps_per_global_step=1,
        micro_batches_per_optimizer_step=ga,
        global_steps_per_episode=update_steps,
        global_steps_total=max_steps,
        partial_batch_prompts=pool_size % prompts_per_generation,
        drops_partial_batch=True,
        optimizer_steps_run=max_steps,
        warmup_steps=warmup,
        peak_lr=peak,
        min_lr_ratio=rate,
        min_lr_rate=rate,
        actor_lr_logging="applied",
        per_device_train_batch_size=b,
        processes=w,
        gradient_accumulation_steps=ga,
        steps_per_generation=s,
        num_iterations=mu,
        num_train_epochs=epochs,
        max_steps_stated=stated_max,
        batches_per_epoch=batches,
        update_steps_per_epoch=update_steps,
        lr_scheduler_type=scheduler,
        num_cycles=num_cycles,
        warmup_rule_text=rule,
        trainer_class=TRAINERS[estimator][0],
    )


def async_grpo_steps(recipe: TrlRecipe, pool_size: int, version: str, processes: int = 1) -> TrlSteps:
    """AsyncGRPOTrainer's steps (see the module docstring): ``max_steps`` as stated, or refused."""
    stated_max = recipe.max_steps
    if isinstance(stated_max, bool) or not isinstance(stated_max, int) or stated_max <= 0:
        raise TrlRecipeError("max_steps", f"{stated_max!r}: AsyncGRPOTrainer's step count is not known before the "
                                          "run without a stated max_steps > 0 (it counts the prompts it trains, and "
                                          "how many a step trains depends on token budgets and forks): state max_steps")
    if str(recipe.eval_strategy) != "no":
        raise TrlRecipeError("eval_strategy", f"{recipe.eval_strategy!r}: AsyncGRPOTrainer gives transformers' "
                                              "Trainer no eval_dataset, and the Trainer refuses an eval_strategy "
                                              "without one: state eval_strategy no")
    b = _int("per_device_train_batch_size", recipe.per_device_train_batch_size, 1)
    ga = _int("gradient_accumulation_steps", recipe.gradient_accumulation_steps, 1)
    g = _int("num_generations", recipe.num_generations, 1)
    w = max(1, int(processes))
    warmup, rule = _warmup(recipe, stated_max)
    scheduler, peak, num_cycles, rate = _lr_schedule(recipe)
    return TrlSteps(
        trainer_version=version, pool_size=pool_size, prompts=pool_size, n_samples_per_prompt=g,
        rollout_batch_size=0,  # not known: no sampler forms generation batches of a fixed number of prompts
        train_batch_size=b * w * ga, micro_train_batch_size=b, data_parallel_size=w, num_episodes=1, max_epochs=1,
        optimizer_steps_total=stated_max,
        # transformers: a DataLoader without a length makes one "epoch" of max_steps optimizer steps
        optimizer_steps_per_episode=stated_max, optimizer_steps_per_global_step=1,
        micro_batches_per_optimizer_step=ga, global_steps_per_episode=stated_max, global_steps_total=stated_max,
        partial_batch_prompts=0, drops_partial_batch=False, optimizer_steps_run=stated_max, warmup_steps=warmup,
        peak_lr=peak, min_lr_ratio=rate, min_lr_rate=rate, actor_lr_logging="applied",
        per_device_train_batch_size=b, processes=w, gradient_accumulation_steps=ga, steps_per_generation=ga,
        num_iterations=1, num_train_epochs=float(recipe.num_train_epochs), max_steps_stated=stated_max,
        batches_per_epoch=stated_max * ga, update_steps_per_epoch=stated_max, lr_scheduler_type=scheduler,
        num_cycles=num_cycles, warmup_rule_text=rule, trainer_class=TRAINERS[ASYNC_GRPO][0],
    )


def _steps_per_generation(recipe: TrlRecipe, b: int, w: int, ga: int, config: str) -> int:
    """S, the optimizer micro-steps one generation feeds, as GRPOConfig.__post_init__ (RLOOConfig's alike)
    sets it: ``steps_per_generation``, else ``generation_batch_size`` / (B × processes), else GA."""
    stated_s, stated_gb = recipe.steps_per_generation, recipe.generation_batch_size
    if stated_s is not None and stated_gb is not None:
        raise TrlRecipeError("steps_per_generation", "generation_batch_size and steps_per_generation are "
                                                     f"mutually exclusive in {config}")
    if stated_gb is not None:
        gb = _int("generation_batch_size", stated_gb, 1)
        if gb % (b * w):
            raise TrlRecipeError("generation_batch_size", f"{gb} is not a multiple of the global batch "
                                                          f"{b} × {w} processes = {b * w}")
        return gb // (b * w)
    return _int("steps_per_generation", stated_s, 1) if stated_s is not None else ga


def _warmup(recipe: TrlRecipe, max_steps: int) -> tuple[int, str]:
    """transformers' warm-up steps (``get_warmup_steps``: a ``warmup_steps`` of 1 or more is a count, below
    1 a ratio of the run) and how it was found, in words."""
    warm = float(recipe.warmup_steps)
    if warm >= 1:
        return int(warm), f"warmup_steps {int(warm)} (absolute)"
    return math.ceil(max_steps * warm), f"ceil({max_steps:,} × warmup_steps {warm:g})"


def _lr_schedule(recipe: TrlRecipe) -> tuple[str, float, float, float]:
    """The scheduler's name, the peak LR, cosine's ``num_cycles`` and the floor as a fraction of the peak
    (cosine_with_min_lr's rate; 1 for the constant schedules; 0 otherwise)."""
    scheduler = str(recipe.lr_scheduler_type)
    if scheduler not in SCHEDULERS:
        raise TrlRecipeError("lr_scheduler_type", f"{scheduler!r} is not planned by rlexp (supported: "
                                                  f"{', '.join(SCHEDULERS)})")
    peak = float(recipe.learning_rate)
    kwargs = scheduler_kwargs(recipe)
    num_cycles = float(kwargs.get("num_cycles", 0.5))
    rate = 0.0
    if scheduler == "cosine_with_min_lr":
        # transformers: exactly one of min_lr / min_lr_rate; min_lr is divided by the optimizer's lr
        if ("min_lr" in kwargs) == ("min_lr_rate" in kwargs):
            raise TrlRecipeError("lr_scheduler_kwargs", "cosine_with_min_lr needs exactly one of min_lr and "
                                                        "min_lr_rate")
        rate = float(kwargs["min_lr_rate"]) if "min_lr_rate" in kwargs else float(kwargs["min_lr"]) / peak
    elif scheduler in ("constant", "constant_with_warmup"):
        rate = 1.0
    return scheduler, peak, num_cycles, rate


def trl_lambda(k: int, steps: TrlSteps) -> float:
    """transformers' LR multiplier of ``steps.lr_scheduler_type`` after ``k`` scheduler steps, with
    the float operations of ``transformers/optimization.py`` in the same order."""
    warmup, total, kind = steps.warmup_steps, steps.optimizer_steps_total, steps.lr_scheduler_type
    if kind == "constant":
        return 1.0
    if kind == "constant_with_warmup":
        if k < warmup:
            return float(k) / float(max(1.0, warmup))
        return 1.0
    if k < warmup:
        return float(k) / float(max(1, warmup))
    if kind == "linear":
        return max(0.0, float(total - k) / float(max(1, total - warmup)))
    progress = float(k - warmup) / float(max(1, total - warmup))
    if kind == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(steps.num_cycles) * 2.0 * progress)))
    # cosine_with_min_lr
    factor = 0.5 * (1.0 + math.cos(math.pi * float(steps.num_cycles) * 2.0 * progress))
    factor = factor * (1 - steps.min_lr_rate) + steps.min_lr_rate
    return max(0, factor)


# ----------------------------------------------------------------------------- eval / save schedule


def _every(value: Any, max_steps: int) -> int:
    """transformers' TrainerState.compute_steps: a value below 1 is a fraction of max_steps."""
    value = float(value)
    return math.ceil(max_steps * value) if value < 1 else int(value)


def firing_steps(strategy: str, every: Any, steps: TrlSteps, *, delay: float = 0.0) -> list[int]:
    """Global steps where transformers' DefaultFlowCallback evaluates (or saves) under ``strategy``:
    ``steps`` fires on multiples of ``every`` and at the final step; ``epoch`` at each epoch's end."""
    total = steps.global_steps_total
    if total < 1 or strategy == "no":
        return []
    if strategy == "epoch":
        per_epoch = steps.update_steps_per_epoch
        return sorted({min(e * per_epoch, total) for e in range(1, -(-total // per_epoch) + 1)})
    if strategy != "steps":
        return []  # "best" saves only when the metric improves: not plannable
    every_n = _every(every, total)
    points = set(range(every_n, total + 1, every_n)) if every_n > 0 else set()
    points.add(total)
    return sorted(p for p in points if p >= delay)


def eval_save_steps(recipe: TrlRecipe, steps: TrlSteps) -> tuple[list[int], list[int]]:
    """The in-run monitor eval steps (GRPOConfig's eval schedule; ``eval_steps`` None takes
    ``logging_steps``) and the checkpoint steps (its save schedule)."""
    eval_every = recipe.eval_steps if recipe.eval_steps is not None else recipe.logging_steps
    evaluated = firing_steps(str(recipe.eval_strategy), eval_every, steps, delay=float(recipe.eval_delay))
    saved = firing_steps(str(recipe.save_strategy), recipe.save_steps, steps)
    return evaluated, saved


# ----------------------------------------------------------------------------- messages of the preflight checks


def empty_message(steps: TrlSteps) -> str:
    return (f"no optimizer step runs: {steps.prompts:,} prompts < {steps.rollout_batch_size} prompts per generation "
            f"batch (B {steps.per_device_train_batch_size} × W {steps.processes} × steps_per_generation "
            f"{steps.steps_per_generation} / num_generations {steps.n_samples_per_prompt})")


def intent_message(intent: int, steps: TrlSteps) -> str:
    head = (f"TRL will run max_steps {steps.global_steps_total:,} optimizer steps"
            + (" (stated max_steps)" if steps.max_steps_stated > 0 else
               f" = ceil({steps.num_train_epochs:g} epochs × max(ceil(L {steps.batches_per_epoch:,} / GA "
               f"{steps.gradient_accumulation_steps}), 1)), L = floor({steps.prompts:,} / P "
               f"{steps.rollout_batch_size}) × num_iterations {steps.num_iterations} × steps_per_generation "
               f"{steps.steps_per_generation}")
            + f", intent is {intent:,}")
    if steps.trainer_class == TRAINERS[ASYNC_GRPO][0]:  # its epochs do not set its steps
        return f"{head}: state max_steps: {intent}"
    return f"{head}: state max_steps: {intent} or change num_train_epochs"


def partial_batch_message(steps: TrlSteps) -> str:
    kept = steps.prompts - steps.partial_batch_prompts
    return (f"{steps.prompts:,} prompts leave a partial generation batch of {steps.partial_batch_prompts} "
            f"(P = {steps.rollout_batch_size} prompts per generation batch): TRL's RepeatSampler drops it every "
            f"epoch (trains {kept:,} of {steps.prompts:,} prompts)")
