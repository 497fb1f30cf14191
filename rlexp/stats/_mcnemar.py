"""McNemar's test: the binomial test of the discordant problems (exact and mid-p)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


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
