"""The attempt spec (``attempt.yaml``): schema, parent-chain resolution, diff against the parent.

One file per attempt, under ``experiments/<experiment>/<attempt_id>/attempt.yaml``. A child names
its parent (``parent: a29b``), inherits everything and overrides what it states; ``change`` declares
the one training variable it changes, and :func:`diff_against_parent` says what really changed.

Recipe keys are OpenRLHF v0.9.x argument names without the dashes (checked against the argparse
of tag v0.9.3), so a recipe can be pasted from a training script; :data:`RECIPE_KEYS` holds each
key's type, the trainer's default and whether it is a *training* variable (counts against the
one-variable rule), *instrumentation* (eval set, eval/save cadence, logging) or *infrastructure*
(GPU layout, memory and speed knobs). Exempt kinds follow the seed's A27 table, except that
``num_episodes`` is a training variable here: it sets the step count and so the LR schedule.

Every bad input is an :class:`~rlexp.errors.InputError` naming the file and the key path. The
schema is declared here and checked with the standard library (see "schema" below for why).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.storage.files import load_yaml
from rlexp.storage.layout import SPEC_NAME

ROLES = ("pool", "ood_monitor", "ood_primary", "id", "sanity")
EVAL_ROLES = ("ood_monitor", "ood_primary", "id", "sanity")
TRAINERS = ("openrlhf", "local")
ENGINES = ("local", "vllm", "openai")
ADVANTAGE_ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")

TRAINING = "training"
INSTRUMENTATION = "instrumentation"
INFRASTRUCTURE = "infrastructure"


@dataclass(frozen=True)
class RecipeKey:
    """One OpenRLHF argument: its value type, the trainer's default, and its kind."""

    name: str
    type: str  # int | float | bool | str | str_list | float_pair
    default: Any
    kind: str  # training | instrumentation | infrastructure
    nullable: bool = False
    constraint: str | None = None  # "gt0", "ge0", "ge1", "ratio" (0..1), "steps" (-1 or >= 1)


T, I, X = TRAINING, INSTRUMENTATION, INFRASTRUCTURE  # noqa: E741 (short names keep the table readable)

