"""Paired statistics for two models scored 0/1 on the same problems.

The conventions are those of :mod:`scipy.stats`: a test returns a frozen result object with
``statistic`` and ``pvalue``, its ``confidence_interval(confidence_level=0.95, ...)`` method
returns a :class:`ConfidenceInterval` ``(low, high)``, one-sided tests take
``alternative="greater"`` or ``"less"``, and random resampling takes ``rng`` (``None``, an
integer seed or a :class:`numpy.random.Generator`). Effects are proportions
(``delta = 0.03`` is three percentage points); percentage points appear only in
:class:`PairedComparison`, the canonical report whose ``*_pp`` fields the decision files store.

With paired 0/1 outcomes the per-problem difference ``y_new - y_base`` takes three values
(-1, 0, +1), so the whole sample is described by ``b`` (base right, new wrong), ``c`` (base
wrong, new right) and ``n``:

- the exact McNemar test is the binomial test of ``c`` among the ``b + c`` discordant problems
  at probability 1/2;
- the paired bootstrap (resampling the n problems with replacement) is the same as drawing the
  counts of the three values from Multinomial(n, (b/n, 1 - (b+c)/n, c/n)). We draw that
  multinomial as two vectorised binomials (the number of discordant draws
  m ~ Bin(n, (b+c)/n), then the wins among them ~ Bin(m, c/(b+c))), which is exactly how a
  multinomial factorises; 10,000 resamples take about a millisecond
  (benchmarks/bench_bootstrap.py).

The main entry points:

- :func:`paired_test` -- exact (or mid-p) McNemar test on two aligned 0/1 sequences, returning
  a :class:`PairedTestResult` with ``delta``, ``b``, ``c``, ``n``, ``statistic``, ``pvalue`` and a
  paired-bootstrap ``confidence_interval`` (percentile, basic or BCa);
- :func:`pair` -- align two mappings ``problem id -> 0/1`` into a :class:`PairedOutcomes`,
  refusing different problem sets unless ``intersect=True`` (and then reporting what was dropped);
- :func:`adjust_pvalues` -- Bonferroni, Holm, Benjamini-Hochberg and Benjamini-Yekutieli
  adjusted p-values for a family of tests;
- :func:`paired_comparison` / :func:`compare_counts` -- the canonical report of one comparison;
- :func:`wilson_ci`, :func:`pass_at_k`, :func:`cluster_robust_mean` for single accuracies.

Only numpy and scipy are needed, and both are imported inside the functions that use them, so
importing this module is cheap.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "ConfidenceInterval",
    "PairedTestResult",
    "paired_test",
    "PairedOutcomes",
    "PairingError",
    "pair",
    "adjust_pvalues",
    "PairedCounts",
    "paired_counts",
    "mcnemar_exact_p",
    "mcnemar_midp",
    "bootstrap_differences",
    "BootstrapCI",
    "bootstrap_delta_ci",
    "bootstrap_delta_ci_many",
    "newcombe_paired_ci",
    "newcombe_paired_ci_arrays",
    "clt_se_pp",
    "wilson_ci",
    "PairedComparison",
    "compare_counts",
    "paired_comparison",
    "pass_at_k",
    "mean_pass_at_k",
    "ClusteredMean",
    "cluster_robust_mean",
]

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


# --------------------------------------------------------------------------- validation


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


# --------------------------------------------------------------------------- the 2x2 table


@dataclass(frozen=True)
class PairedCounts:
    """The 2x2 paired table: n11 both right, b base-only right, c new-only right, n00 both wrong.

    Examples
    --------
    >>> t = PairedCounts(n11=1, b=1, c=2, n00=1)
    >>> t.n
    5
    """

    n11: int
    b: int
    c: int
    n00: int

    @property
    def n(self) -> int:
        return self.n11 + self.b + self.c + self.n00


def paired_counts(y_base: ArrayLike, y_new: ArrayLike) -> PairedCounts:
    """Count the 2x2 paired table of two aligned 0/1 outcome sequences.

    Parameters
    ----------
    y_base, y_new : array_like of 0/1
        Outcomes of the baseline and the new model on the same problems, in the same order.
        ``bool`` and the numbers 0 and 1 are accepted; anything else is a ValueError.

    Returns
    -------
    PairedCounts

    Raises
    ------
    ValueError
        On a value other than 0/1, sequences of different lengths, or empty input.

    Examples
    --------
    >>> paired_counts([1, 1, 0, 0, 1], [1, 0, 1, 0, 1])
    PairedCounts(n11=2, b=1, c=1, n00=1)
    >>> paired_counts([0.4, 2, 0], [1, 0, 5])
    Traceback (most recent call last):
    ...
    ValueError: y_base must contain only 0 and 1 (or False and True): 2 value(s) are not, the first is 0.4 at index 0
    """
    import numpy as np

    base, new = _aligned(y_base, y_new)
    both = int(np.count_nonzero(base & new))
    b = int(np.count_nonzero(base & (1 - new)))
    c = int(np.count_nonzero((1 - base) & new))
    return PairedCounts(both, b, c, len(base) - both - b - c)


# --------------------------------------------------------------------------- McNemar


def _mcnemar_pvalue(b: int, c: int, alternative: str, method: str) -> float:
    """p of the binomial test of c wins among b + c discordant problems at 1/2."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binom, binomtest

    m = b + c
    if method == "exact":
        return float(binomtest(c, m, 0.5, alternative=alternative).pvalue)
    if alternative == "two-sided":  # Fagerland, Lydersen & Laake (2013): 2 [P(X <= k) - P(X = k) / 2], k = min(b, c)
        k = min(b, c)
        return float(min(1.0, 2.0 * binom.cdf(k, m, 0.5) - binom.pmf(k, m, 0.5)))
    half_point = 0.5 * binom.pmf(c, m, 0.5)
    if alternative == "greater":
        return float(binom.sf(c, m, 0.5) + half_point)
    return float(binom.cdf(c, m, 0.5) - half_point)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p: the binomial test of ``b`` against ``c`` at probability 1/2.

    Equal to statsmodels' ``mcnemar([[., b], [c, .]], exact=True).pvalue`` and to
    ``scipy.stats.binomtest(c, b + c).pvalue``; 1.0 when there is no discordant problem.

    Examples
    --------
    >>> round(mcnemar_exact_p(44, 74), 4)
    0.0073
    >>> mcnemar_exact_p(0, 0)
    1.0
    """
    return _mcnemar_pvalue(b, c, "two-sided", "exact")


def mcnemar_midp(b: int, c: int) -> float:
    """Two-sided mid-p McNemar (Fagerland, Lydersen & Laake 2013).

    ``2 [P(X <= k) - P(X = k) / 2]`` with ``k = min(b, c)`` and ``X ~ Bin(b + c, 1/2)``:
    less conservative than the exact test, with a type-I error close to nominal.

    Examples
    --------
    >>> round(mcnemar_midp(44, 74), 4)
    0.0057
    """
    return _mcnemar_pvalue(b, c, "two-sided", "midp")


# --------------------------------------------------------------------------- bootstrap


def bootstrap_differences(b: int, c: int, n: int, resamples: int, rng: Any) -> NDArray[np.int64]:
    """``resamples`` draws of ``c* - b*`` for a paired bootstrap of ``n`` problems (int64 array).

    Equal in distribution to resampling problem indices with replacement and summing
    ``y_new - y_base``: ``(b*, n - b* - c*, c*) ~ Multinomial(n, (b/n, ., c/n))``, drawn as
    ``m = b* + c* ~ Bin(n, (b+c)/n)`` and ``c* | m ~ Bin(m, c/(b+c))``.

    Examples
    --------
    >>> import numpy as np
    >>> d = bootstrap_differences(61, 57, 1000, 10_000, np.random.default_rng(0))
    >>> d.shape, bool(abs(d.mean() - (57 - 61)) < 1)
    ((10000,), True)
    """
    import numpy as np

    if b + c == 0:
        return np.zeros(resamples, dtype=np.int64)
    m = rng.binomial(n, (b + c) / n, size=resamples)
    wins = rng.binomial(m, c / (b + c))
    return 2 * wins - m


def _bootstrap(b: int, c: int, n: int, *, confidence_level: float, method: str, n_resamples: int, rng: Any,
               alternative: str) -> tuple[float, float, float]:
    """The paired-bootstrap interval of delta and the bootstrap standard deviation, all in units of
    1/n (one problem): callers divide by n for proportions, or scale by 100/n for percentage points."""
    import numpy as np

    _check_counts(b, c, n)
    method = _check_choice(method, "method", _CI_METHODS)
    alternative = _check_choice(alternative, "alternative", _ALTERNATIVES)
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    generator = np.random.default_rng(rng)  # a Generator is used as is; an int seeds a new one
    diffs = bootstrap_differences(b, c, n, int(n_resamples), generator)
    return _interval_from_differences(b, c, n, diffs, confidence_level=confidence_level, method=method,
                                      alternative=alternative)


def _interval_from_differences(b: int, c: int, n: int, diffs: Any, *, confidence_level: float, method: str,
                               alternative: str) -> tuple[float, float, float]:
    """:func:`_bootstrap`'s interval and spread from its resampled differences ``diffs``."""
    import numpy as np

    alpha = 1.0 - confidence_level
    # the quantile levels of the two ends; None: that end is the bound of delta itself (one-sided)
    ends: list[float | None] = {"two-sided": [alpha / 2, 1 - alpha / 2], "greater": [alpha, None],
                                "less": [None, 1 - alpha]}[alternative]
    if method == "bca":
        ends = [None if level is None else _bca_level(b, c, n, diffs, level) for level in ends]
    bounds = []
    for level, bound in zip(ends, (-n, n), strict=True):
        if level is None:
            bounds.append(float(bound))
        elif method == "basic":  # reverse percentile: 2 theta - q(1 - level), kept inside [-1, 1]
            bounds.append(float(np.clip(2 * (c - b) - np.quantile(diffs, 1 - level), -n, n)))
        else:
            bounds.append(float(np.quantile(diffs, level)))
    spread = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0
    return bounds[0], bounds[1], spread


