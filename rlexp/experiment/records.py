"""Eval record files: one JSONL per (checkpoint, set), one line per problem, plus a metadata file.

``eval/<checkpoint>/<set>.jsonl`` holds the per-problem records (docs/ARCHITECTURE.md):
``problem_hash, gold, output, answer, parse_method, correct, finish_reason, prompt_tokens,
completion_tokens, bucket``. ``<set>.meta.json`` pins what produced them: engine, decoding,
model/adapter paths and SHA-256, dataset SHA-256, prompt suffix, chat-template hash, grading mode
and the answer parser's version.

Resuming is the normal case: :meth:`RecordWriter.open` repairs a line torn by a kill, refuses to
mix records made under other settings (a changed dataset, decoding, model, suffix or template is
an :class:`InputError`), and reports which problems are done so a rerun only does the rest.
Records are appended in batches of whole lines, one fsync per batch
(``rlexp.experiment.files.append_jsonl_many``): a failed write leaves the file as it was.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rlexp.errors import InputError
from rlexp.evaluation.answers import PARSE_METHODS
from rlexp.experiment.files import (
    MAX_JSONL_BYTES,
    append_jsonl_many,
    atomic_write_json,
    iter_jsonl,
    parse_jsonl_line,
    read_json,
    read_text,
    repair_torn_tail,
)
from rlexp.experiment.layout import (
    AttemptDir,
    checkpoint_step,  # noqa: F401  (re-exported: record files name checkpoints)
)

RECORD_FIELDS = (
    "problem_hash",
    "gold",
    "output",
    "answer",
    "parse_method",
    "correct",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "bucket",
)
# Metadata keys that must match for old and new records to share a file.
IDENTITY_KEYS = (
    "engine",
    "decoding",
    "model_sha256",
    "adapter_sha256",
    "dataset_sha256",
    "prompt_suffix",
    "chat_template_sha256",
    "grading",
    "parser_version",  # rlexp.evaluation.answers.PARSER_VERSION: records graded by another extractor do not mix
)
BASELINE_S0 = "baseline_s0"
BASELINE_SOTA = "baseline_sota"


def record_path(attempt_dir: str | Path, checkpoint: str, set_role: str) -> Path:
    return AttemptDir(attempt_dir).evals.records(checkpoint, set_role)


def meta_path(records_path: str | Path) -> Path:
    """``ood_primary.jsonl`` → ``ood_primary.meta.json`` (same directory)."""
    path = Path(records_path)
    return path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")


def make_record(problem: dict[str, Any], output: str, finish_reason: str, prompt_tokens: int,
                completion_tokens: int, grading: str = "exact") -> dict[str, Any]:
    """One record: the answer is extracted and graded here, the same way for every checkpoint."""
    from rlexp.evaluation.answers import grade_output

    answer, method, correct = grade_output(output, problem["answer"], grading)
    return {
        "problem_hash": problem["problem_hash"],
        "gold": problem["answer"],
        "output": output,
        "answer": answer,
        "parse_method": method,
        "correct": int(correct),
        "finish_reason": finish_reason,
        "prompt_tokens": int(prompt_tokens),
        "completion_tokens": int(completion_tokens),
        "bucket": problem.get("bucket"),
    }


class RecordWriter:
    """Append-only writer for one record file; knows which problems are already done."""

    def __init__(self, path: Path, meta: dict[str, Any], done: dict[str, dict[str, Any]]):
        self.path = path
        self.meta = meta
        self.done = done  # problem_hash -> record already on disk

    @classmethod
    def check(cls, path: str | Path, meta: dict[str, Any]) -> None:
        """Refuse what :meth:`open` refuses, writing nothing: a metadata file of other identity,
        records without metadata, a bad record line (a torn last line, which :meth:`open` drops,
        aside). Commands call it before their first write."""
        path = Path(path)
        missing = [k for k in IDENTITY_KEYS if k not in meta]
        if missing:
            raise ValueError(f"record metadata lacks {missing}")
        mpath = meta_path(path)
        if mpath.exists():
            old = read_json(mpath)
            if not isinstance(old, dict):
                raise InputError(mpath, None, "expected a JSON object")
            for key in IDENTITY_KEYS:
                if key == "parser_version" and old.get(key) != meta[key]:
                    raise InputError(
                        mpath,
                        key,
                        f"these records were graded by answer parser version {old.get(key) or '1 (unversioned)'}, "
                        f"this rlexp grades with version {meta[key]}; refusing to mix — remove {path.parent} "
                        "or use a new attempt",
                    )
                if old.get(key) != meta[key]:
                    field, before, after = _first_difference(key, old.get(key), meta[key])
                    raise InputError(
                        mpath,
                        field,
                        f"changed since these records were written ({_short(before)} → "
                        f"{_short(after)}); refusing to mix — remove {path.parent} or use a new attempt",
                    )
        elif path.exists() and path.stat().st_size > 0:
            raise InputError(path, None, f"records without their metadata file {mpath.name}; refusing to append")
        if path.exists() or path.is_symlink():
            for _ in iter_records(path, complete_lines_only=True):
                pass

    @classmethod
    def open(cls, path: str | Path, meta: dict[str, Any]) -> RecordWriter:
        """Open (or create) ``path`` for appending records produced under ``meta``."""
        path = Path(path)
        cls.check(path, meta)
        mpath = meta_path(path)
        repair_torn_tail(path)
        done: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in iter_records(path):
                done[line.problem_hash] = line.record
        if not mpath.exists():
            atomic_write_json(mpath, meta)  # metadata first: records never exist without it
        return cls(path, meta, done)

    def append(self, record: dict[str, Any]) -> None:
        self.append_many([record])

    def append_many(self, records: list[dict[str, Any]]) -> None:
        """Append a batch of records with one fsync (:func:`append_jsonl_many`): all of them, or —
        a write that fails — none (the file is truncated back); a kill mid-batch loses that batch,
        whose torn line the next :meth:`open` drops."""
        batch: set[str] = set()
        for record in records:
            h = record["problem_hash"]
            if h in self.done or h in batch:
                raise ValueError(f"problem {h[:12]} already has a record in {self.path}")
            batch.add(h)
        append_jsonl_many(self.path, records)
        for record in records:
            self.done[record["problem_hash"]] = record


def drop_records(path: str | Path, drop) -> int:
    """Rewrite a record file without the records for which ``drop(record)`` is true (atomically;
    the metadata untouched), so a resumed eval produces them again; the number dropped."""
    from rlexp.experiment.files import atomic_write_text

    path = Path(path)
    if not path.exists():
        return 0
    # complete lines only: a line torn by a kill is what RecordWriter.open drops anyway, and a strict
    # read here, before that repair, would refuse the file on every rerun
    records = [line.record for line in iter_records(path, complete_lines_only=True)]
    keep = [r for r in records if not drop(r)]
    if len(keep) < len(records):
        atomic_write_text(path, "".join(json.dumps(r, allow_nan=False, ensure_ascii=False) + "\n" for r in keep))
    return len(records) - len(keep)


def _first_difference(field: str, old: Any, new: Any) -> tuple[str, Any, Any]:
    """The first setting that differs, by dotted name: two decodings that differ in their seed read
    ``decoding.seed: 0 → 7``, not two cut-off dicts whose shared start hides the difference."""
    while isinstance(old, dict) and isinstance(new, dict):
        key = next((k for k in (*old, *(k for k in new if k not in old)) if old.get(k) != new.get(k)), None)
        if key is None:
            break
        field, old, new = f"{field}.{key}", old.get(key), new.get(key)
    return field, old, new


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def as_01(value: Any) -> int | None:
    """A correctness value as 0/1: ints 0 and 1 and booleans; anything else (floats, strings,
    None) is None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    return None


