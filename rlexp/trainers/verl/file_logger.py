"""verl's ``file`` logger (``$VERL_FILE_LOGGER_PATH``: one JSON line per step) read into canonical
metric rows: line by line while a run lives (the launch's follower, rlexp.training.followers.MetricsFollower
with :func:`parse_verl_line`), or the whole file at once (:func:`read_verl_metrics`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.training.ingest import IngestStats, normalise

# verl's metric names -> canonical: rlexp.trainers.verl.metrics.NAMES (one table for its
# console, its file logger and TensorBoard).
# greedy pass@1 on the in-run monitor set: rlexp's verl rows name it by this data_source
# (rlexp.trainers.verl.hydra.DATA_SOURCE_MONITOR) and its reward's float score is logged as "acc"
VERL_MONITOR_METRIC = "val-core/rlexp_ood_monitor/acc/mean@1"


def parse_verl_line(path: Path, number: int, line: str, stats: IngestStats) -> dict[str, Any] | None:
    """One line of verl's ``file`` logger, ``{"step": N, "data": {...}}`` (``FileLogger.log`` in
    verl/utils/tracking.py), as a canonical row; a blank line is None. A line that is not such an
    object is an :class:`InputError` naming file and line. orjson writes NaN and inf as ``null``:
    a null is read as NaN and flagged (as :func:`rlexp.training.metric_logs.read_text` does
    for ``rlexp ingest``); a value that is not a number is dropped and counted."""
    if not line.strip():
        return None
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {number}", f"malformed JSON: {exc.msg}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
        raise InputError(path, f"line {number}", 'expected verl\'s {"step": N, "data": {...}}')
    step = raw.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InputError(path, f"line {number}: step", f"expected an integer >= 0, got {step!r}")
    renamed = {k: (math.nan if v is None else v)  # orjson's NaN/inf
               for k, v in raw["data"].items() if k != "training/global_step"}  # the step: the row's key
    return normalise(renamed, stats, step=step, trainer="verl")


def read_verl_metrics(path: str | Path) -> tuple[list[dict[str, Any]], IngestStats]:
    """Every complete line of a verl ``file`` logger JSONL; a step logged twice (the validation of
    step 0, or a line per logger call) is merged into one row."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    stats = IngestStats()
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.endswith("\n"):
                break  # still being written
            row = parse_verl_line(path, number, line, stats)
            if row is not None:
                by_step.setdefault(row["global_step"], {}).update(row)
    return [by_step[s] for s in sorted(by_step)], stats


def follower(source: str | Path, metrics_path: str | Path) -> Any:
    """The launch's follower of the file logger's output: new steps appended to ``metrics_path``."""
    from rlexp.training.followers import MetricsFollower

    return MetricsFollower("verl", source, metrics_path, trainer="verl", parse=parse_verl_line)
