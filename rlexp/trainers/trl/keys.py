"""TRL's recipe keys: the fields of GRPOConfig and ModelConfig of the pinned release
(:mod:`rlexp.trainers.trl.fields`) as a key table (rlexp.spec.recipe.TrainerKeyTable), each with the
kind the one-variable rule reads."""

from __future__ import annotations

from rlexp.spec.recipe import (
    INFRASTRUCTURE,
    INSTRUMENTATION,
    JSON_VALUE,
    TRAINING,
    RecipeKey,
    TrainerKeyTable,
)
from rlexp.trainers.trl.fields import GRPO_CONFIG_FIELDS, MODEL_CONFIG_FIELDS, TRL_VERSION

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


def trl_key_table() -> TrainerKeyTable:
    """GRPOConfig's fields, then ModelConfig's (the model and LoRA settings of ``trl grpo``)."""
    keys: dict[str, RecipeKey] = {}
    for name, annotation, default in (*GRPO_CONFIG_FIELDS, *MODEL_CONFIG_FIELDS):
        if name in keys:  # a field both dataclasses have (GRPOConfig's is listed first)
            continue
        type_, nullable = _trl_type(annotation)
        keys[name] = RecipeKey(name, type_, default, trl_kind(name), nullable or default is None)
    return TrainerKeyTable("trl", f"TRL {TRL_VERSION} GRPOConfig and ModelConfig fields", keys,
                           {k.name: k.default for k in keys.values()}, keys.get, (TRL_VERSION,),
                           model_key="model_name_or_path")  # fmt: skip