def _bca_level(b: int, c: int, n: int, diffs: Any, level: float) -> float:
    """The BCa-adjusted quantile level for ``level`` (Efron 1987), with the conventions of
    ``scipy.stats.bootstrap``: z0 from the mid-rank of delta-hat among the resamples, acceleration
    from the leave-one-problem-out jackknife (three distinct values, weighted by their counts)."""
    import numpy as np

    normal = NormalDist()
    theta = c - b  # in units of 1/n, like diffs
    below = np.count_nonzero(diffs < theta)
    at_or_below = np.count_nonzero(diffs <= theta)
    share = (below + at_or_below) / (2 * len(diffs))
    if share <= 0.0 or share >= 1.0 or n < 2:  # degenerate distribution or no jackknife: percentile
        return level
    z0 = normal.inv_cdf(share)
    # jackknife: leaving out one problem with difference d gives (theta - d) / (n - 1)
    values = np.array([theta + 1, theta, theta - 1]) / (n - 1)  # drop a -1, 0, +1
    weights = np.array([b, n - b - c, c], dtype=float)
    mean = float(np.sum(weights * values) / n)
    dev = mean - values
    num = float(np.sum(weights * dev**3))
    den = 6.0 * float(np.sum(weights * dev**2)) ** 1.5
    accel = num / den if den > 0 else 0.0
    z = normal.inv_cdf(level)
    return normal.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z)))


