"""The local trainer's configuration (pure): :class:`TrainerConfig` (where it reads and writes, the
recipe keys it reads with :class:`~rlexp.spec.recipe.Recipe`'s defaults), mapped from a loaded attempt by
:func:`config_from_attempt`, and what an environment task adds (:class:`EnvTrainingOptions`).

Core layer: it reads no file; the trainer that runs it is :mod:`rlexp.trainers.local.train`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.environments.interface import Budgets
from rlexp.errors import InputError
from rlexp.spec.recipe import RECIPE_KEYS, Recipe, local_trainer_keys, local_trainer_value
from rlexp.training.schedule import LOCAL_TRAINER_VERSION

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.training.schedule import Steps


def _as_held(name: str) -> Any:
    """Recipe's default of key ``name`` as the trainer holds it (a tuple of module names for the
    recipe's ``target_modules``), for the one key whose value the trainer holds otherwise."""
    key = RECIPE_KEYS[name]
    return local_trainer_value(key, key.default)


@dataclass(frozen=True)
class TrainerConfig:
    """The local trainer's configuration: where it reads and writes, then the recipe keys it reads.

    The recipe fields are the fields of :class:`~rlexp.spec.recipe.Recipe` marked for the local trainer
    (``LOCAL_TRAINER_KEYS``), in its order, named as OpenRLHF names them (v0.9.x spelling, no
    dashes), each defaulting to Recipe's own (``Recipe.eps_clip``: written once, on Recipe);
    tests/test_recipe.py checks the two agree."""

    pretrain: Path
    pool_path: Path
    # the base model as the recipe names it (written into each adapter's config, not the path)
    base_name: str | None = None
    monitor_path: Path | None = None
    prompt_suffix: str = ""
    monitor_suffix: str = ""
    eval_max_len: int = Recipe.generate_max_len
    # stop early (intent.global_steps); None = the whole schedule
    max_global_steps: int | None = None
    trainer_version: str = LOCAL_TRAINER_VERSION
    # an environment task (rlexp.spec.EnvironmentSettings); None = single-turn prompts,
    # trained by the single-turn code path (rlexp.trainers.local.env_train otherwise)
    environment: Any = None
    # recipe.loss_agg_mode (rlexp.spec.recipe.LOSS_AGG_KEY, a key of every trainer's recipe): the policy
    # loss's and the KL term's aggregation, as verl applies one mode to both; None: the trainer's
    # default (token-mean, GSPO's seq-mean-token-mean for its policy loss; the KL term token-mean)
    loss_agg_mode: str | None = None
    # ---- the recipe keys (rlexp.spec.recipe.LOCAL_TRAINER_KEYS; ``pretrain`` is the path above)
    advantage_estimator: str = Recipe.advantage_estimator
    eps_clip: float = Recipe.eps_clip
    init_kl_coef: float = Recipe.init_kl_coef
    n_samples_per_prompt: int = Recipe.n_samples_per_prompt
    temperature: float = Recipe.temperature
    generate_max_len: int = Recipe.generate_max_len
    max_samples: int = Recipe.max_samples
    num_episodes: int = Recipe.num_episodes
    max_epochs: int = Recipe.max_epochs
    rollout_batch_size: int = Recipe.rollout_batch_size
    train_batch_size: int = Recipe.train_batch_size
    micro_train_batch_size: int = Recipe.micro_train_batch_size
    seed: int = Recipe.seed
    actor_learning_rate: float = Recipe.actor_learning_rate
    lr_warmup_ratio: float = Recipe.lr_warmup_ratio
    min_lr_ratio: float = Recipe.min_lr_ratio
    max_norm: float = Recipe.max_norm
    l2: float = Recipe.l2
    adam_betas: tuple[float, float] = Recipe.adam_betas
    lora_rank: int = Recipe.lora_rank
    lora_alpha: int = Recipe.lora_alpha
    target_modules: tuple[str, ...] = _as_held("target_modules")
    eval_steps: int = Recipe.eval_steps
    save_steps: int = Recipe.save_steps

    def validate(self, where: str | Path | None = None) -> None:
        cfg = self
        samples = cfg.rollout_batch_size * cfg.n_samples_per_prompt
        if cfg.advantage_estimator not in ("group_norm", "dr_grpo"):
            raise InputError(
                where, "recipe.advantage_estimator", "the local trainer supports group_norm, dr_grpo"
            )
        if samples % cfg.train_batch_size:
            raise InputError(
                where,
                "recipe.train_batch_size",
                f"must divide rollout_batch_size × n_samples_per_prompt = {samples}",
            )
        if cfg.train_batch_size % cfg.micro_train_batch_size:
            raise InputError(where, "recipe.micro_train_batch_size", "must divide train_batch_size")
        for name in (
            "generate_max_len",
            "n_samples_per_prompt",
            "rollout_batch_size",
            "max_epochs",
            "num_episodes",
        ):
            if getattr(cfg, name) < 1:
                raise InputError(where, f"recipe.{name}", "must be >= 1")
        if cfg.lora_rank < 0:
            raise InputError(where, "recipe.lora_rank", "must be >= 0")
        if not cfg.target_modules:
            raise InputError(where, "recipe.target_modules", "names no module")

    @property
    def loss_token_budget(self) -> int:
        """Dr. GRPO's constant L (:func:`loss_token_budget`)."""
        return loss_token_budget(self.generate_max_len, self.environment)

    def recipe(self) -> dict[str, Any]:
        """The recipe keys this configuration holds, by name (what rlexp.training.schedule reads)."""
        return {key.name: getattr(self, key.name) for key in local_trainer_keys()}

    def steps(self, pool_size: int) -> Steps:
        """The run's step counts and LR schedule as ``rlexp plan`` computes them — the one
        source of the trainer's step math (optimizer steps, warm-up, global steps)."""
        from rlexp.training.schedule import compute_steps

        return compute_steps(self.recipe(), pool_size, self.trainer_version, trainer="local")


