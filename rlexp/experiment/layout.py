"""The experiment directory: the one owner of its layout.

Every stage reads what the stage before it wrote, so the directory is the protocol's source of
truth (MLflow only mirrors it). This module is the only place that spells a file name of that
layout; every other module asks an :class:`ExperimentDir` or an :class:`AttemptDir` (and the
objects it hands out by concept: :class:`LaunchFiles`, :class:`CheckpointFiles`, :class:`EvalFiles`, :class:`GuardFiles`) for a path or for a
strictly read document, in the spirit of Optuna's storage behind a study::

    experiments/<experiment>/            ExperimentDir
      data/  models/  ledger.jsonl  sota.json  ladder.yaml
      fanout/<batch>.json  fanout/<batch>/<job>.log   (rlexp.backends.fanout: jobs by submission id)
      <attempt_id>/                      AttemptDir
        attempt.yaml  plan.json  metrics.jsonl  decision.json
        launch/{argv.json, launch.sh, provenance.json, reward_func.py, launches.jsonl,
                spikes.jsonl, stdout.log, state.json, judge_cache.jsonl, judge_calls.jsonl}
        launch/...                       (a trainer's own files: rlexp.trainers.<name>.files names them)
        checkpoints/global_step{N}_hf/   (adapters, for evaluation)
        checkpoints/<folder>/<state>/    (a trainer's resumable states: its rules name the folder
                                          and the states' names)
        eval/selection.json  eval/<checkpoint>/<set>.jsonl (+ .meta.json)  eval/paired/
        guards/<name>.json  guards/parser_audit_review.jsonl
        tensorboard/  final/
      sweeps/<sweep_id>/                 SweepDir (``rlexp sweep models``)
        sweep.yaml  eval/<candidate>/<set>.jsonl (+ .meta.json)  eval/<candidate>/.lock
        truncation/<candidate>/<set>__max_tokens{N}.jsonl (+ .meta.json)
        result/{ranking.json, report.md}   (written together: all or nothing)

The readers are strict: a document of the wrong JSON type is an :class:`~rlexp.errors.InputError`
naming the file, never a traceback further down.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlexp.errors import InputError

SPEC_NAME = "attempt.yaml"
SWEEP_SPEC_NAME = "sweep.yaml"
SWEEPS_DIR = "sweeps"
STUDY_DB_NAME = "optuna.db"  # the ladders' Optuna store, beside a SQLite MLflow store (rlexp.tracking.study)
MAX_GLOBAL_STEP = 10**7  # the largest global step a metrics line may name
CHECKPOINT_PREFIX = "global_step"
_CHECKPOINT_NAME = re.compile(r"global_step(\d+)")
_ADAPTER_DIR = re.compile(r"global_step(\d+)_hf")
ADAPTER_PATTERN = "global_step{N}_hf"  # how messages name the adapter folders
# rlexp's own checkpoint folder names as patterns (the step as group 1); a trainer's rules name the
# folders it writes (rlexp.trainers.base.TrainerRules.checkpoint_dirs), its own ones in its package
ADAPTER_DIR_PATTERN = _ADAPTER_DIR.pattern
CHECKPOINT_NAME_PATTERN = _CHECKPOINT_NAME.pattern
# how messages name the checkpoint folders of runs rlexp did not launch (``rlexp import-run``)
FOREIGN_CHECKPOINT_PATTERNS = "global_step{N}_hf, checkpoint-{N}, global_step_{N}"


def checkpoint_name(step: int) -> str:
    """``global_step{N}``: the name a checkpoint has in records, selections and decisions."""
    return f"{CHECKPOINT_PREFIX}{int(step)}"


def canonical_checkpoint_step(name: Any) -> int | None:
    """The step of a checkpoint name as rlexp writes it (``global_step{N}``, N from 0 to
    :data:`MAX_GLOBAL_STEP`, no leading zero); None for anything else."""
    step = checkpoint_step(name) if isinstance(name, str) else None
    return step if step is not None and step <= MAX_GLOBAL_STEP and checkpoint_name(step) == name else None


def checkpoint_label(name: str) -> str:
    """How reports show a checkpoint: ``step 64`` for ``global_step64``, a baseline by its name."""
    step = checkpoint_step(name)
    return name if step is None else f"step {step}"


class ResumeStateLayout(Protocol):
    """What a trainer's rules tell the layout of its resumable states (rlexp.trainers.base.TrainerRules:
    the layout sits below the trainers and names none of them; callers pass the rules in)."""

    name: str
    #: its folder under ``checkpoints/`` ("" : it names none, and asking for it is an error)
    resume_state_folder: str
    #: a pattern of its own state names besides ``global_step{N}`` (the step as group 1), or None
    own_state_names: str | None


@dataclass(frozen=True)
class Checkpoint:
    """A saved checkpoint: its global step, the role it was selected for (``final``, ``mid``,
    ``best_by_monitor``; None when not selected) and its folder (None when unknown): the adapter eval
    loads (:meth:`CheckpointFiles.adapter`), or a trainer's resumable state where that is what was asked
    for (:meth:`CheckpointFiles.latest_resume_state`)."""

    step: int
    role: str | None = None
    path: Path | None = None

    @property
    def name(self) -> str:
        return checkpoint_name(self.step)

    @classmethod
    def named(cls, name: str, *, role: str | None = None, path: Path | None = None) -> Checkpoint | None:
        """The checkpoint a ``global_step{N}`` name names; None for any other name (a baseline)."""
        step = checkpoint_step(name)
        return None if step is None else cls(step, role, path)

    @classmethod
    def of_adapter(cls, path: str | Path) -> Checkpoint | None:
        """The checkpoint whose adapter folder (``global_step{N}_hf``) ``path`` is; None for a folder
        of another name."""
        match = _ADAPTER_DIR.fullmatch(Path(path).name)
        return None if match is None else cls(int(match.group(1)), path=Path(path))


def check_batch_name(name: str) -> str:
    """A fan-out batch or job name: it becomes a file name, so letters, digits, ``._-`` only."""
    if not isinstance(name, str) or not _BATCH_NAME.fullmatch(name):
        raise InputError(None, "fanout", f"a batch or job name is letters, digits and ._- (at most 100, "
                         f"not starting with . or -), got {name!r:.60}")
    return name


def checkpoint_step(name: str) -> int | None:
    """The step of a ``global_step{N}`` name; None for any other name (a baseline)."""
    match = _CHECKPOINT_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


PID_MAX = 2**31 - 1  # pid_t is a signed 32-bit integer; Linux hands out at most 2**22


def pid_alive(pid: Any) -> bool:
    """Whether a process with ``pid`` exists and has not exited (a zombie waiting to be reaped
    by its parent has exited: Linux shows it as state ``Z`` in ``/proc/<pid>/stat``)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
        return False  # past any pid the kernel hands out (os.kill would raise OverflowError)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): existence is all we can tell
    return stat[stat.rfind(")") + 2 :][:1] != "Z"


