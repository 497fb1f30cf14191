"""Loading ``attempt.yaml``: the parent chain resolved, every field checked, datasets and paths
resolved; the sections other specs share (``eval``, ``datasets``)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlexp.environments.rewards import weights_problem
from rlexp.errors import InputError
from rlexp.experiment.files import check_regular_file, load_yaml
from rlexp.experiment.layout import SPEC_NAME
from rlexp.spec.recipe import (
    key_table,
    recipe_key_for,
)

from .model import (
    ENV_JUDGE_DEFAULTS,
    ENV_LATE_DEFAULTS,
    ROLES,
    TRAINER_GRADED_ROLES,
    TRAINERS,
    Attempt,
    Baseline,
    Budget,
    DatasetRef,
    EnvironmentSettings,
    EvalSettings,
    TrainerSettings,
)
from .schema import (
    _ID_RE,
    _SCHEMA,
    _check_change_key,
    _validate,
    _validate_recipe,
    _validate_section,
    credential_in,
    holds_no_secret,
    is_credential_key,
)

# ----------------------------------------------------------------------------- loading


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

    if "recipe" in own:
        trainer = (own.get("trainer") or {}).get("name") or (parent.trainer.name if parent else None)
        if trainer is None:
            raise InputError(display, "trainer.name", f"required ({', '.join(TRAINERS)}) in this spec or a parent")
        own["recipe"] = _validate_recipe(own["recipe"], display, trainer)
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
    for section in ("intent", "trainer", "recipe", "datasets", "eval", "checkpoints", "budget", "baseline",
                    "environment"):
        merged[section] = _merge(p_raw.get(section), own.get(section))
    # A child pointing a dataset at another file must not inherit the old file's size.
    for role, entry in (own.get("datasets") or {}).items():
        inherited = (p_raw.get("datasets") or {}).get(role) or {}
        if entry and "path" in entry and "size" not in entry and entry["path"] != inherited.get("path"):
            merged["datasets"][role].pop("size", None)

    _refuse_credentials({**merged, "change": own.get("change"), "description": own.get("description")}, display)
    trainer_raw = merged["trainer"]
    if not trainer_raw.get("name"):
        raise InputError(display, "trainer.name", f"required ({', '.join(TRAINERS)}) in this spec or a parent")
    if parent is not None and key_table(trainer_raw["name"]).keys is not key_table(parent.trainer.name).keys:
        # each trainer has its own recipe keys: the parent's recipe means nothing to another trainer
        # (openrlhf and local share OpenRLHF's, so a child may move between them)
        raise InputError(display, "trainer.name", f"{trainer_raw['name']!r} differs from parent {parent.id}'s "
                                                  f"{parent.trainer.name!r}: start a new root attempt instead")
    table = key_table(trainer_raw["name"])
    version = trainer_raw.get("version")
    if version is None:
        from rlexp.trainers import rules as trainer_rules

        how = trainer_rules(trainer_raw["name"])
        version = how.default_version  # local: OpenRLHF 0.11's step semantics
        if version is None and table.versions:
            version = table.versions[0]  # the one release whose keys the table lists
        elif version is None:
            example = f" (e.g. {how.version_example})" if how.version_example else ""
            raise InputError(display, "trainer.version", f"required for {trainer_raw['name']}{example}")
    if not re.match(r"^\d+\.\d+", version):
        raise InputError(display, "trainer.version", f'{version!r} is not a version like "0.9.3"')
    if table.versions and version not in table.versions:
        raise InputError(display, "trainer.version", f"{trainer_raw['name']} {version} is not a listed release: the "
                                                     f"recipe keys were read from {', '.join(table.versions)}")
    trainer = TrainerSettings(name=trainer_raw["name"], version=version, gpus=trainer_raw.get("gpus"))

    recipe_stated = dict(merged["recipe"])
    from rlexp.trainers import rules as trainer_rules

    # the defaults of the trainer as this recipe runs it (TRL's: its config class's)
    recipe = table.recipe(recipe_stated, trainer_rules(trainer.name).recipe_defaults(recipe_stated))

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
        datasets[role] = _dataset_ref(role, entry, experiment_dir, eval_settings, display)

    change = own.get("change") or {}
    for ckey, cvalue in change.items():
        if not isinstance(ckey, str):
            raise InputError(display, f"change.{ckey}",
                             f"keys must be strings, got {type(ckey).__name__} {ckey!r:.40}")
        _check_change_key(ckey, display, trainer.name)
        if (is_credential_key(ckey) and cvalue is not None and cvalue is not False
                and not holds_no_secret(recipe_key_for(trainer.name, ckey), cvalue)):
            raise InputError(display, f"change.{ckey}", "a credential does not go in a spec: set it in an "
                                                         "environment variable instead (e.g. WANDB_API_KEY)")

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
        environment=_environment(merged["environment"], display, trainer.name),
    )
    return attempt


# where the key a field must not hold is named instead
_KEY_BY_NAME = {"eval": "eval.api_key_env (the NAME of the variable holding the key)",
                "environment.judge": "environment.judge.api_key_env (the NAME of the variable holding the key)",
                "environment.config": "a *_env entry naming the variable (e.g. api_token_env: MY_TOKEN) that the "
                                      "environment reads"}


def _refuse_credentials(merged: dict[str, Any], display: str) -> None:
    """A key written into a spec is refused before anything is written: the spec is copied into
    plan.json, the records' metadata, the reports and MLflow. Keys go by reference, as the name of an
    environment variable (``*_env``)."""
    for section in ("intent", "trainer", "recipe", "datasets", "eval", "checkpoints", "budget", "baseline",
                    "environment", "change", "description"):
        value = merged.get(section)
        if section == "environment" and isinstance(value, dict):
            value = dict(value)
            for part in ("config", "judge"):
                found = credential_in(value.pop(part, None), f"environment.{part}", by_key=True)
                if found:
                    _credential_refused(display, found, f"environment.{part}")
        found = credential_in(value, section)
        if found:
            _credential_refused(display, found, section)


def _credential_refused(display: str, found: tuple[str, str], section: str) -> None:
    field, what = found
    alternative = _KEY_BY_NAME.get(section, "an environment variable the trainer or tool reads itself")
    raise InputError(display, field, f"{what}: credentials never go in a spec (it is copied into plan.json, the "
                                     f"records, reports and MLflow); set the key in an environment variable and "
                                     f"name it in {alternative}")


def _environment(merged: dict[str, Any], display: str, trainer: str) -> EnvironmentSettings | None:
    """The attempt's environment task, or None when no spec of the chain has an ``environment:``."""
    if not merged:
        return None
    from rlexp.trainers import rules as trainer_rules

    settings = EnvironmentSettings(**merged)
    if settings.actions != ENV_LATE_DEFAULTS["actions"] and not trainer_rules(trainer).plays_tool_calls:
        raise InputError(display, "environment.actions", f"{settings.actions!r}: trainer {trainer} plays text "
                                                         "turns only (tool calls: trainer trl)")
    if settings.max_tokens_per_turn > settings.max_total_tokens:
        raise InputError(display, "environment.max_tokens_per_turn",
                         f"{settings.max_tokens_per_turn} exceeds max_total_tokens {settings.max_total_tokens}")
    if not settings.name.strip():
        raise InputError(display, "environment.name", "empty: a registered name or an import path")
    if settings.reward and not any(settings.reward.values()):
        raise InputError(display, "environment.reward", "every weight is 0: state at least one positive weight")
    problem = weights_problem(settings.reward, settings.success_threshold)
    if problem is not None:
        raise InputError(display, "environment.reward", problem)
    mixed = sorted(k for k, v in settings.reward.items() if k != "env" and float(v) > 0)
    if mixed and not trainer_rules(trainer).trains_reward_mix:
        raise InputError(display, "environment.reward",
                         f"{'/'.join(mixed)} reward in training not supported on trainer {trainer}: it trains on the "
                         "environment's return, so the eval would grade another reward (state env only, or train "
                         "with trainer local)")
    if mixed and settings.advantage_mode == "token_rewards":
        raise InputError(display, "environment.reward",
                         f"{'/'.join(mixed)} reward with advantage_mode token_rewards: the mix scores whole episodes, "
                         "token_rewards credits the environment's per-turn rewards (use advantage_mode return)")
    if settings.reward.get("judge"):
        for key in ("base_url", "model"):
            if not settings.judge.get(key):
                raise InputError(display, f"environment.judge.{key}",
                                 "required when environment.reward.judge is weighted (an OpenAI-compatible server)")
    if settings.judge:
        settings = replace(settings, judge={**ENV_JUDGE_DEFAULTS, **settings.judge})
    return settings