# name, type, default (OpenRLHF v0.9.3 argparse), kind, nullable, constraint
_TABLE: list[tuple[str, str, Any, str, bool, str | None]] = [
    # ---- model, reward, data
    ("pretrain", "str", None, T, True, None),
    ("reward_pretrain", "str", None, T, True, None),
    ("remote_rm_url", "str", None, T, True, None),
    ("critic_pretrain", "str", None, T, True, None),
    ("value_head_prefix", "str", "score", T, False, None),
    ("agent_func_path", "str", None, T, True, None),
    ("prompt_data", "str", None, T, True, None),
    ("prompt_data_probs", "str", None, T, True, None),
    ("prompt_split", "str", "train", T, False, None),
    ("input_key", "str", "input", T, False, None),
    ("label_key", "str", None, T, True, None),
    ("input_template", "str", None, T, True, None),
    ("apply_chat_template", "bool", False, T, False, None),
    # ---- algorithm
    ("advantage_estimator", "str", "gae", T, False, "advantage"),
    ("policy_loss_type", "str", "ppo", T, False, None),
    ("eps_clip", "float", 0.2, T, False, "gt0"),
    ("eps_clip_low_high", "float_pair", None, T, True, None),
    ("dual_clip", "float", None, T, True, None),
    ("value_clip", "float", 0.5, T, False, None),
    ("lambd", "float", 1.0, T, False, None),
    ("gamma", "float", 1.0, T, False, None),
    ("init_kl_coef", "float", 0.01, T, False, "ge0"),
    ("use_kl_loss", "bool", False, T, False, None),
    ("kl_estimator", "str", "k1", T, False, "kl_estimator"),
    ("kl_target", "float", None, T, True, None),
    ("kl_horizon", "int", 10000, T, False, None),
    ("entropy_loss_coef", "float", None, T, True, None),
    ("aux_loss_coef", "float", 0.0, T, False, None),
    ("ptx_coef", "float", 0.05, T, False, None),
    ("normalize_reward", "bool", False, T, False, None),
    ("no_advantage_std_norm", "bool", False, T, False, None),
    ("reward_clip_range", "float_pair", (-10.0, 10.0), T, False, None),
    ("overlong_buffer_len", "float", None, T, True, None),
    ("overlong_penalty_factor", "float", 1.0, T, False, None),
    ("stop_properly_penalty_coef", "float", None, T, True, None),
    ("dynamic_filtering", "bool", False, T, False, None),
    ("dynamic_filtering_reward_range", "float_pair", (0.0, 1.0), T, False, None),
    ("async_train", "bool", False, T, False, None),
    ("enable_vllm_is_correction", "bool", False, T, False, None),
    ("vllm_is_truncated_threshold", "float_pair", (0.5, 5.0), T, False, None),
    ("vllm_is_correction_type", "str", "tis", T, False, None),
    ("freezing_actor_steps", "int", -1, T, False, None),
    # ---- sampling and lengths
    ("n_samples_per_prompt", "int", 1, T, False, "ge1"),
    ("temperature", "float", 1.0, T, False, "ge0"),
    ("top_p", "float", 1.0, T, False, "gt0"),
    ("prompt_max_len", "int", 1024, T, False, "ge1"),
    ("generate_max_len", "int", 1024, T, False, "ge1"),
    ("max_len", "int", None, T, True, "ge1"),
    ("max_samples", "int", 100_000_000, T, False, "ge1"),
    # ---- batches, epochs, steps
    ("num_episodes", "int", 1, T, False, "ge1"),
    ("max_epochs", "int", 1, T, False, "ge1"),
    ("rollout_batch_size", "int", 1024, T, False, "ge1"),
    ("micro_rollout_batch_size", "int", 8, X, False, "ge1"),
    ("train_batch_size", "int", 128, T, False, "ge1"),
    ("micro_train_batch_size", "int", 4, T, False, "ge1"),
    ("use_dynamic_batch", "bool", False, T, False, None),
    ("seed", "int", 42, T, False, None),
    ("full_determinism", "bool", False, T, False, None),
    # ---- optimiser and LR schedule
    ("actor_learning_rate", "float", 1e-6, T, False, "gt0"),
    ("critic_learning_rate", "float", 9e-6, T, False, "gt0"),
    ("lr_warmup_ratio", "float", 0.03, T, False, "ratio"),
    ("min_lr_ratio", "float", 0.1, T, False, "ratio"),  # v0.11 name; v0.9.x fixes it at 0.1
    ("lr_scheduler", "str", "cosine_with_min_lr", T, False, None),
    ("max_norm", "float", 1.0, T, False, "gt0"),
    ("l2", "float", 0.0, T, False, "ge0"),
    ("adam_betas", "float_pair", (0.9, 0.95), T, False, None),
    ("enable_ema", "bool", False, T, False, None),
    ("ema_beta", "float", 0.992, T, False, None),
    # ---- LoRA and precision
    ("lora_rank", "int", 0, T, False, "ge0"),
    ("lora_alpha", "int", 16, T, False, "ge0"),
    ("target_modules", "str_list", "all-linear", T, False, None),
    ("lora_dropout", "float", 0.0, T, False, "ratio"),
    ("load_in_4bit", "bool", False, T, False, None),
    ("param_dtype", "str", "bf16", T, False, None),
    ("bf16", "bool", False, T, False, None),  # flag of releases before param_dtype
    ("grad_accum_dtype", "str", None, T, True, None),
    # ---- GPU layout (infrastructure)
    ("actor_num_nodes", "int", 1, X, False, "ge1"),
    ("actor_num_gpus_per_node", "int", 8, X, False, "ge1"),
    ("ref_num_nodes", "int", 1, X, False, "ge1"),
    ("ref_num_gpus_per_node", "int", 8, X, False, "ge1"),
    ("reward_num_nodes", "int", 1, X, False, "ge1"),
    ("reward_num_gpus_per_node", "int", 8, X, False, "ge1"),
    ("critic_num_nodes", "int", 1, X, False, "ge1"),
    ("critic_num_gpus_per_node", "int", 8, X, False, "ge1"),
    ("colocate_actor_ref", "bool", False, X, False, None),
    ("colocate_critic_reward", "bool", False, X, False, None),
    ("colocate_all_models", "bool", False, X, False, None),
    ("vllm_num_engines", "int", None, X, True, "ge0"),
    ("vllm_tensor_parallel_size", "int", 1, X, False, "ge1"),
    ("vllm_gpu_memory_utilization", "float", 0.95, X, False, "ratio"),
    ("vllm_sync_backend", "str", "nccl", X, False, None),
    ("vllm_sync_with_ray", "bool", False, X, False, None),
    ("vllm_enable_sleep", "bool", False, X, False, None),
    ("vllm_generate_batch_size", "int", None, X, True, "ge1"),
    ("enable_prefix_caching", "bool", False, X, False, None),
    ("enforce_eager", "bool", False, X, False, None),
    ("async_queue_size", "int", 1, X, False, "ge1"),
    ("zero_stage", "int", 2, X, False, "ge0"),
    ("gradient_checkpointing", "bool", False, X, False, None),
    ("gradient_checkpointing_use_reentrant", "bool", False, X, False, None),
    ("deepcompile", "bool", False, X, False, None),
    ("zpg", "int", 1, X, False, "ge1"),
    ("adam_offload", "bool", False, X, False, None),
    ("offload", "bool", False, X, False, None),  # flag of releases before 0.9
    ("actor_init_on_gpu", "bool", False, X, False, None),
    ("attn_implementation", "str", "flash_attention_2", X, False, None),
    ("flash_attn", "bool", False, X, False, None),  # flag of releases before attn_implementation
    ("use_liger_kernel", "bool", False, X, False, None),
    ("overlap_comm", "bool", False, X, False, None),
    ("disable_fast_tokenizer", "bool", False, X, False, None),
    ("deepspeed_enable_sleep", "bool", False, X, False, None),
    ("ds_tensor_parallel_size", "int", 1, X, False, "ge1"),
    ("ring_attn_size", "int", 1, X, False, "ge1"),
    ("ring_head_stride", "int", 1, X, False, "ge1"),
    ("packing_samples", "bool", False, X, False, None),
    ("rollout_max_tokens_per_gpu", "int", None, X, True, "ge1"),
    ("train_max_tokens_per_gpu", "int", 16192, X, False, "ge1"),
    ("ref_reward_offload", "bool", False, X, False, None),
    ("local_rank", "int", -1, X, False, None),
    # ---- eval, checkpoints, logging (instrumentation)
    ("eval_steps", "int", -1, I, False, "steps"),
    ("save_steps", "int", -1, I, False, "steps"),
    ("logging_steps", "int", 1, I, False, "ge1"),
    ("eval_dataset", "str", None, I, True, None),
    ("eval_split", "str", "train", I, False, None),
    ("eval_temperature", "float", 0.6, I, False, "ge0"),
    ("eval_n_samples_per_prompt", "int", 4, I, False, "ge1"),
    ("ckpt_path", "str", "./ckpt/checkpoints_ppo_ray", I, False, None),
    ("save_path", "str", "./ckpt", I, False, None),
    ("save_hf_ckpt", "bool", False, I, False, None),
    ("disable_ds_ckpt", "bool", False, I, False, None),
    ("max_ckpt_num", "int", 3, I, False, "ge1"),
    ("max_ckpt_mem", "int", 100_000_000, I, False, "ge1"),
    ("load_checkpoint", "bool", False, I, False, None),
    ("use_ds_universal_ckpt", "bool", False, I, False, None),
    ("save_value_network", "bool", False, I, False, None),
    ("use_wandb", "str", None, I, True, None),
    ("wandb_org", "str", None, I, True, None),
    ("wandb_group", "str", None, I, True, None),
    ("wandb_project", "str", "openrlhf_train_ppo", I, False, None),
    ("wandb_run_name", "str", None, I, True, None),
    ("use_tensorboard", "str", None, I, True, None),
    ("perf", "bool", False, I, False, None),
    ("use_ms", "bool", False, I, False, None),
]