@dataclass(frozen=True)
class BootstrapCI:
    """A paired-bootstrap interval in percentage points (see :func:`bootstrap_delta_ci`)."""

    ci_pp: tuple[float, float]
    method: BootstrapMethod
    confidence: float
    resamples: int
    seed: int
    se_pp: float  # standard deviation of the bootstrap distribution


def bootstrap_delta_ci(b: int, c: int, n: int, *, resamples: int = 10_000, seed: int = 0,
                       confidence: float = 0.95, method: BootstrapMethod = "percentile") -> BootstrapCI:
    """Seeded two-sided paired-bootstrap CI of ``delta = acc_new - acc_base``, in percentage points.

    The same draws as ``PairedTestResult.confidence_interval(rng=seed)`` (see
    :meth:`PairedTestResult.confidence_interval` for the methods), scaled to percentage points,
    with the standard deviation of the bootstrap distribution.

    Examples
    --------
    >>> ci = bootstrap_delta_ci(61, 57, 1000, seed=0)
    >>> ci.ci_pp, ci.method
    ((-2.6, 1.7), 'percentile')
    """
    low, high, spread = _bootstrap(b, c, n, confidence_level=confidence, method=method, n_resamples=resamples,
                                   rng=seed, alternative="two-sided")
    return BootstrapCI((100.0 * low / n, 100.0 * high / n), method, confidence, resamples, seed, 100.0 * spread / n)


def bootstrap_delta_ci_many(pairs: Sequence[tuple[int, int]], n: int, *, resamples: int = 10_000, seed: int = 0,
                            confidence: float = 0.95, method: BootstrapMethod = "percentile"
                            ) -> dict[tuple[int, int], tuple[float, float]]:
    """``bootstrap_delta_ci(b, c, n, ...).ci_pp`` for many ``(b, c)`` pairs at once, equal pair by pair.

    Under a fixed seed the first draw of :func:`bootstrap_differences` (``m* ~ Bin(n, (b+c)/n)``)
    depends on ``b + c`` only, so pairs with the same ``b + c`` draw it once and restart the
    generator from the state after it for their own second draw. This halves the work of a
    simulation that judges thousands of tables the way ``rlexp decide`` does.

    Examples
    --------
    >>> many = bootstrap_delta_ci_many([(61, 57), (57, 61)], 1000, seed=0)
    >>> many[(61, 57)] == bootstrap_delta_ci(61, 57, 1000, seed=0).ci_pp
    True
    """
    import numpy as np

    method = _check_choice(method, "method", _CI_METHODS)  # type: ignore[assignment]
    by_total: dict[int, list[int]] = {}
    for b, c in {(int(b), int(c)) for b, c in pairs}:
        _check_counts(b, c, n)
        by_total.setdefault(b + c, []).append(c)
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for total, wins_list in by_total.items():
        generator = np.random.default_rng(seed)
        if total > 0:
            m_star = generator.binomial(n, total / n, size=resamples)
            after_first = generator.bit_generator.state
        for c in sorted(wins_list):
            b = total - c
            if total == 0:
                diffs = np.zeros(resamples, dtype=np.int64)
            else:
                generator.bit_generator.state = after_first
                diffs = 2 * generator.binomial(m_star, c / total) - m_star
            low, high, _ = _interval_from_differences(b, c, n, diffs, confidence_level=confidence, method=method,
                                                      alternative="two-sided")
            out[(b, c)] = (100.0 * low / n, 100.0 * high / n)
    return out


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


