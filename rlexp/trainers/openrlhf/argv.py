"""OpenRLHF command builder: the exact argv of ``python3 -m openrlhf.cli.train_ppo_ray``.

rlexp supports the OpenRLHF releases listed in ``flags/versions.txt`` (0.9.3 to 0.11.2 today),
each with a flag table ``flags/v<version>.txt`` generated from that release's own argparse parser
by ``scripts/refresh-openrlhf-flags`` (:mod:`rlexp.trainers.openrlhf.parser`). A version that is
not listed is refused: its flags are unknown, and guessing them from the newest table would launch
an argv nobody checked.

Two flag dialects exist and neither accepts the other:

- up to 0.10.1.post2 **underscore** flags (``--eps_clip``, ``--n_samples_per_prompt``);
  ``--prompt_max_len`` and ``--generate_max_len`` exist until 0.9.7, 0.9.8 replaced the latter
  by ``--max_new_tokens`` and dropped the former;
- from 0.10.2 **dotted** flags (``--actor.eps_clip``, ``--rollout.n_samples_per_prompt``),
  renamed with no aliases.

Recipe keys are the v0.9.x underscore names; :data:`DOTTED_NAMES` maps them to the dotted
dialect, and the per-version rules below say what else changed. A flag that only newer releases
have is written in the recipe under its own dotted name (``actor.loss_agg_mode``) and accepted
only for the versions that have it. Every emitted flag, its value count, type and choices are
checked against the table of the exact version, so a recipe never launches with an argv its
trainer would reject after Ray start-up; tests parse these argvs with each release's real parser.

The result is always a list of strings: each value is one argv element, never shell text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.spec import is_credential_key
from rlexp.spec.recipe import dotted_names
from rlexp.trainers.openrlhf.parser import (
    FLAGS_DIR,
    REFRESH_SCRIPT,
    FlagSpec,
    listed_releases,
    read_table,
    version_key,
)

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

__all__ = ["FLAGS_DIR"]

TRAIN_MODULE = "openrlhf.cli.train_ppo_ray"

# v0.9.x recipe key -> 0.10.2+ flag (without dashes): the ``dotted`` column of the recipe table
# (rlexp.spec.recipe); tests check both sides against the flag tables.
DOTTED_NAMES: dict[str, str] = dotted_names()

# One v0.9.x switch that 0.10.2 split in two: both models are offloaded, as before.
SPLIT_NAMES: dict[str, tuple[str, ...]] = {"ref_reward_offload": ("ref.offload", "reward.offload")}

# Keys that drive rlexp's step math but that some releases have no flag for: left out of the argv
# (and listed in the plan) instead of failing.
PLANNING_ONLY = frozenset({"prompt_max_len"})

# A setting that releases without its flag fix at one value: stating that value there is fine
# (left out, with a note), any other value cannot be honoured and is an error.
FIXED_WITHOUT_FLAG: dict[str, float] = {"min_lr_ratio": 0.1}  # v0.9.x: min LR = 0.1 x peak

# Values one release spells differently: 0.9.3 calls the sequence-level mask "mis", 0.9.4 on
# "seq-mask-tis" (the same computation in both releases' PolicyLoss).
VALUE_ALIASES: dict[str, dict[str, str]] = {"vllm_is_correction_type": {"mis": "seq-mask-tis", "seq-mask-tis": "mis"}}

# 0.11.2 replaced ``--algo.advantage.is_correction_enable``/``_type`` by ``_level``/``_mode``/
# ``_gating``. Each old type, read off both releases' PolicyLoss, in the new terms (level, mode);
# the gate of all three is the IS ratio itself, 0.11.2's default gating "ratio":
# - tis: every token's ratio clamped into [low, high]            -> token, clip
# - icepop: tokens whose ratio is outside [low, high] get weight 0 -> token, mask
# - seq-mask-tis (0.9.3: mis): sequences whose geometric-mean ratio is outside [low, high] get
#   weight 0, the others keep their per-token ratio               -> seq, mask
# Old releases default the type to "tis" while 0.11.2 defaults the mode to "mask": the mode is
# always written out. Correction off (the default everywhere) is level "off", 0.11.2's default.
IS_CORRECTION_LEVEL_MODE: dict[str, tuple[str, str]] = {
    "tis": ("token", "clip"),
    "icepop": ("token", "mask"),
    "seq-mask-tis": ("seq", "mask"),
    "mis": ("seq", "mask"),
}
IS_CORRECTION_OLD_KEYS = ("enable_vllm_is_correction", "vllm_is_correction_type")
IS_CORRECTION_LEVEL = "algo.advantage.is_correction_level"
IS_CORRECTION_MODE = "algo.advantage.is_correction_mode"
IS_CORRECTION_GATING = "algo.advantage.is_correction_gating"
IS_CORRECTION_THRESHOLD = "algo.advantage.is_correction_threshold"


@dataclass(frozen=True)
class FlagTable:
    """The flags one OpenRLHF release's ``train_ppo_ray`` parser accepts, in parser order."""

    version: str
    flags: Mapping[str, FlagSpec]  # "--eps_clip" -> its action, nargs, type, choices

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
    dropped: tuple[str, ...]  # recipe keys left out of the argv (planning-only, or fixed at their value)
    flag_values: Mapping[str, Any]  # emitted flag -> value (None for a switch) for provenance
    notes: tuple[str, ...] = ()  # one line per key left out or translated, for the plan


