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

Rows are keyed by ``global_step``: :func:`append_new_rows` never writes a step twice, so a resumed
run or a re-read log continues the file instead of duplicating it.

Each row carries the trainer's own time of the step (``time``, Unix seconds) where the source has
one: a stdout line's logging prefix (``2026-02-23 06:30:01`` or OpenRLHF's ``INFO 02-23 06:30:01
file.py:N]``, which has no year: the year is the one that puts the line at or before the log's
last change; both read in this machine's time zone), a TensorBoard event's ``wall_time``, a JSONL
row's ``time`` / ``timestamp`` / ``_timestamp``. A line without a time gives a row without one
(MLflow then records when rlexp logged it).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import append_jsonl_many, finite_number, iter_jsonl, repair_torn_tail
from rlexp.experiment.files import parse_jsonl_line as strict_jsonl_line
from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.numbers import NONFINITE_JSON, json_row, nonfinite_value
from rlexp.training.metric_names import canonical_row

# In-run monitor accuracy (OOD-202 greedy pass@1) under the names trainers use for it.
MONITOR_KEYS = ("monitor_acc", "greedy_pass_at_1", "greedy_pass@1", "pass1", "pass@1")

GLOBAL_STEP_TEXT = "Global step "
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


def canonical_key(key: str, aliases: Mapping[str, str] | None = None, *, trainer: str) -> str:
    """A source's metric name -> its metrics.jsonl name (``aliases``: extra names first; then the
    trainer's table in :mod:`rlexp.training.metric_names`)."""
    key = key.strip()
    if key.startswith("train/"):
        key = key[len("train/") :]
    if aliases and key in aliases:
        return aliases[key]
    if key in ("step", "global_step"):
        return "global_step"
    row = canonical_row({key: 0.0}, trainer)
    return next(iter(row)) if len(row) == 1 else key


def _is_monitor_key(key: str) -> bool:
    tail = key.split("/")[-1].lower()
    return any(tail == m or tail.endswith(m) for m in MONITOR_KEYS)


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
            if _is_monitor_key(name):
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


def parse_stdout_line(line: str, stats: IngestStats, reference: float | None = None,
                      number: int | None = None, *, trainer: str) -> dict[str, Any] | None:
    """``... Global step 12: {'policy_loss': 0.1, ...}`` -> a row; the in-run eval line
    ``... Evaluation completed in ..., global_step 12, eval_metrics: {'eval_x_pass1': 0.6}`` ->
    a row with ``eval_x_pass1`` and ``monitor_acc``; any other line -> None.

    The dict is a Python repr (single quotes, ``nan``, ``tensor(0.5)``); a cut or abridged one is
    read pair by pair (:mod:`rlexp.training.metric_logs`). A metrics line with nothing
    readable is None and, given its ``number``, counted in ``stats.not_understood``. Names go
    through OpenRLHF's table; a NaN is kept and its step flagged in ``stats.nonfinite_steps``.
    """
    from rlexp.trainers.openrlhf.metrics import EVAL_LINE, GLOBAL_STEP
    from rlexp.training.metric_logs import dict_of

    match = GLOBAL_STEP.search(line) or EVAL_LINE.search(line)
    if not match:
        return None
    raw, _ = dict_of(match.group(2))
    if raw is None:
        if number is not None:
            stats.not_understood.append(number)
        return None
    row = normalise(raw, stats, step=int(match.group(1)), trainer=trainer)
    stamp = line_time(line[: match.start()], reference)
    if row is not None and stamp is not None:
        row[STEP_TIME_KEY] = stamp
    return row


def _join(row: dict[str, Any], later: Mapping[str, Any]) -> None:
    """A step's eval line joins its training line; the step keeps the training line's time."""
    stamp = row.get(STEP_TIME_KEY)
    row.update(later)
    if stamp is not None:
        row[STEP_TIME_KEY] = stamp


def read_stdout_log(path: str | Path) -> tuple[list[dict[str, Any]], IngestStats]:
    """The rows of an OpenRLHF console log as metrics.jsonl holds them (a NaN kept as a float
    and its step flagged). Wrapped and abridged lines are read; where step
    numbers restart (two runs in one file) the rows are the last run's and ``stats.runs`` says how
    many there were; lines not understood are in ``stats.not_understood``."""
    return finite_rows(read_log(path, "openrlhf", "openrlhf-console"))


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


# --- the normalised file -----------------------------------------------------------------------

def read_metrics(path: str | Path, *, allow_torn_tail: bool = False) -> list[dict[str, Any]]:
    """``metrics.jsonl`` strictly: every row an int ``global_step`` and numbers only (the strings
    "NaN", "Infinity", "-Infinity" read back as those floats).

    ``allow_torn_tail``: a last line without its newline (a trainer appending right now, or
    killed mid-append) is left out instead of being an error; it is never repaired here."""
    path = Path(path)
    rows = []
    seen: set[int] = set()
    records = _complete_lines(path) if allow_torn_tail else iter_jsonl(path)
    for number, record in records:
        step = check_metrics_row(path, number, record)
        if step in seen:
            raise InputError(path, f"line {number}: global_step", f"step {step} appears twice")
        seen.add(step)
        rows.append(record)
    return sorted(rows, key=lambda r: r["global_step"])


def _complete_lines(path: Path):
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


# --- following a live run ----------------------------------------------------------------------