# --------------------------------------------------------------------------- the paired test


@dataclass(frozen=True)
class PairedTestResult:
    """Result of :func:`paired_test`.

    Attributes
    ----------
    statistic : int
        ``c``, the number of discordant problems the new model gets right; under the null
        hypothesis ``c ~ Binomial(b + c, 1/2)``.
    pvalue : float
        The McNemar p-value for ``alternative``.
    delta : float
        ``acc_new - acc_base = (c - b) / n``, a proportion.
    b, c : int
        Problems only the baseline gets right, and only the new model gets right.
    n : int
        Paired problems.
    correct_base, correct_new : int
        Problems each model gets right.
    alternative : {'two-sided', 'greater', 'less'}
        The alternative hypothesis about ``delta``.
    method : {'exact', 'midp'}
        Exact binomial p-value, or its mid-p version.
    """

    statistic: int
    pvalue: float
    delta: float
    b: int
    c: int
    n: int
    correct_base: int
    correct_new: int
    alternative: Alternative = "two-sided"
    method: TestMethod = "exact"

    @property
    def accuracy_base(self) -> float:
        """``correct_base / n``."""
        return self.correct_base / self.n

    @property
    def accuracy_new(self) -> float:
        """``correct_new / n``."""
        return self.correct_new / self.n

    @property
    def discordance(self) -> float:
        """``(b + c) / n``: the share of problems on which the two models disagree."""
        return (self.b + self.c) / self.n

    @property
    def standard_error(self) -> float:
        """CLT standard error of ``delta``: ``sqrt(((b + c)/n - delta^2) / n)``."""
        return _clt_se(self.b, self.c, self.n)

    def confidence_interval(self, confidence_level: float = 0.95, method: CIMethod = "percentile",
                            n_resamples: int = 10_000, rng: Any = None) -> ConfidenceInterval:
        """Paired-bootstrap confidence interval of ``delta``, in proportions.

        Resamples the ``n`` problems with replacement (drawn exactly, through the counts).
        For a one-sided ``alternative`` the interval is one-sided, as in :mod:`scipy.stats`:
        ``'greater'`` gives ``(low, 1.0)`` and ``'less'`` gives ``(-1.0, high)`` (delta lies in
        [-1, 1]).

        Parameters
        ----------
        confidence_level : float, default 0.95
        method : {'percentile', 'basic', 'bca'}, default 'percentile'
            As in ``scipy.stats.bootstrap`` (``'BCa'`` is accepted too): quantiles of the
            resampled deltas; the reverse-percentile ("basic") interval; or bias-corrected and
            accelerated (Efron 1987: z0 from the mid-rank of delta among the resamples,
            acceleration from the leave-one-problem-out jackknife). BCa falls back to the
            percentile interval when every resample is on one side of delta.
        n_resamples : int, default 10_000
        rng : None, int or numpy.random.Generator
            ``None`` draws fresh entropy (not reproducible); an integer seeds
            ``numpy.random.default_rng``.

        Returns
        -------
        ConfidenceInterval

        Examples
        --------
        >>> res = paired_test([1] * 677 + [1] * 61 + [0] * 57 + [0] * 205,
        ...                   [1] * 677 + [0] * 61 + [1] * 57 + [0] * 205)
        >>> ci = res.confidence_interval(rng=0)
        >>> round(ci.low, 3), round(ci.high, 3)
        (-0.026, 0.017)
        >>> ci = res.confidence_interval(confidence_level=0.9, method="bca", rng=0)
        >>> ci.low < res.delta < ci.high
        True
        """
        low, high, _ = _bootstrap(self.b, self.c, self.n, confidence_level=confidence_level, method=method,
                                  n_resamples=n_resamples, rng=rng, alternative=self.alternative)
        return ConfidenceInterval(low / self.n, high / self.n)


def _result(counts: PairedCounts, alternative: str, method: str) -> PairedTestResult:
    alternative = _check_choice(alternative, "alternative", _ALTERNATIVES)
    method = _check_choice(method, "method", _TEST_METHODS)
    b, c, n = counts.b, counts.c, counts.n
    return PairedTestResult(
        statistic=c, pvalue=_mcnemar_pvalue(b, c, alternative, method), delta=(c - b) / n, b=b, c=c, n=n,
        correct_base=counts.n11 + b, correct_new=counts.n11 + c,
        alternative=alternative, method=method,  # type: ignore[arg-type]
    )


