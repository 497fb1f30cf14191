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
