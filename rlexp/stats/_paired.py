"""The paired test of two aligned 0/1 outcome sequences and its result object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlexp.stats._common import (
    _ALTERNATIVES,
    _TEST_METHODS,
    Alternative,
    CIMethod,
    ConfidenceInterval,
    TestMethod,
    _check_choice,
)
from rlexp.stats._counts import PairedCounts, paired_counts
from rlexp.stats._intervals import _clt_se
from rlexp.stats._mcnemar import _mcnemar_pvalue
from rlexp.stats._resampling import _bootstrap

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


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
