"""OpenRLHF command builder: the exact argv of ``python3 -m openrlhf.cli.train_ppo_ray``.

Two flag dialects exist and neither accepts the other (DESIGN.md, checked against the tags):

- v0.9.x **underscore** flags (``--eps_clip``, ``--n_samples_per_prompt``); ``--prompt_max_len`` and
  ``--generate_max_len`` exist until v0.9.7, v0.9.8 replaced the latter by ``--max_new_tokens``
  and dropped the former;
- v0.10.2+ **dotted** flags (``--actor.eps_clip``, ``--rollout.n_samples_per_prompt``), renamed
  with no aliases.

Recipes are written once, in v0.9.x names without dashes; :data:`DOTTED_NAMES` maps them to the
new dialect. Every emitted flag is checked against the flag table of the exact trainer version
(``flags/v*.txt``, extracted from OpenRLHF's parser by ``flags/extract_flags.py``), so a recipe
can never launch with a flag its trainer would reject after an hour of Ray start-up.

The result is always a list of strings: each value is one argv element, never shell text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rlexp.adapters.provenance import is_secret_recipe_key
from rlexp.errors import InputError

FLAGS_DIR = Path(__file__).with_name("flags")
TRAIN_MODULE = "openrlhf.cli.train_ppo_ray"

# v0.9.x recipe key -> v0.10.2+ flag (without dashes). Built by matching the two parsers' help
# texts and defaults at v0.10.1 and v0.10.2; tests check both sides against the flag tables.
DOTTED_NAMES: dict[str, str] = {
    "ref_num_nodes": "ref.num_nodes",
    "ref_num_gpus_per_node": "ref.num_gpus_per_node",
    "reward_num_nodes": "reward.num_nodes",
    "reward_num_gpus_per_node": "reward.num_gpus_per_node",
    "colocate_actor_ref": "train.colocate_actor_ref",
    "actor_num_nodes": "actor.num_nodes",
    "actor_num_gpus_per_node": "actor.num_gpus_per_node",
    "critic_num_nodes": "critic.num_nodes",
    "critic_num_gpus_per_node": "critic.num_gpus_per_node",
    "colocate_critic_reward": "train.colocate_critic_reward",
    "colocate_all_models": "train.colocate_all",
    "vllm_num_engines": "vllm.num_engines",
    "vllm_tensor_parallel_size": "vllm.tensor_parallel_size",
    "vllm_sync_backend": "vllm.sync_backend",
    "vllm_sync_with_ray": "vllm.sync_with_ray",
    "enable_prefix_caching": "vllm.enable_prefix_caching",
    "enforce_eager": "vllm.enforce_eager",
    "vllm_enable_sleep": "vllm.enable_sleep",
    "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization",
    "enable_vllm_is_correction": "algo.advantage.is_correction_enable",
    "vllm_is_truncated_threshold": "algo.advantage.is_correction_threshold",
    "vllm_is_correction_type": "algo.advantage.is_correction_type",
    "async_train": "train.async_enable",
    "async_queue_size": "train.async_queue_size",
    "partial_rollout": "train.partial_rollout_enable",
    "eval_steps": "eval.steps",
    "save_steps": "ckpt.save_steps",
    "logging_steps": "logger.logging_steps",
    "ckpt_path": "ckpt.path",
    "save_hf_ckpt": "ckpt.save_hf",
    "disable_ds_ckpt": "ckpt.disable_ds",
    "max_ckpt_num": "ckpt.max_num",
    "max_ckpt_mem": "ckpt.max_mem",
    "load_checkpoint": "ckpt.load_enable",
    "best_metric_key": "ckpt.best_metric_key",
    "use_ds_universal_ckpt": "ds.use_universal_ckpt",
    "zero_stage": "ds.zero_stage",
    "gradient_checkpointing": "actor.gradient_checkpointing_enable",
    "deepcompile": "ds.deepcompile",
    "param_dtype": "ds.param_dtype",
    "enable_ema": "train.enable_ema",
    "ema_beta": "train.ema_beta",
    "zpg": "ds.zpg",
    "adam_offload": "ds.adam_offload",
    "attn_implementation": "ds.attn_implementation",
    "use_liger_kernel": "ds.use_liger_kernel",
    "grad_accum_dtype": "ds.grad_accum_dtype",
    "overlap_comm": "ds.overlap_comm",
    "gradient_checkpointing_use_reentrant": "actor.gradient_checkpointing_reentrant",
    "disable_fast_tokenizer": "data.disable_fast_tokenizer",
    "dataloader_num_workers": "data.dataloader_num_workers",
    "deepspeed_enable_sleep": "ds.enable_sleep",
    "ds_tensor_parallel_size": "ds.tensor_parallel_size",
    "packing_samples": "ds.packing_samples",
    "use_dynamic_batch": "train.dynamic_batch_enable",
    "rollout_max_tokens_per_gpu": "rollout.max_tokens_per_gpu",
    "train_max_tokens_per_gpu": "train.max_tokens_per_gpu",
    "load_in_4bit": "ds.load_in_4bit",
    "lora_rank": "ds.lora.rank",
    "lora_alpha": "ds.lora.alpha",
    "target_modules": "ds.lora.target_modules",
    "lora_dropout": "ds.lora.dropout",
    "save_path": "ckpt.output_dir",
    "num_episodes": "train.num_episodes",
    "rollout_batch_size": "rollout.batch_size",
    "vllm_generate_batch_size": "rollout.vllm_generate_batch_size",
    "micro_rollout_batch_size": "rollout.micro_batch_size",
    "max_epochs": "train.max_epochs",
    "max_len": "data.max_len",
    "generate_max_len": "rollout.max_new_tokens",
    "max_new_tokens": "rollout.max_new_tokens",
    "max_samples": "data.max_samples",
    "max_norm": "actor.max_norm",
    "l2": "actor.adam.weight_decay",
    "eps_clip": "actor.eps_clip",
    "eps_clip_low_high": "actor.eps_clip_low_high",
    "dual_clip": "actor.dual_clip",
    "value_clip": "critic.value_clip",
    "lambd": "algo.advantage.lambd",
    "gamma": "algo.advantage.gamma",
    "micro_train_batch_size": "train.micro_batch_size",
    "train_batch_size": "train.batch_size",
    "normalize_reward": "reward.normalize_enable",
    "top_p": "rollout.top_p",
    "temperature": "rollout.temperature",
    "seed": "train.seed",
    "full_determinism": "train.full_determinism_enable",
    "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "save_value_network": "critic.save_value_network",
    "actor_learning_rate": "actor.adam.lr",
    "critic_learning_rate": "critic.adam.lr",
    "lr_warmup_ratio": "actor.lr_warmup_ratio",
    "lr_scheduler": "actor.lr_scheduler",
    "min_lr_ratio": "actor.min_lr_ratio",
    "kl_target": "algo.kl.target",
    "kl_horizon": "algo.kl.horizon",
    "init_kl_coef": "algo.kl.init_coef",
    "policy_loss_type": "actor.policy_loss_type",
    "kl_estimator": "algo.kl.estimator",
    "aux_loss_coef": "actor.aux_loss_coef",
    "entropy_loss_coef": "actor.entropy_coef",
    "adam_betas": "actor.adam.betas",
    "reward_clip_range": "reward.clip_range",
    "advantage_estimator": "algo.advantage.estimator",
    "use_kl_loss": "algo.kl.use_loss",
    "no_advantage_std_norm": "algo.advantage.no_std_norm",
    "overlong_buffer_len": "reward.overlong_buffer_len",
    "overlong_penalty_factor": "reward.overlong_penalty_factor",
    "stop_properly_penalty_coef": "reward.stop_properly_penalty_coef",
    "ring_attn_size": "ds.ring_attn_size",
    "ring_head_stride": "ds.ring_attn_head_stride",
    "pretrain": "actor.model_name_or_path",
    "reward_pretrain": "reward.model_name_or_path",
    "remote_rm_url": "reward.remote_url",
    "critic_pretrain": "critic.model_name_or_path",
    "value_head_prefix": "ds.value_head_prefix",
    "agent_func_path": "train.agent_func_path",
    "prompt_data": "data.prompt_dataset",
    "prompt_data_probs": "data.prompt_probs",
    "prompt_split": "data.prompt_split",
    "eval_dataset": "eval.dataset",
    "eval_split": "eval.split",
    "eval_temperature": "eval.temperature",
    "eval_n_samples_per_prompt": "eval.n_samples_per_prompt",
    "input_key": "data.input_key",
    "label_key": "data.label_key",
    "input_template": "data.input_template",
    "apply_chat_template": "data.apply_chat_template",
    "wandb_org": "logger.wandb.org",
    "wandb_group": "logger.wandb.group",
    "wandb_project": "logger.wandb.project",
    "wandb_run_name": "logger.wandb.run_name",
    "dynamic_filtering": "algo.dynamic_filtering_enable",
    "dynamic_filtering_reward_range": "algo.dynamic_filtering_range",
    "image_key": "data.image_key",
    "max_images_per_prompt": "data.max_images_per_prompt",
    "freeze_visual_encoder": "actor.freeze_visual_encoder",
    "use_tensorboard": "logger.tensorboard_dir",
}

# Planning-only keys: they drive rlexp's step math but some trainer versions have no such flag.
# Dropped (and reported) instead of failing when the version lacks them.
PLANNING_ONLY = frozenset({"prompt_max_len"})



@dataclass(frozen=True)
class FlagTable:
    """The flags one OpenRLHF version's ``train_ppo_ray`` parser accepts: name -> kind."""

    version: str
    flags: Mapping[str, str]  # "--eps_clip" -> "value" | "store_true" | "nargs=2" | "nargs=*"
    source: str

    @property
    def dialect(self) -> str:
        return "dotted" if any("." in name for name in self.flags) else "underscore"

    def __contains__(self, flag: str) -> bool:
        return flag in self.flags