def _dataset_ref(
    role: str, entry: dict[str, Any], experiment_dir: Path, eval_settings: EvalSettings, display: str
) -> DatasetRef:
    stated = entry.get("size")
    answer_mode = entry.get("answer_mode")
    if answer_mode is not None and role in TRAINER_GRADED_ROLES:
        raise InputError(
            display,
            f"datasets.{role}.answer_mode",
            "this set is graded in-run by the trainer's exact-match reward; "
            "answer_mode applies to ood_primary, id and sanity",
        )
    if entry.get("cluster") is not None and role in TRAINER_GRADED_ROLES:
        raise InputError(display, f"datasets.{role}.cluster", "clusters are declared on the sets the decision "
                                                              "reads: ood_primary, id and sanity")
    if role in TRAINER_GRADED_ROLES:
        answer_mode = "exact"
    path = None
    exists = False
    size = stated
    if entry.get("path"):
        where = f"datasets.{role}.path"
        if "\0" in entry["path"]:
            raise InputError(display, where, "a NUL byte in the path")
        path = Path(entry["path"])
        if not path.is_absolute():
            path = experiment_dir / path
        if os.path.lexists(path) and not path.is_dir():  # a FIFO, a device, a symlink loop: refused now,
            try:  # not when launch's trainer blocks on it (and before resolve() trips on a loop)
                check_regular_file(path)
            except InputError as exc:
                raise InputError(display, where, f"{entry['path']}: {exc.message}") from None
        path = path.resolve()
        if not entry.get("allow_outside") and not path.is_relative_to(experiment_dir.resolve()):
            raise InputError(display, where, f"{entry['path']} is outside the experiment directory; state "
                                             f"datasets.{role}.allow_outside: true to use it")
        if path.is_dir():
            raise InputError(
                display, f"datasets.{role}.path", f"{path} is a directory, expected a JSONL file"
            )
        exists = path.is_file()
        if exists:
            size = count_records(path)
    if size is None and not exists:
        raise InputError(display, f"datasets.{role}", "state a size, or a path to an existing file")
    cluster = entry.get("cluster")
    n_clusters = None
    sizes: tuple[int, ...] = ()
    if cluster is not None and exists:  # every row names its cluster: checked now, before any stage writes
        from collections import Counter

        from rlexp.evaluation.arithmetic_task import cluster_labels

        assert path is not None
        sizes = tuple(sorted(Counter(cluster_labels(path, cluster, declared_in=f"{display}: datasets.{role}.cluster")
                                     .values()).values()))
        n_clusters = len(sizes)
        if n_clusters < 2:
            raise InputError(display, f"datasets.{role}.cluster", f"every row of {path.name} is in one cluster "
                                                                  f"of {cluster!r}: nothing can be inferred across "
                                                                  "clusters (drop the field or name another column)")
    suffix = entry.get("prompt_suffix")
    return DatasetRef(
        role=role,
        path=path,
        size=size,
        prompt_suffix=eval_settings.prompt_suffix if suffix is None else suffix,
        stated_size=stated,
        exists=exists,
        answer_mode=eval_settings.answer_mode if answer_mode is None else answer_mode,
        external=tuple(entry.get("sources") or ())
        + ((str(path),) if path is not None and not path.is_relative_to(experiment_dir.resolve()) else ()),
        cluster=cluster,
        n_clusters=n_clusters,
        cluster_sizes=sizes,
    )


