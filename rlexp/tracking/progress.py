"""Progress where there is no terminal: one plain, timestamped, flushed line per step or phase.

On a terminal the stages draw rich bars; in a log (``nohup``, ``sbatch``, ``| tee``,
``> log.txt``) a bar would print nothing until the end, so each stage reports through
:func:`line` instead, the way ``pip`` and ``tqdm`` do in logs. Lines go to stdout, with the
command's own output (stderr stays one line per error); a ``--json`` command calls
:func:`silence`: its stdout is for the machine.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_stream: TextIO | None = None
_silent = False


def use_stream(stream: TextIO | None) -> None:
    """Send plain progress lines to ``stream`` (None: stdout)."""
    global _stream
    _stream = stream


def silence(quiet: bool = True) -> None:
    """No progress lines (machine-readable output)."""
    global _silent
    _silent = quiet


def line(text: str) -> None:
    """``2026-11-26T04:58:12Z text``, written and flushed at once."""
    if _silent:
        return
    stream = _stream or sys.stdout
    stream.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {text}\n")
    stream.flush()


class Throttle:
    """Whether a counter crossed the next tenth of its total (a line per 10%, plus the last)."""

    def __init__(self, total: int | None, parts: int = 10):
        self.total = total
        self.parts = parts
        self.next = 1

    def due(self, done: int) -> bool:
        if not self.total or self.next == 1:  # the first report always shows: the phase has started
            self.next = max(2, done * self.parts // max(self.total or 1, 1) + 1)
            return True
        if done >= self.total or done * self.parts >= self.next * self.total:
            self.next = done * self.parts // self.total + 1
            return True
        return False
