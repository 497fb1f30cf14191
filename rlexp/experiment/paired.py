"""Paired records: two per-problem record files joined by ``problem_hash``.

A paired comparison is only valid on the same problems. Two record files whose problem sets
differ are refused, unless the caller asks for the intersection explicitly, and then what was
dropped is reported. Each input line needs ``problem_hash`` (a non-empty string) and
``correct`` (0/1 or true/false); ``output`` is kept when present. Duplicate hashes, other
correctness values, empty files and a truncated last line are :class:`InputError`.

The joined result is written in the SOP's paired-record format, one line per problem:
``{problem_hash, y_baseline, y_new, output_baseline, output_new}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import atomic_write_text, iter_jsonl
from rlexp.experiment.layout import AttemptDir
from rlexp.experiment.records import BASELINE_S0, BASELINE_SOTA, as_01, read_record_lines, record_path

PAIRED_KEYS = ("problem_hash", "y_baseline", "y_new", "output_baseline", "output_new")


@dataclass(frozen=True)
class Outcome:
    correct: int
    output: str | None
    line: int


def load_outcomes(path: str | Path) -> dict[str, Outcome]:
    """problem_hash -> Outcome, in file order, strictly validated (:func:`rlexp.experiment.records.iter_records`)."""
    out: dict[str, Outcome] = {}
    for line in read_record_lines(path):
        output = line.record.get("output")
        out[line.problem_hash] = Outcome(line.correct, output if isinstance(output, str) else None, line.line)
    return out


@dataclass(frozen=True)
class PairedRecord:
    problem_hash: str
    y_baseline: int
    y_new: int
    output_baseline: str | None
    output_new: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PAIRED_KEYS}


@dataclass(frozen=True)
class PairedSet:
    """The joined problems (baseline file order) and what an explicit intersection dropped."""

    records: tuple[PairedRecord, ...]
    base_path: str
    new_path: str
    dropped_base_only: tuple[str, ...] = ()
    dropped_new_only: tuple[str, ...] = ()

    @property
    def y_baseline(self) -> list[int]:
        return [r.y_baseline for r in self.records]

    @property
    def y_new(self) -> list[int]:
        return [r.y_new for r in self.records]

    @property
    def dropped(self) -> int:
        return len(self.dropped_base_only) + len(self.dropped_new_only)


def pair_files(base_path: str | Path, new_path: str | Path, *, intersect: bool = False) -> PairedSet:
    """Join two record files by problem_hash (:func:`rlexp.stats.pair`); refuse different problem
    sets unless ``intersect``."""
    from rlexp.stats import PairingError, pair

    base = load_outcomes(base_path)
    new = load_outcomes(new_path)
    try:
        joined = pair({h: o.correct for h, o in base.items()}, {h: o.correct for h, o in new.items()},
                      intersect=intersect)
    except PairingError as err:
        if err.common == 0 and intersect:
            raise InputError(new_path, "problem_hash", f"no problem in common with {base_path}") from None
        example = str((err.base_only or err.new_only)[0])
        raise InputError(
            new_path, "problem_hash",
            f"problem sets differ from {base_path}: {len(err.base_only)} only in the baseline, {len(err.new_only)} "
            f"only in the new file (e.g. {example[:16]}); compare the common problems only with --intersect",
        ) from None
    records = tuple(PairedRecord(h, int(yb), int(yn), base[h].output, new[h].output)
                    for h, yb, yn in zip(joined.ids, joined.y_base, joined.y_new, strict=True))
    return PairedSet(records, str(base_path), str(new_path), joined.dropped_base_only, joined.dropped_new_only)


def write_paired_records(path: str | Path, records: tuple[PairedRecord, ...] | list[PairedRecord]) -> Path:
    """Write the SOP paired-record file atomically (a derived file: whole or absent)."""
    text = "".join(json.dumps(r.to_dict(), allow_nan=False, ensure_ascii=False) + "\n" for r in records)
    return atomic_write_text(path, text)


def read_paired_records(path: str | Path) -> list[PairedRecord]:
    """Read a paired-record file back, strictly (same rules as the inputs)."""
    path = Path(path)
    out: list[PairedRecord] = []
    seen: set[str] = set()
    for number, record in iter_jsonl(path):
        missing = [k for k in PAIRED_KEYS if k not in record]
        if missing:
            raise InputError(path, f"line {number}: {missing[0]}", "missing key")
        key = record["problem_hash"]
        if not isinstance(key, str) or not key:
            raise InputError(path, f"line {number}: problem_hash", "not a non-empty string")
        if key in seen:
            raise InputError(path, f"line {number}: problem_hash", f"duplicate problem_hash {key[:16]}")
        seen.add(key)
        ys = []
        for k in ("y_baseline", "y_new"):
            y = as_01(record[k])
            if y is None:
                raise InputError(path, f"line {number}: {k}", f"must be 0/1, got {record[k]!r}")
            ys.append(y)
        outs = []
        for k in ("output_baseline", "output_new"):
            if record[k] is not None and not isinstance(record[k], str):
                raise InputError(path, f"line {number}: {k}", "must be a string or null")
            outs.append(record[k])
        out.append(PairedRecord(key, ys[0], ys[1], outs[0], outs[1]))
    if not out:
        raise InputError(path, None, "empty paired-record file")
    return out


def paired_path(attempt_dir: str | Path, baseline: str, checkpoint: str, set_role: str) -> Path:
    """``eval/paired/<baseline>__<checkpoint>__<set>.jsonl``."""
    return AttemptDir(attempt_dir).evals.paired(baseline, checkpoint, set_role)


def attempt_pairs(baselines: Sequence[str], checkpoints: Sequence[str], *,
                  baseline_vs_baseline: bool = False) -> list[tuple[str, str]]:
    """(baseline, checkpoint) pairs: every baseline × every checkpoint, then Baseline-S0 ×
    Baseline-SOTA when ``baseline_vs_baseline`` and both are among ``baselines``."""
    pairs = [(b, c) for b in baselines for c in checkpoints]
    if baseline_vs_baseline and BASELINE_S0 in baselines and BASELINE_SOTA in baselines:
        pairs.append((BASELINE_S0, BASELINE_SOTA))
    return pairs


def write_pairs_for_attempt(
    attempt_dir: str | Path,
    baselines: Sequence[str],
    checkpoints: Sequence[str],
    roles: Sequence[str],
    *,
    baseline_vs_baseline: bool = False,
    joined: Mapping[tuple[str, str, str], PairedSet] | None = None,
) -> list[Path]:
    """The one writer of ``eval/paired/*.jsonl`` (the paired per-problem records every comparison of
    sop/README.md#canonical-report is computed from).

    For each (baseline, checkpoint) of :func:`attempt_pairs` and each set role, in that order,
    both record files are joined (:func:`pair_files`) and written; a pair with a record file
    missing is skipped. A caller that validated every input before writing anything passes what
    it joined as ``joined`` (keyed ``(baseline, checkpoint, role)``): then exactly those pairs are
    written and no record file is read again. Returns the paths written.
    """
    written = []
    for baseline, checkpoint in attempt_pairs(baselines, checkpoints, baseline_vs_baseline=baseline_vs_baseline):
        for role in roles:
            if joined is not None:
                ps = joined.get((baseline, checkpoint, role))
                if ps is None:
                    continue
            else:
                a, b = record_path(attempt_dir, baseline, role), record_path(attempt_dir, checkpoint, role)
                if not (a.exists() and b.exists()):
                    continue
                ps = pair_files(a, b)
            written.append(write_paired_records(paired_path(attempt_dir, baseline, checkpoint, role), ps.records))
    return written
