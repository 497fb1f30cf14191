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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
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

# The token-level clip range of the PPO ratio when the recipe states none: OpenRLHF's --eps_clip default
# (v0.9.3's argparse), which TRL's GRPOConfig.epsilon and verl's actor clip_ratio share (tests/test_recipe.py
# reads all three from the trainers' own code). Written here once: the table's default, the checks' fallback
# for a recipe without it, and the value agent.gspo_clip warns at.
EPS_CLIP_DEFAULT = 0.2

# one row per key, its fields named (RecipeKey): type, default (OpenRLHF v0.9.3 argparse), kind, nullable,
# constraint, the v0.10.2+ dotted flag; ``local`` is derived from LOCAL_TRAINER_KEYS below
RECIPE_TABLE: list[RecipeKey] = [
    # ---- model, reward, data
    RecipeKey(name="pretrain", type="str", default=None, kind=T, nullable=True, dotted="actor.model_name_or_path"),
    RecipeKey(name="reward_pretrain", type="str", default=None, kind=T, nullable=True, dotted="reward.model_name_or_path"),
    RecipeKey(name="remote_rm_url", type="str", default=None, kind=T, nullable=True, dotted="reward.remote_url"),
    RecipeKey(name="critic_pretrain", type="str", default=None, kind=T, nullable=True, dotted="critic.model_name_or_path"),
    RecipeKey(name="value_head_prefix", type="str", default="score", kind=T, dotted="ds.value_head_prefix"),
    RecipeKey(name="agent_func_path", type="str", default=None, kind=T, nullable=True, dotted="train.agent_func_path"),
    RecipeKey(name="prompt_data", type="str", default=None, kind=T, nullable=True, dotted="data.prompt_dataset"),
    RecipeKey(name="prompt_data_probs", type="str", default=None, kind=T, nullable=True, dotted="data.prompt_probs"),
    RecipeKey(name="prompt_split", type="str", default="train", kind=T, dotted="data.prompt_split"),
    RecipeKey(name="input_key", type="str", default="input", kind=T, dotted="data.input_key"),
    RecipeKey(name="label_key", type="str", default=None, kind=T, nullable=True, dotted="data.label_key"),
    RecipeKey(name="input_template", type="str", default=None, kind=T, nullable=True, dotted="data.input_template"),
    RecipeKey(name="apply_chat_template", type="bool", default=False, kind=T, dotted="data.apply_chat_template"),
    # ---- algorithm
    RecipeKey(name="advantage_estimator", type="str", default="gae", kind=T, constraint="advantage", dotted="algo.advantage.estimator"),
    RecipeKey(name="policy_loss_type", type="str", default="ppo", kind=T, dotted="actor.policy_loss_type"),
    RecipeKey(name="eps_clip", type="float", default=EPS_CLIP_DEFAULT, kind=T, constraint="gt0", dotted="actor.eps_clip"),
    RecipeKey(name="eps_clip_low_high", type="float_pair", default=None, kind=T, nullable=True, dotted="actor.eps_clip_low_high"),
    RecipeKey(name="dual_clip", type="float", default=None, kind=T, nullable=True, dotted="actor.dual_clip"),
    RecipeKey(name="value_clip", type="float", default=0.5, kind=T, dotted="critic.value_clip"),
    RecipeKey(name="lambd", type="float", default=1.0, kind=T, dotted="algo.advantage.lambd"),
    RecipeKey(name="gamma", type="float", default=1.0, kind=T, dotted="algo.advantage.gamma"),
    RecipeKey(name="init_kl_coef", type="float", default=0.01, kind=T, constraint="ge0", dotted="algo.kl.init_coef"),
    RecipeKey(name="use_kl_loss", type="bool", default=False, kind=T, dotted="algo.kl.use_loss"),
    RecipeKey(name="kl_estimator", type="str", default="k1", kind=T, constraint="kl_estimator", dotted="algo.kl.estimator"),
    RecipeKey(name="kl_target", type="float", default=None, kind=T, nullable=True, dotted="algo.kl.target"),
    RecipeKey(name="kl_horizon", type="int", default=10000, kind=T, dotted="algo.kl.horizon"),
    RecipeKey(name="entropy_loss_coef", type="float", default=None, kind=T, nullable=True, dotted="actor.entropy_coef"),
    RecipeKey(name="aux_loss_coef", type="float", default=0.0, kind=T, dotted="actor.aux_loss_coef"),
    RecipeKey(name="ptx_coef", type="float", default=0.05, kind=T),
    RecipeKey(name="normalize_reward", type="bool", default=False, kind=T, dotted="reward.normalize_enable"),
    RecipeKey(name="no_advantage_std_norm", type="bool", default=False, kind=T, dotted="algo.advantage.no_std_norm"),
    RecipeKey(name="reward_clip_range", type="float_pair", default=(-10.0, 10.0), kind=T, dotted="reward.clip_range"),
    RecipeKey(name="overlong_buffer_len", type="float", default=None, kind=T, nullable=True, dotted="reward.overlong_buffer_len"),
    RecipeKey(name="overlong_penalty_factor", type="float", default=1.0, kind=T, dotted="reward.overlong_penalty_factor"),
    RecipeKey(name="stop_properly_penalty_coef", type="float", default=None, kind=T, nullable=True, dotted="reward.stop_properly_penalty_coef"),
    RecipeKey(name="dynamic_filtering", type="bool", default=False, kind=T, dotted="algo.dynamic_filtering_enable"),
    RecipeKey(name="dynamic_filtering_reward_range", type="float_pair", default=(0.0, 1.0), kind=T, dotted="algo.dynamic_filtering_range"),
    RecipeKey(name="async_train", type="bool", default=False, kind=T, dotted="train.async_enable"),
    RecipeKey(name="enable_vllm_is_correction", type="bool", default=False, kind=T, dotted="algo.advantage.is_correction_enable"),
    RecipeKey(name="vllm_is_truncated_threshold", type="float_pair", default=(0.5, 5.0), kind=T, dotted="algo.advantage.is_correction_threshold"),
    RecipeKey(name="vllm_is_correction_type", type="str", default="tis", kind=T, dotted="algo.advantage.is_correction_type"),
    # 0.10.2 renamed it and kept its meaning (freeze the actor for N steps while the critic warms up)
    RecipeKey(name="freezing_actor_steps", type="int", default=-1, kind=T, dotted="critic.freezing_steps"),
    # ---- sampling and lengths
    RecipeKey(name="n_samples_per_prompt", type="int", default=1, kind=T, constraint="ge1", dotted="rollout.n_samples_per_prompt"),
    RecipeKey(name="temperature", type="float", default=1.0, kind=T, constraint="ge0", dotted="rollout.temperature"),
    RecipeKey(name="top_p", type="float", default=1.0, kind=T, constraint="gt0", dotted="rollout.top_p"),
    RecipeKey(name="prompt_max_len", type="int", default=1024, kind=T, constraint="ge1"),
    RecipeKey(name="generate_max_len", type="int", default=1024, kind=T, constraint="ge1", dotted="rollout.max_new_tokens"),
    RecipeKey(name="max_len", type="int", default=None, kind=T, nullable=True, constraint="ge1", dotted="data.max_len"),
    RecipeKey(name="max_samples", type="int", default=100_000_000, kind=T, constraint="ge1", dotted="data.max_samples"),
    # ---- batches, epochs, steps
    RecipeKey(name="num_episodes", type="int", default=1, kind=T, constraint="ge1", dotted="train.num_episodes"),
    RecipeKey(name="max_epochs", type="int", default=1, kind=T, constraint="ge1", dotted="train.max_epochs"),
    RecipeKey(name="rollout_batch_size", type="int", default=1024, kind=T, constraint="ge1", dotted="rollout.batch_size"),
    RecipeKey(name="micro_rollout_batch_size", type="int", default=8, kind=X, constraint="ge1", dotted="rollout.micro_batch_size"),
    RecipeKey(name="train_batch_size", type="int", default=128, kind=T, constraint="ge1", dotted="train.batch_size"),
    RecipeKey(name="micro_train_batch_size", type="int", default=4, kind=T, constraint="ge1", dotted="train.micro_batch_size"),
    RecipeKey(name="use_dynamic_batch", type="bool", default=False, kind=T, dotted="train.dynamic_batch_enable"),
    RecipeKey(name="seed", type="int", default=42, kind=T, constraint="ge0", dotted="train.seed"),
    RecipeKey(name="full_determinism", type="bool", default=False, kind=T, dotted="train.full_determinism_enable"),
    # ---- optimiser and LR schedule
    RecipeKey(name="actor_learning_rate", type="float", default=1e-6, kind=T, constraint="gt0", dotted="actor.adam.lr"),
    RecipeKey(name="critic_learning_rate", type="float", default=9e-6, kind=T, constraint="gt0", dotted="critic.adam.lr"),
    RecipeKey(name="lr_warmup_ratio", type="float", default=0.03, kind=T, constraint="ratio", dotted="actor.lr_warmup_ratio"),
    RecipeKey(name="min_lr_ratio", type="float", default=0.1, kind=T, constraint="ratio", dotted="actor.min_lr_ratio"),  # v0.11 name; v0.9.x fixes it at 0.1
    RecipeKey(name="lr_scheduler", type="str", default="cosine_with_min_lr", kind=T, dotted="actor.lr_scheduler"),
    RecipeKey(name="max_norm", type="float", default=1.0, kind=T, constraint="gt0", dotted="actor.max_norm"),
    RecipeKey(name="l2", type="float", default=0.0, kind=T, constraint="ge0", dotted="actor.adam.weight_decay"),
    RecipeKey(name="adam_betas", type="float_pair", default=(0.9, 0.95), kind=T, dotted="actor.adam.betas"),
    RecipeKey(name="enable_ema", type="bool", default=False, kind=T, dotted="train.enable_ema"),
    RecipeKey(name="ema_beta", type="float", default=0.992, kind=T, dotted="train.ema_beta"),
    # ---- LoRA and precision
    RecipeKey(name="lora_rank", type="int", default=0, kind=T, constraint="ge0", dotted="ds.lora.rank"),
    RecipeKey(name="lora_alpha", type="int", default=16, kind=T, constraint="ge0", dotted="ds.lora.alpha"),
    RecipeKey(name="target_modules", type="str_list", default="all-linear", kind=T, dotted="ds.lora.target_modules"),
    RecipeKey(name="lora_dropout", type="float", default=0.0, kind=T, constraint="ratio", dotted="ds.lora.dropout"),
    RecipeKey(name="load_in_4bit", type="bool", default=False, kind=T, dotted="ds.load_in_4bit"),
    RecipeKey(name="param_dtype", type="str", default="bf16", kind=T, dotted="ds.param_dtype"),
    RecipeKey(name="bf16", type="bool", default=False, kind=T),  # flag of releases before param_dtype
    RecipeKey(name="grad_accum_dtype", type="str", default=None, kind=T, nullable=True, dotted="ds.grad_accum_dtype"),
    # ---- GPU layout (infrastructure)
    RecipeKey(name="actor_num_nodes", type="int", default=1, kind=X, constraint="ge1", dotted="actor.num_nodes"),
    RecipeKey(name="actor_num_gpus_per_node", type="int", default=8, kind=X, constraint="ge1", dotted="actor.num_gpus_per_node"),
    RecipeKey(name="ref_num_nodes", type="int", default=1, kind=X, constraint="ge1", dotted="ref.num_nodes"),
    RecipeKey(name="ref_num_gpus_per_node", type="int", default=8, kind=X, constraint="ge1", dotted="ref.num_gpus_per_node"),
    RecipeKey(name="reward_num_nodes", type="int", default=1, kind=X, constraint="ge1", dotted="reward.num_nodes"),
    RecipeKey(name="reward_num_gpus_per_node", type="int", default=8, kind=X, constraint="ge1", dotted="reward.num_gpus_per_node"),
    RecipeKey(name="critic_num_nodes", type="int", default=1, kind=X, constraint="ge1", dotted="critic.num_nodes"),
    RecipeKey(name="critic_num_gpus_per_node", type="int", default=8, kind=X, constraint="ge1", dotted="critic.num_gpus_per_node"),
    RecipeKey(name="colocate_actor_ref", type="bool", default=False, kind=X, dotted="train.colocate_actor_ref"),
    RecipeKey(name="colocate_critic_reward", type="bool", default=False, kind=X, dotted="train.colocate_critic_reward"),
    RecipeKey(name="colocate_all_models", type="bool", default=False, kind=X, dotted="train.colocate_all"),
    RecipeKey(name="vllm_num_engines", type="int", default=None, kind=X, nullable=True, constraint="ge0", dotted="vllm.num_engines"),
    RecipeKey(name="vllm_tensor_parallel_size", type="int", default=1, kind=X, constraint="ge1", dotted="vllm.tensor_parallel_size"),
    RecipeKey(name="vllm_gpu_memory_utilization", type="float", default=0.95, kind=X, constraint="ratio", dotted="vllm.gpu_memory_utilization"),
    RecipeKey(name="vllm_sync_backend", type="str", default="nccl", kind=X, dotted="vllm.sync_backend"),
    RecipeKey(name="vllm_sync_with_ray", type="bool", default=False, kind=X, dotted="vllm.sync_with_ray"),
    RecipeKey(name="vllm_enable_sleep", type="bool", default=False, kind=X, dotted="vllm.enable_sleep"),
    RecipeKey(name="vllm_generate_batch_size", type="int", default=None, kind=X, nullable=True, constraint="ge1", dotted="rollout.vllm_generate_batch_size"),
    RecipeKey(name="enable_prefix_caching", type="bool", default=False, kind=X, dotted="vllm.enable_prefix_caching"),
    RecipeKey(name="enforce_eager", type="bool", default=False, kind=X, dotted="vllm.enforce_eager"),
    RecipeKey(name="async_queue_size", type="int", default=1, kind=X, constraint="ge1", dotted="train.async_queue_size"),
    RecipeKey(name="zero_stage", type="int", default=2, kind=X, constraint="ge0", dotted="ds.zero_stage"),
    RecipeKey(name="gradient_checkpointing", type="bool", default=False, kind=X, dotted="actor.gradient_checkpointing_enable"),
    RecipeKey(name="gradient_checkpointing_use_reentrant", type="bool", default=False, kind=X, dotted="actor.gradient_checkpointing_reentrant"),
    RecipeKey(name="deepcompile", type="bool", default=False, kind=X, dotted="ds.deepcompile"),
    RecipeKey(name="zpg", type="int", default=1, kind=X, constraint="ge1", dotted="ds.zpg"),
    RecipeKey(name="adam_offload", type="bool", default=False, kind=X, dotted="ds.adam_offload"),
    RecipeKey(name="offload", type="bool", default=False, kind=X),  # flag of releases before 0.9
    RecipeKey(name="actor_init_on_gpu", type="bool", default=False, kind=X),
    RecipeKey(name="attn_implementation", type="str", default="flash_attention_2", kind=X, dotted="ds.attn_implementation"),
    RecipeKey(name="flash_attn", type="bool", default=False, kind=X),  # flag of releases before attn_implementation
    RecipeKey(name="use_liger_kernel", type="bool", default=False, kind=X, dotted="ds.use_liger_kernel"),
    RecipeKey(name="overlap_comm", type="bool", default=False, kind=X, dotted="ds.overlap_comm"),
    RecipeKey(name="disable_fast_tokenizer", type="bool", default=False, kind=X, dotted="data.disable_fast_tokenizer"),
    RecipeKey(name="deepspeed_enable_sleep", type="bool", default=False, kind=X, dotted="ds.enable_sleep"),
    RecipeKey(name="ds_tensor_parallel_size", type="int", default=1, kind=X, constraint="ge1", dotted="ds.tensor_parallel_size"),
    RecipeKey(name="ring_attn_size", type="int", default=1, kind=X, constraint="ge1", dotted="ds.ring_attn_size"),
    RecipeKey(name="ring_head_stride", type="int", default=1, kind=X, constraint="ge1", dotted="ds.ring_attn_head_stride"),
    RecipeKey(name="packing_samples", type="bool", default=False, kind=X, dotted="ds.packing_samples"),
    RecipeKey(name="rollout_max_tokens_per_gpu", type="int", default=None, kind=X, nullable=True, constraint="ge1", dotted="rollout.max_tokens_per_gpu"),
    RecipeKey(name="train_max_tokens_per_gpu", type="int", default=16192, kind=X, constraint="ge1", dotted="train.max_tokens_per_gpu"),
    RecipeKey(name="ref_reward_offload", type="bool", default=False, kind=X),
    RecipeKey(name="local_rank", type="int", default=-1, kind=X),
    # ---- eval, checkpoints, logging (instrumentation)
    RecipeKey(name="eval_steps", type="int", default=-1, kind=I, constraint="steps", dotted="eval.steps"),
    RecipeKey(name="save_steps", type="int", default=-1, kind=I, constraint="steps", dotted="ckpt.save_steps"),
    RecipeKey(name="logging_steps", type="int", default=1, kind=I, constraint="ge1", dotted="logger.logging_steps"),
    RecipeKey(name="eval_dataset", type="str", default=None, kind=I, nullable=True, dotted="eval.dataset"),
    RecipeKey(name="eval_split", type="str", default="train", kind=I, dotted="eval.split"),
    RecipeKey(name="eval_temperature", type="float", default=0.6, kind=I, constraint="ge0", dotted="eval.temperature"),
    RecipeKey(name="eval_n_samples_per_prompt", type="int", default=4, kind=I, constraint="ge1", dotted="eval.n_samples_per_prompt"),
    RecipeKey(name="ckpt_path", type="str", default="./ckpt/checkpoints_ppo_ray", kind=I, dotted="ckpt.path"),
    RecipeKey(name="save_path", type="str", default="./ckpt", kind=I, dotted="ckpt.output_dir"),
    RecipeKey(name="save_hf_ckpt", type="bool", default=False, kind=I, dotted="ckpt.save_hf"),
    RecipeKey(name="disable_ds_ckpt", type="bool", default=False, kind=I, dotted="ckpt.disable_ds"),
    RecipeKey(name="max_ckpt_num", type="int", default=3, kind=I, constraint="ge1", dotted="ckpt.max_num"),
    RecipeKey(name="max_ckpt_mem", type="int", default=100_000_000, kind=I, constraint="ge1", dotted="ckpt.max_mem"),
    RecipeKey(name="load_checkpoint", type="bool", default=False, kind=I, dotted="ckpt.load_enable"),
    RecipeKey(name="use_ds_universal_ckpt", type="bool", default=False, kind=I, dotted="ds.use_universal_ckpt"),
    RecipeKey(name="save_value_network", type="bool", default=False, kind=I, dotted="critic.save_value_network"),
    RecipeKey(name="use_wandb", type="str", default=None, kind=I, nullable=True),
    RecipeKey(name="wandb_org", type="str", default=None, kind=I, nullable=True, dotted="logger.wandb.org"),
    RecipeKey(name="wandb_group", type="str", default=None, kind=I, nullable=True, dotted="logger.wandb.group"),
    RecipeKey(name="wandb_project", type="str", default="openrlhf_train_ppo", kind=I, dotted="logger.wandb.project"),
    RecipeKey(name="wandb_run_name", type="str", default=None, kind=I, nullable=True, dotted="logger.wandb.run_name"),
    RecipeKey(name="use_tensorboard", type="str", default=None, kind=I, nullable=True, dotted="logger.tensorboard_dir"),
    RecipeKey(name="perf", type="bool", default=False, kind=I),
    RecipeKey(name="use_ms", type="bool", default=False, kind=I),
]

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


def _build(rows: list[RecipeKey]) -> dict[str, RecipeKey]:
    keys: dict[str, RecipeKey] = {}
    local = set(LOCAL_TRAINER_KEYS)
    for row in rows:
        # the table is code: a typo in it must fail at import, not as a wrong schema later
        if row.name in keys or row.type not in TYPES or row.kind not in KINDS or row.constraint not in CONSTRAINTS:
            raise ValueError(f"recipe table: bad row {row.name!r}")
        if row.default is None and not row.nullable:
            raise ValueError(f"recipe table: {row.name!r} has no default and is not nullable")
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


def openrlhf_key_table(trainer: str) -> TrainerKeyTable:
    """OpenRLHF's argument names (the table above), the table of every trainer that reads them
    (OpenRLHF, the local trainer: rlexp.trainers.base.TrainerRules.build_key_table's default)."""
    return TrainerKeyTable(trainer, "OpenRLHF v0.9.x argument names without the dashes", RECIPE_KEYS,
                           RECIPE_DEFAULTS, recipe_key)  # fmt: skip


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
