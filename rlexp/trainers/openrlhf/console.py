"""OpenRLHF's console log followed line by line while a run lives (the launch's ``stdout`` metrics
source: rlexp.training.followers.MetricsFollower with :data:`CONSOLE`); the whole log read at once
(``rlexp ingest``, ``rlexp import-run``) is :func:`rlexp.trainers.openrlhf.metrics.read_openrlhf_console`.

Its ``ppo_trainer.py`` (0.9.3-0.11.2) prints ``✨ Global step N: {python dict repr}`` after every
global step, and only then evaluates step N: ``✨ Evaluation completed in T, global_step N,
eval_metrics: {...}`` (the follower holds each step's row until that line can no longer come).
"""

from __future__ import annotations

from typing import Any

from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.trainers.openrlhf.metrics import EVAL_LINE, GLOBAL_STEP
from rlexp.training.followers import ConsoleFormat
from rlexp.training.ingest import IngestStats, line_time, normalise
from rlexp.training.metric_logs import dict_of

GLOBAL_STEP_TEXT = "Global step "


def parse_stdout_line(line: str, stats: IngestStats, reference: float | None = None,
                      number: int | None = None, *, trainer: str) -> dict[str, Any] | None:
    """``... Global step 12: {'policy_loss': 0.1, ...}`` -> a row; the in-run eval line
    ``... Evaluation completed in ..., global_step 12, eval_metrics: {'eval_x_pass1': 0.6}`` ->
    a row with ``eval_x_pass1`` and ``monitor_acc``; any other line -> None.

    The dict is a Python repr (single quotes, ``nan``, ``tensor(0.5)``); a cut or abridged one is
    read pair by pair (:mod:`rlexp.training.metric_logs`). A metrics line with nothing
    readable is None and, given its ``number``, counted in ``stats.not_understood``. Names go
    through ``trainer``'s table; a NaN is kept and its step flagged in ``stats.nonfinite_steps``.
    """
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


def is_step_line(line: str) -> bool:
    """A global step's own line (not its eval line, which repeats the step's number)."""
    return GLOBAL_STEP_TEXT in line


CONSOLE = ConsoleFormat(parse_stdout_line, is_step_line)
