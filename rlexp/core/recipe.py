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
  tests check both sides against the flag tables of ``rlexp/backends/flags``.

Derived from it: the spec schema (:mod:`rlexp.core.spec`, and the JSON Schema of ``attempt.yaml``
through :func:`recipe_json_schema`), the local trainer's configuration (the keys of
:data:`LOCAL_TRAINER_KEYS`, with the same defaults) and both OpenRLHF dialects
(:func:`dotted_names`; the v0.9.x dialect is the key itself).

One default per key, OpenRLHF's, whichever trainer runs the recipe: ``load_attempt`` fills every
unstated key with it before any trainer reads the recipe, so a second set of trainer defaults
could never apply to a spec. A local spec states what it wants (``lora_rank`` 0 is a full
fine-tune), and the local trainer refuses what it does not implement (the default ``gae``).

Keys the table does not describe are accepted too, with no default (a recipe that does not state
them keeps its digest) and type ``flag_value``, checked by the argv builder against the parser of
the exact release: the underscore flags added after v0.9.3 (:data:`LATER_UNDERSCORE_ROWS`) and
any newer release's flag under its own dotted name (:func:`recipe_key`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

TRAINING = "training"
INSTRUMENTATION = "instrumentation"
INFRASTRUCTURE = "infrastructure"
KINDS = (TRAINING, INSTRUMENTATION, INFRASTRUCTURE)

ADVANTAGE_ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
TYPES = ("int", "float", "bool", "str", "str_list", "float_pair")
CONSTRAINTS = (None, "gt0", "ge0", "ge1", "ratio", "steps", "advantage", "kl_estimator")


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
    local: bool = False  # read by the local trainer (rlexp.backends.local_trainer)


T, I, X = TRAINING, INSTRUMENTATION, INFRASTRUCTURE  # noqa: E741 (short names keep the table readable)