RECIPE_KEYS: dict[str, RecipeKey] = {row[0]: RecipeKey(*row) for row in _TABLE}
RECIPE_DEFAULTS: dict[str, Any] = {k.name: k.default for k in RECIPE_KEYS.values()}

# A flag that only newer OpenRLHF releases have is stated under that release's own dotted name
# (``actor.loss_agg_mode``, ``algo.kl.unbiased_gradient``); the argv builder accepts it only for
# releases whose parser has it, and checks its value against that parser's type and choices.
# Its kind follows its group: GPU/DeepSpeed/vLLM knobs are infrastructure, logging and
# checkpoints instrumentation, everything else (actor, critic, algo, ...) training.
DOTTED_RECIPE_KEY = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
_NOT_RECIPE_GROUPS = ("datasets", "trainer", "eval")  # dotted names of the spec's own fields
_DOTTED_INFRASTRUCTURE = ("vllm.", "ds.", "ref.offload", "reward.offload")
_DOTTED_INSTRUMENTATION = ("logger.", "ckpt.")


# Underscore flags that OpenRLHF added after 0.9.3 (the reference of the table above), with their
# kind. Like dotted keys they have no default here: a recipe that does not state them keeps its
# digest. (``max_new_tokens`` is not one: the recipe says ``generate_max_len``, which the builder
# writes as --max_new_tokens from 0.9.8 on.)
LATER_UNDERSCORE_KEYS: dict[str, str] = {
    "partial_rollout": TRAINING,  # 0.9.7
    "best_metric_key": INSTRUMENTATION,  # 0.9.9
    "dataloader_num_workers": INFRASTRUCTURE,  # 0.9.10
    "image_key": TRAINING,  # 0.10.0, vision-language data
    "max_images_per_prompt": TRAINING,  # 0.10.0
    "freeze_visual_encoder": TRAINING,  # 0.10.0
}


