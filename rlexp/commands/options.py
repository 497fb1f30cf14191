"""What several verbs share, the bounds of numeric options: Click's ``FloatRange`` lets NaN through
(every comparison with NaN is false) and a plain ``int`` option takes any size or sign; :func:`finite`
and :data:`SEED` make every numeric option finite and bounded, refused as a one-line usage error
(exit 2) before the command runs.
"""


from __future__ import annotations

import math
from collections.abc import Callable

import typer

SEED_MAX = 2**32 - 1  # numpy's legacy seeding and torch.manual_seed both take 0 .. 2**32-1
SEED = {"min": 0, "max": SEED_MAX}


def finite(low: float, high: float) -> Callable[[float | None], float | None]:
    """A callback: the value must be a finite number from ``low`` to ``high`` (NaN and inf refused)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return value
        if isinstance(value, list | tuple):
            return type(value)(check(v) for v in value)
        if not math.isfinite(value) or not low <= value <= high:
            raise typer.BadParameter(f"must be a finite number from {low:g} to {high:g}, got {value!r:.24}")
        return value

    return check
