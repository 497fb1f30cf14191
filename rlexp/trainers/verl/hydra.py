"""verl as a trainer: recipe keys checked against the release's config, the Hydra argv, the
datasets and reward file it reads, and its ``file`` logger's JSONL as metrics.

A verl recipe states verl's own dotted Hydra keys (``data.train_batch_size``,
``actor_rollout_ref.actor.optim.lr``). :func:`check_recipe` holds each one against the key table of
the pinned release (:mod:`rlexp.trainers.verl.releases`, read from its wheel): an unknown key is one
line naming the spec and the key with a "did you mean", a value of the wrong type likewise.

The command is ``python3 -m verl.trainer.main_ppo key=value ...`` (or the fully-async trainer's
module and config when the recipe's ``entry_module`` names it: rlexp.trainers.verl.fully_async): one
Hydra override per argv item (:func:`hydra_value` writes each value in Hydra's override grammar, quoted where a string
would otherwise read as a number, a bool or null, or contains a character the grammar reserves).
rlexp sets the keys that name the attempt's files (:data:`MANAGED_KEYS`): the data in verl's row
format, the reward file grading with :mod:`rlexp.evaluation.answers`, the checkpoint directory, the
``file`` logger. The metrics path is set with ``VERL_FILE_LOGGER_PATH`` in the run's environment.

verl needs GPUs; nothing here imports or runs it.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.trainers.verl import RULES, fully_async, fully_async_config, releases
from rlexp.trainers.verl.files import VerlFiles
from rlexp.trainers.verl.fully_async import ENTRY_KEY, MAIN_PPO
from rlexp.trainers.verl.steps import NUMBER_OR_BOUNDS

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

ENTRYPOINT = ("python3", "-m", "verl.trainer.main_ppo")
ENTRY_MODULES = (MAIN_PPO, fully_async.MODULE)  # the trainers rlexp plans (the recipe's entry_module)
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
DATA_SOURCE_POOL = "rlexp_pool"
DATA_SOURCE_MONITOR = "rlexp_ood_monitor"
# The keys rlexp sets from the attempt (paths, the reward, the logger, resume); a recipe that
# states them is refused: the spec's datasets and the attempt directory decide them.
MANAGED_KEYS = (
    "data.train_files", "data.val_files", "data.prompt_key",
    "reward.custom_reward_function.path", "reward.custom_reward_function.name",
    "custom_reward_function.path", "custom_reward_function.name",
    "trainer.default_local_dir", "trainer.resume_mode",
)  # fmt: skip
MODEL_KEY = "actor_rollout_ref.model.path"


# ----------------------------------------------------------------------------- the recipe


def check_version(version: str, spec_file: str | Path | None) -> str:
    listed = releases.known_versions()
    if version not in listed:
        raise InputError(spec_file, "trainer.version", f"verl {version} is not a listed release (listed: "
                         f"{', '.join(listed)}; add one with {releases.REFRESH_SCRIPT} <version>)")
    return version


def _suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not close:  # a right leaf under a wrong group: data.total_epochs -> trainer.total_epochs
        leaf = name.rsplit(".", 1)[-1]
        same_leaf = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
        close = difflib.get_close_matches(name, same_leaf, n=1, cutoff=0.0)
    return f"; did you mean '{close[0]}'?" if close else ""


def _check_bounds(value: Any) -> str | None:
    """Why ``value`` is not a threshold verl's `_parse_rollout_is_threshold` takes, or None: a
    positive number, or "LOWER_UPPER" with 0 < LOWER <= UPPER."""
    wrong = f"must be a positive number or 'LOWER_UPPER' with 0 < LOWER <= UPPER (got {value!r})"
    if isinstance(value, bool):
        return wrong
    if isinstance(value, str) and "_" in value:
        lower_text, upper_text = value.strip().split("_", 1)
    else:
        lower_text, upper_text = None, value
    try:
        upper = float(upper_text)
        lower = None if lower_text is None else float(lower_text)
    except (TypeError, ValueError):
        return wrong
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):  # as verl compares (nan passes there too)
        return wrong
    return None


def _check_value(key: releases.ConfigKey, value: Any) -> str | None:
    """Why ``value`` does not fit the key's type (the type of verl's default), or None."""
    if key.name in NUMBER_OR_BOUNDS:
        return _check_bounds(value)
    kind = key.type
    if kind in ("null", "interpolation"):
        return None  # verl's default does not fix a type; OmegaConf takes what Hydra parses
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false (got {value!r})"
    if kind in ("int", "float"):
        # an int default does not make a key integral: verl's YAML writes temperature: 0 where the
        # field is a float (rlexp.trainers.verl.steps checks the step math's integers itself)
        if isinstance(value, bool):
            return f"must be a number (got {value!r})"
        try:
            number = float(value)
        except (TypeError, ValueError):
            return f"must be a number (got {value!r})"
        return None if math.isfinite(number) else f"must be a finite number (got {value!r})"
    if kind == "str":
        return None if isinstance(value, str) else f"must be a string (got {value!r})"
    if kind == "list":
        return None if isinstance(value, list) or value is None else f"must be a list (got {value!r})"
    return None if isinstance(value, dict) or value is None else f"must be a mapping (got {value!r})"


def _coerce(key: releases.ConfigKey, value: Any) -> Any:
    if key.type == "float" and value is not None and not (key.name in NUMBER_OR_BOUNDS and isinstance(value, str)
                                                          and "_" in value):
        return float(value)  # a YAML 1e-6 without a dot reads as a string
    return value


def engine_of(stated: Mapping[str, Any], version: str, spec_file: str | Path | None) -> str:
    """The engine the recipe composes (``model_engine``, ppo_trainer.yaml's first defaults-list choice;
    verl's own default ``dp``, FSDP), one that ``version`` has a key table for."""
    engine = stated.get(releases.ENGINE_KEY, releases.DEFAULT_ENGINE)
    listed = releases.engines_of(version)
    if engine not in listed:
        raise InputError(spec_file, f"recipe.{releases.ENGINE_KEY}", unknown_engine(engine, version))
    return engine


def unknown_engine(engine: Any, version: str) -> str:
    """Why ``engine`` cannot be planned: verl ``version`` has no such engine (Hydra stops at start), or
    rlexp has no key table for it."""
    offered = releases.engine_choices(version)
    if offered and engine not in offered:
        return (f"{engine!r}: verl {version}'s config group {releases.ENGINE_KEY} has no such engine (it offers "
                f"{', '.join(offered)}): Hydra stops before training")
    return (f"{engine!r}: rlexp has no key table for this engine of verl {version} (listed: "
            f"{', '.join(releases.engines_of(version))}; rlexp's limit)")


def key_table(stated: Mapping[str, Any], version: str, spec_file: str | Path | None) -> dict[str, releases.ConfigKey]:
    """The keys of the config verl composes for this recipe: the release's, with its engine's (and the
    fully-async trainer's, when the recipe runs it)."""
    read = fully_async_config.table if fully_async.is_fully_async(stated) else releases.read_table
    return read(check_version(version, spec_file), engine_of(stated, version, spec_file))


def _other_engines(name: str, version: str, engine: str) -> str:
    """Which other engines' configs have ``name`` (for the refusal's hint)."""
    others = [e for e in releases.engines_of(version) if e != engine and name in releases.read_table(version, e)]
    return f" (a key of model_engine {' and '.join(others)}: state {releases.ENGINE_KEY}: {others[0]})" if others else ""


def check_recipe(stated: Mapping[str, Any], version: str, spec_file: str | Path | None) -> dict[str, Any]:
    """The stated recipe checked against verl ``version``'s config with the recipe's engine; returns it
    with numbers coerced."""
    keys = key_table(stated, version, spec_file)
    engine = engine_of(stated, version, spec_file)
    names = list(keys)
    out: dict[str, Any] = {}
    for name, value in stated.items():
        where = f"recipe.{name}"
        if name in MANAGED_KEYS:
            raise InputError(spec_file, where, "set by rlexp launch from the spec (datasets, attempt directory, "
                             "reward): leave it out of the recipe")
        if name in (releases.ENGINE_KEY, ENTRY_KEY):
            if name == ENTRY_KEY and value not in ENTRY_MODULES:
                raise InputError(spec_file, where, f"{value!r}: rlexp plans verl's {' and '.join(ENTRY_MODULES)}")
            out[name] = value
            continue
        key = keys.get(name)
        if key is None:
            raise InputError(spec_file, where, f"not a key of verl {version}'s config with model_engine {engine} "
                             f"({releases.config_source(engine)})" + (_other_engines(name, version, engine)
                                                                or _suggest(name, names)))
        if value is not None:
            problem = _check_value(key, value)
            if problem:
                raise InputError(spec_file, where, f"{problem}; verl {version}'s default is {json.dumps(key.default)}")
        out[name] = _coerce(key, value)
    return out


def resolved_config(stated: Mapping[str, Any], version: str, spec_file: str | Path | None = None) -> dict[str, Any]:
    """Every key of the release's config with the recipe's engine: its default, or the stated value
    (``model_engine`` included: the engine the step math's LR schedule is built for)."""
    checked = check_recipe(stated, version, spec_file)
    defaults = {name: key.default for name, key in key_table(stated, version, spec_file).items()}
    return {**defaults, releases.ENGINE_KEY: engine_of(stated, version, spec_file), **checked}


# ----------------------------------------------------------------------------- Hydra values

_PLAIN = re.compile(r"^[A-Za-z_/~][A-Za-z0-9_./~\-+:]*$")  # an unquoted Hydra string (ID/ESC-free)
_NOT_A_STRING = re.compile(r"^(true|false|null|nan|[+-]?inf)$", re.IGNORECASE)


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar (what ``key=<here>`` parses back to ``value``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return repr(value)  # 1e-06, 0.5: Hydra's float grammar reads both
    if isinstance(value, str):
        if _PLAIN.match(value) and not _NOT_A_STRING.match(value):
            return value
        # Hydra's quoted strings: a backslash escapes only a quote or the backslashes before one
        # (or before the closing quote); any other backslash is literal
        return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value) + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no Hydra form for {type(value).__name__} {value!r}")


def overrides(config: Mapping[str, Any]) -> list[str]:
    return [f"{key}={hydra_value(value)}" for key, value in config.items()]


# ----------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class VerlPaths:
    """What rlexp sets for one attempt (all absolute)."""

    model: str
    train_file: Path
    val_file: Path
    reward_file: Path
    checkpoints: Path
    metrics_file: Path


def attempt_config(stated: Mapping[str, Any], paths: VerlPaths, attempt_id: str, *, resume: bool) -> dict[str, Any]:
    """The stated recipe plus the keys rlexp manages; the logger always includes ``file``."""
    merged = dict(stated)
    merged[MODEL_KEY] = paths.model
    logger = merged.get("trainer.logger") or ["console"]
    logger = [logger] if isinstance(logger, str) else list(logger)
    merged.update({
        "data.train_files": str(paths.train_file),
        "data.val_files": str(paths.val_file),
        "reward.custom_reward_function.path": str(paths.reward_file),
        "reward.custom_reward_function.name": "compute_score",
        "trainer.logger": logger if "file" in logger else [*logger, "file"],
        "trainer.default_local_dir": str(paths.checkpoints),
        "trainer.resume_mode": "auto" if resume else "disable",
    })  # fmt: skip
    merged.setdefault("trainer.project_name", "rlexp")
    merged.setdefault("trainer.experiment_name", attempt_id)
    return merged


def build_argv(config: Mapping[str, Any], version: str, spec_file: str | Path | None = None) -> list[str]:
    """``python3 -m verl.trainer.main_ppo key=value ...``, every key checked against ``version``."""
    keys = key_table(config, version, spec_file)
    for name in config:
        if name not in keys and name not in (releases.ENGINE_KEY, ENTRY_KEY):
            raise InputError(spec_file, f"recipe.{name}", f"not a key of verl {version}'s config")
    return [*entrypoint(config), *overrides({k: v for k, v in config.items() if k != ENTRY_KEY})]


def entrypoint(config: Mapping[str, Any]) -> list[str]:
    """``python3 -m`` the recipe's trainer; the fully-async one with its own config."""
    if not fully_async.is_fully_async(config):
        return list(ENTRYPOINT)
    engine = config.get(releases.ENGINE_KEY, releases.DEFAULT_ENGINE)
    return ["python3", "-m", fully_async.MODULE, f"--config-name={fully_async.config_name(engine)}"]


def model_path(att: Attempt) -> str:
    """``actor_rollout_ref.model.path`` as stated; a relative path that exists under the experiment
    directory becomes absolute (verl runs elsewhere), anything else (a hub id) stays as written."""
    stated = att.recipe_stated.get(MODEL_KEY)
    if not isinstance(stated, str) or not stated:
        raise InputError(att.display_path or att.spec_path, f"recipe.{MODEL_KEY}",
                         "missing: the base model (a directory or a hub id)")
    path = Path(stated)
    if not path.is_absolute():
        path = Path(att.experiment_dir) / path
    return str(path) if path.exists() else stated


def attempt_paths(att: Attempt) -> VerlPaths:
    from rlexp.experiment.layout import AttemptDir

    spec_file = att.display_path or att.spec_path
    ad = AttemptDir(att.attempt_dir)
    pool, monitor = att.datasets.get("pool"), att.datasets.get("ood_monitor")
    if pool is None or (pool.path is None and pool.stated_size is None):
        raise InputError(spec_file, "datasets.pool.path", "required to launch training")
    if monitor is None or (monitor.path is None and monitor.stated_size is None):
        raise InputError(spec_file, "datasets.ood_monitor.path", "verl validates on data.val_files: "
                         "state the in-run monitor set")
    # a set stated by its size alone (external data an import recorded as several files): the plan
    # names the copy launch would write by the role; launch itself refuses it without a file
    return VerlPaths(model=model_path(att), train_file=VerlFiles.of(ad).dataset(pool.path or Path("pool.jsonl")),
                     val_file=VerlFiles.of(ad).dataset(monitor.path or Path("ood_monitor.jsonl")), reward_file=ad.launch.reward_func,
                     checkpoints=ad.checkpoint_files.resume_state_dir(RULES), metrics_file=VerlFiles.of(ad).metrics)


def stated_recipe(att: Attempt) -> dict[str, Any]:
    """The keys some spec in the chain states, with ``environment.loss: gspo``'s policy loss mode,
    aggregation and clip ratios added (:func:`rlexp.trainers.launch.loss_recipe`)."""
    from rlexp.trainers.launch import loss_recipe

    return loss_recipe(att, att.recipe_stated)


def plan_command(att: Attempt) -> dict[str, Any]:
    """What ``rlexp plan`` records about the verl command, checked now (InputError otherwise)."""
    spec_file = att.display_path or att.spec_path
    stated = check_recipe(stated_recipe(att), att.trainer.version, spec_file)
    argv = build_argv(attempt_config(stated, attempt_paths(att), att.id, resume=False), att.trainer.version, spec_file)
    engine = engine_of(stated, att.trainer.version, spec_file)
    start = entrypoint(stated)
    out = {"version": att.trainer.version, "entrypoint": start, "overrides": len(argv) - len(start),
           "config": (f"{fully_async.CONFIG_DIR}/{fully_async.config_name(engine)}.yaml"
                      if fully_async.is_fully_async(stated) else releases.config_source(engine))}
    if engine != releases.DEFAULT_ENGINE:  # plan.json of an FSDP attempt stays as it was
        out["model_engine"] = engine
    return out


def verl_row(record: Mapping[str, Any], source: str, data_source: str, index: int) -> dict[str, Any]:
    """One dataset line (``{"prompt", "answer", ...}``, the suffix already added) in verl's row format."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": str(record.get("prompt", ""))}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(record.get("answer", ""))},
        "extra_info": {"index": index, "problem_hash": record.get("problem_hash"), "source": source},
    }


def write_verl_dataset(source: Path, target: Path, suffix: str, data_source: str) -> Path:
    from rlexp.experiment.files import atomic_write_text, read_jsonl

    lines = []
    for index, record in enumerate(read_jsonl(source)):
        record = dict(record)
        record["prompt"] = str(record.get("prompt", "")) + suffix
        lines.append(json.dumps(verl_row(record, Path(source).name, data_source, index), ensure_ascii=False))
    return atomic_write_text(target, "\n".join(lines) + "\n")


@dataclass(frozen=True)
class VerlHydraRun:
    """Everything ``rlexp launch`` needs for a verl run: the Hydra argv, its environment, the data
    files to convert and the reward and metrics files. (The trainer's launch, the ``TrainerLaunch``
    the registry finds, is :class:`rlexp.trainers.verl.launch.VerlLaunch`; it turns this into a
    ``LaunchPlan``.)"""

    argv: list[str]
    env: dict[str, str]  # the trainer's environment additions (the file logger's path)
    datasets: tuple[tuple[Path, Path, str, str], ...]  # (source, verl copy, prompt suffix, data_source)
    reward_file: Path
    metrics_file: Path


def prepare_launch(att: Attempt, *, resume: bool, must_exist: bool = True) -> VerlHydraRun:
    """The argv, environment and files of a verl launch; every input checked, nothing written."""
    spec_file = att.display_path or att.spec_path
    stated = check_recipe(stated_recipe(att), att.trainer.version, spec_file)
    if fully_async.is_fully_async(stated):  # planned, not launched: rlexp reads its logs by trainer step
        raise InputError(spec_file, f"recipe.{ENTRY_KEY}", "rlexp plans verl's fully-async trainer but does not "
                         "launch it: its metrics and checkpoints are numbered by parameter version, not by the "
                         "plan's trainer steps, and rlexp's log reader does not map them yet")
    paths = attempt_paths(att)
    pool, monitor = att.datasets["pool"], att.datasets["ood_monitor"]
    for role, ref in (("pool", pool), ("ood_monitor", monitor)):
        if ref.path is None:
            raise InputError(spec_file, f"datasets.{role}.path", "required to launch training (the set is stated by "
                             "its size only: give its JSONL file)")
    if must_exist:
        for role, ref in (("pool", pool), ("ood_monitor", monitor)):
            if not ref.path.exists():
                raise InputError(ref.path, None, f"datasets.{role}: file not found")
    argv = build_argv(attempt_config(stated, paths, att.id, resume=resume), att.trainer.version, spec_file)
    datasets = ((pool.path, paths.train_file, pool.prompt_suffix, DATA_SOURCE_POOL),
                (monitor.path, paths.val_file, monitor.prompt_suffix, DATA_SOURCE_MONITOR))
    return VerlHydraRun(argv=argv, env={FILE_LOGGER_ENV: str(paths.metrics_file)}, datasets=datasets,
                      reward_file=paths.reward_file, metrics_file=paths.metrics_file)