@dataclass(frozen=True)
class TrainCommand:
    """The built command and what the builder did to get it."""

    argv: list[str]
    version: str
    dialect: str
    dropped: tuple[str, ...]  # planning-only recipe keys the version has no flag for
    flag_values: Mapping[str, Any]  # emitted flag -> value (None for store_true) for provenance


def _version_key(version: str) -> tuple[int, ...]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[.+-].*)?", version.strip())
    if not match:
        raise InputError(None, "trainer.version", f"not a version number: {version!r}")
    return tuple(int(g) for g in match.groups())


def known_versions() -> list[str]:
    """OpenRLHF versions with a flag table, oldest first."""
    names = [p.stem.lstrip("v") for p in FLAGS_DIR.glob("v*.txt")]
    return sorted(names, key=_version_key)


@cache
def load_flag_table(version: str) -> FlagTable:
    """The flag table of ``version``; a post-release (``0.9.3.post1``) uses its release's table."""
    key = _version_key(version)
    for known in known_versions():
        if _version_key(known) == key:
            path = FLAGS_DIR / f"v{known}.txt"
            flags: dict[str, str] = {}
            source = ""
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith("#"):
                    source = source or line.lstrip("# ")
                    continue
                if line.strip():
                    name, kind = line.split("\t")
                    flags[name] = kind
            return FlagTable(version=known, flags=flags, source=source)
    raise InputError(
        None, "trainer.version", f"no OpenRLHF flag table for {version}; known: {', '.join(known_versions())}"
    )


