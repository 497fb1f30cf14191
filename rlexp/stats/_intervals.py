"""Closed-form intervals: Newcombe's hybrid score interval of a paired difference, the CLT standard
error, and Wilson's interval of one proportion."""

from __future__ import annotations

import math
import numbers
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from rlexp.stats._common import (
    ConfidenceInterval,
)
from rlexp.stats._counts import PairedCounts

if TYPE_CHECKING:
    pass


def newcombe_paired_ci_arrays(n11: Any, b: Any, c: Any, n00: Any, confidence: float = 0.95) -> tuple[Any, Any]:
    """Newcombe's hybrid score interval of ``delta = acc_new - acc_base`` for arrays of paired tables.

    Method 10 of Newcombe (1998, Statistics in Medicine 17:2635-2650): the Wilson score limits
    ``(l1, u1)`` of the new model's accuracy ``p1 = (n11 + c)/n`` and ``(l2, u2)`` of the
    baseline's ``p2 = (n11 + b)/n`` are combined with the correlation of the two outcomes,

        low  = delta - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        high = delta + sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)

    where ``phi = A / sqrt(product of the four margins)`` with ``A = n11 n00 - b c`` shrunk by
    ``n/2`` towards zero when positive (to 0 when ``0 <= A <= n/2``), and ``phi = 0`` when a margin is
    empty. Unlike the bootstrap it needs no resampling, and its coverage stays near nominal with a
    handful of discordant pairs (sop/README.md, "Confidence intervals with few discordant pairs").
    Proportions in, proportions out (arrays of the broadcast shape).

    Examples
    --------
    >>> low, high = newcombe_paired_ci_arrays(36, 2, 12, 0)   # Newcombe (1998), Table II, example (a)
    >>> round(float(low), 4), round(float(high), 4)
    (0.0569, 0.3404)
    """
    import numpy as np
    from scipy.special import ndtri

    n11, b, c, n00 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (n11, b, c, n00)))
    n = n11 + b + c + n00
    if np.any(n <= 0) or min(float(x.min(initial=0.0)) for x in (n11, b, c, n00)) < 0:
        raise ValueError("every table needs non-negative counts and at least one pair")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    z = float(ndtri(0.5 + confidence / 2))

    def wilson(successes: Any) -> tuple[Any, Any, Any]:
        p = successes / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return p, centre - half, centre + half

    p1, l1, u1 = wilson(n11 + c)
    p2, l2, u2 = wilson(n11 + b)
    margins = (n11 + c) * (b + n00) * (n11 + b) * (c + n00)
    a = n11 * n00 - b * c
    a = np.where(a > n / 2, a - n / 2, np.where(a >= 0, 0.0, a))
    phi = np.divide(a, np.sqrt(margins), out=np.zeros_like(a), where=margins > 0)
    delta = p1 - p2
    low = delta - np.sqrt(np.maximum(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = delta + np.sqrt(np.maximum(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return np.maximum(low, -1.0), np.minimum(high, 1.0)


def newcombe_paired_ci(counts: PairedCounts, confidence: float = 0.95) -> ConfidenceInterval:
    """Newcombe's hybrid score interval of ``delta`` (proportions) for one paired table
    (:func:`newcombe_paired_ci_arrays`).

    Examples
    --------
    >>> ci = newcombe_paired_ci(PairedCounts(n11=18, b=2, c=12, n00=18))  # Newcombe (1998), Table II
    >>> round(ci.low, 4), round(ci.high, 4)
    (0.0562, 0.329)
    """
    low, high = newcombe_paired_ci_arrays(counts.n11, counts.b, counts.c, counts.n00, confidence)
    return ConfidenceInterval(float(low), float(high))


def clt_se_pp(b: int, c: int, n: int) -> float:
    """CLT standard error of the paired delta, in pp: ``sqrt(((b + c)/n - delta^2) / n)``.

    Examples
    --------
    >>> round(clt_se_pp(61, 57, 1000), 3)
    1.086
    """
    return 100.0 * _clt_se(b, c, n)


def _clt_se(b: int, c: int, n: int) -> float:
    delta = (c - b) / n
    return math.sqrt(max(0.0, ((b + c) / n - delta * delta) / n))


def wilson_ci(successes: int, n: int, confidence: float = 0.95) -> ConfidenceInterval:
    """Wilson score interval for a proportion ``successes / n``.

    Equal to statsmodels' ``proportion_confint(method="wilson")`` and scipy's
    ``binomtest(k, n).proportion_ci(method="wilson")``.

    Examples
    --------
    >>> lo, hi = wilson_ci(734, 1000)
    >>> round(lo, 4), round(hi, 4)
    (0.7058, 0.7605)
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
        raise ValueError("n must be positive")
    if isinstance(successes, bool) or not isinstance(successes, numbers.Integral) or not 0 <= successes <= n:
        raise ValueError(f"successes must be an integer in [0, n], got {successes!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return ConfidenceInterval(max(0.0, centre - half), min(1.0, centre + half))
