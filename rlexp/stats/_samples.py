"""Several samples per problem: unbiased pass@k and the cluster-robust mean."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


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