def is_dotted_recipe_key(name: str) -> bool:
    return bool(DOTTED_RECIPE_KEY.match(name)) and name.split(".")[0] not in _NOT_RECIPE_GROUPS


def recipe_key(name: str) -> RecipeKey | None:
    """The metadata of a recipe key: a v0.9.3 name of :data:`RECIPE_KEYS`, a later underscore flag, or a
    dotted newer-release flag; None for anything else."""
    if name in RECIPE_KEYS:
        return RECIPE_KEYS[name]
    if name in LATER_UNDERSCORE_KEYS:
        return RecipeKey(name, "flag_value", None, LATER_UNDERSCORE_KEYS[name], True, None)
    if not is_dotted_recipe_key(name):
        return None
    if name.startswith(_DOTTED_INFRASTRUCTURE) and not name.startswith("ds.lora."):
        kind = INFRASTRUCTURE
    elif name.startswith(_DOTTED_INSTRUMENTATION):
        kind = INSTRUMENTATION
    else:
        kind = TRAINING
    return RecipeKey(name, "flag_value", None, kind, True, None)


# ----------------------------------------------------------------------------- resolved objects


@dataclass(frozen=True)
class TrainerSettings:
    name: str  # openrlhf | local
    version: str  # "0.9.3", "0.11.0"; the local trainer follows OpenRLHF 0.11 step semantics
    gpus: int | None  # GPUs available to the run (None: not stated)


@dataclass(frozen=True)
class DatasetRef:
    """A dataset of the attempt. ``size`` is the file's line count when the file exists, else the
    stated size; ``stated_size`` keeps what the spec said (a mismatch is a preflight check)."""

    role: str
    path: Path | None  # absolute
    size: int | None
    prompt_suffix: str
    stated_size: int | None = None
    exists: bool = False


@dataclass(frozen=True)
class EvalSettings:
    """How checkpoints and baselines are evaluated (one pipeline for all of them, SOP §10.2)."""

    engine: str = "local"  # local | vllm | openai
    prompt_suffix: str = ""
    max_tokens: int = 2048
    max_lora_rank: int = 16  # vLLM's default; adapters of a higher rank are refused
    temperature: float = 0.0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int = 0
    batch_size: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_loras: int | None = None
    base_url: str | None = None  # openai engine: the server (vLLM's OpenAI-compatible API)
    model: str | None = None  # openai engine: served model name
    # openai engine: the NAME of the env var with the key, never the key; None = no Authorization header
    # (the engine's default too: an ambient OPENAI_API_KEY is never sent unless named here)
    api_key_env: str | None = None


@dataclass(frozen=True)
class Budget:
    free_disk_gb: float | None = None
    checkpoint_size_gb: float | None = None  # one saved checkpoint (LoRA adapter or full model)


@dataclass(frozen=True)
class Baseline:
    accuracy: float | None = None  # baseline accuracy on the primary set, fraction 0..1
    discordance: float = 0.12  # expected share of discordant problems (§11.26 observed 11.8%)


@dataclass(frozen=True)
class Attempt:
    id: str
    parent_id: str | None
    change: dict[str, Any]
    intent: dict[str, Any]
    trainer: TrainerSettings
    recipe: dict[str, Any]  # fully resolved: parent chain merged, defaults applied
    recipe_stated: dict[str, Any]  # only the keys some spec in the chain states
    datasets: dict[str, DatasetRef]
    eval: EvalSettings
    checkpoints_mid: int | None
    checkpoints_extra: tuple[int, ...]
    budget: Budget
    baseline: Baseline
    attempt_dir: Path
    experiment_dir: Path
    spec_path: Path
    parent: Attempt | None = None
    display_path: str = ""  # the spec path as the user wrote it (for messages)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # this file's own content
    merged_raw: dict[str, Any] = field(default_factory=dict, repr=False)  # chain-merged sections

    def chain(self) -> list[Attempt]:
        """This attempt and its ancestors, nearest first."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def chain_sha256(self) -> str:
        """One digest of every spec file in the chain: editing a parent changes the child's plan."""
        from rlexp.storage.files import sha256_file, sha256_text

        return sha256_text("\n".join(f"{a.id}:{sha256_file(a.spec_path)}" for a in self.chain()))

    def base_model(self) -> Path | str:
        """``recipe.pretrain``, resolved once for every stage: a directory (a relative path resolves
        against the experiment directory) when it exists, else the name as written (a hub id, which
        vLLM, an OpenAI-compatible server or OpenRLHF resolve themselves)."""
        pretrain = self.recipe.get("pretrain")
        if not isinstance(pretrain, str) or not pretrain:
            raise InputError(self.spec_path, "recipe.pretrain", "missing: the base model (a directory or a hub id)")
        path = Path(pretrain)
        if not path.is_absolute():
            path = self.experiment_dir / path
        return path if path.exists() else pretrain