class RecordLine(NamedTuple):
    """One validated record line: its number, the record, and the two fields statistics need."""

    line: int
    record: dict[str, Any]
    problem_hash: str
    correct: int


def check_record(path: Path, number: int, record: dict[str, Any]) -> tuple[str, int]:
    """``(problem_hash, correct as 0/1)`` of one parsed line, or an InputError naming file and line."""
    h = record.get("problem_hash")
    if not isinstance(h, str) or not h.strip():
        raise InputError(path, f"line {number}: problem_hash", "missing or not a non-empty string")
    correct = as_01(record.get("correct"))
    if correct is None:
        raise InputError(path, f"line {number}: correct",
                         f"must be 0/1 or true/false, got {record.get('correct')!r}")
    _check_optional_fields(path, number, record)
    return h, correct


# The other fields of a record, as make_record writes them: checked where present (records made by
# other tools may carry only problem_hash and correct), so no guard or report reads a wrong type.


def _check_optional_fields(path: Path, number: int, record: dict[str, Any]) -> None:
    def bad(key: str, what: str) -> InputError:
        return InputError(path, f"line {number}: {key}", f"must be {what}, got {_short(record[key])}")

    if "output" in record and not isinstance(record["output"], str):
        raise bad("output", "the generated text (a string)")
    if "finish_reason" in record and (not isinstance(record["finish_reason"], str)
                                      or not 0 < len(record["finish_reason"]) <= 64):
        raise bad("finish_reason", "a short string (stop, length...)")
    if "parse_method" in record and record["parse_method"] not in PARSE_METHODS:
        raise bad("parse_method", f"one of {', '.join(PARSE_METHODS)}")
    for key in ("prompt_tokens", "completion_tokens"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9):
            raise bad(key, "a token count (an integer from 0) or null")
    for key in ("answer", "gold", "bucket"):
        value = record.get(key)
        if value is not None and not isinstance(value, str | int | float) or isinstance(value, bool):
            raise bad(key, "a string or null")


