"""Small pure helpers on values: finite numbers and text digests (standard library only)."""

from __future__ import annotations

import hashlib
import math
from typing import Any


def finite_number(value: Any) -> float | None:
    """A metric value as float, or None when it is not a finite real number (strings, NaN, bools)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
