"""TRL's recipe keys: the fields of GRPOConfig, RLOOConfig, AsyncGRPOConfig and ModelConfig of the pinned release
(:mod:`rlexp.trainers.trl.fields`) as a key table (rlexp.spec.recipe.TrainerKeyTable), each with the
kind the one-variable rule reads, and the key that says which of TRL's trainers runs the recipe.

TRL runs one trainer per command: ``trl grpo`` GRPOTrainer (GRPOConfig), ``trl rloo`` RLOOTrainer
(RLOOConfig, REINFORCE with a leave-one-out baseline); ``trl.experimental.async_grpo``'s
AsyncGRPOTrainer (AsyncGRPOConfig: generation on a vLLM server, overlapped with training) runs from a
script of one's own. A recipe names it with ``advantage_estimator`` (``grpo``, the default, ``rloo``:
the estimator's name in verl and OpenRLHF too, or ``async_grpo``). It is rlexp's key, not a config field: it picks the class whose fields the recipe
may state and whose defaults fill the ones it does not (RLOOConfig's differ: ``num_generations``
2, not 8; ``beta`` 0.05, not 0.0; AsyncGRPOConfig's ``lr_scheduler_type`` constant, not linear), and
the class the launch runs."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from rlexp.spec.recipe import (
    INFRASTRUCTURE,
    INSTRUMENTATION,
    JSON_VALUE,
    TRAINING,
    RecipeKey,
    TrainerKeyTable,
)
from rlexp.trainers.trl.fields import (
    ASYNC_GRPO_CONFIG_FIELDS,
    GRPO_CONFIG_FIELDS,
    MODEL_CONFIG_FIELDS,
    RLOO_CONFIG_FIELDS,
    TRL_VERSION,
)

# the recipe key naming TRL's trainer, its values -> (trainer class, config class, fields)
ESTIMATOR_KEY = "advantage_estimator"
TRAINERS = {"grpo": ("GRPOTrainer", "GRPOConfig", GRPO_CONFIG_FIELDS),
            "rloo": ("RLOOTrainer", "RLOOConfig", RLOO_CONFIG_FIELDS),
            "async_grpo": ("AsyncGRPOTrainer", "AsyncGRPOConfig", ASYNC_GRPO_CONFIG_FIELDS)}
DEFAULT_ESTIMATOR = "grpo"
ASYNC_GRPO = "async_grpo"  # trl.experimental.async_grpo: no `trl` command runs it
CLI_COMMANDS = ("grpo", "rloo")  # `trl grpo`, `trl rloo`: the TRAINERS TRL's command line runs


def estimator_of(recipe: Mapping[str, Any]) -> str:
    """The TRL trainer a recipe names (``grpo`` unless ``advantage_estimator`` says otherwise); a value
    that names none is returned as it is, for the plan's check to name."""
    value = recipe.get(ESTIMATOR_KEY)
    return DEFAULT_ESTIMATOR if value is None else value


def config_fields(estimator: str) -> tuple[tuple[str, str, object], ...]:
    """The rows of the config class of ``estimator`` (GRPOConfig's for a value that names none)."""
    return TRAINERS.get(estimator, TRAINERS[DEFAULT_ESTIMATOR])[2]


def config_field_names(estimator: str) -> frozenset[str]:
    return frozenset(row[0] for row in config_fields(estimator))


def recipe_defaults(stated: Mapping[str, Any]) -> dict[str, Any]:
    """What the keys a recipe does not state resolve to: the fields of the class it names (rlexp's
    spec loader calls this through TrlRules.recipe_defaults). GRPOConfig's are the table's own
    defaults, so a GRPO recipe resolves as before; RLOOConfig's are its own (2 generations, beta 0.05),
    and so are AsyncGRPOConfig's (a constant LR, logging every step)."""
    estimator = estimator_of(stated)
    table = trl_key_table()
    if estimator not in TRAINERS or estimator == DEFAULT_ESTIMATOR:
        return dict(table.defaults)
    own = {name: default for name, _, default in (*config_fields(estimator), *MODEL_CONFIG_FIELDS)}
    return {**own, ESTIMATOR_KEY: estimator}