# name, type, default (OpenRLHF v0.9.3 argparse), kind, nullable, constraint, v0.10.2+ dotted flag
RECIPE_TABLE: list[tuple[str, str, Any, str, bool, str | None, str | None]] = [
    # ---- model, reward, data
    ("pretrain", "str", None, T, True, None, "actor.model_name_or_path"),
    ("reward_pretrain", "str", None, T, True, None, "reward.model_name_or_path"),
    ("remote_rm_url", "str", None, T, True, None, "reward.remote_url"),
    ("critic_pretrain", "str", None, T, True, None, "critic.model_name_or_path"),
    ("value_head_prefix", "str", "score", T, False, None, "ds.value_head_prefix"),
    ("agent_func_path", "str", None, T, True, None, "train.agent_func_path"),
    ("prompt_data", "str", None, T, True, None, "data.prompt_dataset"),
    ("prompt_data_probs", "str", None, T, True, None, "data.prompt_probs"),
    ("prompt_split", "str", "train", T, False, None, "data.prompt_split"),
    ("input_key", "str", "input", T, False, None, "data.input_key"),
    ("label_key", "str", None, T, True, None, "data.label_key"),
    ("input_template", "str", None, T, True, None, "data.input_template"),
    ("apply_chat_template", "bool", False, T, False, None, "data.apply_chat_template"),
    # ---- algorithm
    ("advantage_estimator", "str", "gae", T, False, "advantage", "algo.advantage.estimator"),
    ("policy_loss_type", "str", "ppo", T, False, None, "actor.policy_loss_type"),
    ("eps_clip", "float", 0.2, T, False, "gt0", "actor.eps_clip"),
    ("eps_clip_low_high", "float_pair", None, T, True, None, "actor.eps_clip_low_high"),
    ("dual_clip", "float", None, T, True, None, "actor.dual_clip"),
    ("value_clip", "float", 0.5, T, False, None, "critic.value_clip"),
    ("lambd", "float", 1.0, T, False, None, "algo.advantage.lambd"),
    ("gamma", "float", 1.0, T, False, None, "algo.advantage.gamma"),
    ("init_kl_coef", "float", 0.01, T, False, "ge0", "algo.kl.init_coef"),
    ("use_kl_loss", "bool", False, T, False, None, "algo.kl.use_loss"),
    ("kl_estimator", "str", "k1", T, False, "kl_estimator", "algo.kl.estimator"),
    ("kl_target", "float", None, T, True, None, "algo.kl.target"),
    ("kl_horizon", "int", 10000, T, False, None, "algo.kl.horizon"),
    ("entropy_loss_coef", "float", None, T, True, None, "actor.entropy_coef"),
    ("aux_loss_coef", "float", 0.0, T, False, None, "actor.aux_loss_coef"),
    ("ptx_coef", "float", 0.05, T, False, None, None),
    ("normalize_reward", "bool", False, T, False, None, "reward.normalize_enable"),
    ("no_advantage_std_norm", "bool", False, T, False, None, "algo.advantage.no_std_norm"),
    ("reward_clip_range", "float_pair", (-10.0, 10.0), T, False, None, "reward.clip_range"),
    ("overlong_buffer_len", "float", None, T, True, None, "reward.overlong_buffer_len"),
    ("overlong_penalty_factor", "float", 1.0, T, False, None, "reward.overlong_penalty_factor"),
    ("stop_properly_penalty_coef", "float", None, T, True, None, "reward.stop_properly_penalty_coef"),
    ("dynamic_filtering", "bool", False, T, False, None, "algo.dynamic_filtering_enable"),
    ("dynamic_filtering_reward_range", "float_pair", (0.0, 1.0), T, False, None, "algo.dynamic_filtering_range"),
    ("async_train", "bool", False, T, False, None, "train.async_enable"),
    ("enable_vllm_is_correction", "bool", False, T, False, None, "algo.advantage.is_correction_enable"),
    ("vllm_is_truncated_threshold", "float_pair", (0.5, 5.0), T, False, None, "algo.advantage.is_correction_threshold"),
    ("vllm_is_correction_type", "str", "tis", T, False, None, "algo.advantage.is_correction_type"),
    # 0.10.2 renamed it and kept its meaning (freeze the actor for N steps while the critic warms up)
    ("freezing_actor_steps", "int", -1, T, False, None, "critic.freezing_steps"),
    # ---- sampling and lengths
    ("n_samples_per_prompt", "int", 1, T, False, "ge1", "rollout.n_samples_per_prompt"),
    ("temperature", "float", 1.0, T, False, "ge0", "rollout.temperature"),
    ("top_p", "float", 1.0, T, False, "gt0", "rollout.top_p"),
    ("prompt_max_len", "int", 1024, T, False, "ge1", None),
    ("generate_max_len", "int", 1024, T, False, "ge1", "rollout.max_new_tokens"),
    ("max_len", "int", None, T, True, "ge1", "data.max_len"),
    ("max_samples", "int", 100_000_000, T, False, "ge1", "data.max_samples"),
    # ---- batches, epochs, steps
    ("num_episodes", "int", 1, T, False, "ge1", "train.num_episodes"),
    ("max_epochs", "int", 1, T, False, "ge1", "train.max_epochs"),
    ("rollout_batch_size", "int", 1024, T, False, "ge1", "rollout.batch_size"),
    ("micro_rollout_batch_size", "int", 8, X, False, "ge1", "rollout.micro_batch_size"),
    ("train_batch_size", "int", 128, T, False, "ge1", "train.batch_size"),
    ("micro_train_batch_size", "int", 4, T, False, "ge1", "train.micro_batch_size"),
    ("use_dynamic_batch", "bool", False, T, False, None, "train.dynamic_batch_enable"),
    ("seed", "int", 42, T, False, None, "train.seed"),
    ("full_determinism", "bool", False, T, False, None, "train.full_determinism_enable"),
    # ---- optimiser and LR schedule
    ("actor_learning_rate", "float", 1e-6, T, False, "gt0", "actor.adam.lr"),
    ("critic_learning_rate", "float", 9e-6, T, False, "gt0", "critic.adam.lr"),
    ("lr_warmup_ratio", "float", 0.03, T, False, "ratio", "actor.lr_warmup_ratio"),
    ("min_lr_ratio", "float", 0.1, T, False, "ratio", "actor.min_lr_ratio"),  # v0.11 name; v0.9.x fixes it at 0.1
    ("lr_scheduler", "str", "cosine_with_min_lr", T, False, None, "actor.lr_scheduler"),
    ("max_norm", "float", 1.0, T, False, "gt0", "actor.max_norm"),
    ("l2", "float", 0.0, T, False, "ge0", "actor.adam.weight_decay"),
    ("adam_betas", "float_pair", (0.9, 0.95), T, False, None, "actor.adam.betas"),
    ("enable_ema", "bool", False, T, False, None, "train.enable_ema"),
    ("ema_beta", "float", 0.992, T, False, None, "train.ema_beta"),
    # ---- LoRA and precision
    ("lora_rank", "int", 0, T, False, "ge0", "ds.lora.rank"),
    ("lora_alpha", "int", 16, T, False, "ge0", "ds.lora.alpha"),
    ("target_modules", "str_list", "all-linear", T, False, None, "ds.lora.target_modules"),
    ("lora_dropout", "float", 0.0, T, False, "ratio", "ds.lora.dropout"),
    ("load_in_4bit", "bool", False, T, False, None, "ds.load_in_4bit"),
    ("param_dtype", "str", "bf16", T, False, None, "ds.param_dtype"),
    ("bf16", "bool", False, T, False, None, None),  # flag of releases before param_dtype
    ("grad_accum_dtype", "str", None, T, True, None, "ds.grad_accum_dtype"),
    # ---- GPU layout (infrastructure)
    ("actor_num_nodes", "int", 1, X, False, "ge1", "actor.num_nodes"),
    ("actor_num_gpus_per_node", "int", 8, X, False, "ge1", "actor.num_gpus_per_node"),
    ("ref_num_nodes", "int", 1, X, False, "ge1", "ref.num_nodes"),
    ("ref_num_gpus_per_node", "int", 8, X, False, "ge1", "ref.num_gpus_per_node"),
    ("reward_num_nodes", "int", 1, X, False, "ge1", "reward.num_nodes"),
    ("reward_num_gpus_per_node", "int", 8, X, False, "ge1", "reward.num_gpus_per_node"),
    ("critic_num_nodes", "int", 1, X, False, "ge1", "critic.num_nodes"),
    ("critic_num_gpus_per_node", "int", 8, X, False, "ge1", "critic.num_gpus_per_node"),
    ("colocate_actor_ref", "bool", False, X, False, None, "train.colocate_actor_ref"),
    ("colocate_critic_reward", "bool", False, X, False, None, "train.colocate_critic_reward"),
    ("colocate_all_models", "bool", False, X, False, None, "train.colocate_all"),
    ("vllm_num_engines", "int", None, X, True, "ge0", "vllm.num_engines"),
    ("vllm_tensor_parallel_size", "int", 1, X, False, "ge1", "vllm.tensor_parallel_size"),
    ("vllm_gpu_memory_utilization", "float", 0.95, X, False, "ratio", "vllm.gpu_memory_utilization"),
    ("vllm_sync_backend", "str", "nccl", X, False, None, "vllm.sync_backend"),
    ("vllm_sync_with_ray", "bool", False, X, False, None, "vllm.sync_with_ray"),
    ("vllm_enable_sleep", "bool", False, X, False, None, "vllm.enable_sleep"),
    ("vllm_generate_batch_size", "int", None, X, True, "ge1", "rollout.vllm_generate_batch_size"),
    ("enable_prefix_caching", "bool", False, X, False, None, "vllm.enable_prefix_caching"),
    ("enforce_eager", "bool", False, X, False, None, "vllm.enforce_eager"),
    ("async_queue_size", "int", 1, X, False, "ge1", "train.async_queue_size"),
    ("zero_stage", "int", 2, X, False, "ge0", "ds.zero_stage"),
    ("gradient_checkpointing", "bool", False, X, False, None, "actor.gradient_checkpointing_enable"),
    ("gradient_checkpointing_use_reentrant", "bool", False, X, False, None, "actor.gradient_checkpointing_reentrant"),
    ("deepcompile", "bool", False, X, False, None, "ds.deepcompile"),
    ("zpg", "int", 1, X, False, "ge1", "ds.zpg"),
    ("adam_offload", "bool", False, X, False, None, "ds.adam_offload"),
    ("offload", "bool", False, X, False, None, None),  # flag of releases before 0.9
    ("actor_init_on_gpu", "bool", False, X, False, None, None),
    ("attn_implementation", "str", "flash_attention_2", X, False, None, "ds.attn_implementation"),
    ("flash_attn", "bool", False, X, False, None, None),  # flag of releases before attn_implementation
    ("use_liger_kernel", "bool", False, X, False, None, "ds.use_liger_kernel"),
    ("overlap_comm", "bool", False, X, False, None, "ds.overlap_comm"),
    ("disable_fast_tokenizer", "bool", False, X, False, None, "data.disable_fast_tokenizer"),
    ("deepspeed_enable_sleep", "bool", False, X, False, None, "ds.enable_sleep"),
    ("ds_tensor_parallel_size", "int", 1, X, False, "ge1", "ds.tensor_parallel_size"),
    ("ring_attn_size", "int", 1, X, False, "ge1", "ds.ring_attn_size"),
    ("ring_head_stride", "int", 1, X, False, "ge1", "ds.ring_attn_head_stride"),
    ("packing_samples", "bool", False, X, False, None, "ds.packing_samples"),
    ("rollout_max_tokens_per_gpu", "int", None, X, True, "ge1", "rollout.max_tokens_per_gpu"),
    ("train_max_tokens_per_gpu", "int", 16192, X, False, "ge1", "train.max_tokens_per_gpu"),
    ("ref_reward_offload", "bool", False, X, False, None, None),
    ("local_rank", "int", -1, X, False, None, None),
    # ---- eval, checkpoints, logging (instrumentation)
    ("eval_steps", "int", -1, I, False, "steps", "eval.steps"),
    ("save_steps", "int", -1, I, False, "steps", "ckpt.save_steps"),
    ("logging_steps", "int", 1, I, False, "ge1", "logger.logging_steps"),
    ("eval_dataset", "str", None, I, True, None, "eval.dataset"),
    ("eval_split", "str", "train", I, False, None, "eval.split"),
    ("eval_temperature", "float", 0.6, I, False, "ge0", "eval.temperature"),
    ("eval_n_samples_per_prompt", "int", 4, I, False, "ge1", "eval.n_samples_per_prompt"),
    ("ckpt_path", "str", "./ckpt/checkpoints_ppo_ray", I, False, None, "ckpt.path"),
    ("save_path", "str", "./ckpt", I, False, None, "ckpt.output_dir"),
    ("save_hf_ckpt", "bool", False, I, False, None, "ckpt.save_hf"),
    ("disable_ds_ckpt", "bool", False, I, False, None, "ckpt.disable_ds"),
    ("max_ckpt_num", "int", 3, I, False, "ge1", "ckpt.max_num"),
    ("max_ckpt_mem", "int", 100_000_000, I, False, "ge1", "ckpt.max_mem"),
    ("load_checkpoint", "bool", False, I, False, None, "ckpt.load_enable"),
    ("use_ds_universal_ckpt", "bool", False, I, False, None, "ds.use_universal_ckpt"),
    ("save_value_network", "bool", False, I, False, None, "critic.save_value_network"),
    ("use_wandb", "str", None, I, True, None, None),
    ("wandb_org", "str", None, I, True, None, "logger.wandb.org"),
    ("wandb_group", "str", None, I, True, None, "logger.wandb.group"),
    ("wandb_project", "str", "openrlhf_train_ppo", I, False, None, "logger.wandb.project"),
    ("wandb_run_name", "str", None, I, True, None, "logger.wandb.run_name"),
    ("use_tensorboard", "str", None, I, True, None, "logger.tensorboard_dir"),
    ("perf", "bool", False, I, False, None, None),
    ("use_ms", "bool", False, I, False, None, None),
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


def _build(rows: list[tuple[str, str, Any, str, bool, str | None, str | None]]) -> dict[str, RecipeKey]:
    keys: dict[str, RecipeKey] = {}
    local = set(LOCAL_TRAINER_KEYS)
    for name, type_, default, kind, nullable, constraint, dotted in rows:
        # the table is code: a typo in it must fail at import, not as a wrong schema later
        if name in keys or type_ not in TYPES or kind not in KINDS or constraint not in CONSTRAINTS:
            raise ValueError(f"recipe table: bad row {name!r}")
        if default is None and not nullable:
            raise ValueError(f"recipe table: {name!r} has no default and is not nullable")
        keys[name] = RecipeKey(name, type_, default, kind, nullable, constraint, dotted, name in local)
    unknown = local - set(keys)
    if unknown:
        raise ValueError(f"LOCAL_TRAINER_KEYS names no table row: {sorted(unknown)}")
    clash = (set(BUILDER_ONLY_DOTTED) | set(LATER_UNDERSCORE_ROWS)) & set(keys)
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
    """The JSON Schema of one recipe value (what :func:`rlexp.core.spec.load_attempt` accepts)."""
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
            "gt0": (0, None, True), "ge1": (0, None, True), "ge0": (0, None, False), "ratio": (0, 1, False),
        }.get(rule or "", (None, None, False))  # fmt: skip
        schema = json_number(low, high, low_open=low_open)
    elif key.type == "bool":
        schema = {"type": "boolean"}
    elif key.type == "str":
        if rule == "advantage":
            schema = {"enum": list(ADVANTAGE_ESTIMATORS)}
        elif rule == "kl_estimator":
            schema = {"enum": list(KL_ESTIMATORS)}
        else:
            schema = {"type": "string"}
    elif key.type == "str_list":
        schema = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
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


def recipe_json_schema() -> dict[str, Any]:
    """The JSON Schema of the ``recipe`` section: the table's keys, each typed and bounded, the
    later underscore flags, and the dotted name of any newer release's flag."""
    properties = {name: key_json_schema(key) for name, key in RECIPE_KEYS.items()}
    for name in LATER_UNDERSCORE_ROWS:
        properties[name] = key_json_schema(recipe_key(name))  # type: ignore[arg-type]
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
# (rlexp.core.spec.diff_against_parent) work the same way for every trainer.


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
        table = self[trainer] = rules(trainer).build_key_table()
        return table


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
                "propertyNames": {"enum": list(table.keys)}}
    properties = {}
    for name, key in table.keys.items():
        schema = {} if key.type == JSON_VALUE else key_json_schema(key)
        schema.pop("description", None)
        properties[name] = {"description": f"{key.kind}; {table.spelling}", **schema,
                            "default": _json_default(key.default)}
    return {"type": "object", "description": f"{table.spelling}; unstated keys take the default",
            "properties": properties, "additionalProperties": False}