def paired_test(y_base: ArrayLike, y_new: ArrayLike, *, alternative: Alternative = "two-sided",
                method: TestMethod = "exact") -> PairedTestResult:
    """McNemar test of two models scored 0/1 on the same problems.

    The exact test is the binomial test of ``c`` (new right, baseline wrong) among the
    ``b + c`` discordant problems at probability 1/2; the concordant problems carry no
    information about the difference. ``pvalue`` is 1.0 when no problem is discordant.

    Parameters
    ----------
    y_base, y_new : array_like of 0/1
        Outcomes of the baseline and the new model on the same problems, in the same order
        (use :func:`pair` to align outcomes keyed by problem id). ``bool`` and the numbers
        0 and 1 are accepted.
    alternative : {'two-sided', 'greater', 'less'}, default 'two-sided'
        About ``delta = acc_new - acc_base``: ``'greater'`` tests whether the new model is
        more accurate, ``'less'`` whether it is less accurate.
    method : {'exact', 'midp'}, default 'exact'
        The exact binomial p-value (equal to statsmodels' ``mcnemar(exact=True)`` two-sided),
        or the mid-p value (Fagerland, Lydersen & Laake 2013), which subtracts half the
        probability of the observed count and has a type-I error closer to nominal.

    Returns
    -------
    PairedTestResult
        With ``statistic`` (= ``c``), ``pvalue``, ``delta`` (a proportion), ``b``, ``c``, ``n``
        and ``confidence_interval(confidence_level=0.95, method='percentile', n_resamples=10_000,
        rng=None)``.

    Raises
    ------
    ValueError
        On a value other than 0/1 (such as 0.4 or 2), sequences of different lengths, empty
        input, or an unknown ``alternative`` / ``method``.

    Examples
    --------
    Two models on 1,000 problems: 738 and 734 right, 61 problems only the baseline gets
    right and 57 only the new model does.

    >>> y_base = [1] * 677 + [1] * 61 + [0] * 57 + [0] * 205
    >>> y_new = [1] * 677 + [0] * 61 + [1] * 57 + [0] * 205
    >>> res = paired_test(y_base, y_new)
    >>> res.b, res.c, res.n, res.delta
    (61, 57, 1000, -0.004)
    >>> round(res.pvalue, 4)
    0.7826
    >>> ci = res.confidence_interval(confidence_level=0.95, rng=0)
    >>> round(ci.low, 3), round(ci.high, 3)
    (-0.026, 0.017)

    A one-sided test that the new model is better:

    >>> round(paired_test(y_base, y_new, alternative="greater").pvalue, 4)
    0.6773

    Outcomes must be 0/1:

    >>> paired_test([0.4, 2, 0], [1, 0, 5])
    Traceback (most recent call last):
    ...
    ValueError: y_base must contain only 0 and 1 (or False and True): 2 value(s) are not, the first is 0.4 at index 0
    """
    return _result(paired_counts(y_base, y_new), alternative, method)


# --------------------------------------------------------------------------- pairing by problem id


class PairingError(ValueError):
    """Two outcome mappings cannot be paired: different problem sets (without ``intersect``), or
    none in common. ``base_only`` and ``new_only`` list the problem ids of one side only."""

    def __init__(self, message: str, base_only: tuple[Hashable, ...], new_only: tuple[Hashable, ...],
                 common: int) -> None:
        super().__init__(message)
        self.base_only = base_only
        self.new_only = new_only
        self.common = common


@dataclass(frozen=True, eq=False)
class PairedOutcomes:
    """Outcomes of two models aligned by problem id (the result of :func:`pair`).

    Attributes
    ----------
    ids : tuple
        The paired problem ids, in the order of the baseline mapping.
    y_base, y_new : numpy.ndarray of int64
        The aligned 0/1 outcomes (read-only).
    dropped_base_only, dropped_new_only : tuple
        Problem ids left out by ``intersect=True``: in the baseline only, in the new mapping only.
    """

    ids: tuple[Hashable, ...]
    y_base: NDArray[np.int64]
    y_new: NDArray[np.int64]
    dropped_base_only: tuple[Hashable, ...] = ()
    dropped_new_only: tuple[Hashable, ...] = ()

    @property
    def n(self) -> int:
        """The number of paired problems."""
        return len(self.ids)

    @property
    def dropped(self) -> int:
        """How many problem ids ``intersect=True`` left out, both sides together."""
        return len(self.dropped_base_only) + len(self.dropped_new_only)

    def test(self, *, alternative: Alternative = "two-sided", method: TestMethod = "exact") -> PairedTestResult:
        """:func:`paired_test` on the aligned outcomes.

        Examples
        --------
        >>> pair({"p1": 1, "p2": 0, "p3": 1}, {"p3": 1, "p2": 1, "p1": 1}).test().c
        1
        """
        return paired_test(self.y_base, self.y_new, alternative=alternative, method=method)


