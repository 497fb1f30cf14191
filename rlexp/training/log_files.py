"""Any trainer's metrics file read whole: ``rlexp ingest`` and ``rlexp import-run``.

:func:`read_log` detects the format from the file's name and place and the trainer's rules
(rlexp.trainers: ``console_log_format``, ``jsonl_log_format``), bounds what it reads, and hands the
text to the format's reader (:mod:`rlexp.training.metric_logs`, each trainer's own formats in its
package's ``metrics`` module); :func:`finite_rows` and :func:`finite_runs` turn the result into
``metrics.jsonl`` rows; :func:`log_summary` and :func:`summary_lines` are what ``rlexp ingest`` shows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.training.ingest import IngestStats, event_dirs, line_time, normalise


def finite_rows(read) -> tuple[list[dict[str, Any]], IngestStats]:
    """A :func:`read_log` result as metrics.jsonl rows: the last run's; NaN/inf kept, their steps
    flagged in ``stats.nonfinite_steps`` (the name is older than that)."""
    runs, stats = finite_runs(read, read.runs[-1:])
    return (runs[0] if runs else []), stats


def finite_runs(read, runs: Any = None) -> tuple[list[list[dict[str, Any]]], IngestStats]:
    """:func:`finite_rows` for every run of ``read`` (or the given ``runs`` of it), one list of rows
    each, counted into one :class:`IngestStats` (a resumed run's log: ``rlexp import-run``)."""
    stats = IngestStats(not_understood=list(read.not_understood), runs=max(1, len(read.runs)))
    for key, count in read.dropped.items():
        stats.dropped_keys[key] = stats.dropped_keys.get(key, 0) + count
        stats.dropped_values += count
    out = []
    for run in read.runs if runs is None else runs:
        out.append([kept for row in run.rows if (kept := normalise(row, stats, trainer=read.trainer)) is not None])
    return out, stats


def detect_format(path: Path, trainer: str) -> str:
    """The format a file of ``trainer`` is read as, from its name and place (see :func:`read_log`);
    a trainer's own formats are its rules' (rlexp.trainers: ``console_log_format``, ``jsonl_log_format``)."""
    from rlexp.trainers import rules
    from rlexp.training.metric_logs import formats

    if path.is_dir() or path.name.startswith("events.out.tfevents."):
        return "tensorboard"
    name = path.name.lower()
    if name.endswith(".json"):
        return "trainer-state"
    own = rules(trainer)
    if name.endswith(".jsonl"):
        return own.jsonl_log_format
    if own.console_log_format is None:
        raise InputError(path, None, own.console_log_note)
    assert own.console_log_format in formats()
    return own.console_log_format


def read_log(path: str | Path, trainer: str, fmt: str | None = None):
    """Any metrics file of ``trainer`` (a ``trainer.name``) as a
    :class:`rlexp.training.metric_logs.LogRead`: every step under canonical names, runs split
    where steps restart, NaN/inf kept and flagged, and the line numbers of the lines that looked
    like metrics but could not be read. A Git LFS pointer, a file that is not there, bytes that
    are not UTF-8 in a JSON format, a file over ``MAX_LOG_BYTES`` (256 MiB) or ``MAX_LOG_LINES``
    (4 million lines): an :class:`InputError`. Within those bounds a read takes time and memory
    linear in the file (rlexp.training.metric_logs: no line over ``MAX_LINE_CHARS`` is
    searched, no record re-joined past ``MAX_RECORD_CHARS``)."""
    from rlexp.experiment.files import MAX_LOG_BYTES, MAX_LOG_LINES, check_regular_file
    from rlexp.experiment.lfs import refuse_lfs_pointer
    from rlexp.training import metric_logs
    from rlexp.training.metric_names import trainers

    path = Path(path)
    if trainer not in trainers():
        raise InputError(None, "--trainer", f"expected one of {', '.join(trainers())}, got {trainer!r}")
    if fmt is not None and fmt not in metric_logs.formats():
        raise InputError(None, "--format", f"expected one of {', '.join(metric_logs.formats())}, got {fmt!r}")
    if not path.exists():
        raise InputError(path, None, "file not found")
    if not path.is_dir():  # a TensorBoard run is a directory; anything else must be a regular file
        check_regular_file(path)  # before anything opens it: a FIFO would block, a device never end
    fmt = fmt or detect_format(path, trainer)
    directory_reader = DIRECTORY_READERS.get(fmt)
    if directory_reader is not None:
        return directory_reader(path if path.is_dir() else path.parent, trainer)
    if not path.is_file():
        raise InputError(path, None, "not a file")
    refuse_lfs_pointer(path)
    if path.stat().st_size > MAX_LOG_BYTES:
        raise InputError(path, None, f"{path.stat().st_size:,} bytes: over the limit of {MAX_LOG_BYTES:,} for a log "
                         "(cut it to the run to read)")
    with path.open("rb") as handle:
        data = handle.read(MAX_LOG_BYTES + 1)  # the file may have grown since
    if len(data) > MAX_LOG_BYTES:
        raise InputError(path, None, f"over the limit of {MAX_LOG_BYTES:,} bytes for a log (cut it to the run to read)")
    if (count := data.count(b"\n")) > MAX_LOG_LINES:
        raise InputError(path, None, f"{count:,} lines: over the limit of {MAX_LOG_LINES:,} for a log "
                         "(cut it to the run to read)")
    if fmt.endswith("console"):
        text = data.decode("utf-8", errors="replace")  # a console log may hold any bytes
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise InputError(path, f"line {line}", f"not UTF-8 (byte {exc.start})") from None
    del data
    if "\0" in text and not fmt.endswith("console"):
        raise InputError(path, None, "a NUL byte: not a text file")
    import inspect  # here: 20 ms that only a read of a log pays

    reader = metric_logs.trainer_readers().get(fmt)
    if reader is not None and "reference_time" in inspect.signature(reader).parameters:
        # a console whose lines carry a logging prefix (OpenRLHF's): its times, read against the file's mtime
        reference = path.stat().st_mtime
        return reader(text, trainer, reference_time=lambda prefix: line_time(prefix, reference))
    if fmt == "trainer-state":
        try:
            return metric_logs.read_trainer_state(text, trainer)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
        except RecursionError:
            raise InputError(path, None, "nested too deep") from None
        except ValueError as exc:
            raise InputError(path, "log_history", str(exc)) from None
    return metric_logs.read_text(text, fmt, trainer)


def _read_tensorboard_log(root: Path, trainer: str):
    from rlexp.experiment.files import MAX_LOG_BYTES
    from rlexp.training.metric_logs import LogRead, Run, metrics_of

    dirs = event_dirs(root)
    if not dirs:
        raise InputError(root, None, "no TensorBoard event files (events.out.tfevents.*)")
    size = sum(p.stat().st_size for d in dirs for p in d.glob("events.out.tfevents.*") if p.is_file())
    if size > MAX_LOG_BYTES:
        raise InputError(root, None, f"{size:,} bytes of event files: over the limit of {MAX_LOG_BYTES:,} for a log")
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        raise InputError(root, None, "reading TensorBoard files needs the tensorboard package") from None
    by_step: dict[int, dict[str, float]] = {}
    wall: dict[int, float] = {}
    for directory in dirs:
        acc = event_accumulator.EventAccumulator(str(directory), size_guidance={event_accumulator.SCALARS: 0})
        try:
            acc.Reload()
        except Exception as exc:  # a corrupt event file: TensorBoard's own reader refused it
            raise InputError(directory, None, f"TensorBoard could not read it: {' '.join(str(exc).split())[:200]}") \
                from None
        for tag in acc.Tags().get("scalars", []):
            for event in acc.Scalars(tag):
                by_step.setdefault(int(event.step), {})[tag] = float(event.value)
                wall[int(event.step)] = max(wall.get(int(event.step), 0.0), float(event.wall_time))
    read = LogRead("tensorboard", trainer)
    run = Run(first_line=0)
    for step in sorted(by_step):
        row = {"global_step": step, **metrics_of(by_step[step], trainer, read, step)}
        row.setdefault(STEP_TIME_KEY, wall[step])
        run.rows.append(row)
    read.runs = [run] if run.rows else []
    read.lines = sum(len(v) for v in by_step.values())
    return read


def _json_number(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def log_summary(path: str | Path, read) -> dict[str, Any]:
    """``rlexp ingest --json``: every step (``{step, metrics}``; NaN/inf as the strings "NaN",
    "Infinity", "-Infinity", flagged in ``nonfinite``), the metrics by canonical name (steps
    holding each), the runs, and the line numbers not understood."""
    counts: dict[str, int] = {}
    steps = []
    for index, run in enumerate(read.runs):
        for row in run.rows:
            metrics = {k: _json_number(v) for k, v in row.items() if k != "global_step"}
            for k in metrics:
                counts[k] = counts.get(k, 0) + 1
            steps.append({"step": row["global_step"], "run": index + 1, "metrics": metrics})
    return {
        "file": str(path), "format": read.format, "trainer": read.trainer, "lines": read.lines,
        "steps_read": len(steps), "steps": steps,
        "metrics": dict(sorted(counts.items())),
        "runs": [{"run": i + 1, "first_line": r.first_line, "first_step": r.steps[0], "last_step": r.steps[-1],
                  "steps": len(r.rows)} for i, r in enumerate(read.runs) if r.rows],
        "not_understood": list(read.not_understood),
        "nonfinite": [{"step": s, "metric": m} for s, m in read.nonfinite],
        "not_numbers": dict(sorted(read.dropped.items())),
        "rejoined": list(read.rejoined), "abridged": list(read.abridged),
        "cut": [{"first_line": a, "last_line": b} for a, b in read.cut],
        "steps_counted": read.steps_counted,
    }


def _lines_list(numbers: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f", … ({len(numbers) - limit} more)" if len(numbers) > limit else "")


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """``rlexp ingest``'s text: what was read, what was not, and where."""
    bad = summary["not_understood"]
    what = "entr" + ("y" if len(bad) == 1 else "ies") if summary["format"] == "trainer-state" else \
        "line" + ("" if len(bad) == 1 else "s")
    head = f"{summary['file']} ({summary['format']}, {summary['trainer']}): read {summary['steps_read']} steps"
    head += f"; {len(bad)} {what} not understood" + (f": {_lines_list(bad)}" if bad else "")
    out = [head]
    if summary["steps_counted"]:
        out.append("  steps counted from 1 by rlexp: tqdm postfixes carry no step number")
    runs = summary["runs"]
    if len(runs) > 1:
        out.append(f"  {len(runs)} runs in one file (step numbers restart), not merged:")
        out += [f"    run {r['run']}: from line {r['first_line']}, steps {r['first_step']}..{r['last_step']} "
                f"({r['steps']} steps)" for r in runs]
    if summary["metrics"]:
        out.append("  metrics (steps): " + ", ".join(f"{k} ({n})" for k, n in summary["metrics"].items()))
    if summary["nonfinite"]:
        flagged: dict[int, list[str]] = {}
        for item in summary["nonfinite"]:
            flagged.setdefault(item["step"], []).append(item["metric"])
        out.append("  NaN/inf kept at " + "; ".join(f"step {s}: {', '.join(m)}" for s, m in list(flagged.items())[:20]))
    if summary["not_numbers"]:
        out.append("  values that are not numbers (left out): "
                   + ", ".join(f"{k} ({n})" for k, n in summary["not_numbers"].items()))
    if summary["rejoined"]:
        out.append(f"  records wrapped over several lines, re-joined at lines {_lines_list(summary['rejoined'])}")
    if summary["abridged"]:
        out.append(f"  abridged or cut records read pair by pair at lines {_lines_list(summary['abridged'])}")
    if summary["cut"]:
        spans = [str(c["first_line"]) if c["first_line"] == c["last_line"] else f"{c['first_line']}-{c['last_line']}"
                 for c in summary["cut"]]
        out.append(f"  records cut and not re-joined (the cut item left out, the rest read) at lines "
                   f"{', '.join(spans[:20])}" + (f", … ({len(spans) - 20} more)" if len(spans) > 20 else ""))
    return out


# the formats read from a directory (a file inside names its directory), not as one text file
DIRECTORY_READERS = {"tensorboard": _read_tensorboard_log}