def iter_records(path: str | Path, *, complete_lines_only: bool = False) -> Iterator[RecordLine]:
    """The one strict reader of eval record lines: bad JSON, a truncated last line, NaN, a missing
    or empty ``problem_hash``, ``correct`` other than 0/1 or true/false, and a duplicate hash are
    :class:`InputError` naming the file and line. An empty file yields nothing.
    ``complete_lines_only``: skip a last line without its newline (what a kill leaves in a file
    rlexp appends to; the writer drops it before appending)."""
    path = Path(path)
    first_seen: dict[str, int] = {}
    for number, record in (_complete_lines(path) if complete_lines_only else iter_jsonl(path)):
        h, correct = check_record(path, number, record)
        if h in first_seen:
            raise InputError(path, f"line {number}: problem_hash",
                             f"duplicate record: problem_hash {h[:16]} (first at line {first_seen[h]})")
        first_seen[h] = number
        yield RecordLine(number, record, h, correct)


def _complete_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    text = read_text(path, limit=MAX_JSONL_BYTES)
    for number, line in enumerate(text[: text.rfind("\n") + 1].split("\n"), start=1):
        if line.strip():
            yield number, parse_jsonl_line(path, number, line)


def read_record_lines(path: str | Path, *, allow_empty: bool = False) -> list[RecordLine]:
    """Every line of a record file (:func:`iter_records`); a file without records is an
    :class:`InputError` unless ``allow_empty``."""
    lines = list(iter_records(path))
    if not lines and not allow_empty:
        raise InputError(path, None, "empty record file: no problems")
    return lines


def read_records(path: str | Path, *, allow_empty: bool = False) -> list[dict[str, Any]]:
    """Strictly read a record file: ``problem_hash`` strings, unique, ``correct`` 0/1 or bool."""
    return [line.record for line in read_record_lines(path, allow_empty=allow_empty)]



def eval_accuracies(attempt_dir: str | Path) -> dict[tuple[str, str], dict[str, float]]:
    """(checkpoint, set) -> {acc, n} from ``eval/<checkpoint>/<set>.jsonl`` (paired/ excluded;
    files without records are skipped). Every file is read strictly (:func:`iter_records`)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for checkpoint, set_role, path in AttemptDir(attempt_dir).evals.record_files():
        correct = [line.correct for line in iter_records(path)]
        if correct:
            out[(checkpoint, set_role)] = {"acc": sum(correct) / len(correct), "n": float(len(correct))}
    return out


def read_meta(records_path: str | Path) -> dict[str, Any]:
    meta = read_json(meta_path(records_path))
    if not isinstance(meta, dict):
        raise InputError(meta_path(records_path), None, "expected a JSON object")
    return meta


@dataclass(frozen=True)
class BucketAccuracy:
    n: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


@dataclass(frozen=True)
class RecordSummary:
    """Per-file summary: the parse-method distribution (what the parser audit watches) and truncation as
    the engine reported it (``finish_reason``, never a text heuristic)."""

    n: int
    correct: int
    accuracy: float
    parse_methods: dict[str, int] = field(default_factory=dict)
    truncation_rate: float = 0.0
    per_bucket: dict[str, BucketAccuracy] = field(default_factory=dict)

    def parse_rate(self, method: str) -> float:
        return self.parse_methods.get(method, 0) / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "parse_methods": dict(self.parse_methods),
            "truncation_rate": self.truncation_rate,
            "per_bucket": {b: {"n": v.n, "correct": v.correct, "accuracy": v.accuracy}
                           for b, v in self.per_bucket.items()},
        }


def summarize(records: list[dict[str, Any]]) -> RecordSummary:
    n = len(records)
    correct = sum(int(bool(r["correct"])) for r in records)
    methods = Counter(str(r.get("parse_method", "none")) for r in records)
    truncated = sum(1 for r in records if r.get("finish_reason") == "length")
    buckets: dict[str, list[int]] = {}
    for r in records:
        tally = buckets.setdefault(str(r.get("bucket")), [0, 0])
        tally[0] += 1
        tally[1] += int(bool(r["correct"]))
    return RecordSummary(
        n=n,
        correct=correct,
        accuracy=correct / n if n else 0.0,
        parse_methods=dict(sorted(methods.items())),
        truncation_rate=truncated / n if n else 0.0,
        per_bucket={b: BucketAccuracy(t[0], t[1]) for b, t in sorted(buckets.items())},
    )
