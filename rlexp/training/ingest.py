"""Training-metric readers, normalised into ``ATTEMPT/metrics.jsonl`` (one line per global step).

OpenRLHF writes no JSONL of its own. It logs (read from its source at v0.9.3 and v0.11.0):

- TensorBoard scalars ``train/<key>`` per global step (``--use_tensorboard DIR``), read here with
  TensorBoard's own ``event_accumulator`` — never a hand-written protobuf parser;
- a stdout line ``✨ Global step N: {python dict repr}`` after every global step;
- and a patched trainer of a real campaign appended ``training_metrics.jsonl``.

Raw sources are forgiving about values and strict about structure: a value that is not a number
(a string, a tensor repr we cannot read) is dropped and counted — a real run once crashed its
metrics pipeline on one ``"nan"`` string — while a line that is not JSON at all is an
:class:`InputError` naming file and line. A NaN or an infinity is data (the step where a run
diverged): it is kept, and its step flagged in ``IngestStats.nonfinite_steps``. The normalised
``metrics.jsonl`` is strict JSON, so it holds them as the strings "NaN", "Infinity", "-Infinity"
(:data:`rlexp.numbers.NONFINITE_JSON`); its reader (:func:`read_metrics`) gives them back as
floats and is strict otherwise: any other non-numeric value there is an error.

The normalised file itself (read strictly, cut for a resume, appended by step) is
:mod:`rlexp.training.metrics_file`; a live run's source is followed into it by
:mod:`rlexp.training.followers`; any trainer's file read whole (``rlexp ingest``, ``rlexp import-run``)
is :mod:`rlexp.training.log_files`.

Each row carries the trainer's own time of the step (``time``, Unix seconds) where the source has
one: a stdout line's logging prefix (``2026-02-23 06:30:01`` or OpenRLHF's ``INFO 02-23 06:30:01
file.py:N]``, which has no year: the year is the one that puts the line at or before the log's
last change; both read in this machine's time zone), a TensorBoard event's ``wall_time``, a JSONL
row's ``time`` / ``timestamp`` / ``_timestamp``. A line without a time gives a row without one
(MLflow then records when rlexp logged it).
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import finite_number
from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.numbers import nonfinite_value
from rlexp.training.metric_names import canonical_row, is_monitor_key

# a logging prefix's time: ISO date (Python logging's asctime), or month-day without a year (OpenRLHF)
_ISO_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
_MONTH_DAY_TIME = re.compile(r"(?<![\d-])(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?![\d])")


@dataclass
class IngestStats:
    """What a read kept and what it dropped (reported, never silent)."""

    rows: int = 0
    dropped_values: int = 0
    dropped_keys: dict[str, int] = field(default_factory=dict)
    nonfinite_steps: dict[int, list[str]] = field(default_factory=dict)  # step -> names that were NaN/inf
    not_understood: list[int] = field(default_factory=list)  # line numbers of metric lines not read
    runs: int = 1  # more than one: the step numbers restart in the file
    restarts: list[int] = field(default_factory=list)  # lines where a followed log's steps went back

    def drop(self, key: str) -> None:
        self.dropped_values += 1
        self.dropped_keys[key] = self.dropped_keys.get(key, 0) + 1


def normalise(raw: Mapping[str, Any], stats: IngestStats, *, step: int | None = None,
              aliases: Mapping[str, str] | None = None, trainer: str) -> dict[str, Any] | None:
    """One canonical row from a raw mapping: ``global_step`` first, numbers only (this row goes to
    ``metrics.jsonl``: a NaN or an infinity is kept as a float and its step flagged, by name, in
    ``stats.nonfinite_steps``; a value that is not a number is dropped and counted).

    Names go through the trainer's table (:mod:`rlexp.training.metric_names`), so a
    metric has one name whichever reader ran. Returns None when there is no usable integer step.
    """
    values: dict[str, float] = {}
    raw_step = step
    source: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).strip()
        name = name[len("train/"):] if name.startswith("train/") else name
        if aliases and name in aliases:
            name = aliases[name]
        if name in ("step", "global_step"):
            number = finite_number(value)
            if number is not None and number == int(number):
                raw_step = int(number)
            continue
        source.setdefault(name, value)
    nonfinite = []
    for name, value in canonical_row(source, trainer).items():
        if isinstance(value, dict | list):  # e.g. generated_samples; not a metric
            continue
        number = finite_number(value)
        if number is None:
            number = nonfinite_value(value)
            if number is None or name == STEP_TIME_KEY:  # not a number, or a time of day that is none
                stats.drop(name)
                continue
            nonfinite.append(name)
        if name.startswith("eval/") or name.startswith("eval_"):
            if is_monitor_key(name):
                values["monitor_acc"] = number if number <= 1.0 else number / 100.0
            values[name.replace("/", "_")] = number
            continue
        if name == STEP_TIME_KEY:
            if number > 1e11:  # milliseconds since the epoch
                number = number / 1000.0
            if number < 1e9:  # not a time of day since the epoch (a duration?): not a step time
                stats.drop(name)
                continue
        values[name] = number
    if raw_step is None or raw_step < 0:
        return None
    stats.rows += 1
    if nonfinite:
        stats.nonfinite_steps.setdefault(raw_step, []).extend(nonfinite)
    return {"global_step": raw_step, **values}


# --- stdout ---------------------------------------------------------------------------------

def line_time(prefix: str, reference: float | None = None) -> float | None:
    """The Unix time of a log line's logging prefix, or None. A month-day without a year takes the
    year that puts it at or before ``reference`` (the log's last change; default now)."""
    try:
        if match := _ISO_TIME.search(prefix):
            y, mo, d, h, mi, sec, frac = match.groups()
            micro = int((frac or "0").ljust(6, "0"))
            return datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), micro).timestamp()
        if match := _MONTH_DAY_TIME.search(prefix):
            mo, d, h, mi, sec = (int(g) for g in match.groups())
            ref = reference if reference is not None else time.time()
            year = datetime.datetime.fromtimestamp(ref).year
            stamp = datetime.datetime(year, mo, d, h, mi, sec).timestamp()
            if stamp > ref + 86400:  # a December line read in January
                stamp = datetime.datetime(year - 1, mo, d, h, mi, sec).timestamp()
            return stamp
    except ValueError:  # 02-30, 25:00: not a time
        return None
    return None


