"""Following a live run: each poll reads what its metrics source gained and appends the new steps to
``ATTEMPT/metrics.jsonl`` (:mod:`rlexp.training.metrics_file`), never a step twice.

A source is a console log (read by its trainer's :class:`ConsoleFormat`: OpenRLHF's ``Global step N`` lines), a JSON-lines file (a patched
trainer's ``training_metrics.jsonl``, or a trainer's own logger read by its package), a TensorBoard
event directory, or the local trainer's own ``metrics.jsonl`` (:class:`MetricsFileFollower`). Only
complete lines are read: a line still being written waits for its newline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import repair_torn_tail
from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.training.ingest import (
    IngestStats,
    event_dirs,
    parse_jsonl_line,
    read_tensorboard,
)
from rlexp.training.metrics_file import (
    append_new_rows,
    check_metrics_row,
    complete_lines,
    nonfinite_names,
    written_steps,
)


@dataclass(frozen=True)
class ConsoleFormat:
    """A trainer's console log as a live metrics source (its package's, e.g.
    rlexp.trainers.openrlhf.console.CONSOLE): ``parse(line, stats, number=N, trainer=name)`` reads one
    line into a row (None: not a metrics line), ``is_step_line(line)`` tells a step's own line from a
    line that joins a step already printed (its in-run eval): only a step line whose number goes back
    starts a new run."""

    parse: Callable[..., dict[str, Any] | None]
    is_step_line: Callable[[str], bool]


def _join(row: dict[str, Any], later: Mapping[str, Any]) -> None:
    """A step's eval line joins its training line; the step keeps the training line's time."""
    stamp = row.get(STEP_TIME_KEY)
    row.update(later)
    if stamp is not None:
        row[STEP_TIME_KEY] = stamp


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
        for number, row in complete_lines(self.path):
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

    ``kind`` is ``stdout`` (a trainer's console log, each line read by ``console``, its package's
    :class:`ConsoleFormat`), ``jsonl`` (a patched trainer's
    ``training_metrics.jsonl``), ``tensorboard`` (an event directory; a step is written once a later
    step exists, or at :meth:`close`, so its scalars are complete), or any other name with ``parse``:
    a JSON-lines file of a trainer's own format, each line read by ``parse(path, number, line, stats)``
    (a trainer's own file logger, read by its package).
    """

    def __init__(self, kind: str, source: str | Path, metrics_path: str | Path,
                 aliases: Mapping[str, str] | None = None, *, trainer: str,
                 parse: Callable[[Path, int, str, IngestStats], dict[str, Any] | None] | None = None,
                 console: ConsoleFormat | None = None):
        poll = self._POLLS.get(kind) or (MetricsFollower._poll_lines if parse or kind in LINE_PARSERS else None)
        if poll is None:
            raise InputError(None, "metrics source", f"unknown kind {kind!r}")
        if poll is MetricsFollower._poll_stdout and console is None:
            raise InputError(None, "metrics source", f"{kind}: no console format (its trainer's package states it)")
        self.kind = kind
        self._poll = poll
        self.console = console
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
        # a trainer may print a step's line before its in-run eval of that step (OpenRLHF does):
        # hold each step's row until a later step (or the end) shows that no eval line is coming for it
        assert self.console is not None
        rows: list[dict[str, Any]] = []
        for number, line in self._lines.new_lines():
            row = self.console.parse(line, self.stats, number=number, trainer=self.trainer)
            if row is None:
                continue
            last = self._pending["global_step"] if self._pending is not None else max(self.known, default=None)
            if last is not None and row["global_step"] < last and self.console.is_step_line(line):
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