# Which command writes each file of the layout, so that a missing one names the step to run first.
_PRODUCERS = {
    "plan.json": "rlexp plan", "argv.json": "rlexp launch", "provenance.json": "rlexp launch",
    "state.json": "rlexp launch", "metrics.jsonl": "rlexp launch", "selection.json": "rlexp eval",
    "decision.json": "rlexp decide", "ledger.jsonl": "rlexp decide", "sota.json": "rlexp decide (on STOP-1)",
    "parser_audit_review.jsonl": "rlexp guard audit --draw", "parser_audit.json": "rlexp guard audit --verdicts FILE",
    "ranking.json": "rlexp sweep models",
}


def producer_of(path: str | Path) -> str | None:
    """The command that writes ``path`` in an experiment directory, or None for any other file."""
    path = Path(path)
    if path.name in _PRODUCERS:
        return _PRODUCERS[path.name]
    if path.parent.name == "guards" and path.suffix == ".json":
        return f"rlexp guard {path.stem}"
    if path.suffix == ".jsonl" and path.parent.parent.name == "eval":
        return "rlexp eval"
    if _ADAPTER_DIR.fullmatch(path.name) or path.parent.name == "checkpoints":
        return "rlexp launch"  # an adapter, or a trainer's resume-state folder (its rules name it)
    return None