def count_records(path: Path) -> int:
    """Non-blank lines of a JSONL file (its record count; validity is read by the checks)."""
    count = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                count += 1
    return count


# ----------------------------------------------------------------------------- sections shared with other specs


def validate_spec_section(raw: Any, section: str, display: str, where: str | None = None) -> dict[str, Any]:
    """One section of the attempt schema (``eval``, ``datasets``) checked exactly as in
    ``attempt.yaml``, for another spec that shares it (the sweep spec of :mod:`rlexp.spec.sweep`):
    one format for datasets and eval settings, one set of messages."""
    where = where or section
    if not isinstance(raw, dict):
        raise InputError(display, where, f"must be a mapping (got {raw!r:.60})")
    return _validate_section(raw, _SCHEMA[section], display, f"{where}.")


def spec_section_rules(section: str) -> dict[str, Any]:
    """The rules of one section of the attempt schema (``eval``, ``datasets``), for the JSON Schema
    of another spec that shares it."""
    return _SCHEMA[section]


def resolve_eval_settings(stated: dict[str, Any]) -> EvalSettings:
    """Validated ``eval`` keys (:func:`validate_spec_section`) with the defaults applied."""
    defaults = EvalSettings()
    return EvalSettings(**{k: stated.get(k, getattr(defaults, k)) for k in EvalSettings.__dataclass_fields__})


def resolve_dataset(role: str, entry: dict[str, Any], experiment_dir: Path, eval_settings: EvalSettings,
                    display: str) -> DatasetRef:
    """A validated dataset entry resolved as the attempt spec resolves it (paths inside the
    experiment unless ``allow_outside``, the set's suffix and grading defaulting to ``eval``'s)."""
    return _dataset_ref(role, entry, experiment_dir, eval_settings, display)
