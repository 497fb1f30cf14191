"""Small pure helpers on values: finite numbers and text digests (standard library only)."""

from __future__ import annotations

import hashlib
import math
from pathlib import PurePath
from typing import Any


def finite_number(value: Any) -> float | None:
    """A metric value as float, or None when it is not a finite real number (strings, NaN, bools)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# metrics.jsonl is strict JSON, which has no NaN or infinity: a non-finite metric value is kept
# there as one of these strings (the spelling of JavaScript and of Python's json module, and what
# ``rlexp ingest --json`` writes), and read back as the float it stands for.
NONFINITE_JSON: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_number(value: Any) -> Any:
    """``value`` as strict JSON holds it: a NaN or an infinity as "NaN", "Infinity", "-Infinity";
    anything else unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row with every non-finite value in its strict-JSON spelling (:func:`json_number`)."""
    return {k: json_number(v) for k, v in row.items()}


def metric_value(value: Any) -> float | None:
    """A metrics.jsonl value as a float (the NaN/inf spellings of :data:`NONFINITE_JSON` decoded),
    or None when it is not a number."""
    if isinstance(value, str):
        return NONFINITE_JSON.get(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def nonfinite_value(value: Any) -> float | None:
    """A trainer's NaN or infinity (a float, or text such as ``nan``, ``inf``, ``-Infinity``) as a
    float; None for anything else (finite numbers included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None if math.isfinite(value) else float(value)
    if isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(value.strip())
    return None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def jsonable(value: Any) -> Any:
    """``value`` with paths, tuples and other non-JSON leaves (YAML dates) as JSON types."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # YAML dates and the like
