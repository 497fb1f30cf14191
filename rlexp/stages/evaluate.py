"""``rlexp eval``: the K=3 pre-registered checkpoints and the baselines, one pipeline, resumable.

What is evaluated is fixed before any result is seen (sop/README.md#k3-checkpoints): the final, the pre-registered mid
and the best-by-monitor checkpoint (``rlexp.protocol.gates.select_k3``, written to ``eval/selection.json``),
plus Baseline-S0 (the base model, no adapter) and Baseline-SOTA (the pinned checkpoint, when
``sota.json`` exists) — on the primary OOD set, the ID set and the sanity set. Every one of them
goes through the same engine, chat template, suffix, decoding and parser: a comparison is only
worth something when the model is the one thing that changed.

Resumable by construction: records are appended one line per problem as each chunk finishes; a
rerun skips problems already recorded and refuses to mix settings (:mod:`rlexp.experiment.records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import Decoding, Engine, close_engine
from rlexp.experiment.files import atomic_write_json, iter_jsonl
from rlexp.experiment.layout import (
    ADAPTER_PATTERN,
    AttemptDir,
    ExperimentDir,
    checkpoint_name,
    checkpoint_step,
)
from rlexp.experiment.records import BASELINE_S0, BASELINE_SOTA, read_records, record_path, summarize
from rlexp.numbers import NONFINITE_JSON
from rlexp.stages.eval_records import (
    EvalOutcome,
    FileOutcome,
    Target,
    build_engine,
    check_record_files,
    engine_chunk,
    eval_lock,
    eval_records,
    load_eval_sets,
    write_paired,
)

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

EVAL_SETS = ("ood_primary", "id", "sanity")


# --------------------------------------------------------------------------- what to evaluate


def monitor_points(attempt_dir: Path) -> tuple[list[tuple[int, float]], int | None]:
    """``(global_step, monitor_acc)`` points from metrics.jsonl, and the last global step seen."""
    path = AttemptDir(attempt_dir).metrics
    if not path.exists():
        return [], None
    points, last = [], None
    for number, row in iter_jsonl(path):
        step = row.get("global_step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise InputError(path, f"line {number}: global_step", "missing or not an integer")
        last = step if last is None else max(last, step)
        if "monitor_acc" in row:
            value = row["monitor_acc"]
            if isinstance(value, str) and value in NONFINITE_JSON:
                continue  # a NaN/inf accuracy (flagged where the run's NaN steps are): no point to select by
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise InputError(path, f"line {number}: monitor_acc", f"not a finite number: {value!r}")
            points.append((step, float(value)))
    return points, last


def select_checkpoints(att: Attempt, *, write: bool = True) -> dict[str, Any]:
    """Run the SOP's K=3 selection and (``write``) write ``eval/selection.json``."""
    from rlexp.protocol.gates import RegisteredSelection, select_k3
    from rlexp.spec.sop import load_sop

    attempt_dir = Path(att.attempt_dir)
    saved = AttemptDir(attempt_dir).checkpoint_files.adapters()
    if not saved:
        raise InputError(AttemptDir(attempt_dir).checkpoint_files.dir, ADAPTER_PATTERN, "no saved checkpoints to evaluate")
    points, last = monitor_points(attempt_dir)
    final_step = last if last is not None else max(saved)
    sop = load_sop()
    selection = select_k3(points, final_step, att.checkpoints_mid, list(saved), sop)
    payload = RegisteredSelection.of(selection, final_step_trained=final_step, mid_preregistered=att.checkpoints_mid,
                                     saved_steps=list(saved), monitor_points=len(points), sop_version=sop.version,
                                     sop_sha256=sop.sha256).to_dict()
    if write:
        atomic_write_json(AttemptDir(attempt_dir).evals.selection, payload)
    return payload


def plan_targets(att: Attempt, selection: dict[str, Any], only: Sequence[str] | None = None) -> list[Target]:
    """Baselines first (they are shared by every comparison), then the selected checkpoints."""
    from rlexp.experiment.ledger import read_sota

    attempt_dir = Path(att.attempt_dir)
    saved = AttemptDir(attempt_dir).checkpoint_files.adapters()
    targets = [Target(BASELINE_S0, None)]
    pin = read_sota(att.experiment_dir)
    if pin is not None:
        path = Path(pin.path)
        if not path.is_absolute():
            path = Path(att.experiment_dir) / path
        if not path.exists():
            raise InputError(ExperimentDir(att.experiment_dir).sota, "path", f"pinned checkpoint {path} does not exist")
        targets.append(Target(BASELINE_SOTA, path))
    steps = [checkpoint_step(name) for name in selection["checkpoints"]]
    for step in att.checkpoints_extra:  # pre-registered extras (sop/README.md#k3-checkpoints)
        if step not in saved:
            raise InputError(att.spec_path, "checkpoints.extra", f"pre-registered step {step} was not saved")
        if step not in steps:
            steps.append(step)
    for step in steps:
        targets.append(Target(checkpoint_name(step), saved[step]))
    if only:
        known = {t.name for t in targets}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise InputError(
                AttemptDir(attempt_dir).evals.selection,
                "checkpoint",
                f"{unknown[0]!r} is not pre-registered (evaluable: {', '.join(sorted(known))}); "
                "the SOP evaluates the K=3 checkpoints, never picks among many",
            )
        targets = [t for t in targets if t.name in only]
    return targets