class LineFollower:
    """Reads only complete new lines of a growing file (a torn last line waits for its newline)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self.line_number = 0

    def new_lines(self) -> list[tuple[int, str]]:
        if not self.path.exists():
            return []
        stat = self.path.stat()
        # truncated, or replaced by an atomic rewrite (a new inode): read it again from the start
        if stat.st_size < self.offset or stat.st_ino != getattr(self, "_inode", stat.st_ino):
            self.offset = self.line_number = 0
        self._inode = stat.st_ino
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        if end == 0:
            return []
        self.offset += end
        out = []
        for raw in data[:end].splitlines():
            self.line_number += 1
            out.append((self.line_number, raw.decode("utf-8", errors="replace")))
        return out


class MetricsFileFollower:
    """New complete rows of a ``metrics.jsonl`` that another process (the local trainer) appends,
    each validated as :func:`read_metrics` does; a bad line is an :class:`InputError` naming the
    file and line. Nothing is written: the file is already the normalised one.

    Followed by step number, not by byte offset: each poll reads the complete lines and returns
    the rows past the last step returned. A trainer that rewrites the file (a resume cuts it
    back to its checkpoint, atomically, so its bytes shift) then never makes the follower read
    from the middle of a line or skip a row. ``after_step``: rows up to it are not returned."""

    def __init__(self, path: str | Path, after_step: int = 0):
        self.path = Path(path)
        self.last_step = after_step
        self.stats = IngestStats()  # nonfinite_steps: the steps whose rows hold NaN/inf

    def poll(self, final: bool = False) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        for number, row in _complete_lines(self.path):
            step = check_metrics_row(self.path, number, row)
            if step > self.last_step:
                rows.append(row)
                if names := nonfinite_names(row):
                    self.stats.nonfinite_steps[step] = names
        rows.sort(key=lambda r: r["global_step"])
        if rows:
            self.last_step = rows[-1]["global_step"]
        return rows

    def close(self) -> list[dict[str, Any]]:
        return self.poll(final=True)


class MetricsFollower:
    """Tails one metrics source while the run lives and appends new steps to ``metrics.jsonl``.

    ``kind`` is ``stdout`` (a log with ``Global step N: {...}`` lines), ``jsonl`` (a patched trainer's
    ``training_metrics.jsonl``), ``tensorboard`` (an event directory; a step is written once a later
    step exists, or at :meth:`close`, so its scalars are complete), or any other name with ``parse``:
    a JSON-lines file of a trainer's own format, each line read by ``parse(path, number, line, stats)``
    (a trainer's own file logger, read by its package).
    """

    def __init__(self, kind: str, source: str | Path, metrics_path: str | Path,
                 aliases: Mapping[str, str] | None = None, *, trainer: str,
                 parse: Callable[[Path, int, str, IngestStats], dict[str, Any] | None] | None = None):
        poll = self._POLLS.get(kind) or (MetricsFollower._poll_lines if parse or kind in LINE_PARSERS else None)
        if poll is None:
            raise InputError(None, "metrics source", f"unknown kind {kind!r}")
        self.kind = kind
        self._poll = poll
        line_parser = LINE_PARSERS.get(kind)
        self._parse = parse or (functools.partial(line_parser, trainer=trainer) if line_parser else None)
        self.source = Path(source)
        self.metrics_path = Path(metrics_path)
        self.aliases = aliases
        self.trainer = trainer
        self.stats = IngestStats()
        repair_torn_tail(self.metrics_path)
        self.known = written_steps(self.metrics_path)
        self._lines = LineFollower(source) if poll is not MetricsFollower._poll_tensorboard else None
        self._pending: dict[str, Any] | None = None  # stdout: the last step, until its eval can't follow

    def poll(self, final: bool = False) -> list[dict[str, Any]]:
        return append_new_rows(self.metrics_path, self._poll(self, final), self.known)

    def _poll_stdout(self, final: bool) -> list[dict[str, Any]]:
        # OpenRLHF prints "Global step N" and only then evaluates step N: hold each step's row
        # until a later step (or the end) shows that no eval line is coming for it
        rows: list[dict[str, Any]] = []
        for number, line in self._lines.new_lines():
            row = parse_stdout_line(line, self.stats, number=number, trainer=self.trainer)
            if row is None:
                continue
            last = self._pending["global_step"] if self._pending is not None else max(self.known, default=None)
            if last is not None and row["global_step"] < last and GLOBAL_STEP_TEXT in line:
                self.stats.restarts.append(number)  # a second run in the same log: its steps are not merged
            if self._pending is not None and self._pending["global_step"] == row["global_step"]:
                _join(self._pending, row)
                continue
            if self._pending is not None:
                rows.append(self._pending)
            self._pending = row
        if final and self._pending is not None:
            rows.append(self._pending)
            self._pending = None
        return rows

    def _poll_lines(self, final: bool) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for number, line in self._lines.new_lines():
            row = self._parse(self.source, number, line, self.stats)
            if row is not None:
                rows.append(row)
        return rows

    def _poll_tensorboard(self, final: bool) -> list[dict[str, Any]]:
        if not self.source.is_dir() or not event_dirs(self.source):
            return []
        all_rows, self.stats = read_tensorboard(self.source, self.aliases, trainer=self.trainer)
        if all_rows and not final:
            last = all_rows[-1]["global_step"]
            all_rows = [r for r in all_rows if r["global_step"] < last]
        return all_rows

    # the kinds read their own way (the others are JSON-lines files: LINE_PARSERS or ``parse``)
    _POLLS = {"stdout": _poll_stdout, "tensorboard": _poll_tensorboard}

    def close(self) -> list[dict[str, Any]]:
        return self.poll(final=True)


# a JSON-lines source's kind -> the reader of one of its lines (MetricsFollower)
LINE_PARSERS = {"jsonl": parse_jsonl_line}


# --- any trainer's file, read for `rlexp ingest` ------------------------------------------------

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