# --- a patched trainer's training_metrics.jsonl ---------------------------------------------------------

def parse_jsonl_line(path: Path, number: int, line: str, stats: IngestStats, *, trainer: str) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        raw = json.loads(line)  # Python's json accepts NaN/Infinity; normalise keeps them, flagged
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {number}", f"malformed JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise InputError(path, f"line {number}", "expected a JSON object")
    row = normalise(raw, stats, trainer=trainer)
    if row is None:
        raise InputError(path, f"line {number}", "no integer global_step (or step)")
    return row


def read_training_metrics_jsonl(path: str | Path, *, trainer: str) -> tuple[list[dict[str, Any]], IngestStats]:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    stats = IngestStats()
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.endswith("\n"):
                break  # a line still being written by the trainer; the follower reads it later
            row = parse_jsonl_line(path, number, line, stats, trainer=trainer)
            if row is not None:
                rows.append(row)
    return rows, stats


# --- TensorBoard -------------------------------------------------------------------------------

def event_dirs(root: str | Path) -> list[Path]:
    """Directories under ``root`` holding TensorBoard event files (OpenRLHF adds a run subdir)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, None, "TensorBoard directory not found")
    return sorted({p.parent for p in root.rglob("events.out.tfevents.*") if p.is_file()})


def read_tensorboard(root: str | Path, aliases: Mapping[str, str] | None = None, *, trainer: str
                     ) -> tuple[list[dict[str, Any]], IngestStats]:
    """All ``train/*`` and ``eval/*`` scalars under ``root``, merged into one row per step
    (``aliases``: the trainer's names -> metrics.jsonl names, e.g. TRL's ``learning_rate``)."""
    dirs = event_dirs(root)
    if not dirs:
        raise InputError(root, None, "no TensorBoard event files (events.out.tfevents.*)")
    from tensorboard.backend.event_processing import event_accumulator

    by_step: dict[int, dict[str, Any]] = {}
    wall: dict[int, float] = {}  # the step's time: its last scalar's wall_time
    for directory in dirs:
        acc = event_accumulator.EventAccumulator(str(directory), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for event in acc.Scalars(tag):
                by_step.setdefault(int(event.step), {})[tag] = float(event.value)
                wall[int(event.step)] = max(wall.get(int(event.step), 0.0), float(event.wall_time))
    stats = IngestStats()
    rows = [row for step in sorted(by_step)
            if (row := normalise(by_step[step], stats, step=step, aliases=aliases, trainer=trainer)) is not None]
    for row in rows:
        if row["global_step"] in wall and STEP_TIME_KEY not in row:
            row[STEP_TIME_KEY] = wall[row["global_step"]]
    return rows, stats