def evaluate(
    attempt: str | Path,
    *,
    checkpoints: Sequence[str] | None = None,
    sets: Sequence[str] | None = None,
    limit: int | None = None,
    show_progress: bool = True,
    engine: Engine | None = None,
) -> EvalOutcome:
    """Evaluate what the plan pre-registered; write records, selection.json and paired records."""
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    env = att.environment
    if env is not None and env.actions != "text":
        # the episode eval plays text turns; a model trained through tool calls would be graded on a
        # format it was not trained for
        raise InputError(att.display_path or att.spec_path, "environment.actions",
                         f"{env.actions!r}: rlexp eval plays text turns only (tool-call episodes are not evaluated "
                         "yet; TRL's in-run monitor plays them)")
    attempt_dir = Path(att.attempt_dir)
    roles = list(sets) if sets else list(EVAL_SETS)
    for role in roles:
        if role not in EVAL_SETS:
            raise InputError(att.spec_path, "set", f"unknown eval set {role!r} ({', '.join(EVAL_SETS)})")
    selection = select_checkpoints(att, write=False)  # written once the record files are checked
    targets = plan_targets(att, selection, checkpoints)
    base = att.base_model()
    # the lock first: a second `rlexp eval` exits at once instead of after loading a model
    with eval_lock(attempt_dir):
        if att.environment is not None:  # episodes instead of single generations
            from rlexp.stages.evaluate_env import evaluate_episodes

            return evaluate_episodes(att, attempt_dir, roles, selection, targets, base, limit, show_progress)
        return _evaluate_locked(att, attempt_dir, roles, selection, targets, base, limit, show_progress, engine)


def _evaluate_locked(att: Attempt, attempt_dir: Path, roles: list[str], selection: dict[str, Any],
                     targets: list[Target], base: Path | str, limit: int | None, show_progress: bool,
                     engine: Engine | None) -> EvalOutcome:
    """Build the engine (unless one is handed in), evaluate, and close it when evaluation ends,
    also on error. A caller that hands in an engine keeps ownership: evaluate does not close it."""
    if engine is not None:
        return _evaluate_with(att, attempt_dir, roles, selection, targets, base, limit, show_progress,
                              engine, engine.tokenizer)  # type: ignore[attr-defined]
    engine, tokenizer = build_engine(att, base, targets)
    try:
        return _evaluate_with(att, attempt_dir, roles, selection, targets, base, limit, show_progress,
                              engine, tokenizer)
    finally:
        close_engine(engine)


def _evaluate_with(att: Attempt, attempt_dir: Path, roles: list[str], selection: dict[str, Any],
                   targets: list[Target], base: Path | str, limit: int | None, show_progress: bool, engine: Engine,
                   tokenizer: Any) -> EvalOutcome:
    decoding = Decoding.for_eval(att.eval)
    datasets = load_eval_sets(att, roles, limit)

    for role, (_problems, _path, digest) in datasets.items():  # every set checked before the first write
        ref = att.datasets[role]
        check_record_files(engine, tokenizer, attempt_dir=attempt_dir, set_role=role, dataset_sha256=digest,
                           targets=targets, base=base, decoding=decoding, suffix=ref.prompt_suffix or "",
                           grading=ref.answer_mode)
    atomic_write_json(AttemptDir(attempt_dir).evals.selection, selection)
    files: list[FileOutcome] = []
    with _progress_bar(show_progress) as bar:
        total = sum(len(problems) * len(targets) for problems, _, _ in datasets.values())
        task = bar.add_task("eval", total=total) if bar else None
        for role, (problems, _path, digest) in datasets.items():
            ref = att.datasets[role]
            suffix = ref.prompt_suffix or ""  # the set's own suffix; the spec defaults it to eval.prompt_suffix
            grading = ref.answer_mode  # the set's own, else eval.answer_mode (resolved by the spec)
            already = sum(
                _count_done(record_path(attempt_dir, t.name, role)) for t in targets
            )
            if bar:
                bar.update(task, advance=already, description=f"eval {role}")
            results = eval_records(
                engine,
                tokenizer,
                attempt_dir=attempt_dir,
                set_role=role,
                problems=problems,
                dataset_sha256=digest,
                targets=targets,
                base=base,
                decoding=decoding,
                suffix=suffix,
                grading=grading,
                chunk=engine_chunk(engine),
                progress=(lambda n: bar.update(task, advance=n)) if bar else None,
            )
            for target, writer, new in results:
                records = read_records(writer.path)
                files.append(FileOutcome(target.name, role, writer.path, new, summarize(records)))
    paired = write_paired(attempt_dir, [t.name for t in targets], list(datasets))
    return EvalOutcome(selection, tuple(files), tuple(paired))


def _count_done(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return fh.read().count(b"\n")


class _PlainBar:
    """The slice of rich's Progress that eval uses, as plain timestamped lines (a log, not a terminal)."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.done = 0
        self.description = "eval"
        self.throttle = None

    def add_task(self, description: str, total: int | None = None) -> int:
        from rlexp.tracking.progress import Throttle

        self.total, self.description, self.throttle = total, description, Throttle(total)
        return 0

    def update(self, task: int, advance: int = 0, description: str | None = None) -> None:
        from rlexp.tracking import progress

        self.done += advance
        if description and description != self.description:
            self.description = description
            progress.line(f"{description}: started ({self.done}/{self.total or '?'} records done)")
        if advance and self.throttle is not None and self.throttle.due(self.done):
            progress.line(f"{self.description}: {self.done}/{self.total or '?'} records")


class _progress_bar:
    """A rich progress bar on a terminal, plain lines in a log, or nothing (tests, --json)."""

    def __init__(self, show: bool):
        self.show = show
        self.bar = None

    def __enter__(self):
        if not self.show:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        if not Console().is_terminal:
            return _PlainBar()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        self.bar.__enter__()
        return self.bar

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
