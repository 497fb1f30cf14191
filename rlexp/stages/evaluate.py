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

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import Decoding, Engine, Request, close_engine
from rlexp.experiment.files import (
    atomic_write_json,
    iter_jsonl,
    read_json,
    sha256_dir,
    sha256_file,
    sha256_text,
)
from rlexp.experiment.layout import (
    ADAPTER_PATTERN,
    AttemptDir,
    ExperimentDir,
    checkpoint_name,
    checkpoint_step,
)
from rlexp.experiment.records import (
    BASELINE_S0,
    BASELINE_SOTA,
    RecordSummary,
    RecordWriter,
    make_record,
    read_records,
    record_path,
    summarize,
)
from rlexp.numbers import NONFINITE_JSON

EVAL_SETS = ("ood_primary", "id", "sanity")
DEFAULT_CHUNK = 256  # requests per engine call for engines without a preference (local)


@dataclass(frozen=True)
class Target:
    """One model to evaluate: the base model plus (optionally) an adapter / checkpoint directory."""

    name: str  # global_step{N} | baseline_s0 | baseline_sota
    adapter_path: Path | None


@dataclass(frozen=True)
class FileOutcome:
    checkpoint: str
    set_role: str
    path: Path
    new_records: int
    summary: RecordSummary


@dataclass(frozen=True)
class EvalOutcome:
    """What one ``rlexp eval`` run evaluated: the selection, each record file, the paired records."""

    selection: dict[str, Any]
    files: tuple[FileOutcome, ...]
    paired: tuple[Path, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "selection": self.selection,
            "files": [{"checkpoint": f.checkpoint, "set": f.set_role, "path": str(f.path),
                       "new_records": f.new_records, **f.summary.to_dict()} for f in self.files],
            "paired": [str(p) for p in self.paired],
        }


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


def select_checkpoints(att: Any, *, write: bool = True) -> dict[str, Any]:
    """Run the SOP's K=3 selection and (``write``) write ``eval/selection.json``."""
    from rlexp.protocol.gates import RegisteredSelection, select_k3
    from rlexp.spec.sop import load_sop

    attempt_dir = Path(att.attempt_dir)
    saved = AttemptDir(attempt_dir).checkpoints()
    if not saved:
        raise InputError(AttemptDir(attempt_dir).checkpoints_dir, ADAPTER_PATTERN, "no saved checkpoints to evaluate")
    points, last = monitor_points(attempt_dir)
    final_step = last if last is not None else max(saved)
    sop = load_sop()
    selection = select_k3(points, final_step, att.checkpoints_mid, list(saved), sop)
    payload = RegisteredSelection.of(selection, final_step_trained=final_step, mid_preregistered=att.checkpoints_mid,
                                     saved_steps=list(saved), monitor_points=len(points), sop_version=sop.version,
                                     sop_sha256=sop.sha256).to_dict()
    if write:
        atomic_write_json(AttemptDir(attempt_dir).selection, payload)
    return payload



def plan_targets(att: Any, selection: dict[str, Any], only: Sequence[str] | None = None) -> list[Target]:
    """Baselines first (they are shared by every comparison), then the selected checkpoints."""
    from rlexp.experiment.ledger import read_sota

    attempt_dir = Path(att.attempt_dir)
    saved = AttemptDir(attempt_dir).checkpoints()
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
    for step in getattr(att, "checkpoints_extra", ()) or ():  # pre-registered extras (sop/README.md#k3-checkpoints)
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
                AttemptDir(attempt_dir).selection,
                "checkpoint",
                f"{unknown[0]!r} is not pre-registered (evaluable: {', '.join(sorted(known))}); "
                "the SOP evaluates the K=3 checkpoints, never picks among many",
            )
        targets = [t for t in targets if t.name in only]
    return targets


# --------------------------------------------------------------------------- engines


def build_engine(att: Any, base: Path | str, targets: Sequence[Target]) -> tuple[Engine, Any]:
    """The engine the spec names, serving the base and each target's adapter; plus a tokenizer
    for rendering prompts (the base model's own, so its chat template)."""
    from rlexp.evaluation.engines.registry import open_engine

    adapters = {t.name: t.adapter_path for t in targets if t.adapter_path is not None}
    return open_engine(att, base, adapters)


def engine_chunk(engine: Engine) -> int | None:
    """Requests per engine call: vLLM takes everything in one call (its scheduler batches)."""
    return getattr(engine, "preferred_chunk", DEFAULT_CHUNK)


# --------------------------------------------------------------------------- hashing


_HASHED: dict[tuple[str, str], str] = {}  # (path, stamp) -> digest hashed by this process


