"""``rlexp import`` of a verl launch script: ``key=value`` Hydra overrides become the recipe's dotted
keys, values read as Hydra reads them (YAML scalars, ``[a,b]`` lists, ``{k: v}`` mappings).

``+key=value`` (Hydra's addition) is checked against the release's composed config, as Hydra
composes it: adding a key the config already holds a value for is refused (Hydra refuses it; it adds
over a null default, and merges a mapping or list); a key inside one of
its mappings (``+actor_rollout_ref.model.override_config.max_position_embeddings=32768``) becomes
that mapping's entry in the recipe; a key the composed config has nowhere is left out with a note
(verl's code does not read it through the config rlexp plans with). ``++key`` adds or overrides, and
is read the same way. The config is the one of the engine the script chooses (``model_engine=...``, or
``--config-name ppo_megatron_trainer``, which becomes the recipe's ``model_engine: megatron``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.training.launch_script import argument_value, dataset_argument, secret_argument

CHECKS_VERSION = False  # a missing --version is refused by the stage (the script does not state the release)
LAUNCH_DEFAULTS: dict[str, Any] = {}
ARGUMENT_STYLE = "hydra"
DATASET_KEYS = {"data.train_files": "pool", "data.val_files": "ood_monitor"}
# what names the run for its loggers: import keeps it when known, leaves it out when only running tells
LOGGER_NAMES = ("trainer.project_name", "trainer.experiment_name", "trainer.logger")


# the module verl runs its trainer with; its ppo_trainer config is the key table plan checks against
ENTRY_MODULE = "verl.trainer.main_ppo"


# Hydra 1.3's override grammar for a primitive value (hydra/grammar/OverrideLexer.g4): an integer has
# no leading zero and may have single underscores between digits (`1_000`); a float is a point or
# exponent form with the same digits, or inf / nan in any case; true/false and null in any case.
# `007` and `none` stay strings, as Hydra keeps them.
_H_UINT = r"(?:0|[1-9](?:_?\d)*)"
_H_DIGITS = r"\d(?:_?\d)*"
_H_POINT = rf"(?:{_H_UINT}?\.{_H_DIGITS}|{_H_UINT}\.)"
_HYDRA_INT = re.compile(rf"^[+-]?{_H_UINT}$")
_HYDRA_FLOAT = re.compile(rf"^[+-]?(?:{_H_POINT}|(?:{_H_POINT}|{_H_UINT})[eE][+-]?{_H_DIGITS}|[Ii][Nn][Ff]|[Nn][Aa][Nn])$")


def hydra_scalar(raw: str) -> Any:
    """An override's value as Hydra's grammar reads it: a number, a bool, null, a list or mapping
    (:func:`argument_value`), else the string itself."""
    text = raw.strip()
    if _HYDRA_INT.match(text):
        return int(text.replace("_", ""))
    if _HYDRA_FLOAT.match(text):
        return float(text.replace("_", ""))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "null":
        return None
    if text.startswith(("[", "{")):
        return argument_value(raw)
    return raw


def check_module(script: Path, where: str, module: str) -> dict[str, Any] | None:
    """:data:`ENTRY_MODULE`, or the fully-async trainer (the recipe's ``entry_module``: its own config
    and step counts, rlexp.trainers.verl.fully_async); another verl module composes another config or
    none (the one-step-off trainer has its own; a module a release no longer ships makes ``python -m``
    fail): refused, naming it, rather than planned as ``main_ppo``."""
    from rlexp.trainers.verl import fully_async

    if module == fully_async.MODULE:
        return {fully_async.ENTRY_KEY: module}
    if module != ENTRY_MODULE:
        raise InputError(script, where, f"python -m {module[:80]}: rlexp plans verl's trainer as {ENTRY_MODULE} runs "
                         "it (its ppo_trainer config is rlexp's key table); another module composes another config "
                         "or is not in the release")


def dropped(key: str, known: Any = None, value: Any = None) -> bool:
    """Whether import leaves ``key`` out anyway (rlexp sets it, a logger, a credential, the reward).
    A key named like a credential's is kept when the release's config (``known``: its key there)
    says its value holds no secret, by the spec's own rule (``rlexp.spec.schema.holds_no_secret``:
    ``ppo_max_token_len_per_gpu`` counts tokens, ``data.continuous_token.enable`` switches a feature)."""
    from rlexp.spec.schema import holds_no_secret
    from rlexp.trainers.verl.hydra import MANAGED_KEYS

    secret = secret_argument(key) and not holds_no_secret(known, value)
    return (key in MANAGED_KEYS and key not in DATASET_KEYS) or key in LOGGER_NAMES or secret \
        or key.startswith(("reward_model.reward_kwargs", "trainer.default_local_dir", "trainer.validation_data_dir",
                           "trainer.rollout_data_dir"))


def field_of(key: str) -> str:
    if key.startswith("--config"):
        return "the Hydra config verl composes; rlexp plans with ppo_trainer (and its model_engine)"
    role = DATASET_KEYS.get(key)
    return f"datasets.{role}: the data's path" if role else f"recipe key {key}"


def _config_name_engine(script: Path, where: str, token: str) -> str | None:
    """The engine a ``--config-name`` chooses (None: another --config option, which sets no key).
    ``ppo_megatron_trainer`` is ppo_trainer with ``model_engine: megatron`` and nothing else (verl
    deprecated it for ``model_engine=megatron``); any other config is refused."""
    from rlexp.trainers.verl.fully_async import CONFIG_NAMES
    from rlexp.trainers.verl.releases import CONFIG_NAME_ENGINES

    name = _config_name(token)
    if name is None:
        return None
    if name in CONFIG_NAMES:  # the fully-async trainer's configs (its module sets the recipe's entry_module)
        return CONFIG_NAMES[name]
    if name not in CONFIG_NAME_ENGINES:
        raise InputError(script, where, f"{token[:80]}: rlexp plans verl's ppo_trainer config (its key table "
                         f"is that config's, per model_engine), not {token.partition('=')[2]!r}")
    return CONFIG_NAME_ENGINES[name]


def _engine(script: Path, where: str, args: list[str]) -> str | None:
    """The engine the command composes: ``model_engine=...`` (the last one, as Hydra applies them) or
    the one its ``--config-name`` implies; None when neither says (verl's default)."""
    engine = None
    for token in args:
        if token.startswith("--config-name"):
            engine = _config_name_engine(script, where, token) or engine
    for token in args:
        key, eq, raw = token.partition("=")
        if eq and key.lstrip("+") == "model_engine":
            engine = hydra_scalar(raw) if raw else ""
    return engine


def read_args(script: Path, where: str, args: list[str], version: str | None = None):
    """The recipe, datasets, left-out keys and notes of ``key=value`` Hydra overrides."""
    from rlexp.trainers.verl import releases
    from rlexp.trainers.verl.hydra import check_version

    engine = _engine(script, where, args)
    stated_engine = {releases.ENGINE_KEY: engine} if engine is not None else {}
    table: dict[str, Any] = {}
    if version:  # `+` additions are checked against the engine's config (plan refuses an engine rlexp lacks)
        listed = releases.engines_of(check_version(version, script))
        offered = releases.engine_choices(version)
        if engine is not None and offered and engine not in offered:  # verl's own refusal, at import
            from rlexp.trainers.verl.hydra import unknown_engine

            raise InputError(script, where, f"model_engine={engine}: " + unknown_engine(engine, version))
        from rlexp.trainers.verl import fully_async_config

        read = fully_async_config.table if _names_fully_async_config(args) else releases.read_table
        table = read(version, engine if engine in listed else releases.DEFAULT_ENGINE)
    recipe: dict[str, Any] = dict(stated_engine)
    datasets: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    notes: list[str] = []
    for token in args:
        if token.startswith(("--config-name", "--config-path", "--config-dir")):
            if token.startswith("--config-name") and _names_fully_async_config([token]):
                notes.append(f"{token[:80]}: verl's fully-async trainer composes ppo_trainer with model_engine "
                             f"{engine} and its own keys (the recipe's entry_module and {releases.ENGINE_KEY})")
            elif _config_name_engine(script, where, token) not in (None, releases.DEFAULT_ENGINE):
                notes.append(f"{token[:80]}: verl composes ppo_trainer with model_engine {engine} (the recipe's "
                             f"{releases.ENGINE_KEY}: {engine})")
            continue
        raw_key, eq, raw = token.partition("=")
        plus = len(raw_key) - len(raw_key.lstrip("+"))
        key = raw_key.lstrip("+")
        if not eq or plus > 2 or not re.match(r"^[A-Za-z_][\w.]*$", key):
            raise InputError(script, where, f"{token[:80]!r}: not a Hydra override key=value")
        value = hydra_scalar(raw) if raw else ""
        if key == releases.ENGINE_KEY:
            continue  # read above (a config-group choice, not a key of the composed config)
        if key in DATASET_KEYS:
            role = DATASET_KEYS[key]
            path = value[0] if isinstance(value, list) and len(value) == 1 else value
            datasets[role] = dataset_argument(path if isinstance(path, list) else str(path), key)
        elif dropped(key, table.get(key), value):
            left_out.append(key)
        elif plus and table and key not in table:  # + and ++ add a key: into a mapping, or nowhere
            _addition(script, where, key, value, table, recipe, left_out, notes, version)
        elif plus == 1 and table and not _hydra_adds(table[key], value):
            raise InputError(script, where, f"+{key}: verl {version}'s config already has {key}, and Hydra refuses "
                             f"to add it again (\"Could not append to config\"): write {key}=VALUE")
        else:
            recipe[key] = value
    if "pool" not in datasets:
        raise InputError(script, where, "no data.train_files: the data the run trains on is needed for its steps")
    return recipe, datasets, left_out, notes


def _config_name(token: str) -> str | None:
    """The config a ``--config-name=NAME`` token names (quotes and ``.yaml`` off); None for another token."""
    option, _, chosen = token.partition("=")
    return chosen.strip().strip("'\"").removesuffix(".yaml") if option == "--config-name" else None


def _names_fully_async_config(args: list[str]) -> bool:
    """Whether ``--config-name`` names one of the fully-async trainer's configs."""
    from rlexp.trainers.verl.fully_async import CONFIG_NAMES

    return any(_config_name(t) in CONFIG_NAMES for t in args)


def _hydra_adds(existing: Any, value: Any) -> bool:
    """Whether Hydra's ``+key=value`` accepts a key the config has (hydra/_internal/config_loader_impl.py,
    1.3: ``OmegaConf.select(cfg, key) is None or isinstance(value, (dict, list))``): a null default, or a
    mapping or list merged into it. An interpolated default is taken as set (what it resolves to is not
    known here)."""
    return existing.type == "null" or isinstance(value, dict | list)


def _addition(script: Path, where: str, key: str, value: Any, table: dict[str, Any], recipe: dict[str, Any],
              left_out: list[str], notes: list[str], version: str | None) -> None:
    """``+key=value`` (or ``++``) of a key the release's config lacks, as Hydra composes it."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:cut])
        if parent in table:
            # Hydra adds into a mapping, a null, or an interpolation (which the mapping of the added key replaces)
            if table[parent].type not in ("dict", "null", "interpolation"):
                raise InputError(script, where, f"+{key}: {parent} is a {table[parent].type} in verl {version}'s "
                                 "config, not a mapping a key can be added to")
            mapping = recipe.setdefault(parent, {})
            if not isinstance(mapping, dict):
                raise InputError(script, where, f"+{key}: {parent} is already set to {mapping!r}")
            node = mapping
            for part in parts[cut:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
            return
    left_out.append(f"+{key}")
    notes.append(f"+{key}: an addition verl {version}'s composed config has nowhere (Hydra adds it; the config "
                 "rlexp plans with does not read it): left out")
