"""``rlexp import SCRIPT ATTEMPT_DIR``: an existing launch script -> an ``attempt.yaml``.

The script is read, never run (:mod:`rlexp.training.launch_script`): its one launch command, with the
script's own variables filled in, gives the trainer and its arguments.

Each trainer reads its own arguments (its package's ``script_args``, e.g. OpenRLHF's through the
named release's own parser);
``rlexp plan`` then checks them against the trainer's key table.

What rlexp sets itself (output paths, the reward, the loggers) is left out and listed; a flag that
carries a secret (an API key, a token) is left out and never written. The data the script trains
on becomes ``datasets.pool`` (and OpenRLHF's ``--eval_dataset`` ``datasets.ood_monitor``); where such a
file is not in the experiment directory its size is asked for by name (``--pool-size``), as is the
release when the script does not state it (``--version``): nothing is guessed. ``--parent`` makes
the attempt a child of an existing one: its recipe is then only what differs from the parent, and
``change`` declares it, so ``rlexp plan`` checks the one-variable rule on what the script changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import FOREIGN_CHECKPOINT_PATTERNS
from rlexp.trainers import names as trainer_names
from rlexp.trainers import rules as trainer_rules
from rlexp.trainers.launch import launcher

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.training.launch_script import Launch, Script


@dataclass
class Imported:
    spec: dict[str, Any]
    trainer: str
    spec_path: Path
    left_out: list[str] = field(default_factory=list)   # keys rlexp sets itself, or secrets
    notes: list[str] = field(default_factory=list)


def import_script(script: str | Path, attempt_dir: str | Path, *, version: str | None = None,
                  pool_size: int | None = None, monitor_size: int | None = None, parent: str | None = None,
                  intent_steps: int | None = None, gpus: int | None = None, env: dict[str, str] | None = None,
                  env_file: str | Path | None = None, workdir: str | Path | None = None,
                  write: bool = True) -> Imported:
    """Read ``script`` and write ``ATTEMPT_DIR/attempt.yaml`` (refused when one is there). ``env``
    (``--env``) and ``env_file`` (``--env-file``, read as ``NAME=VALUE`` data) are what the script
    would find in its environment; ``env`` wins over the file. ``workdir``: the folder the script's
    command runs from, where a relative path it launches (``python train.py``) is read (the current
    directory when None)."""
    from rlexp.experiment.layout import AttemptDir

    script = Path(script)
    attempt_dir = Path(attempt_dir)
    command, launch, environment = _read_command(script, env, env_file)
    spec_path = AttemptDir(attempt_dir).spec
    if spec_path.exists() and write:
        raise InputError(spec_path, None, "already exists: import into a new attempt directory")
    experiment = attempt_dir.resolve().parent
    where = f"line {command.line}"
    # the launch script's trainer (rlexp.training.launch_script.launch_of) reads its own arguments
    reader = launcher(launch.trainer).script_args()
    built = None
    if hasattr(reader, "read_source"):  # a training script that builds its config in its own code
        built = reader.read_source(script, where, launch, workdir=None if workdir is None else Path(workdir),
                                   env=environment)
    if built is not None:
        recipe, datasets, left_out, notes = built
    else:
        recipe, datasets, left_out, notes = _read_arguments(reader, script, where, launch, version)
    notes = command.notes + notes
    if version is None and not reader.CHECKS_VERSION:
        raise InputError(script, None, f"the {launch.trainer} release is not stated in the script: give it with "
                         "--version (the steps and keys depend on it)")
    trainer: dict[str, Any] = {"name": launch.trainer, "version": str(version)}
    if hasattr(reader, "processes"):  # a trainer whose batches depend on the processes the launcher starts
        gpus = _processes(reader, script, where, launch, None if workdir is None else Path(workdir), gpus, recipe,
                          notes)
    if gpus is not None:
        trainer["gpus"] = gpus
    spec: dict[str, Any] = {"id": attempt_dir.name,
                            "description": f"imported from {script.name} (rlexp import; the script was not run)"}
    stated_sizes = {"pool": pool_size, "ood_monitor": monitor_size}
    for role in list(datasets):
        datasets[role] = _dataset_entry(script, where, experiment, role, datasets[role], stated_sizes.get(role), notes)
    if parent is not None:
        spec.update(_child_spec(reader, experiment, parent, trainer, recipe, datasets, intent_steps, notes))
    else:
        if intent_steps is not None:
            spec["intent"] = {"global_steps": intent_steps}
        spec["trainer"] = trainer
        spec["recipe"] = recipe
        spec["datasets"] = datasets
        notes.append("the eval sets (ood_primary, id, sanity), checkpoints, budget and baseline are not in a launch "
                     "script: add them to attempt.yaml (or import with --parent to inherit them)")
    if write:
        from rlexp.experiment.files import atomic_write_text

        attempt_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(spec_path, render(spec, script, left_out, notes))
    return Imported(spec, launch.trainer, spec_path, left_out, notes)


def _processes(reader: Any, script: Path, where: str, launch: Launch, workdir: Path | None, gpus: int | None,
               recipe: dict[str, Any], notes: list[str]) -> int | None:
    """The attempt's ``trainer.gpus``: the processes the launch command starts (the trainer's
    ``processes``), or ``--gpus`` where given (noted where it differs); None for one process. A count the
    command leaves unknown is refused unless ``--gpus`` gives it or the plan does not need it."""
    try:
        started, how = reader.processes(script, where, launch, workdir=workdir)
    except InputError:
        if gpus is None and reader.processes_needed(recipe):
            raise
        started, how = gpus, "not known from the command"
        if gpus is None:  # a trainer whose steps do not depend on them (TRL's AsyncGRPOTrainer)
            notes.append("trainer.gpus: the command does not state the processes it starts (the launcher's own "
                         "settings decide), left unset (1): this trainer's step count and LR do not depend on them")
            started = 1
    if gpus is None:
        if started > 1:
            notes.append(f"trainer.gpus: {started} processes ({how})")
        return started if started > 1 else None
    if gpus != started:
        notes.append(f"trainer.gpus: {gpus} as given with --gpus; the command states {started} ({how})")
    return gpus


def _read_command(script: Path, env: dict[str, str] | None, env_file: str | Path | None,
                  ) -> tuple[Script, Launch, dict[str, str]]:
    """The script's one launch command, read with the environment it is given (never run), the
    trainer launch it makes (:func:`rlexp.training.launch_script.launch_of`) and that environment."""
    from rlexp.experiment.files import read_text
    from rlexp.training.launch_script import (
        MAX_SCRIPT_BYTES,
        ScriptError,
        launch_of,
        read_env_file,
        read_script,
    )

    environment: dict[str, str] = {}
    if env_file is not None:
        _check_size(Path(env_file), MAX_SCRIPT_BYTES)
        try:
            environment.update(read_env_file(read_text(Path(env_file))))
        except ValueError as exc:
            raise InputError(env_file, None, str(exc)) from None
    environment.update(env or {})
    _check_size(script, MAX_SCRIPT_BYTES)
    text = read_text(script)
    try:
        command = read_script(text, environment, script_name=script.name, script_dir=str(script.resolve().parent))
        launch = launch_of(command.argv)
    except ScriptError as exc:
        where = f"line {exc.line}" if exc.line else (f"line {command.line}" if "command" in locals() else None)
        raise InputError(script, where, exc.message) from None
    return command, launch, environment


def _read_arguments(reader: Any, script: Path, where: str, launch: Launch, version: str | None,
                    ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
    """The launch's arguments as the trainer reads them: the recipe, the datasets, what is left out and
    the notes. A value the script leaves unknown is refused where it reaches a key plan needs, and
    noted where import drops that key anyway."""
    from rlexp.training.launch_script import unknown_arguments

    implied: dict[str, Any] = {}
    if hasattr(reader, "check_module"):  # a trainer with one entry point among its package's modules
        # the recipe keys the command itself states (`trl rloo`: TRL's RLOOTrainer), else None
        implied = reader.check_module(script, where, launch.module) or {}
    args, unknowns = unknown_arguments(launch.args, reader.ARGUMENT_STYLE)
    unknown_notes = []
    for unknown in unknowns:
        if unknown.key is not None and reader.dropped(unknown.key):
            unknown_notes.append(f"line {unknown.value.line}: {unknown.key} left out (import drops it anyway); its "
                                 f"value was unknown: {unknown.value.cause}")
            continue
        if unknown.key is None:
            raise InputError(script, f"line {unknown.value.line}", f"{unknown.value.what} makes a word of the launch "
                             "command that no flag or key names, and plan reads every argument of the trainer")
        raise InputError(script, f"line {unknown.value.line}", f"{unknown.value.what} reaches {unknown.key!r}, "
                         f"which plan needs ({reader.field_of(unknown.key)})")
    recipe, datasets, left_out, notes = reader.read_args(script, where, args, version)
    notes = unknown_notes + notes
    if "pool" not in datasets:
        if not (getattr(reader, "DATA_IN_SCRIPT", False) and launch.module.endswith(".py")):
            raise InputError(script, where, f"no training data in the {launch.trainer} command (datasets.pool, which "
                             "plan needs for the steps)")
        datasets["pool"] = {"path": [launch.module], "flag": f"the data {launch.module} loads"}
        notes.append(f"datasets.pool: the training data is loaded inside {launch.module} (no --dataset_name): "
                     "recorded as its source")
    return {**implied, **recipe}, datasets, left_out, notes


def _child_spec(reader: Any, experiment: Path, parent: str, trainer: dict[str, Any], recipe: dict[str, Any],
                datasets: dict[str, Any], intent_steps: int | None, notes: list[str]) -> dict[str, Any]:
    """The spec's fields for an attempt imported as a child of ``parent``: only what the script
    changes, declared as the change, so plan checks the one-variable rule on it."""
    from rlexp.spec import values_equal

    spec: dict[str, Any] = {"parent": parent}
    parent_stated, parent_recipe, parent_trainer, parent_datasets = _parent_of(experiment / parent)
    differs = {k: v for k, v in recipe.items() if k not in parent_recipe or not values_equal(parent_recipe[k], v)}
    missing = [k for k in parent_stated if k not in recipe
               and not (k in reader.LAUNCH_DEFAULTS and reader.LAUNCH_DEFAULTS[k] == parent_stated[k])]
    if missing:
        notes.append(f"keys the parent states that the script does not ({', '.join(missing)}): the parent's "
                     "values are inherited")
    spec["change"] = dict(differs)
    if intent_steps is not None:
        spec["intent"] = {"global_steps": intent_steps}
    if trainer["name"] != parent_trainer.get("name") or trainer["version"] != str(parent_trainer.get("version")):
        spec["trainer"] = trainer
    spec["recipe"] = differs
    changed = {r: d for r, d in datasets.items() if not _same_dataset(d, parent_datasets.get(r), experiment / parent)}
    if changed:
        spec["datasets"] = changed
    return spec


def _check_size(path: Path, limit: int) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return  # read_text names what is wrong with it
    if size > limit:
        raise InputError(path, None, f"{size} bytes: rlexp import reads files of at most {limit} bytes")


def _dataset_entry(script: Path, where: str, experiment: Path, role: str, entry: dict[str, Any], size: int | None,
                   notes: list[str]) -> dict[str, Any]:
    """A dataset the script names, as the spec's ``datasets.<role>``: a file in the experiment is
    counted by plan; anything else (a file elsewhere, several files, a hub name) is external data,
    recorded with its path(s), the size given by name, and its content hash when it can be read."""
    from rlexp.experiment.files import sha256_file

    raw = entry["path"]
    counted = entry.get("size")  # the prompts the script's own code builds (rlexp.training.python_script)
    option = "--pool-size" if role == "pool" else "--monitor-size"
    if counted is not None:
        if size is not None and size != counted:
            raise InputError(script, f"{where}: {entry['flag']}", f"{option} {size}, but the script's code builds "
                             f"{counted} prompts")
        size = counted
    paths = [str(p) for p in raw] if isinstance(raw, list) else [str(raw)]
    resolved = [Path(p) if Path(p).is_absolute() else experiment / p for p in paths]
    here = experiment.resolve()
    inside = [_is_within(p, here) for p in resolved]
    if len(paths) == 1 and inside[0] and resolved[0].is_file():
        return {"path": paths[0]}
    if size is None:
        shown = paths[0] if len(paths) == 1 else f"{len(paths)} files ({', '.join(paths)[:120]})"
        raise InputError(script, f"{where}: {entry['flag']}",
                         f"{shown} is not a file in the experiment directory ({experiment}): give the prompts' count "
                         f"with {option} N (datasets.{role}.size: the plan's steps depend on it)")
    # one JSONL file elsewhere stays the set's path (rlexp can read it); anything else (parquet, several
    # files) is recorded as its sources, which plan never opens
    as_path = len(paths) == 1 and (inside[0] or Path(paths[0]).suffix == ".jsonl")
    out: dict[str, Any] = {"path": paths[0]} if as_path else {"sources": paths}
    out["size"] = size
    if as_path and not inside[0]:
        out["allow_outside"] = True
    if len(paths) == 1 and resolved[0].is_file():
        out["sha256"] = sha256_file(resolved[0])
    how = "counted from the script's code" if counted is not None else f"as given with {option}"
    notes.append(f"datasets.{role}: external data ({', '.join(paths)[:120]}), {size} prompts {how}"
                 + ("" if "sha256" in out else "; not readable here, so no content hash"))
    return out


def _is_within(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _same_dataset(new: dict[str, Any], old: Any, parent_dir: Path) -> bool:
    if not isinstance(old, dict):
        return False
    return (Path(str(old.get("path"))) == Path(str(new.get("path")))
            and old.get("sources") == new.get("sources")
            and old.get("size", new.get("size")) == new.get("size", old.get("size")))


def _parent_of(parent_dir: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The parent's stated and resolved recipe, trainer and datasets (as its spec chain states them)."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt

    if not AttemptDir(parent_dir).spec.exists():
        raise InputError(AttemptDir(parent_dir).spec, None, "file not found: --parent names an attempt of this "
                         "experiment")
    att = load_attempt(parent_dir)
    datasets = {}
    for role, ref in att.datasets.items():
        stated = att.merged_raw.get("datasets", {}).get(role, {}) if isinstance(att.merged_raw, dict) else {}
        datasets[role] = dict(stated) if isinstance(stated, dict) else {}
        del ref
    return (dict(att.recipe_stated), dict(att.recipe), {"name": att.trainer.name, "version": att.trainer.version},
            datasets)


def render(spec: dict[str, Any], script: Path, left_out: list[str], notes: list[str]) -> str:
    import yaml

    head = [f"# Imported by `rlexp import` from {script.name}; the script was read, not run.",
            "# Check it with `rlexp plan` before launching."]
    if left_out:
        head.append(f"# Left out (rlexp sets these itself, or they carry a secret): {', '.join(left_out)}")
    head += [f"# Note: {' '.join(n.split())}" for n in notes]  # a note quoting the script stays one line
    body = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    return "\n".join(head) + "\n" + body


# --- an existing run's logs and checkpoints --------------------------------------------------------

def _checkpoint_layouts() -> tuple[list[re.Pattern[str]], list[str]]:
    """Every trainer's checkpoint folder names (``global_step{N}_hf``, ``checkpoint-{N}``, ...) and the
    folders inside one where its weights may be (rlexp.trainers: ``checkpoint_dirs``, ``weights_inside``)."""
    patterns: dict[str, None] = {}
    inside: dict[str, None] = {}
    for name in trainer_names():
        patterns.update(dict.fromkeys(trainer_rules(name).checkpoint_dirs))
        inside.update(dict.fromkeys(trainer_rules(name).weights_inside))
    return [re.compile(p) for p in patterns], list(inside)


@dataclass
class ImportedRun:
    steps: int = 0
    checkpoints: dict[int, str] = field(default_factory=dict)
    not_understood: list[int] = field(default_factory=list)
    cut: list[tuple[int, int]] = field(default_factory=list)  # records cut by a wrap, not re-joined (lines)
    not_numbers: dict[str, int] = field(default_factory=dict)
    nonfinite_steps: list[int] = field(default_factory=list)
    health: list[Any] = field(default_factory=list)  # the run-health verdicts (rlexp.protocol.run_health)
    notes: list[str] = field(default_factory=list)


def find_checkpoints(root: Path) -> dict[int, Path]:
    """``{global step: directory of evaluable weights}`` under ``root`` (the run's checkpoint folder),
    by each trainer's folder names; a folder without weights (no ``adapter_config.json`` nor
    ``config.json``) is not a checkpoint rlexp can evaluate and is left out."""
    found: dict[int, Path] = {}
    patterns, inside = _checkpoint_layouts()
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        for pattern in patterns:
            m = pattern.fullmatch(child.name)
            if not m:
                continue
            candidates = [child] + [child / inner for inner in inside]
            weights = next((c for c in candidates if (c / "adapter_config.json").is_file()
                            or (c / "config.json").is_file()), None)
            if weights is not None and int(m.group(1)) not in found:
                found[int(m.group(1))] = weights
            break
    return dict(sorted(found.items()))


def _health(attempt_dir: Path, att: Attempt, run_rows: list[list[dict[str, Any]]]) -> list[Any]:
    """The run-health verdicts of the imported log: the plan's LR (plan.json, else the plan computed
    here without writing it) for the resume gate, the attempt's launch settings for staleness."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.protocol.run_health import health_of_log
    from rlexp.spec.sop import load_sop
    from rlexp.stages.plan import build_plan
    from rlexp.training.monitor import planned_global_steps, planned_lr

    plan = AttemptDir(attempt_dir).read_plan()
    if plan is None:
        try:
            plan = build_plan(att)
        except InputError:
            plan = None
    lr = (lambda step: planned_lr(plan, step)) if plan else None
    return health_of_log(run_rows, load_sop(), planned_lr=lr, lag=trainer_rules(att.trainer.name).async_lag(att.recipe),
                         planned_steps=planned_global_steps(plan))


