"""Types, the confidence-interval result and the input checks shared by the paired statistics."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


Alternative = Literal["two-sided", "greater", "less"]
TestMethod = Literal["exact", "midp"]
CIMethod = Literal["percentile", "basic", "bca"]
BootstrapMethod = Literal["percentile", "basic", "bca"]
# The interval of a PairedComparison: a paired bootstrap, or Newcombe's hybrid score interval
ComparisonCIMethod = Literal["percentile", "basic", "bca", "newcombe"]
AdjustMethod = Literal["bonferroni", "holm", "bh", "by"]

_ALTERNATIVES = ("two-sided", "greater", "less")
_TEST_METHODS = ("exact", "midp")
_CI_METHODS = ("percentile", "basic", "bca")
COMPARISON_CI_METHODS = ("percentile", "basic", "bca", "newcombe")
_ADJUST_METHODS = {"bonferroni": "bonferroni", "holm": "holm", "bh": "bh", "fdr_bh": "bh", "by": "by",
                   "fdr_by": "by"}


class ConfidenceInterval(NamedTuple):
    """A confidence interval ``(low, high)``, as returned by :mod:`scipy.stats` results.

    Examples
    --------
    >>> ci = ConfidenceInterval(low=-0.026, high=0.017)
    >>> ci.low, ci.high
    (-0.026, 0.017)
    >>> low, high = ci
    >>> ci == (-0.026, 0.017)
    True
    """

    low: float
    high: float


def _is_01(value: Any) -> bool:
    return isinstance(value, numbers.Real) and value in (0, 1)  # NaN equals neither


def _as_binary(values: Any, name: str) -> NDArray[np.int64]:
    """``values`` as a 1-D int64 array of 0/1; ValueError naming ``name`` and the first bad value."""
    import numpy as np

    if isinstance(values, Mapping):
        raise ValueError(f"{name} is a mapping: align outcomes keyed by problem id with rlexp.stats.pair first")
    if isinstance(values, str | bytes):
        raise ValueError(f"{name} must be a sequence of 0/1 outcomes, got a string")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a one-dimensional sequence of 0/1 outcomes ({err})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one outcome per problem), got shape {arr.shape}")
    if arr.dtype == np.bool_:
        return arr.astype(np.int64)
    if arr.dtype.kind in "iuf":
        ok = (arr == 0) | (arr == 1)
        items = arr
    else:  # objects, strings, complex numbers: element by element, as given ([1, "1"] became two strings)
        items = arr if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
        ok = np.fromiter((_is_01(v) for v in items.tolist()), dtype=bool, count=len(items))
    if not ok.all():
        bad = np.flatnonzero(~ok)
        first = int(bad[0])
        raise ValueError(f"{name} must contain only 0 and 1 (or False and True): {len(bad)} value(s) are not, "
                         f"the first is {items.tolist()[first]!r} at index {first}")
    return arr.astype(np.int64)


def _aligned(y_base: Any, y_new: Any) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    base = _as_binary(y_base, "y_base")
    new = _as_binary(y_new, "y_new")
    if len(base) != len(new):
        raise ValueError(f"y_base and y_new differ in length ({len(base)} vs {len(new)}): paired outcomes must "
                         "be the same problems in the same order (rlexp.stats.pair aligns them by problem id)")
    if len(base) == 0:
        raise ValueError("y_base and y_new are empty: a paired test needs at least one problem")
    return base, new


def _check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    key = value.lower() if isinstance(value, str) else value
    if key not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return key


def _check_counts(b: int, c: int, n: int) -> None:
    for label, value in (("b", b), ("c", c), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{label} must be a non-negative integer, got {value!r}")
    if n < 1:
        raise ValueError("n must be positive")
    if b + c > n:
        raise ValueError(f"b + c = {b + c} discordant problems cannot exceed n = {n}")