def format_value(value: Any) -> str:
    """One argv element for a scalar: ints as written, floats shortest (``5e-7``, ``0.1``)."""
    if isinstance(value, bool):
        raise TypeError("booleans are flags, not values")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value}")
        text = repr(value)
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"unsupported value type {type(value).__name__}")


def flag_name(key: str, table: FlagTable) -> str | None:
    """The flag for a v0.9.x recipe key in ``table``'s dialect, or None when it has none."""
    if table.dialect == "dotted":
        dotted = DOTTED_NAMES.get(key)
        return f"--{dotted}" if dotted and f"--{dotted}" in table else None
    if f"--{key}" in table:
        return f"--{key}"
    # v0.9.8 renamed --generate_max_len to --max_new_tokens (same meaning: response budget)
    if key == "generate_max_len" and "--max_new_tokens" in table:
        return "--max_new_tokens"
    if key == "max_new_tokens" and "--generate_max_len" in table:
        return "--generate_max_len"
    return None


def build_train_argv(
    recipe: Mapping[str, Any],
    version: str,
    *,
    python: str = "python3",
    spec_file: str | Path | None = None,
) -> TrainCommand:
    """``[python, -m, openrlhf.cli.train_ppo_ray, --flag, value, ...]`` for ``version``.

    ``recipe`` maps v0.9.x argument names (no dashes) to values: ``True`` emits a store_true flag,
    ``False``/``None`` omit it, lists fill ``nargs`` flags, everything else is one argv element.
    Any key the version has no flag for is an :class:`InputError` naming ``recipe.<key>``.
    Flags come out in the order of the version's parser.
    """
    table = load_flag_table(version)
    order = {flag: i for i, flag in enumerate(table.flags)}
    parts: list[tuple[int, str, list[str]]] = []  # (parser position, flag, values)
    dropped: list[str] = []
    emitted: dict[str, Any] = {}
    for key, value in recipe.items():
        field = f"recipe.{key}"
        if is_secret_recipe_key(key):  # argv lands in argv.json, launch.sh, MLflow and `ps`
            raise InputError(spec_file, field, "secrets never go in the recipe; set them in the environment")
        flag = flag_name(key, table)
        if flag is None:
            if key in PLANNING_ONLY:
                dropped.append(key)
                continue
            raise InputError(spec_file, field, f"OpenRLHF {table.version} has no flag for this key")
        if flag in emitted:
            raise InputError(spec_file, field, f"{flag} is already set by another recipe key")
        kind = table.flags[flag]
        if kind == "store_true":
            if not isinstance(value, bool) and value is not None:
                raise InputError(spec_file, field, f"{flag} is a switch: use true or false, not {value!r}")
            if value:
                parts.append((order[flag], flag, []))
                emitted[flag] = None
            continue
        if value is None or value is False:
            continue
        try:
            if kind.startswith("nargs="):
                values = list(value) if isinstance(value, list | tuple) else [value]
                expected = kind.split("=", 1)[1]
                if expected.isdigit() and len(values) != int(expected):
                    raise ValueError(f"{flag} takes {expected} values, got {len(values)}")
                rendered = [format_value(v) for v in values]
            else:
                if isinstance(value, list | tuple | dict):
                    raise ValueError(f"{flag} takes one value, got {type(value).__name__}")
                rendered = [format_value(value)]
        except (TypeError, ValueError) as exc:
            raise InputError(spec_file, field, str(exc)) from None
        parts.append((order[flag], flag, rendered))
        emitted[flag] = rendered if len(rendered) > 1 else rendered[0]
    # Flags in the parser's own order: the argv reads like the trainer's --help, and it does not
    # depend on how the recipe happened to be ordered (golden files stay stable).
    argv = [python, "-m", TRAIN_MODULE]
    for _, flag, rendered in sorted(parts):
        argv.append(flag)
        argv.extend(rendered)
    return TrainCommand(argv=argv, version=table.version, dialect=table.dialect, dropped=tuple(dropped),
                        flag_values=emitted)


