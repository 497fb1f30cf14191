"""The recipe keys: one table from which everything that names a recipe key is derived.

A recipe key is an OpenRLHF ``train_ppo_ray`` argument in its v0.9.x spelling without the dashes
(checked against the argparse of tag v0.9.3), so a recipe can be pasted from a training script.
Each row of :data:`RECIPE_TABLE` gives

- ``type``: ``int | float | bool | str | str_list | float_pair``, and whether null is allowed;
- ``default``: OpenRLHF's argparse default — the value an attempt gets when no spec in its chain
  states the key, whichever trainer runs it (so ``rlexp plan``, the diff against the parent and
  the tracked parameters show the values the trainer really uses);
- ``kind``: *training* (counts against the one-variable rule), *instrumentation* (eval set,
  eval/save cadence, logging) or *infrastructure* (GPU layout, memory and speed knobs). Exempt
  kinds follow the campaign's exemption table (docs/plan.md), except that ``num_episodes`` is a training variable here: it
  sets the step count and so the LR schedule;
- ``constraint``: ``gt0``, ``ge0``, ``ge1``, ``ratio`` (0..1), ``steps`` (-1 or >= 1), or a
  closed set of values (``advantage``, ``kl_estimator``);
- ``dotted``: the flag of the v0.10.2+ dialect (``--actor.eps_clip``), None where that dialect
  has none. Built by matching the two parsers' help texts and defaults at v0.10.1 and v0.10.2;
  tests check both sides against the flag tables of ``rlexp/trainers/openrlhf/flags``.

Derived from it: the spec schema (:mod:`rlexp.spec`, and the JSON Schema of ``attempt.yaml``
through :func:`recipe_json_schema`), the local trainer's configuration (the keys of
:data:`LOCAL_TRAINER_KEYS`, with the same defaults) and both OpenRLHF dialects
(:func:`dotted_names`; the v0.9.x dialect is the key itself).

One default per key, OpenRLHF's, whichever trainer runs the recipe: ``load_attempt`` fills every
unstated key with it before any trainer reads the recipe, so a second set of trainer defaults
could never apply to a spec. A local spec states what it wants (``lora_rank`` 0 is a full
fine-tune), and the local trainer refuses what it does not implement (the default ``gae``).

One key belongs to every trainer's recipe, whatever its spelling (:data:`COMMON_KEYS`):
``loss_agg_mode``, the loss aggregation in verl's names (:data:`LOSS_AGG_MODES`), with no default;
each trainer's launch writes it in its own setting or refuses it (rlexp.trainers.launch.loss_recipe).

Keys the table does not describe are accepted too, with no default (a recipe that does not state
them keeps its digest) and type ``flag_value``, checked by the argv builder against the parser of
the exact release: the underscore flags added after v0.9.3 (:data:`LATER_UNDERSCORE_ROWS`) and
any newer release's flag under its own dotted name (:func:`recipe_key`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

TRAINING = "training"
INSTRUMENTATION = "instrumentation"
INFRASTRUCTURE = "infrastructure"
KINDS = (TRAINING, INSTRUMENTATION, INFRASTRUCTURE)

ADVANTAGE_ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
TYPES = ("int", "float", "bool", "str", "str_list", "float_pair")
CONSTRAINTS = (None, "gt0", "ge0", "ge1", "ratio", "steps", "advantage", "kl_estimator", "loss_agg_mode")

# The loss aggregations, in verl's names (``actor.loss_agg_mode``): how the per-token losses ℓ_it of
# the sequences i of one optimizer step become one number. With |o_i| the agent tokens of sequence i,
# N the sequences that hold any, L a constant token budget:
#   token-mean               Σ_i Σ_t ℓ_it / Σ_i |o_i|          (DAPO; OpenRLHF's and verl's default)
#   seq-mean-token-sum       Σ_i Σ_t ℓ_it / N
#   seq-mean-token-mean      Σ_i (Σ_t ℓ_it / |o_i|) / N         (DeepSeekMath's GRPO; GSPO)
#   seq-mean-token-sum-norm  Σ_i Σ_t ℓ_it / (N · L)             (Dr. GRPO)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
GSPO_LOSS_AGG = "seq-mean-token-mean"  # GSPO's own aggregation, forced by every trainer that has GSPO


@dataclass(frozen=True)
class RecipeKey:
    """One OpenRLHF argument: value type, default, kind, and its names in both dialects."""

    name: str
    type: str  # int | float | bool | str | str_list | float_pair | flag_value (see recipe_key)
    default: Any
    kind: str  # training | instrumentation | infrastructure
    nullable: bool = False
    constraint: str | None = None  # see the module docstring
    dotted: str | None = None  # v0.10.2+ flag without dashes; None: that dialect has no such flag
    local: bool = False  # read by the local trainer (rlexp.trainers.local.config)


T, I, X = TRAINING, INSTRUMENTATION, INFRASTRUCTURE  # noqa: E741 (short names keep the table readable)

FloatPair = tuple[float, float]  # type float_pair: two numbers (a range, Adam's betas)
ModuleNames = str | list[str]  # type str_list: one name or pattern ("all-linear"), or distinct names

# a field's annotation (a string: annotations are not evaluated here) -> its value type in the table
ANNOTATION_TYPES = {"int": "int", "float": "float", "bool": "bool", "str": "str", "ModuleNames": "str_list",
                    "FloatPair": "float_pair"}


def row(default: Any, kind: str, *, constraint: str | None = None, dotted: str | None = None) -> Any:
    """One OpenRLHF argument as a field of :class:`Recipe`: its default (v0.9.3's argparse), its kind,
    its bound and its v0.10.2+ flag; its type, and whether null is allowed, is the field's annotation."""
    return field(default=default, metadata={"kind": kind, "constraint": constraint, "dotted": dotted})


class RecipeView(Mapping[str, Any]):
    """A resolved recipe read by key, read-only: the trainer-neutral code (the one-variable diff, the
    digest, the plan) and the trainers whose recipe is read by name (TRL, verl) read any recipe this
    way; each key's value is the stated one, else its trainer table's default."""

    __slots__ = ()

    @classmethod
    def resolve(cls, stated: Mapping[str, Any], defaults: Mapping[str, Any]) -> RecipeView:
        """The recipe of the ``stated`` keys, the others at ``defaults`` (the key table's, or the ones
        this recipe runs with): how a key table builds its recipe (:meth:`TrainerKeyTable.recipe`)."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class NativeRecipe(RecipeView):
    """The recipe of a trainer whose keys are its own and have no typed class here (TRL's GRPOConfig
    fields, verl's dotted config keys): every key, stated or defaulted, in its table's order."""

    values: Mapping[str, Any]

    @classmethod
    def resolve(cls, stated: Mapping[str, Any], defaults: Mapping[str, Any]) -> NativeRecipe:
        return cls({**defaults, **stated})

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, eq=False)
class Recipe(RecipeView):
    """The recipe of OpenRLHF and the local trainer, typed: one field per OpenRLHF ``train_ppo_ray``
    argument in its v0.9.x spelling, declared once with its default (OpenRLHF v0.9.3's argparse
    default, which tests/test_recipe.py compares with the release's own parser), its kind, its bound
    and its v0.10.2+ flag (:func:`row`). :data:`RECIPE_TABLE` is read from these fields, so the spec
    schema, the JSON Schema, the local trainer's keys and both flag dialects follow them.

    Code reads a key as an attribute (``att.recipe.eps_clip``). The keys the table does not describe
    (the later underscore flags, a newer release's dotted flags, :data:`COMMON_KEYS`) are in
    :attr:`extra`, as stated. As a mapping (:class:`RecipeView`) it is the ``dict`` it replaces: the
    table's keys in table order, then the extra ones in the order the spec states them."""

    # ---- model, reward, data
    pretrain: str | None = row(None, T, dotted="actor.model_name_or_path")
    reward_pretrain: str | None = row(None, T, dotted="reward.model_name_or_path")
    remote_rm_url: str | None = row(None, T, dotted="reward.remote_url")
    critic_pretrain: str | None = row(None, T, dotted="critic.model_name_or_path")
    value_head_prefix: str = row("score", T, dotted="ds.value_head_prefix")
    agent_func_path: str | None = row(None, T, dotted="train.agent_func_path")
    prompt_data: str | None = row(None, T, dotted="data.prompt_dataset")
    prompt_data_probs: str | None = row(None, T, dotted="data.prompt_probs")
    prompt_split: str = row("train", T, dotted="data.prompt_split")
    input_key: str = row("input", T, dotted="data.input_key")
    label_key: str | None = row(None, T, dotted="data.label_key")
    input_template: str | None = row(None, T, dotted="data.input_template")
    apply_chat_template: bool = row(False, T, dotted="data.apply_chat_template")
    # ---- algorithm
    advantage_estimator: str = row("gae", T, constraint="advantage", dotted="algo.advantage.estimator")
    policy_loss_type: str = row("ppo", T, dotted="actor.policy_loss_type")
    eps_clip: float = row(0.2, T, constraint="gt0", dotted="actor.eps_clip")
    eps_clip_low_high: FloatPair | None = row(None, T, dotted="actor.eps_clip_low_high")
    dual_clip: float | None = row(None, T, dotted="actor.dual_clip")
    value_clip: float = row(0.5, T, dotted="critic.value_clip")
    lambd: float = row(1.0, T, dotted="algo.advantage.lambd")
    gamma: float = row(1.0, T, dotted="algo.advantage.gamma")
    init_kl_coef: float = row(0.01, T, constraint="ge0", dotted="algo.kl.init_coef")
    use_kl_loss: bool = row(False, T, dotted="algo.kl.use_loss")
    kl_estimator: str = row("k1", T, constraint="kl_estimator", dotted="algo.kl.estimator")
    kl_target: float | None = row(None, T, dotted="algo.kl.target")
    kl_horizon: int = row(10000, T, dotted="algo.kl.horizon")
    entropy_loss_coef: float | None = row(None, T, dotted="actor.entropy_coef")
    aux_loss_coef: float = row(0.0, T, dotted="actor.aux_loss_coef")
    ptx_coef: float = row(0.05, T)
    normalize_reward: bool = row(False, T, dotted="reward.normalize_enable")
    no_advantage_std_norm: bool = row(False, T, dotted="algo.advantage.no_std_norm")
    reward_clip_range: FloatPair = row((-10.0, 10.0), T, dotted="reward.clip_range")
    overlong_buffer_len: float | None = row(None, T, dotted="reward.overlong_buffer_len")
    overlong_penalty_factor: float = row(1.0, T, dotted="reward.overlong_penalty_factor")
    stop_properly_penalty_coef: float | None = row(None, T, dotted="reward.stop_properly_penalty_coef")
    dynamic_filtering: bool = row(False, T, dotted="algo.dynamic_filtering_enable")
    dynamic_filtering_reward_range: FloatPair = row((0.0, 1.0), T, dotted="algo.dynamic_filtering_range")
    async_train: bool = row(False, T, dotted="train.async_enable")
    enable_vllm_is_correction: bool = row(False, T, dotted="algo.advantage.is_correction_enable")
    vllm_is_truncated_threshold: FloatPair = row((0.5, 5.0), T, dotted="algo.advantage.is_correction_threshold")
    vllm_is_correction_type: str = row("tis", T, dotted="algo.advantage.is_correction_type")
    # 0.10.2 renamed it and kept its meaning (freeze the actor for N steps while the critic warms up)
    freezing_actor_steps: int = row(-1, T, dotted="critic.freezing_steps")
    # ---- sampling and lengths
    n_samples_per_prompt: int = row(1, T, constraint="ge1", dotted="rollout.n_samples_per_prompt")
    temperature: float = row(1.0, T, constraint="ge0", dotted="rollout.temperature")
    top_p: float = row(1.0, T, constraint="gt0", dotted="rollout.top_p")
    prompt_max_len: int = row(1024, T, constraint="ge1")
    generate_max_len: int = row(1024, T, constraint="ge1", dotted="rollout.max_new_tokens")
    max_len: int | None = row(None, T, constraint="ge1", dotted="data.max_len")
    max_samples: int = row(100_000_000, T, constraint="ge1", dotted="data.max_samples")
    # ---- batches, epochs, steps
    num_episodes: int = row(1, T, constraint="ge1", dotted="train.num_episodes")
    max_epochs: int = row(1, T, constraint="ge1", dotted="train.max_epochs")
    rollout_batch_size: int = row(1024, T, constraint="ge1", dotted="rollout.batch_size")
    micro_rollout_batch_size: int = row(8, X, constraint="ge1", dotted="rollout.micro_batch_size")
    train_batch_size: int = row(128, T, constraint="ge1", dotted="train.batch_size")
    micro_train_batch_size: int = row(4, T, constraint="ge1", dotted="train.micro_batch_size")
    use_dynamic_batch: bool = row(False, T, dotted="train.dynamic_batch_enable")
    seed: int = row(42, T, constraint="ge0", dotted="train.seed")
    full_determinism: bool = row(False, T, dotted="train.full_determinism_enable")
    # ---- optimiser and LR schedule
    actor_learning_rate: float = row(1e-6, T, constraint="gt0", dotted="actor.adam.lr")
    critic_learning_rate: float = row(9e-6, T, constraint="gt0", dotted="critic.adam.lr")
    lr_warmup_ratio: float = row(0.03, T, constraint="ratio", dotted="actor.lr_warmup_ratio")
    min_lr_ratio: float = row(0.1, T, constraint="ratio", dotted="actor.min_lr_ratio")  # v0.11 name; v0.9.x fixes it at 0.1
    lr_scheduler: str = row("cosine_with_min_lr", T, dotted="actor.lr_scheduler")
    max_norm: float = row(1.0, T, constraint="gt0", dotted="actor.max_norm")
    l2: float = row(0.0, T, constraint="ge0", dotted="actor.adam.weight_decay")
    adam_betas: FloatPair = row((0.9, 0.95), T, dotted="actor.adam.betas")
    enable_ema: bool = row(False, T, dotted="train.enable_ema")
    ema_beta: float = row(0.992, T, dotted="train.ema_beta")
    # ---- LoRA and precision
    lora_rank: int = row(0, T, constraint="ge0", dotted="ds.lora.rank")
    lora_alpha: int = row(16, T, constraint="ge0", dotted="ds.lora.alpha")
    target_modules: ModuleNames = row("all-linear", T, dotted="ds.lora.target_modules")
    lora_dropout: float = row(0.0, T, constraint="ratio", dotted="ds.lora.dropout")
    load_in_4bit: bool = row(False, T, dotted="ds.load_in_4bit")
    param_dtype: str = row("bf16", T, dotted="ds.param_dtype")
    bf16: bool = row(False, T)  # flag of releases before param_dtype
    grad_accum_dtype: str | None = row(None, T, dotted="ds.grad_accum_dtype")
    # ---- GPU layout (infrastructure)
    actor_num_nodes: int = row(1, X, constraint="ge1", dotted="actor.num_nodes")
    actor_num_gpus_per_node: int = row(8, X, constraint="ge1", dotted="actor.num_gpus_per_node")
    ref_num_nodes: int = row(1, X, constraint="ge1", dotted="ref.num_nodes")
    ref_num_gpus_per_node: int = row(8, X, constraint="ge1", dotted="ref.num_gpus_per_node")
    reward_num_nodes: int = row(1, X, constraint="ge1", dotted="reward.num_nodes")
    reward_num_gpus_per_node: int = row(8, X, constraint="ge1", dotted="reward.num_gpus_per_node")
    critic_num_nodes: int = row(1, X, constraint="ge1", dotted="critic.num_nodes")
    critic_num_gpus_per_node: int = row(8, X, constraint="ge1", dotted="critic.num_gpus_per_node")
    colocate_actor_ref: bool = row(False, X, dotted="train.colocate_actor_ref")
    colocate_critic_reward: bool = row(False, X, dotted="train.colocate_critic_reward")
    colocate_all_models: bool = row(False, X, dotted="train.colocate_all")
    vllm_num_engines: int | None = row(None, X, constraint="ge0", dotted="vllm.num_engines")
    vllm_tensor_parallel_size: int = row(1, X, constraint="ge1", dotted="vllm.tensor_parallel_size")
    vllm_gpu_memory_utilization: float = row(0.95, X, constraint="ratio", dotted="vllm.gpu_memory_utilization")
    vllm_sync_backend: str = row("nccl", X, dotted="vllm.sync_backend")
    vllm_sync_with_ray: bool = row(False, X, dotted="vllm.sync_with_ray")
    vllm_enable_sleep: bool = row(False, X, dotted="vllm.enable_sleep")
    vllm_generate_batch_size: int | None = row(None, X, constraint="ge1", dotted="rollout.vllm_generate_batch_size")
    enable_prefix_caching: bool = row(False, X, dotted="vllm.enable_prefix_caching")
    enforce_eager: bool = row(False, X, dotted="vllm.enforce_eager")
    async_queue_size: int = row(1, X, constraint="ge1", dotted="train.async_queue_size")
    zero_stage: int = row(2, X, constraint="ge0", dotted="ds.zero_stage")
    gradient_checkpointing: bool = row(False, X, dotted="actor.gradient_checkpointing_enable")
    gradient_checkpointing_use_reentrant: bool = row(False, X, dotted="actor.gradient_checkpointing_reentrant")
    deepcompile: bool = row(False, X, dotted="ds.deepcompile")
    zpg: int = row(1, X, constraint="ge1", dotted="ds.zpg")
    adam_offload: bool = row(False, X, dotted="ds.adam_offload")
    offload: bool = row(False, X)  # flag of releases before 0.9
    actor_init_on_gpu: bool = row(False, X)
    attn_implementation: str = row("flash_attention_2", X, dotted="ds.attn_implementation")
    flash_attn: bool = row(False, X)  # flag of releases before attn_implementation
    use_liger_kernel: bool = row(False, X, dotted="ds.use_liger_kernel")
    overlap_comm: bool = row(False, X, dotted="ds.overlap_comm")
    disable_fast_tokenizer: bool = row(False, X, dotted="data.disable_fast_tokenizer")
    deepspeed_enable_sleep: bool = row(False, X, dotted="ds.enable_sleep")
    ds_tensor_parallel_size: int = row(1, X, constraint="ge1", dotted="ds.tensor_parallel_size")
    ring_attn_size: int = row(1, X, constraint="ge1", dotted="ds.ring_attn_size")
    ring_head_stride: int = row(1, X, constraint="ge1", dotted="ds.ring_attn_head_stride")
    packing_samples: bool = row(False, X, dotted="ds.packing_samples")
    rollout_max_tokens_per_gpu: int | None = row(None, X, constraint="ge1", dotted="rollout.max_tokens_per_gpu")
    train_max_tokens_per_gpu: int = row(16192, X, constraint="ge1", dotted="train.max_tokens_per_gpu")
    ref_reward_offload: bool = row(False, X)
    local_rank: int = row(-1, X)
    # ---- eval, checkpoints, logging (instrumentation)
    eval_steps: int = row(-1, I, constraint="steps", dotted="eval.steps")
    save_steps: int = row(-1, I, constraint="steps", dotted="ckpt.save_steps")
    logging_steps: int = row(1, I, constraint="ge1", dotted="logger.logging_steps")
    eval_dataset: str | None = row(None, I, dotted="eval.dataset")
    eval_split: str = row("train", I, dotted="eval.split")
    eval_temperature: float = row(0.6, I, constraint="ge0", dotted="eval.temperature")
    eval_n_samples_per_prompt: int = row(4, I, constraint="ge1", dotted="eval.n_samples_per_prompt")
    ckpt_path: str = row("./ckpt/checkpoints_ppo_ray", I, dotted="ckpt.path")
    save_path: str = row("./ckpt", I, dotted="ckpt.output_dir")
    save_hf_ckpt: bool = row(False, I, dotted="ckpt.save_hf")
    disable_ds_ckpt: bool = row(False, I, dotted="ckpt.disable_ds")
    max_ckpt_num: int = row(3, I, constraint="ge1", dotted="ckpt.max_num")
    max_ckpt_mem: int = row(100_000_000, I, constraint="ge1", dotted="ckpt.max_mem")
    load_checkpoint: bool = row(False, I, dotted="ckpt.load_enable")
    use_ds_universal_ckpt: bool = row(False, I, dotted="ds.use_universal_ckpt")
    save_value_network: bool = row(False, I, dotted="critic.save_value_network")
    use_wandb: str | None = row(None, I)
    wandb_org: str | None = row(None, I, dotted="logger.wandb.org")
    wandb_group: str | None = row(None, I, dotted="logger.wandb.group")
    wandb_project: str = row("openrlhf_train_ppo", I, dotted="logger.wandb.project")
    wandb_run_name: str | None = row(None, I, dotted="logger.wandb.run_name")
    use_tensorboard: str | None = row(None, I, dotted="logger.tensorboard_dir")
    perf: bool = row(False, I)
    use_ms: bool = row(False, I)
    # the stated keys the table does not describe, by name: the later underscore flags, the dotted
    # flags of newer releases, loss_agg_mode; in the order the spec states them
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = TABLE_FIELDS.intersection(self.extra)
        if clash:
            raise ValueError(f"recipe keys of the table given as extra: {sorted(clash)}")

    @classmethod
    def of(cls, stated: Mapping[str, Any]) -> Recipe:
        """The recipe of the stated keys, the others at their default."""
        return cls(**{k: v for k, v in stated.items() if k in TABLE_FIELDS},
                   extra={k: v for k, v in stated.items() if k not in TABLE_FIELDS})

    @classmethod
    def resolve(cls, stated: Mapping[str, Any], defaults: Mapping[str, Any]) -> Recipe:
        del defaults  # the fields declare them (the table's defaults are read from the fields)
        return cls.of(stated)

    @property
    def loss_agg_mode(self) -> str | None:
        """``loss_agg_mode`` (:data:`COMMON_KEYS`: every trainer's recipe has it, with no default); None: unset."""
        return self.extra.get(LOSS_AGG_KEY.name)

    def __getitem__(self, key: str) -> Any:
        if key in TABLE_FIELDS:
            return getattr(self, key)
        return self.extra[key]

    def __iter__(self) -> Iterator[str]:
        yield from TABLE_FIELD_ORDER
        yield from self.extra

    def __len__(self) -> int:
        return len(TABLE_FIELD_ORDER) + len(self.extra)


TABLE_FIELD_ORDER: tuple[str, ...] = tuple(f.name for f in fields(Recipe) if f.name != "extra")
TABLE_FIELDS = frozenset(TABLE_FIELD_ORDER)


def as_recipe(recipe: Mapping[str, Any]) -> Recipe:
    """``recipe`` read in OpenRLHF's terms: a :class:`Recipe` as it is; a mapping (some of its keys: the local
    trainer's configuration, a test's few keys) with Recipe's own default for each key it lacks or leaves null."""
    if isinstance(recipe, Recipe):
        return recipe
    return Recipe(**{k: v for k, v in recipe.items() if k in TABLE_FIELDS and v is not None})

# The token-level clip range of the PPO ratio when a recipe states none: Recipe.eps_clip's default,
# OpenRLHF's --eps_clip, which TRL's GRPOConfig.epsilon and verl's actor clip_ratio share
# (tests/test_recipe.py reads all three from the trainers' own code); the value agent.gspo_clip warns at.
EPS_CLIP_DEFAULT: float = Recipe.eps_clip


def _table_row(f: Any) -> RecipeKey:
    """The table row of one field of :class:`Recipe`."""
    base, nullable, _ = str(f.type).partition(" | None")
    return RecipeKey(name=f.name, type=ANNOTATION_TYPES[base], default=f.default, kind=f.metadata["kind"],
                     nullable=bool(nullable), constraint=f.metadata["constraint"], dotted=f.metadata["dotted"])


# one row per field of Recipe, in its order; ``local`` is derived from LOCAL_TRAINER_KEYS below
RECIPE_TABLE: list[RecipeKey] = [_table_row(f) for f in fields(Recipe) if f.name != "extra"]

# The keys the local trainer reads; it ignores the others (GPU layout, vLLM, critic, ...). It
# implements group_norm and dr_grpo only, and always the k3 KL-loss form.
LOCAL_TRAINER_KEYS: tuple[str, ...] = (
    "pretrain",
    "advantage_estimator",
    "n_samples_per_prompt",
    "rollout_batch_size",
    "train_batch_size",
    "micro_train_batch_size",
    "max_epochs",
    "num_episodes",
    "actor_learning_rate",
    "lr_warmup_ratio",
    "min_lr_ratio",
    "adam_betas",
    "l2",
    "max_norm",
    "eps_clip",
    "init_kl_coef",
    "temperature",
    "generate_max_len",
    "lora_rank",
    "lora_alpha",
    "target_modules",
    "eval_steps",
    "save_steps",
    "max_samples",
    "seed",
)

# Underscore flags that OpenRLHF added after 0.9.3 (the reference of the table above), with their
# kind and their flag in the dotted dialect. Like dotted keys they have no default here: a recipe
# that does not state them keeps its digest. (``max_new_tokens`` is not one: the recipe says
# ``generate_max_len``, which the builder writes as --max_new_tokens from 0.9.8 on.)
LATER_UNDERSCORE_ROWS: dict[str, tuple[str, str]] = {
    "partial_rollout": (TRAINING, "train.partial_rollout_enable"),  # 0.9.7
    "best_metric_key": (INSTRUMENTATION, "ckpt.best_metric_key"),  # 0.9.9
    "dataloader_num_workers": (INFRASTRUCTURE, "data.dataloader_num_workers"),  # 0.9.10
    "image_key": (TRAINING, "data.image_key"),  # 0.10.0, vision-language data
    "max_images_per_prompt": (TRAINING, "data.max_images_per_prompt"),  # 0.10.0
    "freeze_visual_encoder": (TRAINING, "actor.freeze_visual_encoder"),  # 0.10.0
}
LATER_UNDERSCORE_KEYS: dict[str, str] = {name: kind for name, (kind, _) in LATER_UNDERSCORE_ROWS.items()}

# The command builder also translates ``max_new_tokens`` (0.9.8's name of ``generate_max_len``)
# when a caller hands it in; attempt.yaml keeps one name per meaning and does not accept it.
BUILDER_ONLY_DOTTED: dict[str, str] = {"max_new_tokens": "rollout.max_new_tokens"}

# A flag that only newer OpenRLHF releases have is stated under that release's own dotted name
# (``actor.loss_agg_mode``, ``algo.kl.unbiased_gradient``); the argv builder accepts it only for
# releases whose parser has it, and checks its value against that parser's type and choices.
# Its kind follows its group: GPU/DeepSpeed/vLLM knobs are infrastructure, logging and
# checkpoints instrumentation, everything else (actor, critic, algo, ...) training.
DOTTED_RECIPE_KEY = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
NOT_RECIPE_GROUPS = ("datasets", "trainer", "eval")  # dotted names of the spec's own fields
_DOTTED_INFRASTRUCTURE = ("vllm.", "ds.", "ref.offload", "reward.offload")
_DOTTED_INSTRUMENTATION = ("logger.", "ckpt.")
FLAG_VALUE = "flag_value"  # the type of a key the table does not describe: checked by the argv builder


# Keys of every trainer's recipe, in rlexp's own words: :func:`rlexp.trainers.launch.loss_recipe` writes
# each in the trainer's own settings (and refuses it, naming the trainer and release, where the trainer
# cannot do it). No default: an unstated key leaves the trainer's own behaviour, which the plan names
# (``loss_aggregation``), and the recipe's digest as it was.
LOSS_AGG_KEY = RecipeKey(name="loss_agg_mode", type="str", default=None, kind=TRAINING, nullable=True,
                         constraint="loss_agg_mode")
COMMON_KEYS: dict[str, RecipeKey] = {LOSS_AGG_KEY.name: LOSS_AGG_KEY}
COMMON_KEY_DESCRIPTIONS = {
    "loss_agg_mode": "training; how the per-token losses of an optimizer step become one number (verl's names: "
                     + " | ".join(LOSS_AGG_MODES) + "), written in the trainer's own setting; unset: the "
                     "trainer's own default, which rlexp plan names",
}


_DEFAULT_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "str_list": str, "float_pair": tuple}


def _build(rows: list[RecipeKey]) -> dict[str, RecipeKey]:
    keys: dict[str, RecipeKey] = {}
    local = set(LOCAL_TRAINER_KEYS)
    for row in rows:
        # the table is code: a typo in it must fail at import, not as a wrong schema later
        if row.name in keys or row.type not in TYPES or row.kind not in KINDS or row.constraint not in CONSTRAINTS:
            raise ValueError(f"recipe table: bad row {row.name!r}")
        if row.default is None and not row.nullable:
            raise ValueError(f"recipe table: {row.name!r} has no default and is not nullable")
        if row.default is not None and type(row.default) is not _DEFAULT_TYPES[row.type]:
            raise ValueError(f"recipe table: {row.name!r}'s default is not a {row.type}")
        keys[row.name] = replace(row, local=row.name in local)
    unknown = local - set(keys)
    if unknown:
        raise ValueError(f"LOCAL_TRAINER_KEYS names no table row: {sorted(unknown)}")
    clash = (set(BUILDER_ONLY_DOTTED) | set(LATER_UNDERSCORE_ROWS) | set(COMMON_KEYS)) & set(keys)
    if clash:
        raise ValueError(f"later flags repeat table rows: {sorted(clash)}")
    return keys


RECIPE_KEYS: dict[str, RecipeKey] = _build(RECIPE_TABLE)
RECIPE_DEFAULTS: dict[str, Any] = {k.name: k.default for k in RECIPE_KEYS.values()}
# the trainer whose arguments the table names: a check of recipe values made before any attempt
# is loaded (a ladder's grid) checks them as this trainer's
RECIPE_TABLE_TRAINER = "openrlhf"


def dotted_names() -> dict[str, str]:
    """v0.9.x key -> v0.10.2+ flag (without dashes), for every key that dialect has."""
    names = {k.name: k.dotted for k in RECIPE_KEYS.values() if k.dotted is not None}
    later = {name: dotted for name, (_, dotted) in LATER_UNDERSCORE_ROWS.items()}
    return {**names, **later, **BUILDER_ONLY_DOTTED}


def is_dotted_recipe_key(name: str) -> bool:
    return bool(DOTTED_RECIPE_KEY.match(name)) and name.split(".")[0] not in NOT_RECIPE_GROUPS


def recipe_key(name: str) -> RecipeKey | None:
    """The metadata of a recipe key: a v0.9.3 name of :data:`RECIPE_KEYS`, a later underscore flag, or a
    dotted newer-release flag; None for anything else."""
    if name in RECIPE_KEYS:
        return RECIPE_KEYS[name]
    if name in LATER_UNDERSCORE_ROWS:
        kind, dotted = LATER_UNDERSCORE_ROWS[name]
        return RecipeKey(name, FLAG_VALUE, None, kind, True, None, dotted)
    if not is_dotted_recipe_key(name):
        return None
    if name.startswith(_DOTTED_INFRASTRUCTURE) and not name.startswith("ds.lora."):
        kind = INFRASTRUCTURE
    elif name.startswith(_DOTTED_INSTRUMENTATION):
        kind = INSTRUMENTATION
    else:
        kind = TRAINING
    return RecipeKey(name, FLAG_VALUE, None, kind, True, None)


def local_trainer_keys() -> list[RecipeKey]:
    """The rows the local trainer reads, in table order."""
    return [k for k in RECIPE_KEYS.values() if k.local]


def local_trainer_value(key: RecipeKey, value: Any) -> Any:
    """A resolved recipe value as the local trainer holds it: lists become tuples (the
    configuration is frozen), a comma-separated ``target_modules`` string a tuple of names."""
    if value is None:
        return None
    if key.type == "str_list":
        return tuple(value.split(",")) if isinstance(value, str) else tuple(str(v) for v in value)
    if key.type == "float_pair":
        return tuple(float(v) for v in value)
    if key.type == "bool":
        return bool(value)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected {key.type}, got {type(value).__name__}")
    return {"int": int, "float": float, "str": str}[key.type](value)


# ----------------------------------------------------------------------------- JSON Schema

# A number written as text: PyYAML reads 5e-7 (no dot) as a string and the spec accepts it.
NUMERIC_STRING = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"


def json_number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> dict[str, Any]:
    """A number, or a numeric string (whose bounds JSON Schema cannot check)."""
    number: dict[str, Any] = {"type": "number"}
    if low is not None:
        number["exclusiveMinimum" if low_open else "minimum"] = low
    if high is not None:
        number["maximum"] = high
    return {"anyOf": [number, {"type": "string", "pattern": NUMERIC_STRING}]}


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def key_json_schema(key: RecipeKey) -> dict[str, Any]:
    """The JSON Schema of one recipe value (what :func:`rlexp.spec.load_attempt` accepts)."""
    rule = key.constraint
    schema: dict[str, Any]
    if key.type == "int":
        schema = {"type": "integer"}
        if rule in ("gt0", "ge1"):
            schema["minimum"] = 1
        elif rule == "ge0":
            schema["minimum"] = 0
        elif rule == "steps":
            schema["anyOf"] = [{"const": -1}, {"minimum": 1}]
    elif key.type == "float":
        low, high, low_open = {
            "gt0": (0, None, True), "ge1": (1, None, False), "ge0": (0, None, False), "ratio": (0, 1, False),
        }.get(rule or "", (None, None, False))  # fmt: skip
        schema = json_number(low, high, low_open=low_open)
    elif key.type == "bool":
        schema = {"type": "boolean"}
    elif key.type == "str":
        if rule == "advantage":
            schema = {"enum": list(ADVANTAGE_ESTIMATORS)}
        elif rule == "loss_agg_mode":
            schema = {"enum": list(LOSS_AGG_MODES)}
        elif rule == "kl_estimator":
            schema = {"enum": list(KL_ESTIMATORS)}
        else:
            schema = {"type": "string"}
    elif key.type == "str_list":
        name = {"type": "string", "pattern": r"\S"}
        schema = {"anyOf": [name, {"type": "array", "items": name, "minItems": 1, "uniqueItems": True}]}
    elif key.type == "float_pair":
        schema = {"type": "array", "items": json_number(), "minItems": 2, "maxItems": 2}
    else:  # FLAG_VALUE: a switch, a number, a string or a list of them; the argv builder checks it
        scalar = [{"type": "number"}, {"type": "string"}]
        schema = {"anyOf": [{"type": "boolean"}, *scalar, {"type": "array", "minItems": 1, "items": {"anyOf": scalar}}]}
    if key.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if "." in key.name:
        flag = f"--{key.name} (releases whose parser has it)"
    else:
        flag = f"--{key.name}" + (f", v0.10.2+: --{key.dotted}" if key.dotted else ", no v0.10.2+ flag")
    reader = "read by the local trainer" if key.local else "ignored by the local trainer"
    described = {"description": f"{key.kind}; OpenRLHF {flag}; {reader}"}
    if key.type != FLAG_VALUE:
        described["default"] = _json_default(key.default)
    return {**described, **schema}


# DOTTED_RECIPE_KEY without the spec's own groups (JSON Schema has no "and not")
DOTTED_KEY_PATTERN = r"^(?!(" + "|".join(NOT_RECIPE_GROUPS) + r")\.)" + DOTTED_RECIPE_KEY.pattern[1:]


def common_keys_json_schema() -> dict[str, Any]:
    """The JSON Schema of each key every trainer's recipe has (:data:`COMMON_KEYS`): no default
    (unset, the trainer keeps its own)."""
    out = {}
    for name, key in COMMON_KEYS.items():
        schema = {**key_json_schema(key), "description": COMMON_KEY_DESCRIPTIONS[name]}
        schema.pop("default", None)
        out[name] = schema
    return out


def recipe_json_schema() -> dict[str, Any]:
    """The JSON Schema of the ``recipe`` section: the table's keys, each typed and bounded, the
    later underscore flags, and the dotted name of any newer release's flag."""
    properties = {name: key_json_schema(key) for name, key in RECIPE_KEYS.items()}
    for name in LATER_UNDERSCORE_ROWS:
        properties[name] = key_json_schema(recipe_key(name))  # type: ignore[arg-type]
    properties.update(common_keys_json_schema())
    dotted = key_json_schema(RecipeKey("a.b", FLAG_VALUE, None, TRAINING, True, None))
    dotted["description"] = "a flag only newer OpenRLHF releases have, under its own dotted name"
    return {
        "type": "object",
        "description": "OpenRLHF v0.9.x argument names without the dashes; unstated keys take the default",
        "properties": properties,
        "patternProperties": {DOTTED_KEY_PATTERN: dotted},
        "additionalProperties": False,
    }


# ----------------------------------------------------------------------------- per-trainer key tables
#
# Each trainer keeps its own key names in the recipe: OpenRLHF's argument names (the table above,
# shared by the local trainer), or a trainer's own (its package builds its table). One
# TrainerKeyTable per trainer says which keys a recipe for that trainer may state, with each key's
# type, default and kind, so that the spec's validation, its defaults and the one-variable rule
# (rlexp.spec.diff_against_parent) work the same way for every trainer.


@dataclass(frozen=True)
class TrainerKeyTable:
    """The recipe keys of one trainer (``trainer.name``)."""

    trainer: str
    spelling: str  # what the key names are, for messages ("TRL 1.16.0 GRPOConfig fields")
    keys: Mapping[str, RecipeKey]  # the described keys in table order: defaults, diff order, "did you mean"
    defaults: Mapping[str, Any]  # what an unstated key resolves to
    # any key the trainer accepts: a described key, or one matched by a pattern (OpenRLHF's dotted
    # flags of newer releases); None for a key the trainer does not have
    lookup: Callable[[str], RecipeKey | None]
    versions: tuple[str, ...] = ()  # the versions the keys were read from; () = any version
    model_key: str = "pretrain"  # the key naming the base model (Attempt.base_model reads it)
    names_only_schema: bool = False  # the JSON Schema lists the keys by name only (~900 keys would bloat it)
    schema_note: str = ""  # the rest of that schema's description: where the keys and their defaults are
    # the class of the resolved recipe: OpenRLHF's Recipe (a field per key), a trainer's own typed
    # attributes over its keys (TRL's TrlRecipe), or the plain mapping of a table's keys
    recipe_type: type[RecipeView] = NativeRecipe

    def recipe(self, stated: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> RecipeView:
        """The resolved recipe of the ``stated`` keys: every described key, at its default unless stated.
        ``defaults``: the defaults this recipe runs with where they are not the table's (TRL's
        RLOOConfig's for an RLOO recipe)."""
        return self.recipe_type.resolve(stated, self.defaults if defaults is None else defaults)


def openrlhf_key_table(trainer: str) -> TrainerKeyTable:
    """OpenRLHF's argument names (the table above), the table of every trainer that reads them
    (OpenRLHF, the local trainer: rlexp.trainers.base.TrainerRules.build_key_table's default)."""
    return TrainerKeyTable(trainer, "OpenRLHF v0.9.x argument names without the dashes", RECIPE_KEYS,
                           RECIPE_DEFAULTS, recipe_key, recipe_type=Recipe)  # fmt: skip


JSON_VALUE = "json"  # a key of a composite type (a dict, a union): any YAML value, checked by the trainer at launch


class _TrainerTables(dict):
    """Each trainer's table, built on first use by its package (``rules(name).build_key_table()``,
    rlexp.trainers): some take tens of milliseconds to import (~900 keys), which every command
    (``rlexp --help`` included) would otherwise pay."""

    def __missing__(self, trainer: str) -> TrainerKeyTable:
        from rlexp.trainers import TRAINERS, rules

        if trainer not in TRAINERS:
            raise KeyError(trainer)
        table = self[trainer] = with_common_keys(rules(trainer).build_key_table())
        return table


def with_common_keys(table: TrainerKeyTable) -> TrainerKeyTable:
    """``table`` whose lookup also knows the keys of every trainer's recipe (:data:`COMMON_KEYS`)."""
    own = table.lookup

    def lookup(name: str) -> RecipeKey | None:
        return COMMON_KEYS.get(name) or own(name)

    return replace(table, lookup=lookup)


TRAINER_KEY_TABLES: dict[str, TrainerKeyTable] = _TrainerTables()


def key_table(trainer: str) -> TrainerKeyTable:
    """The key table of ``trainer`` (a ``trainer.name`` value)."""
    try:
        return TRAINER_KEY_TABLES[trainer]
    except KeyError:
        raise ValueError(f"no recipe-key table for trainer {trainer!r}") from None


def recipe_key_for(trainer: str, name: str) -> RecipeKey | None:
    """The metadata of recipe key ``name`` for ``trainer``; None when that trainer has no such key."""
    return key_table(trainer).lookup(name)


def recipe_kind_for(trainer: str, name: str) -> str | None:
    """The kind of a recipe key (training, instrumentation, infrastructure) for the one-variable rule."""
    key = recipe_key_for(trainer, name)
    return key.kind if key is not None else None


def table_json_schema(table: TrainerKeyTable) -> dict[str, Any]:
    """The JSON Schema of the ``recipe`` section for a trainer whose keys are all described
    (TRL's GRPOConfig fields): each key with its type and default, nothing else. A table of ~900 keys
    (``names_only_schema``) would make the schema file ten times larger: its keys are listed by name only."""
    if table.names_only_schema:
        return {"type": "object", "description": f"{table.spelling}; {table.schema_note}",
                "propertyNames": {"enum": [*table.keys, *COMMON_KEYS]}}
    properties = {}
    for name, key in table.keys.items():
        schema = {} if key.type == JSON_VALUE else key_json_schema(key)
        schema.pop("description", None)
        properties[name] = {"description": f"{key.kind}; {table.spelling}", **schema,
                            "default": _json_default(key.default)}
    properties.update(common_keys_json_schema())
    return {"type": "object", "description": f"{table.spelling}; unstated keys take the default",
            "properties": properties, "additionalProperties": False}
