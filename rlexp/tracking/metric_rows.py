"""Training metrics per global step into an MLflow run, exactly once.

Rows of ``metrics.jsonl`` go through ``log_batch``, each stamped with the trainer's own time of
the step (``time`` of the row; rows without one get the time of logging), at most 1000 values a
call (one call per value is ~40x slower, see benchmarks/bench_mlflow_logging.py). Logging is
idempotent: the (key, step) pairs already in the run are read back from MLflow and only the
missing ones are sent, so a launcher killed between a batch and its bookkeeping never duplicates
a row. Names never hold ``@`` or parentheses: MLflow rejects them.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rlexp.experiment.layout import STEP_TIME_KEY
from rlexp.tracking.store import store_lock

LOGGED_STEP_TAG = "rlexp.metrics_logged_through"


POINT_METRIC_PREFIXES = ("eval/", "decision/", "primary/")
MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call
NOT_METRICS = ("global_step", STEP_TIME_KEY)  # a metrics.jsonl row's step and the step's time
_BAD_METRIC_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")


def metric_name(name: str) -> str:
    """An MLflow-safe metric name: ``greedy_pass@1`` -> ``greedy_pass_at_1``, no parentheses."""
    name = name.replace("@", "_at_")
    return _BAD_METRIC_CHARS.sub("_", name)


def log_metric_rows(client, run_id: str, rows: Iterable[Mapping[str, Any]], after_step: int = -1,
                    logged: Mapping[str, Mapping[int, float]] | None = None) -> int:
    """Log training rows with ``step > after_step`` through ``log_batch``, skipping every
    (key, step) already in ``logged`` (key -> {step: value}); returns the last step seen."""
    from mlflow.entities import Metric

    logged = logged or {}
    batch: list[Metric] = []
    last = after_step
    now_ms = int(time.time() * 1000)
    for row in sorted(rows, key=lambda r: r["global_step"]):
        step = int(row["global_step"])
        if step <= after_step:
            continue
        stamp = row.get(STEP_TIME_KEY)  # the trainer's time of the step, else now
        timestamp_ms = int(round(float(stamp) * 1000)) if stamp is not None else now_ms
        for key, value in row.items():
            if key in NOT_METRICS:
                continue
            name = metric_name(key)
            if step in logged.get(name, {}):
                continue
            batch.append(Metric(name, float(value), timestamp_ms, step))
            if len(batch) == MAX_BATCH:
                client.log_batch(run_id, metrics=batch)
                batch = []
        last = max(last, step)
    if batch:
        client.log_batch(run_id, metrics=batch)
    return last


def logged_metrics(client, run_id: str, keys: Iterable[str]) -> dict[str, dict[int, float]]:
    """What the run holds for each training metric: key -> {step: value} (read back from MLflow)."""
    return {name: {m.step: m.value for m in client.get_metric_history(run_id, name)}
            for name in sorted({metric_name(k) for k in keys if k not in NOT_METRICS})}


def _row_keys(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {k for row in rows for k in row if k not in NOT_METRICS}


def rewound(rows: list[Mapping[str, Any]], logged: Mapping[str, Mapping[int, float]]) -> bool:
    """True when the run holds a training value the file no longer has: a step past the file's
    end, or a step whose row is now different (MLflow cannot delete or replace metrics)."""
    in_file: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in NOT_METRICS:
                in_file.setdefault(metric_name(key), {})[int(row["global_step"])] = float(value)
    return any(step not in in_file.get(name, {}) or not _same(in_file[name][step], value)
               for name, steps in logged.items() for step, value in steps.items())


def _same(in_file: float, logged: float) -> bool:
    """The file's value is the one the run holds: a NaN equals a NaN (MLflow keeps NaN), and an
    infinity equals the largest float of its sign (MLflow's SQL store keeps an infinity as that)."""
    if math.isinf(in_file) and abs(logged) in (math.inf, sys.float_info.max):
        return math.copysign(1.0, in_file) == math.copysign(1.0, logged)
    return in_file == logged or (math.isnan(in_file) and math.isnan(logged))


def sync_metric_rows(client, run_id: str, rows: list[Mapping[str, Any]], uri: str) -> int:
    """Log the rows' (key, step) pairs the run does not hold yet (read back under the store
    lock, so parallel loggers never log one twice); returns the last step."""
    with store_lock(uri):
        logged = logged_metrics(client, run_id, _row_keys(rows))
        return log_metric_rows(client, run_id, rows, -1, logged)