def config_from_attempt(att: Attempt) -> TrainerConfig:
    """Map a loaded attempt (rlexp.spec) onto the trainer's configuration (a TrainerConfig)."""
    recipe = att.recipe
    where = att.spec_path
    values: dict[str, Any] = {}
    for key in local_trainer_keys():  # the fields TrainerConfig shares with Recipe, as the trainer holds them
        value = getattr(recipe, key.name)
        if key.name == "pretrain" or value is None:
            continue
        try:
            values[key.name] = local_trainer_value(key, value)
        except (TypeError, ValueError):
            raise InputError(where, f"recipe.{key.name}", f"expected {key.type}, got {value!r}") from None
    pretrain = recipe.pretrain
    if not pretrain:
        raise InputError(where, "recipe.pretrain", "missing")
    pretrain_path = Path(pretrain)
    if not pretrain_path.is_absolute():
        pretrain_path = Path(att.experiment_dir) / pretrain_path
    pool = att.datasets.get("pool")
    if pool is None or pool.path is None:
        raise InputError(where, "datasets.pool", "missing")
    monitor = att.datasets.get("ood_monitor")
    global_steps = (att.intent or {}).get("global_steps")
    return TrainerConfig(
        pretrain=pretrain_path,
        base_name=str(pretrain),
        pool_path=Path(pool.path),
        monitor_path=Path(monitor.path) if monitor is not None and monitor.path is not None else None,
        prompt_suffix=pool.prompt_suffix or "",
        monitor_suffix=(monitor.prompt_suffix if monitor is not None else None) or pool.prompt_suffix or "",
        eval_max_len=recipe.generate_max_len,
        max_global_steps=int(global_steps) if global_steps else None,
        trainer_version=str(att.trainer.version),
        environment=att.environment,
        loss_agg_mode=recipe.loss_agg_mode,
        **values,
    )


def loss_token_budget(generate_max_len: int, environment: Any) -> int:
    """Dr. GRPO's constant L for ``seq-mean-token-sum-norm``: the most agent tokens one sequence can
    hold, ``environment.max_total_tokens`` on an environment task, else ``generate_max_len``."""
    if environment is not None:
        return int(environment.max_total_tokens)
    return generate_max_len


# =============================================================================== environment tasks


LOSS_TYPES = ("grpo", "gspo")
ADVANTAGE_MODES = ("return", "token_rewards")


@dataclass(frozen=True)
class EnvTrainingOptions:
    """What environment tasks add to the local trainer's recipe."""

    budgets: Budgets  # the attempt's (budgets_of(environment)): its defaults are the spec's
    loss_type: str = "grpo"  # grpo: token-level ratio | gspo: sequence-level ratio
    advantage_mode: str = "return"  # return | token_rewards
    # GSPO's clip range (its paper uses 3e-4 / 4e-4: the sequence ratio moves far less than a token's)
    gspo_eps_low: float = 3e-4
    gspo_eps_high: float = 4e-4

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}")
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"advantage_mode must be one of {ADVANTAGE_MODES}")
        if not (self.gspo_eps_low > 0 and self.gspo_eps_high > 0):
            raise ValueError("GSPO clip ranges must be > 0")