def known_versions() -> list[str]:
    """The listed OpenRLHF releases (each has a flag table), oldest first."""
    return [r.version for r in listed_releases()]


def _normalize_version(version: str) -> str:
    return str(version).strip().removeprefix("v")


def check_version(version: str, spec_file: str | Path | None = None) -> str:
    """``version`` if it is a listed release; else an :class:`InputError` on ``trainer.version``."""
    known = known_versions()
    wanted = _normalize_version(version)
    if wanted in known:
        return wanted
    newest = known[-1]
    try:
        newer = version_key(wanted) > version_key(newest)
    except ValueError:
        newer = False
    if newer:
        hint = f"newer than {newest}, the newest listed release: run {REFRESH_SCRIPT} to add it"
    else:
        hint = (f"not a listed OpenRLHF release ({known[0]} ... {newest}, newest {newest}; "
                f"{REFRESH_SCRIPT} adds newer ones)")
    raise InputError(spec_file, "trainer.version", f"{version}: {hint}")


@cache
def load_flag_table(version: str) -> FlagTable:
    """The flag table of a listed release (exact version, post-releases included)."""
    listed = check_version(version)
    return FlagTable(version=listed, flags={spec.flag: spec for spec in read_table(listed)})


def releases_with(flag: str) -> list[str]:
    """The listed releases whose parser has ``flag``."""
    return [v for v in known_versions() if flag in load_flag_table(v)]


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


def _has_v09_name(dotted: str) -> str | None:
    for key, name in DOTTED_NAMES.items():
        if name == dotted:
            return key
    return None


def flag_names(key: str, table: FlagTable) -> tuple[str, ...]:
    """The flag(s) of a recipe key in ``table``'s release; empty when that release has none.

    ``key`` is a v0.9.x name, or the dotted name of a flag only newer releases have.
    """
    if "." in key:
        return (f"--{key}",) if f"--{key}" in table else ()
    if table.dialect == "dotted":
        if key in SPLIT_NAMES:
            names = tuple(f"--{n}" for n in SPLIT_NAMES[key])
            return names if all(n in table for n in names) else ()
        dotted = DOTTED_NAMES.get(key)
        if dotted:
            return (f"--{dotted}",) if f"--{dotted}" in table else ()
        # a few flags kept their name in the dotted dialect (--local_rank, --use_ms)
        return (f"--{key}",) if f"--{key}" in table else ()
    if f"--{key}" in table:
        return (f"--{key}",)
    # 0.9.8 renamed --generate_max_len to --max_new_tokens (same meaning: response budget)
    if key == "generate_max_len" and "--max_new_tokens" in table:
        return ("--max_new_tokens",)
    if key == "max_new_tokens" and "--generate_max_len" in table:
        return ("--generate_max_len",)
    return ()