@dataclass(frozen=True)
class Difference:
    key: str  # recipe key, or datasets.<role>.<field>, trainer.<field>, eval.<field>
    parent: Any
    value: Any
    kind: str  # training | instrumentation | infrastructure


# ----------------------------------------------------------------------------- schema
#
# A small declarative schema, checked with the standard library: pydantic would cost ~0.1 s of
# `rlexp plan`'s 0.5 s start-up budget for a dozen flat sections. Every section is a mapping
# with a closed set of keys (unknown keys are errors with a "did you mean"); leaves are
# checkers that return the value or raise with a one-line reason. ``None`` means "not stated".


class _Invalid(Exception):
    """A leaf value is wrong; the caller adds file and key path."""


def _int(minimum: int | None = None) -> Any:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be an integer (got {value!r})")
        if minimum is not None and value < minimum:
            raise _Invalid(f"must be > {minimum - 1} (got {value!r})" if minimum == 1 else
                           f"must be >= {minimum} (got {value!r})")  # fmt: skip
        return value

    return check


def _number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Any:
    def check(value: Any) -> float:
        number = _to_float(value)
        if low is not None and (number <= low if low_open else number < low):
            raise _Invalid(f"must be {'>' if low_open else '>='} {low:g} (got {value!r})")
        if high is not None and number > high:
            raise _Invalid(f"must be <= {high:g} (got {value!r})")
        return number

    return check


def _to_float(value: Any) -> float:
    # PyYAML reads 5e-7 (no dot) as a string: accept numeric strings, like a command line would
    if isinstance(value, bool):
        raise _Invalid(f"must be a number (got {value!r})")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _Invalid(f"must be a number (got {value!r})") from None
    if not math.isfinite(number):
        raise _Invalid(f"must be a finite number (got {value!r})")
    return number


def _str(value: Any) -> str:
    if not isinstance(value, str):
        hint = ' (quote versions: "0.10")' if isinstance(value, float) else ""
        raise _Invalid(f"must be a string (got {value!r}){hint}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false (got {value!r})")
    return value


def _one_of(*choices: str) -> Any:
    def check(value: Any) -> str:
        if value not in choices:
            raise _Invalid(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    return check


def _list_of(item: Any) -> Any:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _Invalid(f"must be a list (got {value!r})")
        return [item(v) for v in value]

    return check


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"must be a mapping (got {value!r})")
    return dict(value)


_POS_INT = _int(1)
_DATASET = {"path": _str, "size": _POS_INT, "prompt_suffix": _str}
_SCHEMA: dict[str, Any] = {
    "id": _str,
    "parent": _str,
    "description": _str,
    "change": _mapping,  # keys checked by _check_change_key
    "intent": {"global_steps": _POS_INT, "max_warmup_share": _number(0, 1, low_open=True), "note": _str},
    "trainer": {"name": _one_of(*TRAINERS), "version": _str, "gpus": _int(0)},
    "recipe": "recipe",  # checked against RECIPE_KEYS
    "datasets": {role: _DATASET for role in ROLES},
    "eval": {
        "engine": _one_of(*ENGINES),
        "prompt_suffix": _str,
        "max_tokens": _POS_INT,
        "max_lora_rank": _POS_INT,
        "temperature": _number(0),
        "top_p": _number(0, 1, low_open=True),
        "num_samples": _POS_INT,
        "seed": _int(),
        "batch_size": _POS_INT,
        "max_model_len": _POS_INT,
        "tensor_parallel_size": _POS_INT,
        "gpu_memory_utilization": _number(0, 1, low_open=True),
        "max_loras": _POS_INT,
        "base_url": _str,
        "model": _str,
        "api_key_env": _str,
    },
    "checkpoints": {"mid": _POS_INT, "extra": _list_of(_POS_INT)},
    "budget": {"free_disk_gb": _number(0), "checkpoint_size_gb": _number(0, low_open=True)},
    "baseline": {"accuracy": _number(0, 1), "discordance": _number(0, 1, low_open=True)},
}