def _mapping_outcomes(outcomes: Any, name: str) -> dict[Hashable, int]:
    if not isinstance(outcomes, Mapping):
        raise TypeError(f"{name} must be a mapping problem id -> 0/1, got {type(outcomes).__name__}")
    bad = [key for key, value in outcomes.items() if not _is_01(value)]
    if bad:
        raise ValueError(f"{name} must map every problem id to 0 or 1 (or False and True): {len(bad)} do not, "
                         f"the first is {name}[{bad[0]!r}] = {outcomes[bad[0]]!r}")
    return {key: int(value) for key, value in outcomes.items()}


def pair(outcomes_base: Mapping[Hashable, Any], outcomes_new: Mapping[Hashable, Any], *,
         intersect: bool = False) -> PairedOutcomes:
    """Align two models' outcomes by problem id.

    A paired comparison is only valid on the same problems: mappings with different key sets
    are refused unless ``intersect=True``, which keeps the common ids and reports the others
    in ``dropped_base_only`` / ``dropped_new_only``.

    Parameters
    ----------
    outcomes_base, outcomes_new : Mapping
        Problem id -> outcome (0/1 or False/True).
    intersect : bool, default False
        Pair the problems both mappings have instead of refusing different sets.

    Returns
    -------
    PairedOutcomes
        ``ids`` in the baseline's order, the aligned ``y_base`` and ``y_new`` arrays, and what
        was dropped.

    Raises
    ------
    PairingError
        (a ValueError) When the key sets differ and ``intersect`` is False, or no id is common.
    ValueError
        When an outcome is not 0/1.
    TypeError
        When an argument is not a mapping.

    Examples
    --------
    >>> p = pair({"p1": 1, "p2": 0, "p3": 1}, {"p3": 0, "p1": 1, "p2": True})
    >>> p.ids, p.y_base.tolist(), p.y_new.tolist()
    (('p1', 'p2', 'p3'), [1, 0, 1], [1, 1, 0])
    >>> pair({"p1": 1, "p2": 0}, {"p1": 1, "p3": 1})
    Traceback (most recent call last):
    ...
    rlexp.stats.PairingError: problem ids differ: 1 only in outcomes_base, 1 only in outcomes_new (e.g. 'p2'); pass intersect=True to pair the 1 common problem(s)
    >>> p = pair({"p1": 1, "p2": 0}, {"p1": 1, "p3": 1}, intersect=True)
    >>> p.ids, p.dropped_base_only, p.dropped_new_only
    (('p1',), ('p2',), ('p3',))
    """
    import numpy as np

    base = _mapping_outcomes(outcomes_base, "outcomes_base")
    new = _mapping_outcomes(outcomes_new, "outcomes_new")
    base_only = tuple(k for k in base if k not in new)
    new_only = tuple(k for k in new if k not in base)
    ids = tuple(k for k in base if k in new)
    if (base_only or new_only) and not intersect:
        example = (base_only or new_only)[0]
        raise PairingError(f"problem ids differ: {len(base_only)} only in outcomes_base, {len(new_only)} only in "
                           f"outcomes_new (e.g. {example!r}); pass intersect=True to pair the {len(ids)} common "
                           "problem(s)", base_only, new_only, len(ids))
    if not ids:
        raise PairingError("no problem id in common", base_only, new_only, 0)
    y_base = np.fromiter((base[k] for k in ids), dtype=np.int64, count=len(ids))
    y_new = np.fromiter((new[k] for k in ids), dtype=np.int64, count=len(ids))
    y_base.flags.writeable = False
    y_new.flags.writeable = False
    return PairedOutcomes(ids, y_base, y_new, base_only, new_only)


# --------------------------------------------------------------------------- multiple testing


def adjust_pvalues(pvalues: ArrayLike, method: AdjustMethod = "holm", *, axis: int = -1) -> NDArray[np.float64]:
    """Adjusted p-values for a family of tests.

    Parameters
    ----------
    pvalues : array_like of float in [0, 1]
        The family's p-values (along ``axis``; other axes are independent families).
    method : {'holm', 'bonferroni', 'bh', 'by'}, default 'holm'
        ``'bonferroni'``: ``min(1, m p)``. ``'holm'``: Holm's step-down (controls the
        family-wise error rate, uniformly more powerful than Bonferroni). ``'bh'``:
        Benjamini-Hochberg step-up (false discovery rate, independent or positively dependent
        tests). ``'by'``: Benjamini-Yekutieli (false discovery rate under any dependence).
        statsmodels' names ``'fdr_bh'`` and ``'fdr_by'`` are accepted too.
    axis : int, default -1

    Returns
    -------
    numpy.ndarray
        Adjusted p-values, the shape of ``pvalues``. Reject hypothesis i at level alpha when
        ``adjusted[i] <= alpha``. Equal to statsmodels' ``multipletests(p, method=...)[1]``.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03])
    array([0.03, 0.06, 0.06])
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bonferroni")
    array([0.03, 0.12, 0.09])
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="bh")
    array([0.03, 0.04, 0.04])
    """
    import numpy as np

    key = _check_choice(method, "method", tuple(_ADJUST_METHODS))
    kind = _ADJUST_METHODS[key]
    p = np.asarray(pvalues, dtype=float)
    if p.ndim == 0:
        raise ValueError("pvalues must be a sequence (one p-value per test), got a scalar")
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues must all be in [0, 1] (no NaN)")
    p = np.moveaxis(p, axis, -1)
    m = p.shape[-1]
    if m == 0:
        return np.moveaxis(p.copy(), -1, axis)
    if kind == "bonferroni":
        return np.moveaxis(np.minimum(1.0, p * m), -1, axis)
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    rank = np.arange(1, m + 1)
    if kind == "holm":  # step-down: max over j <= i of (m - j + 1) p_(j)
        adjusted = np.maximum.accumulate(ranked * (m - rank + 1), axis=-1)
    else:  # step-up: min over j >= i of m / j * p_(j) (times sum 1/k for BY)
        scale = m / rank * (np.sum(1.0 / rank) if kind == "by" else 1.0)
        adjusted = np.minimum.accumulate((ranked * scale)[..., ::-1], axis=-1)[..., ::-1]
    adjusted = np.minimum(1.0, adjusted)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return np.moveaxis(out, -1, axis)