def flag_name(key: str, table: FlagTable) -> str | None:
    """The one flag of a recipe key in ``table``'s release, or None."""
    names = flag_names(key, table)
    return names[0] if len(names) == 1 else None


def _translate_is_correction(
    recipe: dict[str, Any], table: FlagTable, spec_file, notes: list[str], origin: dict[str, str]
) -> dict[str, Any]:
    """0.11.2+: the old ``enable``/``type`` pair written as ``level``/``mode`` (see the table above).

    Returns the recipe with the old keys replaced by the new dotted ones; ``origin`` learns the
    recipe key each new one came from (errors name what the user wrote).
    """
    if f"--{IS_CORRECTION_LEVEL}" not in table or not any(k in recipe for k in IS_CORRECTION_OLD_KEYS):
        return recipe
    out = {k: v for k, v in recipe.items() if k not in IS_CORRECTION_OLD_KEYS}
    enabled = recipe.get("enable_vllm_is_correction")
    type_stated = recipe.get("vllm_is_correction_type")
    if type_stated is not None and type_stated not in IS_CORRECTION_LEVEL_MODE:
        raise InputError(spec_file, "recipe.vllm_is_correction_type",
                         f"{type_stated!r} has no equivalent in OpenRLHF {table.version}'s is_correction "
                         f"level/mode (known: {', '.join(IS_CORRECTION_LEVEL_MODE)})")
    if not enabled:
        if type_stated is not None:
            notes.append(f"recipe.vllm_is_correction_type {type_stated}: left out, it has no effect without "
                         f"enable_vllm_is_correction (OpenRLHF {table.version}: {IS_CORRECTION_LEVEL} off)")
        return out
    for new in (IS_CORRECTION_LEVEL, IS_CORRECTION_MODE):
        if new in recipe:
            raise InputError(spec_file, f"recipe.{new}",
                             "set twice: enable_vllm_is_correction/vllm_is_correction_type already set it")
    level, mode = IS_CORRECTION_LEVEL_MODE[type_stated or "tis"]  # "tis": the old releases' default type
    out[IS_CORRECTION_LEVEL] = level
    out[IS_CORRECTION_MODE] = mode
    origin[IS_CORRECTION_LEVEL] = origin[IS_CORRECTION_MODE] = "enable_vllm_is_correction"
    notes.append(f"recipe.enable_vllm_is_correction + vllm_is_correction_type {type_stated or 'tis'}: "
                 f"written as --{IS_CORRECTION_LEVEL} {level} --{IS_CORRECTION_MODE} {mode} "
                 f"(OpenRLHF {table.version} replaced the type by level/mode/gating)")
    return out


def _check_is_correction(emitted: Mapping[str, Any], table: FlagTable, spec_file, origin: Mapping[str, str]) -> None:
    """The combinations 0.11.2's PolicyLoss refuses at start-up, refused at plan time instead."""
    if f"--{IS_CORRECTION_LEVEL}" not in table:
        return
    level = emitted.get(f"--{IS_CORRECTION_LEVEL}", "off")
    mode = emitted.get(f"--{IS_CORRECTION_MODE}", "mask")
    gating = emitted.get(f"--{IS_CORRECTION_GATING}", "ratio")
    threshold = emitted.get(f"--{IS_CORRECTION_THRESHOLD}", ["0.5", "5.0"])
    threshold = threshold if isinstance(threshold, list) else [threshold]
    field = f"recipe.{origin.get(IS_CORRECTION_MODE, IS_CORRECTION_MODE)}"
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        raise InputError(spec_file, field, f"OpenRLHF {table.version}: is_correction mode clip needs level token "
                         f"and gating ratio (got level {level}, gating {gating})")
    if gating != "ratio" and level != "off" and len(threshold) == 2 and float(threshold[0]) > 0:
        raise InputError(spec_file, f"recipe.{IS_CORRECTION_GATING}",
                         f"OpenRLHF {table.version}: gating {gating} takes an upper bound only "
                         f"(threshold [0, delta]), got {threshold}")