def _suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _validate(raw: Any, display: str) -> dict[str, Any]:
    """Validate one file's content; return the keys it states (nested, after coercion)."""
    if not isinstance(raw, dict):
        what = "empty file" if raw is None else f"a {type(raw).__name__}"
        raise InputError(display, None, f"expected a mapping of spec keys at the top level, got {what}")
    return _validate_section(raw, _SCHEMA, display, "")


def _validate_section(
    raw: dict[Any, Any], schema: dict[str, Any], display: str, prefix: str
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in raw.items():
        where = f"{prefix}{name}"
        rule = schema.get(str(name))
        if rule is None:
            raise InputError(display, where, "unknown key" + _suggest(str(name), list(schema)))
        if value is None:
            continue  # not stated
        if rule == "recipe":
            if not isinstance(value, dict):
                raise InputError(display, where, f"must be a mapping (got {value!r})")
            out[name] = _validate_recipe(value, display)
        elif isinstance(rule, dict):
            if not isinstance(value, dict):
                raise InputError(display, where, f"must be a mapping (got {value!r})")
            out[name] = _validate_section(value, rule, display, f"{where}.")
        else:
            try:
                out[name] = rule(value)
            except _Invalid as exc:
                raise InputError(display, where, str(exc)) from None
    return out


def _validate_recipe(recipe: dict[str, Any], display: str) -> dict[str, Any]:
    """Check each recipe key against :data:`RECIPE_KEYS`; return the values, coerced."""
    out: dict[str, Any] = {}
    for name, value in recipe.items():
        key = recipe_key(str(name))
        where = f"recipe.{name}"
        if key is None:
            raise InputError(display, where, "unknown key" + _suggest(str(name), list(RECIPE_KEYS)))
        if value is None:
            if not key.nullable:
                raise InputError(display, where, f"must not be null (a {key.type.replace('_', ' ')})")
            out[name] = None
            continue
        try:
            value = _coerce(key, value)
            _check_constraint(key, value)
        except _Invalid as exc:
            raise InputError(display, where, str(exc)) from None
        out[name] = value
    return out


def _coerce(key: RecipeKey, value: Any) -> Any:
    if key.type == "int":
        return _int()(value)
    if key.type == "float":
        return _to_float(value)
    if key.type == "bool":
        return _bool(value)
    if key.type == "str":
        return _str(value)
    if key.type == "flag_value":  # a newer release's flag: the argv builder checks it against that parser
        scalar = bool | int | float | str
        if isinstance(value, scalar) or (isinstance(value, list) and value and all(
                isinstance(v, scalar) and not isinstance(v, bool) for v in value)):
            return value
        raise _Invalid(f"must be a switch, a number, a string or a list of them (got {value!r})")
    if key.type == "str_list":
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return value
        raise _Invalid(f"must be a string or a list of strings (got {value!r})")
    # float_pair
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _Invalid(f"must be a list of two numbers (got {value!r})")
    return tuple(_to_float(v) for v in value)


def _check_constraint(key: RecipeKey, value: Any) -> None:
    rule = key.constraint
    if rule == "advantage" and value not in ADVANTAGE_ESTIMATORS:
        raise _Invalid(f"must be one of {', '.join(ADVANTAGE_ESTIMATORS)} (got {value!r})")
    if rule == "kl_estimator" and value not in ("k1", "k2", "k3"):
        raise _Invalid(f"must be one of k1, k2, k3 (got {value!r})")
    if rule in ("gt0", "ge1") and not value > 0:
        raise _Invalid(f"must be > 0 (got {value!r})")
    if rule == "ge0" and not value >= 0:
        raise _Invalid(f"must be >= 0 (got {value!r})")
    if rule == "ratio" and not 0 <= value <= 1:
        raise _Invalid(f"must be between 0 and 1 (got {value!r})")
    if rule == "steps" and not (value == -1 or value >= 1):
        raise _Invalid(f"must be -1 (never) or >= 1 (got {value!r})")


# ----------------------------------------------------------------------------- loading

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_spec_path(path: str | Path) -> Path:
    """``ATTEMPT`` arguments are the attempt directory or its ``attempt.yaml``."""
    path = Path(path)
    if path.is_dir():
        return path / SPEC_NAME
    return path


def load_attempt(path: str | Path) -> Attempt:
    """Load an attempt spec, resolve its parent chain and apply defaults (InputError on bad input)."""
    spec_path = resolve_spec_path(path)
    return _load(spec_path, seen=())


def _load(spec_path: Path, seen: tuple[str, ...]) -> Attempt:
    display = str(spec_path)
    if not spec_path.exists():
        raise InputError(display, None, "file not found (an attempt is a directory holding attempt.yaml)")
    own = _validate(load_yaml(spec_path), display)
    attempt_dir = spec_path.parent
    dir_id = attempt_dir.resolve().name
    attempt_id = own.get("id") or dir_id
    if not _ID_RE.match(attempt_id):
        raise InputError(display, "id", f"{attempt_id!r} is not a valid attempt id (letters, digits, _ . -)")
    if attempt_id != dir_id:
        raise InputError(display, "id", f"{attempt_id!r} does not match its directory name {dir_id!r}")
    key = str(spec_path.resolve())

    parent: Attempt | None = None
    parent_id = own.get("parent")
    if parent_id is not None:
        if not _ID_RE.match(parent_id):  # a bare id: no paths, no other experiment
            raise InputError(display, "parent", f"{parent_id!r} is not an attempt id of this experiment")
        parent_spec = attempt_dir.parent / parent_id / SPEC_NAME
        if not parent_spec.exists():
            raise InputError(display, "parent", f"attempt {parent_id!r} not found (no {parent_spec})")
        if str(parent_spec.resolve()) in (*seen, key):
            chain = [Path(s).parent.name for s in (*seen, key)] + [parent_id]
            raise InputError(display, "parent", "cyclic parent chain: " + " -> ".join(chain))
        parent = _load(parent_spec, seen=(*seen, key))

    return _resolve(own, parent, spec_path, attempt_id, display)


def _merge(parent: dict[str, Any] | None, child: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(parent or {})
    for k, v in (child or {}).items():
        out[k] = _merge(out.get(k), v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _resolve(
    own: dict[str, Any], parent: Attempt | None, spec_path: Path, attempt_id: str, display: str
) -> Attempt:
    p_raw: dict[str, Any] = parent.merged_raw if parent is not None else {}
    merged: dict[str, Any] = {}
    for section in ("intent", "trainer", "recipe", "datasets", "eval", "checkpoints", "budget", "baseline"):
        merged[section] = _merge(p_raw.get(section), own.get(section))
    # A child pointing a dataset at another file must not inherit the old file's size.
    for role, entry in (own.get("datasets") or {}).items():
        inherited = (p_raw.get("datasets") or {}).get(role) or {}
        if entry and "path" in entry and "size" not in entry and entry["path"] != inherited.get("path"):
            merged["datasets"][role].pop("size", None)

    trainer_raw = merged["trainer"]
    if not trainer_raw.get("name"):
        raise InputError(display, "trainer.name", "required (openrlhf or local) in this spec or a parent")
    version = trainer_raw.get("version")
    if version is None:
        if trainer_raw["name"] == "local":
            version = "0.11.0"  # the local trainer follows OpenRLHF 0.11 step semantics
        else:
            raise InputError(display, "trainer.version", 'required for openrlhf (e.g. "0.9.3" or "0.11.0")')
    if not re.match(r"^\d+\.\d+", version):
        raise InputError(display, "trainer.version", f'{version!r} is not a version like "0.9.3"')
    trainer = TrainerSettings(name=trainer_raw["name"], version=version, gpus=trainer_raw.get("gpus"))

    recipe_stated = dict(merged["recipe"])
    recipe = {**RECIPE_DEFAULTS, **recipe_stated}

    experiment_dir = spec_path.parent.parent
    eval_raw = merged["eval"]
    defaults = EvalSettings()
    eval_settings = EvalSettings(
        **{k: eval_raw.get(k, getattr(defaults, k)) for k in EvalSettings.__dataclass_fields__}
    )

    datasets: dict[str, DatasetRef] = {}
    for role in ROLES:
        entry = merged["datasets"].get(role)
        if entry is None:
            continue
        datasets[role] = _dataset_ref(role, entry, experiment_dir, eval_settings.prompt_suffix, display)

    change = own.get("change") or {}
    for ckey in change:
        _check_change_key(ckey, display)

    ck = merged["checkpoints"]
    budget = Budget(**merged["budget"])
    baseline_raw = {k: v for k, v in merged["baseline"].items() if v is not None}
    attempt = Attempt(
        id=attempt_id,
        parent_id=own.get("parent"),
        change=dict(change),
        intent=dict(merged["intent"]),
        trainer=trainer,
        recipe=recipe,
        recipe_stated=recipe_stated,
        datasets=datasets,
        eval=eval_settings,
        checkpoints_mid=ck.get("mid"),
        checkpoints_extra=tuple(ck.get("extra") or ()),
        budget=budget,
        baseline=Baseline(**baseline_raw),
        attempt_dir=spec_path.parent.resolve(),
        experiment_dir=experiment_dir.resolve(),
        spec_path=spec_path.resolve(),
        parent=parent,
        display_path=display,
        raw=own,
        merged_raw=merged,
    )
    return attempt


def _dataset_ref(
    role: str, entry: dict[str, Any], experiment_dir: Path, eval_suffix: str, display: str
) -> DatasetRef:
    stated = entry.get("size")
    path = None
    exists = False
    size = stated
    if entry.get("path"):
        path = Path(entry["path"])
        if not path.is_absolute():
            path = experiment_dir / path
        path = path.resolve()
        if path.is_dir():
            raise InputError(
                display, f"datasets.{role}.path", f"{path} is a directory, expected a JSONL file"
            )
        exists = path.is_file()
        if exists:
            size = count_records(path)
    if size is None and not exists:
        raise InputError(display, f"datasets.{role}", "state a size, or a path to an existing file")
    suffix = entry.get("prompt_suffix")
    return DatasetRef(
        role=role,
        path=path,
        size=size,
        prompt_suffix=eval_suffix if suffix is None else suffix,
        stated_size=stated,
        exists=exists,
    )


def count_records(path: Path) -> int:
    """Non-blank lines of a JSONL file (its record count; validity is read by the checks)."""
    count = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                count += 1
    return count


def _check_change_key(ckey: str, display: str) -> None:
    if recipe_key(ckey) is not None:
        return
    parts = ckey.split(".")
    ok = (
        (
            len(parts) == 3
            and parts[0] == "datasets"
            and parts[1] in ROLES
            and parts[2] in ("path", "size", "prompt_suffix")
        )
        or (len(parts) == 2 and parts[0] == "trainer" and parts[1] in ("name", "version", "gpus"))
        or (len(parts) == 2 and parts[0] == "eval" and parts[1] in EvalSettings.__dataclass_fields__)
    )
    if not ok:
        candidates = [
            *RECIPE_KEYS,
            *(f"datasets.pool.{f}" for f in ("path", "size", "prompt_suffix")),
            "trainer.version",
            "trainer.name",
        ]
        raise InputError(
            display,
            f"change.{ckey}",
            "not a recipe key or datasets/trainer/eval field" + _suggest(ckey, candidates),
        )


# ----------------------------------------------------------------------------- diff against parent


def _dataset_kind(role: str) -> str:
    return TRAINING if role == "pool" else INSTRUMENTATION


def diff_against_parent(att: Attempt) -> list[Difference]:
    """Every resolved value that differs from the parent's, with its kind (empty for a root)."""
    par = att.parent
    if par is None:
        return []
    out: list[Difference] = []
    dotted = sorted({k for k in (*par.recipe, *att.recipe) if k not in RECIPE_KEYS})
    for key in (*RECIPE_KEYS, *dotted):
        a, b = par.recipe.get(key), att.recipe.get(key)
        if not values_equal(a, b):
            out.append(Difference(key, a, b, recipe_key(key).kind))
    for fname in ("name", "version"):
        a, b = getattr(par.trainer, fname), getattr(att.trainer, fname)
        if a != b:
            out.append(Difference(f"trainer.{fname}", a, b, TRAINING))
    if par.trainer.gpus != att.trainer.gpus:
        out.append(Difference("trainer.gpus", par.trainer.gpus, att.trainer.gpus, INFRASTRUCTURE))
    for role in ROLES:
        da, db = par.datasets.get(role), att.datasets.get(role)
        for fname in ("path", "size", "prompt_suffix"):
            a = getattr(da, fname) if da else None
            b = getattr(db, fname) if db else None
            if fname == "path":
                a, b = (str(a) if a else None), (str(b) if b else None)
            if a != b:
                out.append(Difference(f"datasets.{role}.{fname}", a, b, _dataset_kind(role)))
    for fname in EvalSettings.__dataclass_fields__:
        a, b = getattr(par.eval, fname), getattr(att.eval, fname)
        if a != b:
            out.append(Difference(f"eval.{fname}", a, b, INSTRUMENTATION))
    return out


def values_equal(a: Any, b: Any) -> bool:
    """Recipe values compared as the trainer sees them (5e-7 == 5.0e-7; lists == tuples)."""
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def change_value(att: Attempt, key: str) -> Any:
    """The resolved value of a ``change`` key (recipe key or dotted datasets/trainer/eval field)."""
    if recipe_key(key) is not None:
        return att.recipe.get(key)
    parts = key.split(".")
    if parts[0] == "datasets":
        ref = att.datasets.get(parts[1])
        value = getattr(ref, parts[2]) if ref else None
        if parts[2] == "path" and value is not None:
            return str(value)
        return value
    if parts[0] == "trainer":
        return getattr(att.trainer, parts[1])
    return getattr(att.eval, parts[1])
