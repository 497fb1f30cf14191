"""``ATTEMPT/metrics.jsonl``, the normalised training metrics: one line per global step.

Strict JSON, so a NaN or an infinity is held as the string "NaN", "Infinity" or "-Infinity"
(:data:`rlexp.numbers.NONFINITE_JSON`); :func:`read_metrics` gives them back as floats and is strict
otherwise: any other non-numeric value is an :class:`InputError` naming file, line and key.

Rows are keyed by ``global_step``: :func:`append_new_rows` never writes a step twice, so a resumed
run or a re-read log continues the file instead of duplicating it; a resume first cuts it back to
its checkpoint (:func:`cut_metrics`). The rows come from the raw sources' readers
(:mod:`rlexp.training.ingest`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import append_jsonl_many, finite_number, iter_jsonl, repair_torn_tail
from rlexp.experiment.files import parse_jsonl_line as strict_jsonl_line
from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.numbers import NONFINITE_JSON, json_row


def read_metrics(path: str | Path, *, allow_torn_tail: bool = False) -> list[dict[str, Any]]:
    """``metrics.jsonl`` strictly: every row an int ``global_step`` and numbers only (the strings
    "NaN", "Infinity", "-Infinity" read back as those floats).

    ``allow_torn_tail``: a last line without its newline (a trainer appending right now, or
    killed mid-append) is left out instead of being an error; it is never repaired here."""
    path = Path(path)
    rows = []
    seen: set[int] = set()
    records = complete_lines(path) if allow_torn_tail else iter_jsonl(path)
    for number, record in records:
        step = check_metrics_row(path, number, record)
        if step in seen:
            raise InputError(path, f"line {number}: global_step", f"step {step} appears twice")
        seen.add(step)
        rows.append(record)
    return sorted(rows, key=lambda r: r["global_step"])


def complete_lines(path: Path):
    """(line number, record) of every complete line (ending in a newline), strictly parsed."""
    if not path.exists():
        raise InputError(path, None, "file not found")
    data = path.read_bytes()
    data = data[: data.rfind(b"\n") + 1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"byte {exc.start}", "not UTF-8") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, strict_jsonl_line(path, number, line)


def metrics_resume_point(path: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` a resume starts from, validated before anything is written
    (a torn last line is allowed: the resume drops it)."""
    return read_metrics(path, allow_torn_tail=True) if Path(path).exists() else []


def cut_metrics(path: str | Path, last_step: int) -> int:
    """Keep the rows of ``metrics.jsonl`` up to ``last_step`` (a resume re-does and re-logs the
    later ones; a torn last line goes too); the file is rewritten atomically, and only when
    something goes. Returns the number of rows dropped. Validate with :func:`read_metrics` first."""
    from rlexp.experiment.files import atomic_write_text

    path = Path(path)
    if not path.exists():
        return 0
    data = path.read_bytes()
    rows = read_metrics(path, allow_torn_tail=True)
    kept = [r for r in rows if r["global_step"] <= last_step]
    if len(kept) == len(rows) and (not data or data.endswith(b"\n")):
        return 0
    atomic_write_text(path, "".join(json.dumps(json_row(r), allow_nan=False) + "\n" for r in kept))
    return len(rows) - len(kept)


def check_metrics_row(path: str | Path, number: int, record: Mapping[str, Any]) -> int:
    """One ``metrics.jsonl`` row: an int ``global_step`` >= 0 (returned) and numbers only, or an
    :class:`InputError` naming file, line and key. The strings "NaN", "Infinity", "-Infinity" are
    decoded in place to the floats they stand for."""
    from rlexp.experiment.layout import MAX_GLOBAL_STEP

    step = record.get("global_step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_GLOBAL_STEP:
        raise InputError(path, f"line {number}: global_step",
                         f"expected an integer from 0 to {MAX_GLOBAL_STEP}, got {step!r}")
    for key, value in record.items():
        if key == "global_step" or finite_number(value) is not None:
            continue
        if isinstance(value, str) and value in NONFINITE_JSON and key != STEP_TIME_KEY:
            record[key] = NONFINITE_JSON[value]  # type: ignore[index]
            continue
        raise InputError(path, f"line {number}: {key}",
                         f'expected a finite number or "NaN", "Infinity", "-Infinity", got {value!r}')
    return step


def nonfinite_names(row: Mapping[str, Any]) -> list[str]:
    """The names of a row's NaN/inf values (its step is flagged where they are reported)."""
    return [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]


def written_steps(path: str | Path) -> set[int]:
    path = Path(path)
    if not path.exists():
        return set()
    return {r["global_step"] for r in read_metrics(path)}


def append_new_rows(path: str | Path, rows: Iterable[Mapping[str, Any]], known: set[int] | None = None) -> list[dict]:
    """Append the rows whose step is not in the file yet, in step order; returns what was written.

    ``known`` (the steps already written, kept by a follower) avoids re-reading the file each poll.
    """
    path = Path(path)
    repair_torn_tail(path)  # only our own file: a kill mid-append leaves at most one torn line
    if known is None:
        known = written_steps(path)
    fresh = []
    for row in sorted(rows, key=lambda r: r["global_step"]):
        if row["global_step"] not in known:
            fresh.append(dict(row))
            known.add(row["global_step"])
    append_jsonl_many(path, [json_row(r) for r in fresh])  # NaN/inf as strict JSON's strings
    return fresh