def _render(flag: str, spec: FlagSpec, value: Any, version: str) -> list[str]:
    """The argv elements of one value flag, checked against the release's nargs, type and choices."""
    many = spec.nargs not in ("", "?")
    if isinstance(value, dict):
        raise ValueError(f"unsupported value type {type(value).__name__}")
    if isinstance(value, list | tuple):
        if not many:
            raise ValueError(f"{flag} takes one value, got {type(value).__name__}")
        values = list(value)
    else:
        values = [value]
    if spec.nargs.isdigit() and len(values) != int(spec.nargs):
        raise ValueError(f"{flag} takes {spec.nargs} values, got {len(values)}")
    if spec.nargs == "+" and not values:
        raise ValueError(f"{flag} takes at least one value")
    for v in values:
        if isinstance(v, bool):
            raise ValueError(f"{flag} takes a {spec.type or 'value'}, not a switch ({v})")
        if spec.type == "int" and not isinstance(v, int):
            raise ValueError(f"{flag} takes an integer in OpenRLHF {version}, got {v!r}")
        if spec.type == "float" and not isinstance(v, int | float):
            raise ValueError(f"{flag} takes a number in OpenRLHF {version}, got {v!r}")
    rendered = [format_value(v) for v in values]
    if spec.choices:
        for text in rendered:
            if text not in spec.choices:
                raise ValueError(f"{flag} takes one of {', '.join(spec.choices)} in OpenRLHF {version}, not {text!r}")
    return rendered


def _missing_flag_message(key: str, table: FlagTable) -> str:
    if "." in key:
        v09 = _has_v09_name(key)
        if v09:
            return f"write this flag under its v0.9 name, recipe.{v09} (rlexp maps it per release)"
        have = releases_with(f"--{key}")
        where = f"releases that have it: {have[0]} ... {have[-1]}" if have else "no listed release has it"
        return f"OpenRLHF {table.version} has no --{key} ({where})"
    return f"OpenRLHF {table.version} has no flag for this key"