# --------------------------------------------------------------------------- single proportions


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


# --------------------------------------------------------------------------- the canonical comparison


@dataclass(frozen=True)
class PairedComparison:
    """The canonical report of one paired comparison (new vs baseline), in percentage points.

    The fields are those stored in ``decision.json`` and printed by ``rlexp compare``.
    """

    n: int
    correct_base: int
    correct_new: int
    acc_base: float
    acc_new: float
    acc_base_ci: tuple[float, float]   # Wilson
    acc_new_ci: tuple[float, float]
    delta_pp: float
    b: int                             # base right, new wrong
    c: int                             # base wrong, new right
    mcnemar_p: float                   # exact, two-sided
    mcnemar_midp: float
    ci_pp: tuple[float, float]         # paired bootstrap, or Newcombe's hybrid score interval
    ci_method: ComparisonCIMethod
    confidence: float
    resamples: int
    seed: int
    se_pp: float                       # CLT
    bootstrap_se_pp: float
    discordance: float                 # (b + c) / n
    mde_pp: float | None               # minimal detectable effect at 80% power of the exact McNemar test, alpha 0.05
    power_at_3pp: float | None         # exact McNemar power at rlexp.core.power.WIN_THRESHOLD_PP (+3pp), this n and discordance

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("acc_base_ci", "acc_new_ci", "ci_pp"):
            out[key] = list(out[key])
        return out


def compare_counts(counts: PairedCounts, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
                   method: ComparisonCIMethod = "percentile") -> PairedComparison:
    """The canonical report from a 2x2 paired table (see :func:`paired_comparison`).

    ``method`` picks the interval ``ci_pp``: a paired bootstrap (``percentile``, ``basic``,
    ``bca``) or ``newcombe`` (:func:`newcombe_paired_ci`, no resampling). The bootstrap standard
    deviation ``bootstrap_se_pp`` comes from the seeded bootstrap in every case.

    Examples
    --------
    >>> cmp = compare_counts(PairedCounts(n11=677, b=61, c=57, n00=205))
    >>> cmp.delta_pp, cmp.b, cmp.c, cmp.ci_pp
    (-0.4, 61, 57, (-2.6, 1.7))
    """
    if counts.n <= 0:
        raise ValueError("no paired problems")
    test = _result(counts, "two-sided", "exact")
    n, b, c = test.n, test.b, test.c
    method = _check_choice(method, "method", COMPARISON_CI_METHODS)  # type: ignore[assignment]
    low, high, spread = _bootstrap(b, c, n, confidence_level=confidence,
                                   method="percentile" if method == "newcombe" else method, n_resamples=resamples,
                                   rng=seed, alternative="two-sided")
    if method == "newcombe":
        interval = newcombe_paired_ci(counts, confidence)
        low, high = n * interval.low, n * interval.high
    mde, power3 = _power(n, test.discordance)
    return PairedComparison(
        n=n, correct_base=test.correct_base, correct_new=test.correct_new,
        acc_base=test.accuracy_base, acc_new=test.accuracy_new,
        acc_base_ci=tuple(wilson_ci(test.correct_base, n, confidence)),
        acc_new_ci=tuple(wilson_ci(test.correct_new, n, confidence)),
        delta_pp=100.0 * (c - b) / n, b=b, c=c,
        mcnemar_p=test.pvalue, mcnemar_midp=_mcnemar_pvalue(b, c, "two-sided", "midp"),
        ci_pp=(100.0 * low / n, 100.0 * high / n), ci_method=method, confidence=confidence,
        resamples=resamples, seed=seed, se_pp=100.0 * test.standard_error, bootstrap_se_pp=100.0 * spread / n,
        discordance=test.discordance, mde_pp=mde, power_at_3pp=power3,
    )