def model_sha256(path: Path | str | None, cache_file: Path, *, save: bool = True) -> str | None:
    """SHA-256 of a model/adapter directory, cached by (path, sizes, mtimes): hashing 28 GB of
    weights on every rerun would dominate a resumed eval. ``save=False`` writes no cache (a check
    before a command's first write); the digest is kept in memory, so the saving call that follows
    does not hash again."""
    if path is None:
        return None
    if not isinstance(path, Path) or not path.exists():
        return f"name:{path}"
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stamp = sha256_text(repr([(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]))
    cache: dict[str, Any] = {}
    if cache_file.exists():
        try:
            loaded = read_json(cache_file)
            cache = loaded if isinstance(loaded, dict) else {}
        except InputError:
            cache = {}  # a cache is never worth failing for
    key = str(path.resolve())
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = _HASHED.get((key, stamp)) or (sha256_dir(path) if path.is_dir() else sha256_file(path))
    _HASHED[(key, stamp)] = digest
    if save:
        cache[key] = {"stamp": stamp, "sha256": digest}
        atomic_write_json(cache_file, cache)
    return digest


# --------------------------------------------------------------------------- the pipeline


def load_problems(att: Any, role: str, limit: int | None = None) -> tuple[list[dict[str, Any]], Path, str] | None:
    from rlexp.experiment.datasets import read_dataset

    ref = att.datasets.get(role)
    if ref is None or ref.path is None:
        return None
    path = Path(ref.path)
    problems = read_dataset(path)
    if limit is not None:
        problems = problems[:limit]
    return problems, path, sha256_file(path)


def record_metas(
    engine: Engine,
    tokenizer: Any,
    *,
    attempt_dir: Path,
    set_role: str,
    dataset_sha256: str,
    targets: Sequence[Target],
    base: Path | str,
    decoding: Decoding,
    suffix: str,
    grading: str = "exact",
    records_path: Callable[[Target], Path] | None = None,
    extra_meta: dict[str, Any] | None = None,
    save_hashes: bool = True,
) -> list[tuple[Target, Path, dict[str, Any]]]:
    """Each target's record file and the metadata its records are written under."""
    from rlexp.evaluation.answers import PARSER_VERSION
    from rlexp.evaluation.generation import chat_template_sha256

    cache_file = AttemptDir(attempt_dir).hash_cache
    base_sha = model_sha256(base, cache_file, save=save_hashes)  # a hub name is recorded as "name:<id>"
    common = {
        "engine": getattr(engine, "name", type(engine).__name__),
        "decoding": decoding.to_dict(),
        "model_sha256": base_sha,
        "dataset_sha256": dataset_sha256,
        "prompt_suffix": suffix,
        "chat_template_sha256": chat_template_sha256(tokenizer),
        "grading": grading,
        "parser_version": PARSER_VERSION,
    }
    out = []
    for target in targets:
        path = records_path(target) if records_path else record_path(attempt_dir, target.name, set_role)
        meta = {
            **common,
            "adapter_sha256": model_sha256(target.adapter_path, cache_file, save=save_hashes),
            "checkpoint": target.name,
            "set": set_role,
            "model_path": str(base),
            "adapter_path": None if target.adapter_path is None else str(target.adapter_path),
            "engine_details": engine.describe(),
            **(extra_meta or {}),
        }
        out.append((target, path, meta))
    return out


def check_record_files(engine: Engine, tokenizer: Any, **where: Any) -> None:
    """Refuse (InputError) what :func:`eval_records` would refuse for these record files, writing
    nothing (no records, metadata or hash cache): called before a command's first write.
    ``where``: the keyword arguments of :func:`record_metas`."""
    for _target, path, meta in record_metas(engine, tokenizer, save_hashes=False, **where):
        RecordWriter.check(path, meta)


def eval_records(
    engine: Engine,
    tokenizer: Any,
    *,
    attempt_dir: Path,
    set_role: str,
    problems: list[dict[str, Any]],
    dataset_sha256: str,
    targets: Sequence[Target],
    base: Path | str,
    decoding: Decoding,
    suffix: str,
    grading: str = "exact",
    chunk: int | None = DEFAULT_CHUNK,
    progress: Callable[[int], None] | None = None,
    records_path: Callable[[Target], Path] | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> list[tuple[Target, RecordWriter, int]]:
    """Evaluate ``problems`` for every target into its record file; returns (target, writer, new)."""
    from rlexp.evaluation.generation import render_prompt

    metas = record_metas(engine, tokenizer, attempt_dir=attempt_dir, set_role=set_role,
                         dataset_sha256=dataset_sha256, targets=targets, base=base, decoding=decoding,
                         suffix=suffix, grading=grading, records_path=records_path, extra_meta=extra_meta)
    for _target, path, meta in metas:  # every file checked before the first is opened (and written)
        RecordWriter.check(path, meta)
    writers: list[tuple[Target, RecordWriter]] = [(target, RecordWriter.open(path, meta))
                                                  for target, path, meta in metas]

    rendered = {p["problem_hash"]: render_prompt(tokenizer, p["prompt"], suffix) for p in problems}
    pending: list[tuple[int, dict[str, Any]]] = [
        (w, p) for w, (_, writer) in enumerate(writers) for p in problems if p["problem_hash"] not in writer.done
    ]
    counts = [0] * len(writers)
    size = chunk or max(1, len(pending))
    for start in range(0, len(pending), size):
        part = pending[start : start + size]
        requests = [Request(rendered[p["problem_hash"]], writers[w][0].name if writers[w][0].adapter_path else None)
                    for w, p in part]
        results = engine.generate(requests, decoding, progress)
        batches: dict[int, list[dict[str, Any]]] = {}
        for (w, problem), result in zip(part, results, strict=True):
            batches.setdefault(w, []).append(_record(problem, result.samples, grading))
        for w, batch in batches.items():  # one fsync per file and engine chunk: a kill loses that chunk at most
            writers[w][1].append_many(batch)
            counts[w] += len(batch)
    return [(t, writer, counts[i]) for i, (t, writer) in enumerate(writers)]


def _record(problem: dict[str, Any], samples: Sequence[Any], grading: str) -> dict[str, Any]:
    first = samples[0]
    record = make_record(problem, first.text, first.finish_reason, first.prompt_tokens, first.completion_tokens, grading)
    if len(samples) > 1:  # pass@k: every sample, graded the same way
        graded = [make_record(problem, s.text, s.finish_reason, s.prompt_tokens, s.completion_tokens, grading)
                  for s in samples]
        record["samples"] = [{k: g[k] for k in ("output", "answer", "parse_method", "correct", "finish_reason",
                                                "completion_tokens")} for g in graded]
        record["n"] = len(samples)
        record["num_correct"] = sum(g["correct"] for g in graded)
    return record


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
    env = getattr(att, "environment", None)
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
        if getattr(att, "environment", None) is not None:  # episodes instead of single generations
            from rlexp.stages.evaluate_env import evaluate_episodes

            return evaluate_episodes(att, attempt_dir, roles, selection, targets, base, limit, show_progress)
        return _evaluate_locked(att, attempt_dir, roles, selection, targets, base, limit, show_progress, engine)


def _evaluate_locked(att, attempt_dir, roles, selection, targets, base, limit, show_progress, engine) -> EvalOutcome:
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


def load_eval_sets(att, roles, limit) -> dict[str, tuple[Any, Path, str]]:
    """``role -> (problems, path, sha256)`` of every eval set the attempt names a path for; the
    primary set must have one."""
    datasets = {}
    for role in roles:
        loaded = load_problems(att, role, limit)
        if loaded is None:
            if role == "ood_primary":
                raise InputError(att.spec_path, "datasets.ood_primary", "the primary eval set has no path")
            continue
        datasets[role] = loaded
    return datasets


def _evaluate_with(att, attempt_dir, roles, selection, targets, base, limit, show_progress, engine,
                   tokenizer) -> EvalOutcome:
    decoding = Decoding.for_eval(att.eval)
    datasets = load_eval_sets(att, roles, limit)

    for role, (_problems, _path, digest) in datasets.items():  # every set checked before the first write
        ref = att.datasets[role]
        check_record_files(engine, tokenizer, attempt_dir=attempt_dir, set_role=role, dataset_sha256=digest,
                           targets=targets, base=base, decoding=decoding, suffix=ref.prompt_suffix or "",
                           grading=ref.answer_mode)
    atomic_write_json(AttemptDir(attempt_dir).selection, selection)
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


@contextlib.contextmanager
def eval_lock(attempt_dir: Path) -> Iterator[None]:
    """One writer per attempt's eval records: two concurrent runs would both append the same
    problems. ``flock`` is released by the kernel when a process dies, so a SIGKILL leaves no
    stale lock."""
    import fcntl

    # the lock is on the attempt directory itself: taking it writes nothing, so a command that
    # then refuses its input leaves the experiment as it was
    path = AttemptDir(attempt_dir).root
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(path, None, "another rlexp eval/guard is writing this attempt's records") from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _count_done(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return fh.read().count(b"\n")


def write_paired(attempt_dir: Path, names: Sequence[str], roles: Sequence[str]) -> list[Path]:
    """Paired records (sop/README.md#canonical-report), baseline × checkpoint × set (and S0 × SOTA), for every complete pair
    of files (:func:`rlexp.experiment.paired.write_pairs_for_attempt`)."""
    from rlexp.experiment.paired import write_pairs_for_attempt

    baselines = [n for n in (BASELINE_S0, BASELINE_SOTA) if n in names]
    checkpoints = [n for n in names if n not in (BASELINE_S0, BASELINE_SOTA)]
    return write_pairs_for_attempt(attempt_dir, baselines, checkpoints, roles, baseline_vs_baseline=True)


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
