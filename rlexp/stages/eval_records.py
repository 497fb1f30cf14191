"""The record files of an eval, shared by ``rlexp eval`` (:mod:`rlexp.stages.evaluate`, one
generation per problem), its episode variant (:mod:`rlexp.stages.evaluate_env`), the guards and the
model sweep: what a target is, the engine that serves the targets, the model digests, the record
metadata a file is written under and checked against before the first write, the single-generation
pipeline (:func:`eval_records`), the one-writer lock and the paired records.

Its own module so that both evals import it and neither imports the other (the entry,
:func:`rlexp.stages.evaluate.evaluate`, dispatches to the episode eval).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import Decoding, Engine, Request
from rlexp.experiment.files import atomic_write_json, read_json, sha256_dir, sha256_file, sha256_text
from rlexp.experiment.layout import AttemptDir
from rlexp.experiment.records import (
    BASELINE_S0,
    BASELINE_SOTA,
    RecordSummary,
    RecordWriter,
    make_record,
    record_path,
)

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt, EvalSpec

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


# --------------------------------------------------------------------------- engines


def build_engine(att: EvalSpec, base: Path | str, targets: Sequence[Target]) -> tuple[Engine, Any]:
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


def load_problems(att: EvalSpec, role: str, limit: int | None = None) -> tuple[list[dict[str, Any]], Path, str] | None:
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

    cache_file = AttemptDir(attempt_dir).evals.hash_cache
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


def load_eval_sets(att: Attempt, roles: Sequence[str], limit: int | None) -> dict[str, tuple[Any, Path, str]]:
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


def write_paired(attempt_dir: Path, names: Sequence[str], roles: Sequence[str]) -> list[Path]:
    """Paired records (sop/README.md#canonical-report), baseline × checkpoint × set (and S0 × SOTA), for every complete pair
    of files (:func:`rlexp.experiment.paired.write_pairs_for_attempt`)."""
    from rlexp.experiment.paired import write_pairs_for_attempt

    baselines = [n for n in (BASELINE_S0, BASELINE_SOTA) if n in names]
    checkpoints = [n for n in names if n not in (BASELINE_S0, BASELINE_SOTA)]
    return write_pairs_for_attempt(attempt_dir, baselines, checkpoints, roles, baseline_vs_baseline=True)