def build_train_argv(
    recipe: Mapping[str, Any],
    version: str,
    *,
    python: str = "python3",
    spec_file: str | Path | None = None,
) -> TrainCommand:
    """``[python, -m, openrlhf.cli.train_ppo_ray, --flag, value, ...]`` for ``version``.

    ``recipe`` maps v0.9.x argument names (no dashes), or the dotted names of flags only newer
    releases have, to values: ``True`` emits a switch, ``False``/``None`` omit it, lists fill
    ``nargs`` flags, everything else is one argv element. A key the release has no flag for is an
    :class:`InputError` naming ``recipe.<key>``, except planning-only keys (left out, noted).
    Flags come out in the order of the release's parser.
    """
    table = load_flag_table(check_version(version, spec_file))
    order = {flag: i for i, flag in enumerate(table.flags)}
    parts: list[tuple[int, str, list[str]]] = []  # (parser position, flag, values)
    dropped: list[str] = []
    notes: list[str] = []
    emitted: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    origins: dict[str, str] = {}  # translated key -> the recipe key it came from
    for key in recipe:
        if is_credential_key(key):  # argv lands in argv.json, launch.sh, MLflow and `ps`
            raise InputError(spec_file, f"recipe.{key}", "secrets never go in the recipe; set them in the environment")
    items = _translate_is_correction(dict(recipe), table, spec_file, notes, origins)
    for key, value in items.items():
        origin = origins.get(key, key)
        field = f"recipe.{origin}"
        if "." in key and key not in origins and _has_v09_name(key):
            raise InputError(spec_file, field, _missing_flag_message(key, table))
        flags = flag_names(key, table)
        if not flags:
            if key in PLANNING_ONLY:
                dropped.append(key)
                notes.append(f"recipe.{key}: left out, OpenRLHF {table.version} has no such flag "
                             "(rlexp still uses it for planning)")
                continue
            if key in FIXED_WITHOUT_FLAG:
                fixed = FIXED_WITHOUT_FLAG[key]
                if value is None or (not isinstance(value, bool) and isinstance(value, int | float)
                                     and abs(float(value) - fixed) <= 1e-12):
                    dropped.append(key)
                    notes.append(f"recipe.{key}: left out, OpenRLHF {table.version} fixes it at {fixed}")
                    continue
                raise InputError(spec_file, field, f"OpenRLHF {table.version} fixes it at {fixed} and has no flag "
                                 f"to change it (got {value})")
            raise InputError(spec_file, field, _missing_flag_message(key, table))
        for flag in flags:
            if flag in set_by:
                raise InputError(spec_file, field, f"{flag} is already set by recipe.{set_by[flag]}")
            set_by[flag] = origin
            spec = table.flags[flag]
            if spec.action in ("store_true", "store_false"):
                if not isinstance(value, bool) and value is not None:
                    raise InputError(spec_file, field, f"{flag} is a switch: use true or false, not {value!r}")
                if value:
                    parts.append((order[flag], flag, []))
                    emitted[flag] = None
                continue
            if spec.action != "value":
                raise InputError(spec_file, field, f"{flag} is an argparse {spec.action} action rlexp does not write")
            if value is None or value is False:
                continue
            aliases = VALUE_ALIASES.get(origin, {})
            if spec.choices and isinstance(value, str) and value not in spec.choices and aliases.get(value) in spec.choices:
                notes.append(f"recipe.{origin} {value}: written as {aliases[value]}, its name in OpenRLHF {table.version}")
                value = aliases[value]
            try:
                rendered = _render(flag, spec, value, table.version)
            except (TypeError, ValueError) as exc:
                raise InputError(spec_file, field, str(exc)) from None
            parts.append((order[flag], flag, rendered))
            emitted[flag] = rendered if len(rendered) > 1 or spec.nargs not in ("", "?") else rendered[0]
    _check_is_correction(emitted, table, spec_file, origins)
    # Flags in the parser's own order: the argv reads like the trainer's --help, and it does not
    # depend on how the recipe happened to be ordered (golden files stay stable).
    argv = [python, "-m", TRAIN_MODULE]
    for _, flag, rendered in sorted(parts):
        argv.append(flag)
        argv.extend(rendered)
    return TrainCommand(argv=argv, version=table.version, dialect=table.dialect, dropped=tuple(dropped),
                        flag_values=emitted, notes=tuple(notes))


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
        # the in-run monitor is greedy pass@1 (sop/README.md#primary-metric); OpenRLHF's defaults are 0.6 and 4
        merged.setdefault("eval_temperature", 0.0)
        merged.setdefault("eval_n_samples_per_prompt", 1)
    if resume:
        merged["load_checkpoint"] = True
    return merged


def plan_train_command(att: Attempt) -> dict[str, Any]:
    """What ``rlexp plan`` records about the OpenRLHF command of an attempt, checked now.

    The version must be a listed release and every stated recipe key must have a flag (or a
    rule) in it: an :class:`InputError` naming the spec and the key otherwise, so a recipe that
    cannot launch fails at plan time, not after an hour of Ray start-up. The attempt's paths are
    the ones ``rlexp launch`` uses; datasets that do not exist yet are named by their stated path.
    """
    from rlexp.experiment.layout import AttemptDir

    spec_file = att.display_path or att.spec_path
    version = check_version(att.trainer.version, spec_file)
    ad = AttemptDir(att.attempt_dir)
    pool = att.datasets.get("pool")
    monitor = att.datasets.get("ood_monitor")
    paths = AttemptPaths(
        pretrain=att.recipe.pretrain or "",
        prompt_data=str(pool.path) if pool is not None and pool.path is not None else "",
        eval_dataset=str(monitor.path) if monitor is not None and monitor.path is not None else None,
        save_path=ad.final_model,
        ckpt_path=ad.checkpoint_files.dir,
        reward_file=ad.launch.reward_func,
        tensorboard_dir=ad.tensorboard,
    )
    from rlexp.trainers.launch import loss_recipe  # environment.loss gspo: the release's GSPO flags

    recipe = loss_recipe(att, att.recipe_stated or att.recipe)
    built = build_train_argv(attempt_recipe(recipe, paths), version, spec_file=spec_file)
    return {"version": built.version, "dialect": built.dialect, "flags": len(built.flag_values),
            "dropped_recipe_keys": list(built.dropped), "notes": list(built.notes)}