@dataclass(frozen=True)
class AttemptPaths:
    """Where an attempt's trainer reads and writes (all absolute)."""

    pretrain: str
    prompt_data: str
    eval_dataset: str | None
    save_path: Path
    ckpt_path: Path
    reward_file: Path
    tensorboard_dir: Path


def attempt_recipe(recipe: Mapping[str, Any], paths: AttemptPaths, *, resume: bool = False) -> dict[str, Any]:
    """The recipe with the attempt's own paths put in: data and model from the spec, every output
    under the attempt directory, the generated reward file, TensorBoard scalars, HF checkpoints.

    Keys keep the recipe's order (golden files compare argv as a list); new keys go at the end.
    """
    merged = dict(recipe)
    merged.update(
        {
            "pretrain": paths.pretrain,
            "prompt_data": paths.prompt_data,
            "input_key": merged.get("input_key", "prompt"),
            "label_key": merged.get("label_key", "answer"),
            "apply_chat_template": merged.get("apply_chat_template", True),
            "remote_rm_url": str(paths.reward_file),
            "save_path": str(paths.save_path),
            "ckpt_path": str(paths.ckpt_path),
            "save_hf_ckpt": True,  # rlexp eval reads {ckpt_path}/global_step{N}_hf adapters
            "use_tensorboard": str(paths.tensorboard_dir),
        }
    )
    if paths.eval_dataset is not None:
        merged["eval_dataset"] = paths.eval_dataset
        # the in-run monitor is greedy pass@1 (SOP §11.24 §1); OpenRLHF's defaults are 0.6 and 4
        merged.setdefault("eval_temperature", 0.0)
        merged.setdefault("eval_n_samples_per_prompt", 1)
    if resume:
        merged["load_checkpoint"] = True
    return merged