# A field's kind is
# training unless its name says it is instrumentation (logging, eval, checkpoints, hub) or
# infrastructure (processes, kernels, memory, the vLLM server): exempt kinds follow the same
# exemption table as OpenRLHF's keys.
_TRL_INSTRUMENTATION_PREFIXES = (
    "logging_", "log_", "eval_", "save_", "hub_", "push_to_hub", "report_to", "output_dir", "run_name",
    "project", "trackio_", "load_best_model_at_end", "metric_for_best_model", "greater_is_better",
    "do_eval", "do_predict", "do_train", "prediction_loss_only", "per_device_eval_batch_size",
    "num_generations_eval", "disable_tqdm", "include_", "resume_from_checkpoint", "ignore_data_skip",
    "restore_callback_states_from_checkpoint", "num_completions_to_print", "wandb_", "skip_memory_metrics",
    "batch_eval_metrics", "label_names", "past_index", "overwrite_output_dir", "full_determinism_",
)
_TRL_INFRASTRUCTURE_PREFIXES = (
    "dataloader_", "ddp_", "fsdp", "deepspeed", "accelerator_config", "parallelism_config", "use_vllm",
    "vllm_mode", "vllm_server_", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size",
    "vllm_enable_sleep_mode", "vllm_model_impl", "vllm_max_model_length", "vllm_group_port",
    "gradient_checkpointing", "torch_compile", "use_cpu", "no_cuda", "tf32", "local_rank", "tpu_",
    "torch_empty_cache_steps", "use_liger_kernel", "liger_kernel_config", "ds3_gather_for_generation",
    "use_transformers_paged", "use_transformers_continuous_batching", "cache_implementation",
    "half_precision_backend", "auto_find_batch_size", "jit_mode_eval", "use_ipex", "ray_scope",
    "debug", "hub_always_push",
)
_TRL_TYPES = {"int": "int", "float": "float", "bool": "bool", "str": "str", "list[str]": "str_list"}


def trl_kind(name: str) -> str:
    """The kind of a GRPOConfig field for the one-variable rule (see the prefixes above)."""
    if name.startswith(_TRL_INFRASTRUCTURE_PREFIXES):
        return INFRASTRUCTURE
    if name.startswith(_TRL_INSTRUMENTATION_PREFIXES):
        return INSTRUMENTATION
    return TRAINING


def _trl_type(annotation: str) -> tuple[str, bool]:
    """A field's annotation as listed ("int | None", "float", "dict | str | None") → recipe type, nullable."""
    parts = [p.strip() for p in annotation.split("|")]
    nullable = "None" in parts
    parts = [p for p in parts if p != "None"]
    if parts == ["float", "int"] or parts == ["int", "float"]:
        return "float", nullable
    if len(parts) == 1 and parts[0] in _TRL_TYPES:
        return _TRL_TYPES[parts[0]], nullable
    return JSON_VALUE, True


@cache
def trl_key_table() -> TrainerKeyTable:
    """GRPOConfig's fields, ModelConfig's (the model and LoRA settings of ``trl grpo``), then the
    fields only RLOOConfig or AsyncGRPOConfig has and ``advantage_estimator``. The defaults are GRPOConfig's and
    ModelConfig's (the RLOO- and AsyncGRPO-only fields and the estimator have none there: a GRPO recipe
    that does not state them resolves, and hashes, as before); an RLOO or AsyncGRPO recipe's are
    :func:`recipe_defaults`'."""
    keys: dict[str, RecipeKey] = {}
    for name, annotation, default in (*GRPO_CONFIG_FIELDS, *MODEL_CONFIG_FIELDS):
        if name in keys:  # a field both dataclasses have (GRPOConfig's is listed first)
            continue
        type_, nullable = _trl_type(annotation)
        keys[name] = RecipeKey(name, type_, default, trl_kind(name), nullable or default is None)
    defaults = {k.name: k.default for k in keys.values()}
    for name, annotation, default in (*RLOO_CONFIG_FIELDS, *ASYNC_GRPO_CONFIG_FIELDS):
        if name not in keys:
            type_, nullable = _trl_type(annotation)
            keys[name] = RecipeKey(name, type_, default, trl_kind(name), nullable or default is None)
    keys[ESTIMATOR_KEY] = RecipeKey(ESTIMATOR_KEY, "str", DEFAULT_ESTIMATOR, TRAINING, True)
    return TrainerKeyTable("trl", f"TRL {TRL_VERSION} GRPOConfig, RLOOConfig, AsyncGRPOConfig and ModelConfig fields", keys,
                           defaults, keys.get, (TRL_VERSION,), model_key="model_name_or_path")  # fmt: skip