def import_run(attempt_dir: str | Path, *, logs: str | Path | None = None, log_format: str | None = None,
               checkpoints: str | Path | None = None) -> ImportedRun:
    """An existing run of an attempt (its ``attempt.yaml`` there already: ``rlexp import`` or by hand)
    brought into the protocol: ``logs`` read into ``metrics.jsonl`` (the readers of ``rlexp ingest``:
    lines not understood, NaN steps reported), the run's checkpoints linked as
    ``checkpoints/global_step{N}_hf``, and ``state.json`` ``finished``, so ``rlexp eval``,
    ``decide`` and ``report`` work on it. A log holding two runs is refused (which one is asked,
    never guessed); nothing is written until everything is read."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec import load_attempt
    from rlexp.stages.launch import write_state
    from rlexp.training.log_files import finite_runs, read_log
    from rlexp.training.metrics_file import append_new_rows

    attempt_dir = Path(attempt_dir)
    ad = AttemptDir(attempt_dir)
    att = load_attempt(attempt_dir)
    if logs is None and checkpoints is None:
        raise InputError(None, "--logs/--checkpoints", "name the run's metrics log, its checkpoint folder, or both")
    out = ImportedRun()
    rows: list[dict[str, Any]] = []
    if logs is not None:
        if ad.metrics.exists():
            raise InputError(ad.metrics, None, "already exists: this attempt has metrics; import into a new attempt")
        from rlexp.protocol.run_health import merge_resumed

        read = read_log(logs, trainer_rules(att.trainer.name).log_trainer, log_format)
        runs = [r for r in read.runs if r.rows]
        run_rows, stats = finite_runs(read, runs)  # a resumed run's log: each launch's rows
        merged = merge_resumed(run_rows) if len(runs) > 1 else None
        if len(runs) > 1 and merged is None:
            starts = ", ".join(f"line {r.first_line} (steps {r.steps[0]}..{r.steps[-1]})" for r in runs)
            raise InputError(logs, None, f"{len(runs)} runs in one file (step numbers restart at 1): {starts}; cut "
                             "the file to the run to import (`rlexp ingest` shows them)")
        rows = merged[0] if merged else (run_rows[-1] if run_rows else [])
        if not rows:
            raise InputError(logs, None, f"no metric steps found as {read.format}")
        out.health = _health(attempt_dir, att, run_rows)
        out.steps = len(rows)
        out.not_understood = list(read.not_understood)
        out.cut = list(read.cut)
        out.not_numbers = dict(stats.dropped_keys)
        out.nonfinite_steps = sorted(stats.nonfinite_steps)
    found: dict[int, Path] = {}
    if checkpoints is not None:
        root = Path(checkpoints)
        if not root.is_dir():
            raise InputError(root, None, "not a directory (the run's checkpoint folder)")
        if ad.checkpoint_files.adapters():
            raise InputError(ad.checkpoint_files.dir, None, "already holds checkpoints: import into a new attempt")
        found = find_checkpoints(root)
        if not found:
            raise InputError(root, None, f"no checkpoint folders with weights ({FOREIGN_CHECKPOINT_PATTERNS}: "
                             "each with adapter_config.json or config.json)")
    # everything read: now write
    if rows:
        append_new_rows(ad.metrics, rows)
    for step, source in found.items():
        link = ad.checkpoint_files.adapter(step)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source.resolve(), target_is_directory=True)
        out.checkpoints[step] = str(source.resolve())
    if found:
        out.notes.append("checkpoints are linked, not copied: keep the run's folder where it is")
    last = max([r["global_step"] for r in rows] + list(found), default=0)
    write_state(attempt_dir, "finished", exit_code=None, steps=last,
                reason=f"imported by rlexp import-run (logs: {logs or '-'}; checkpoints: {checkpoints or '-'})")
    return out