def paired_comparison(y_base: ArrayLike, y_new: ArrayLike, **kwargs: Any) -> PairedComparison:
    """The canonical report of two aligned 0/1 outcome sequences (same problems, same order).

    Accuracies with Wilson intervals, ``delta_pp``, ``b``, ``c``, the exact McNemar p and its
    mid-p, a seeded paired-bootstrap interval (``resamples``, ``seed``, ``confidence``,
    ``method`` as keyword arguments), the CLT and bootstrap standard errors, and the minimal
    detectable effect and power at the win threshold of the exact McNemar test
    (:mod:`rlexp.core.gate_power`).

    Examples
    --------
    >>> cmp = paired_comparison([1, 1, 1, 0, 0, 1, 0, 1], [1, 1, 0, 1, 1, 1, 1, 1], seed=0)
    >>> cmp.b, cmp.c, cmp.delta_pp, round(cmp.mcnemar_p, 3)
    (1, 3, 25.0, 0.625)
    """
    return compare_counts(paired_counts(y_base, y_new), **kwargs)


def _power(n: int, discordance: float) -> tuple[float | None, float | None]:
    """MDE (80% power) and power at the win threshold of the exact two-sided McNemar test at α = 0.05,
    the test the SOP runs (:func:`rlexp.core.gate_power.mcnemar_mde`, :func:`~rlexp.core.gate_power.mcnemar_power`;
    the z approximation of :mod:`rlexp.core.power` overstates the power by about 2 points at N = 1000);
    None where the discordance makes them undefined (no effect within it reaches 80%; a threshold
    beyond it). The threshold is ``rlexp.core.power.WIN_THRESHOLD_PP``, the default that
    tests/test_sop.py keeps equal to the SOP's ``gate_1b.min_delta_pp``."""
    from rlexp.core.gate_power import mcnemar_mde, mcnemar_power
    from rlexp.core.power import WIN_THRESHOLD_PP

    if discordance <= 0.0:
        return None, None
    power = mcnemar_power(WIN_THRESHOLD_PP, n, discordance) if 100.0 * discordance >= WIN_THRESHOLD_PP else None
    return mcnemar_mde(n, discordance), power


# --------------------------------------------------------------------------- several samples per problem


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) from ``n`` samples with ``c`` correct.

    Computed in the stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which avoids the
    huge binomial coefficients of ``1 - C(n-c, k) / C(n, k)``.

    Examples
    --------
    >>> round(pass_at_k(8, 3, 1), 4)
    0.375
    >>> round(pass_at_k(8, 3, 4), 4)
    0.9286
    """
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(samples: Sequence[tuple[int, int]], k: int) -> float:
    """Mean unbiased pass@k over problems given ``(n, c)`` per problem.

    Examples
    --------
    >>> mean_pass_at_k([(8, 0), (8, 8)], 4)
    0.5
    """
    if not samples:
        raise ValueError("no problems")
    return sum(pass_at_k(n, c, k) for n, c in samples) / len(samples)


@dataclass(frozen=True)
class ClusteredMean:
    """Result of :func:`cluster_robust_mean`."""

    mean: float
    se: float           # cluster-robust (problems are clusters)
    se_naive: float     # as if every sample were independent
    n_clusters: int
    n_samples: int

    @property
    def se_cr1(self) -> float:
        """CR1: ``se`` times ``sqrt(G / (G - 1))`` (the Stata/statsmodels small-sample factor
        ``G/(G−1)·(N−1)/(N−K)`` with K = 1 regressor, the mean); to be used with G − 1 degrees of
        freedom (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust Inference").
        NaN with a single cluster."""
        g = self.n_clusters
        return self.se * math.sqrt(g / (g - 1)) if g > 1 else math.nan


def cluster_robust_mean(values: ArrayLike, clusters: Sequence[Any]) -> ClusteredMean:
    """Mean of per-sample scores with a cluster-robust standard error.

    Samples of the same problem are correlated, so treating them as independent understates
    the SE. CR0 (no small-sample correction), Miller (2024):
    ``SE = sqrt(sum_g (sum_{i in g} (x_i - mean))^2) / N``; equal to statsmodels'
    ``OLS(x, 1).fit(cov_type="cluster", cov_kwds={"groups": g, "use_correction": False})``.

    Examples
    --------
    >>> r = cluster_robust_mean([1, 1, 0, 0], ["p1", "p1", "p2", "p2"])
    >>> r.mean, round(r.se, 4), r.se_naive, r.n_clusters
    (0.5, 0.3536, 0.25, 2)
    """
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) != len(clusters) or len(x) == 0:
        raise ValueError("values and clusters must be non-empty and of equal length")
    _, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    mean = float(x.mean())
    sums = np.bincount(codes, weights=x - mean)
    se = float(math.sqrt(float(np.sum(sums**2))) / len(x))
    se_naive = float(x.std(ddof=0) / math.sqrt(len(x)))
    return ClusteredMean(mean, se, se_naive, int(codes.max()) + 1, len(x))