def ray_job_argv(
    train_argv: list[str],
    address: str,
    *,
    runtime_env: Mapping[str, Any] | None = None,
    submission_id: str | None = None,
) -> list[str]:
    """``ray job submit --address URL --runtime-env-json JSON [--submission-id ID] -- <train argv>``."""
    argv = ["ray", "job", "submit", "--address", normalize_ray_address(address)]
    argv += ["--runtime-env-json", json.dumps(dict(runtime_env or {}), sort_keys=True, separators=(",", ":"))]
    if submission_id:
        argv += ["--submission-id", submission_id]
    return [*argv, "--", *train_argv]


def ray_stop_argv(address: str, submission_id: str) -> list[str]:
    """``ray job stop --address URL ID``: stopping the submit client does not stop the job."""
    return ["ray", "job", "stop", "--address", normalize_ray_address(address), submission_id]


def normalize_ray_address(address: str) -> str:
    """The Ray dashboard's HTTP address (``ray job submit`` talks to the dashboard, port 8265)."""
    address = address.strip()
    if not address:
        raise InputError(None, "--ray-address", "empty address")
    if "://" not in address:
        address = f"http://{address}"
    if not address.startswith(("http://", "https://")):
        raise InputError(None, "--ray-address", f"expected the dashboard's http:// address, got {address}")
    return address.rstrip("/")


def check_ray_dashboard(address: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """GET ``<address>/api/version`` before submitting: an unreachable cluster is one clear line
    now instead of a stack trace from ``ray job submit`` later."""
    import urllib.error
    import urllib.request

    url = normalize_ray_address(address) + "/api/version"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (http only, checked)
            body = response.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise InputError(None, "--ray-address", f"Ray dashboard at {address} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(None, "--ray-address", f"Ray dashboard unreachable at {address}: {reason}") from None
    try:
        info = json.loads(body)
    except ValueError:
        raise InputError(None, "--ray-address", f"{url} did not answer like a Ray dashboard") from None
    return info if isinstance(info, dict) else {"version": info}