def _read_object(path: Path, fields: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when the file does not exist. ``fields`` maps the
    keys whose type is known to the types allowed (``type(None)`` for null): a key of another
    type is an InputError naming the file and the key, not a traceback in a later stage."""
    from rlexp.experiment.files import check_path, read_json_object

    if not check_path(path).exists() and not path.is_symlink():
        return None
    data = read_json_object(path)
    _check_fields(path, data, fields or {}, "")
    return data


def _check_fields(path: Path, data: dict[str, Any], fields: dict[str, Any], prefix: str) -> None:
    """Each known key of ``data`` of its type; a nested spec (a dict) types the keys of an object
    value (``"*"``: of every value of a mapping)."""
    for key, kinds in fields.items():
        values = data.items() if key == "*" else [(key, data[key])] if key in data else []
        for name, value in values:
            where = f"{prefix}{name}"
            if isinstance(kinds, dict):
                if value is None:
                    continue
                if not isinstance(value, dict):
                    raise InputError(path, where, f"must be an object or null, got {value!r:.60}")
                _check_fields(path, value, kinds, where + ".")
            elif not _is_kind(value, kinds):
                names = " or ".join(_KIND_NAMES[k] for k in kinds)
                raise InputError(path, where, f"must be {names}, got {value!r:.60}")


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float) and float in kinds:
        return True
    return any(isinstance(value, k) for k in kinds if k not in (bool, float))


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
               dict: "an object", type(None): "null"}
_NULL = type(None)
_OPT_INT = (int, _NULL)
_OPT_STR = (str, _NULL)
# The fields of the documents rlexp writes and reads back, by the type each reader relies on.
STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "state": (str,), "pid": _OPT_INT, "launcher_pid": _OPT_INT, "exit_code": _OPT_INT, "reason": _OPT_STR,
    "metrics_source": _OPT_STR, "early_stop": (dict, _NULL), "updated_at": _OPT_STR,
}
PROVENANCE_FIELDS: dict[str, Any] = {
    "attempt_id": _OPT_STR, "started_at": _OPT_STR, "host": _OPT_STR, "seed": _OPT_INT,
    "git": {"sha": _OPT_STR, "dirty": (bool, _NULL)},
    "datasets": {"*": {"path": _OPT_STR, "sha256": _OPT_STR, "size": _OPT_INT}}, "model": (dict, _NULL), "versions": (dict, _NULL), "trainer": (dict, _NULL),
    "argv": (list, _NULL), "env": (dict, _NULL), "extra": (dict, _NULL),
}
ARGV_FIELDS: dict[str, tuple[type, ...]] = {
    "argv": (list,), "backend": _OPT_STR, "cwd": _OPT_STR, "metrics_source": _OPT_STR,
}
SELECTION_FIELDS: dict[str, tuple[type, ...]] = {
    "final": _OPT_INT, "mid": _OPT_INT, "best_by_monitor": _OPT_INT, "checkpoints": (list, _NULL),
    "notes": (list, _NULL),
}
DECISION_FIELDS: dict[str, tuple[type, ...]] = {
    "decision": (str,), "gates": (dict, _NULL), "checkpoints": (dict, _NULL), "fault_tree": (dict, _NULL),
    "reason": _OPT_STR, "baseline": _OPT_STR,
}
PLAN_FIELDS: dict[str, tuple[type, ...]] = {"checks": (list, _NULL), "lr_table": (list, _NULL)}
FANOUT_FIELDS: dict[str, tuple[type, ...]] = {"batch": (str,), "jobs": (dict,), "ray_address": _OPT_STR}
FANOUT_JOB_FIELDS: dict[str, tuple[type, ...]] = {
    "submission_id": (str,), "status": (str,), "exit_code": _OPT_INT, "steps": (list,),
    "started_at": (float, _NULL), "ended_at": (float, _NULL), "ray_address": _OPT_STR,
}
_BATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


# metrics.jsonl: the trainer's own wall-clock time (Unix seconds) of a step's row, when its source
# has one; MLflow stores it as the step's timestamp. Not a metric: comparisons of runs leave it out.
STEP_TIME_KEY = "time"


@dataclass(frozen=True)
class ExperimentDir:
    """``experiments/<experiment>/``: datasets, models, the ledger, the SOTA pin, the attempts."""

    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root))

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def sota(self) -> Path:
        return self.root / "sota.json"

    @property
    def ladder_spec(self) -> Path:
        """``ladder.yaml``: the ladder's root, grid of values per variable, seeds and rungs (rlexp.spec.ladder)."""
        return self.root / "ladder.yaml"

    def attempt(self, attempt_id: str) -> AttemptDir:
        return AttemptDir(self.root / attempt_id)

    def attempts(self) -> list[AttemptDir]:
        """Every attempt directory (one holding an ``attempt.yaml``), sorted by name."""
        if not self.root.is_dir():
            return []
        return [AttemptDir(p) for p in sorted(self.root.iterdir()) if (p / SPEC_NAME).is_file()]

    def fanout_state(self, batch: str) -> Path:
        """``fanout/<batch>.json``: the jobs of one fan-out by name — submission id, status, exit
        code, start and end — so that a rerun after a kill resubmits none that SUCCEEDED."""
        return self.root / "fanout" / f"{check_batch_name(batch)}.json"

    def fanout_log(self, batch: str, job: str) -> Path:
        """``fanout/<batch>/<job>.log``: one job's output (Ray's job log, or the local run's)."""
        return self.root / "fanout" / check_batch_name(batch) / f"{check_batch_name(job)}.log"

    def read_fanout_state(self, batch: str) -> dict[str, Any] | None:
        """The state of a fan-out batch, each job's entry type-checked; None before its first job."""
        path = self.fanout_state(batch)
        data = _read_object(path, FANOUT_FIELDS)
        if data is None:
            return None
        for name, entry in data.get("jobs", {}).items():
            if not isinstance(entry, dict):
                raise InputError(path, f"jobs.{name}", f"must be an object, got {entry!r:.60}")
            for key, kinds in FANOUT_JOB_FIELDS.items():
                if key in entry and not _is_kind(entry[key], kinds):
                    names = " or ".join(_KIND_NAMES[k] for k in kinds)
                    raise InputError(path, f"jobs.{name}.{key}", f"must be {names}, got {entry[key]!r:.60}")
        return data

    def resolve(self, relative: str | Path) -> Path:
        """A path of a spec (relative to the experiment) made absolute; absolute paths stay."""
        path = Path(relative)
        return path if path.is_absolute() else self.root / path

    @property
    def sweeps_dir(self) -> Path:
        return self.root / SWEEPS_DIR

    def sweep(self, sweep_id: str) -> SweepDir:
        return SweepDir(self.sweeps_dir / sweep_id)


@dataclass(frozen=True)
class LaunchFiles:
    """``<attempt>/launch/``: the argv and its readable copy, provenance, the run's state and log, the
    launches and spikes seen, the training judge's cache and log, the shared reward file; a trainer's
    own files here are named in its package (rlexp.trainers.<name>.files)."""

    dir: Path

    @property
    def argv(self) -> Path:
        return self.dir / "argv.json"

    @property
    def training_judge_cache(self) -> Path:
        """``launch/judge_cache.jsonl``: the judge's scores of training episodes (the local trainer's
        weighted ``judge`` part), kept apart from the eval's cache, which an eval may write meanwhile."""
        return self.dir / "judge_cache.jsonl"

    @property
    def training_judge_log(self) -> Path:
        """``launch/judge_calls.jsonl``: one line per judge call of the training run."""
        return self.dir / "judge_calls.jsonl"

    @property
    def launch_script(self) -> Path:
        return self.dir / "launch.sh"

    @property
    def provenance(self) -> Path:
        return self.dir / "provenance.json"

    @property
    def reward_func(self) -> Path:
        return self.dir / "reward_func.py"

    @property
    def launches(self) -> Path:
        return self.dir / "launches.jsonl"

    @property
    def spikes(self) -> Path:
        return self.dir / "spikes.jsonl"

    @property
    def stdout_log(self) -> Path:
        return self.dir / "stdout.log"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    def read_state(self) -> dict[str, Any] | None:
        return _read_object(self.state, STATE_FIELDS)

    def read_argv(self) -> dict[str, Any] | None:
        return _read_object(self.argv, ARGV_FIELDS)

    def read_provenance(self) -> dict[str, Any] | None:
        return _read_object(self.provenance, PROVENANCE_FIELDS)

    def is_running(self, state: dict[str, Any] | None = None) -> bool:
        """state.json says running and its trainer or its launcher is still alive on this machine."""
        state = self.read_state() if state is None else state
        return bool(state) and state.get("state") == "running" and (
            pid_alive(state.get("pid")) or pid_alive(state.get("launcher_pid")))


@dataclass(frozen=True)
class CheckpointFiles:
    """``<attempt>/checkpoints/``: the adapters eval loads (``global_step{N}_hf``) and, in the folder
    each trainer's rules name, its resumable states."""

    dir: Path

    def adapter(self, step: int) -> Path:
        """The saved adapter of a global step (what eval loads): ``checkpoints/global_step{N}_hf``."""
        return self.dir / ADAPTER_PATTERN.replace("{N}", str(int(step)))

    def adapters(self) -> dict[int, Path]:
        """Saved adapters ``{global_step: directory}``, by step."""
        found: dict[int, Path] = {}
        if self.dir.is_dir():
            for child in self.dir.iterdir():
                match = _ADAPTER_DIR.fullmatch(child.name)
                if match and child.is_dir():
                    found[int(match.group(1))] = child
        return dict(sorted(found.items()))

    def resume_state_dir(self, layout: ResumeStateLayout) -> Path:
        """The folder of a trainer's resumable states: ``checkpoints/<its folder>``, the folder its
        rules name (rlexp.trainers.base.TrainerRules.resume_state_folder). A trainer that names none
        is an error, never another trainer's folder."""
        folder = layout.resume_state_folder
        if not folder:
            raise ValueError(f"trainer {layout.name!r} names no resume-state folder (its rules' resume_state_folder)")
        return self.dir / folder

    def resume_state(self, step: int, layout: ResumeStateLayout) -> Path:
        return self.resume_state_dir(layout) / checkpoint_name(step)

    def latest_resume_state(self, layout: ResumeStateLayout, *, complete: str | None = None
                            ) -> Checkpoint | None:
        """The highest resumable saved step, its directory the checkpoint's ``path``; None when none.

        Adapters (``global_step{N}_hf``) are for evaluation; a trainer resumes from its own state in
        the folder its rules name (:meth:`resume_state_dir`): ``global_step{N}``, or a name of its own
        (its rules' ``own_state_names``, the step as group 1). ``complete`` names a file a state must
        hold to count (a state whose writer was killed has none).
        """
        folder = self.resume_state_dir(layout)
        own = re.compile(layout.own_state_names) if layout.own_state_names else None
        best: Checkpoint | None = None
        if folder.is_dir():
            for child in folder.iterdir():
                step = checkpoint_step(child.name)
                if step is None and own is not None and (match := own.fullmatch(child.name)):
                    step = int(match.group(1))
                if step is None or not child.is_dir() or (complete and not (child / complete).exists()):
                    continue
                if best is None or step > best.step:
                    best = Checkpoint(step, path=child)
        return best


@dataclass(frozen=True)
class EvalFiles:
    """``<attempt>/eval/`` (and a sweep's): the K=3 selection, the per-problem records of each model
    on each set (``<checkpoint>/<set>.jsonl``), the paired records, the judge's cache and call log."""

    dir: Path

    @property
    def selection(self) -> Path:
        return self.dir / "selection.json"

    def read_selection(self) -> dict[str, Any] | None:
        return _read_object(self.selection, SELECTION_FIELDS)

    @property
    def judge_cache(self) -> Path:
        """``eval/judge_cache.jsonl``: the LLM judge's scores by (judge model, prompt, answer)."""
        return self.dir / "judge_cache.jsonl"

    @property
    def judge_log(self) -> Path:
        """``eval/judge_calls.jsonl``: one line per call that reached the judge (latency, ok or error)."""
        return self.dir / "judge_calls.jsonl"

    @property
    def hash_cache(self) -> Path:
        return self.dir / ".hash_cache.json"

    def records(self, checkpoint: str, set_role: str) -> Path:
        """``eval/<checkpoint>/<set>.jsonl``: per-problem records of one model on one set."""
        return self.dir / checkpoint / f"{set_role}.jsonl"

    def record_files(self) -> list[tuple[str, str, Path]]:
        """``(checkpoint, set_role, path)`` of every record file, paired records excluded."""
        out = []
        if self.dir.is_dir():
            for folder in sorted(p for p in self.dir.iterdir() if p.is_dir() and p.name != "paired"):
                for path in sorted(folder.glob("*.jsonl")):
                    out.append((folder.name, path.stem, path))
        return out

    @property
    def paired_dir(self) -> Path:
        return self.dir / "paired"

    def paired(self, baseline: str, checkpoint: str, set_role: str) -> Path:
        return self.paired_dir / f"{baseline}__{checkpoint}__{set_role}.jsonl"


@dataclass(frozen=True)
class GuardFiles:
    """``<attempt>/guards/``: one verdict per guard, the parser audit's review file, the records G1
    and G4 drew."""

    dir: Path

    def verdict(self, name: str) -> Path:
        """``guards/<name>.json``: one guard verdict."""
        return self.dir / f"{name}.json"

    def read(self, name: str) -> dict[str, Any] | None:
        """A guard's verdict as written (strictly an object), or None when it was not run."""
        return _read_object(self.verdict(name))

    def verdicts(self) -> list[Path]:
        return sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []

    @property
    def audit_review(self) -> Path:
        return self.dir / "parser_audit_review.jsonl"

    def g1_records(self, checkpoint: str, set_role: str, label: str) -> Path:
        return self.dir / "g1" / f"{checkpoint}__{set_role}__{label}.jsonl"

    @property
    def g4_samples(self) -> Path:
        return self.dir / "g4_samples.jsonl"


@dataclass(frozen=True)
class AttemptDir:
    """``experiments/<experiment>/<attempt_id>/``: every path of an attempt and its readers."""

    root: Path

    def __init__(self, root: str | Path):
        root = Path(root)
        if root.name == SPEC_NAME:
            root = root.parent
        object.__setattr__(self, "root", root)

    # ---------------------------------------------------------------- identity
    @property
    def id(self) -> str:
        return self.root.name

    @property
    def experiment(self) -> ExperimentDir:
        return ExperimentDir(self.root.parent)

    # ---------------------------------------------------------------- files of the attempt
    @property
    def spec(self) -> Path:
        return self.root / SPEC_NAME

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def decision(self) -> Path:
        return self.root / "decision.json"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def final_model(self) -> Path:
        return self.root / "final"

    # ---------------------------------------------------------------- launch/, checkpoints/, eval/, guards/
    @property
    def launch(self) -> LaunchFiles:
        """``launch/``: what ``rlexp launch`` wrote and keeps up to date (argv, provenance, state)."""
        return LaunchFiles(self.root / "launch")

    @property
    def checkpoint_files(self) -> CheckpointFiles:
        """``checkpoints/``: the adapters eval loads and each trainer's resumable states."""
        return CheckpointFiles(self.root / "checkpoints")

    @property
    def evals(self) -> EvalFiles:
        """``eval/``: the selection, the per-problem and paired records, the judge's cache and log."""
        return EvalFiles(self.root / "eval")

    @property
    def guards(self) -> GuardFiles:
        """``guards/``: the guards' verdicts and the records they drew."""
        return GuardFiles(self.root / "guards")

    # ---------------------------------------------------------------- strict readers
    def read_plan(self) -> dict[str, Any] | None:
        return _read_object(self.plan, PLAN_FIELDS)

    def read_decision(self) -> dict[str, Any] | None:
        return _read_object(self.decision, DECISION_FIELDS)

    def last_metrics_step(self) -> int:
        """The highest ``global_step`` among the complete lines of ``metrics.jsonl`` (0 if none).

        Lenient on purpose: a live trainer appends to the file while it is read, so a line that is
        cut, malformed or out of bounds is skipped here (the strict reader reports it to the
        stages that use the metrics)."""
        from rlexp.experiment.files import MAX_JSONL_BYTES, check_path, loads_line

        path = check_path(self.metrics)
        if not path.is_file():
            return 0
        steps = 0
        with open(path, "rb") as fh:
            for line in fh.read(MAX_JSONL_BYTES).split(b"\n")[:-1]:
                if b"global_step" not in line:
                    continue
                record = loads_line(line)
                step = record.get("global_step") if isinstance(record, dict) else None
                if isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_GLOBAL_STEP:
                    steps = max(steps, step)
        return steps

    def has_metrics(self) -> bool:
        return self.metrics.exists() and self.metrics.stat().st_size > 0


@dataclass(frozen=True)
class SweepDir:
    """``experiments/<experiment>/sweeps/<sweep_id>/``: a base-model sweep (``rlexp sweep models``).

    Its eval records have the shape of an attempt's (``eval/<candidate>/<set>.jsonl`` + meta), so
    the eval pipeline writes them unchanged; the result files are written together into
    ``result/`` (a temporary directory swapped in whole)."""

    root: Path

    def __init__(self, root: str | Path):
        root = Path(root)
        if root.name == SWEEP_SPEC_NAME:
            root = root.parent
        object.__setattr__(self, "root", root)

    @property
    def id(self) -> str:
        return self.root.name

    @property
    def experiment(self) -> ExperimentDir:
        """The experiment holding ``sweeps/<sweep_id>/``."""
        return ExperimentDir(self.root.parent.parent)

    @property
    def spec(self) -> Path:
        return self.root / SWEEP_SPEC_NAME

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    @property
    def evals(self) -> EvalFiles:
        """``eval/``, laid out as an attempt's (the eval pipeline writes both)."""
        return EvalFiles(self.eval_dir)

    @property
    def hash_cache(self) -> Path:
        return self.evals.hash_cache

    def records(self, candidate: str, set_role: str) -> Path:
        """``eval/<candidate>/<set>.jsonl``."""
        return self.evals.records(candidate, set_role)

    def candidate_lock(self, candidate: str) -> Path:
        return self.eval_dir / candidate / ".lock"

    def truncation_records(self, candidate: str, set_role: str, max_tokens: int) -> Path:
        return self.root / "truncation" / candidate / f"{set_role}__max_tokens{int(max_tokens)}.jsonl"

    @property
    def result_dir(self) -> Path:
        return self.root / "result"

    @property
    def ranking(self) -> Path:
        return self.result_dir / "ranking.json"

    @property
    def report(self) -> Path:
        return self.result_dir / "report.md"
