"""Paired statistics for two models scored 0/1 on the same problems (SOP §11.24 §1).

Everything here works on counts: with paired 0/1 outcomes, the per-problem difference
``y_new - y_base`` takes three values (-1, 0, +1), so the whole sample is described by
``b`` (base right, new wrong), ``c`` (base wrong, new right) and ``n``. That makes the
paired bootstrap cheap: resampling n problems with replacement is the same as drawing the
counts of the three values from Multinomial(n, (b/n, 1 - (b+c)/n, c/n)). We draw that
multinomial as two vectorised binomials (the number of discordant draws m ~ Bin(n, (b+c)/n),
then the wins among them ~ Bin(m, c/(b+c))), which is exactly how a multinomial factorises;
10,000 resamples take about a millisecond (benchmarks/bench_bootstrap.py).

numpy, scipy and statsmodels are imported inside the functions that need them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Literal

BootstrapMethod = Literal["percentile", "bca"]


@dataclass(frozen=True)
class PairedCounts:
    """The 2x2 paired table: n11 both right, b base-only right, c new-only right, n00 both wrong."""

    n11: int
    b: int
    c: int
    n00: int

    @property
    def n(self) -> int:
        return self.n11 + self.b + self.c + self.n00


def paired_counts(y_base: Sequence[int], y_new: Sequence[int]) -> PairedCounts:
    if len(y_base) != len(y_new):
        raise ValueError(f"paired outcomes differ in length: {len(y_base)} vs {len(y_new)}")
    n11 = b = c = n00 = 0
    for yb, yn in zip(y_base, y_new, strict=True):
        if yb and yn:
            n11 += 1
        elif yb:
            b += 1
        elif yn:
            c += 1
        else:
            n00 += 1
    return PairedCounts(n11, b, c, n00)


# --------------------------------------------------------------------------- single proportions


def wilson_ci(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (statsmodels ``proportion_confint(method="wilson")``)."""
    if n <= 0:
        raise ValueError("n must be positive")
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(successes, n, alpha=1.0 - confidence, method="wilson")
    return float(lo), float(hi)


# --------------------------------------------------------------------------- McNemar


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p (binomial test of b vs c at 1/2), via statsmodels."""
    if b + c == 0:
        return 1.0
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar([[0, b], [c, 0]], exact=True).pvalue)


def mcnemar_midp(b: int, c: int) -> float:
    """Mid-p McNemar (Fagerland, Lydersen & Laake 2013): 2 * [P(X <= k) - P(X = k) / 2], k = min(b, c).

    Less conservative than the exact test, with type-I error close to nominal.
    """
    n = b + c
    if n == 0:
        return 1.0
    from scipy.stats import binom

    k = min(b, c)
    return float(min(1.0, 2.0 * binom.cdf(k, n, 0.5) - binom.pmf(k, n, 0.5)))


# --------------------------------------------------------------------------- bootstrap


def bootstrap_differences(b: int, c: int, n: int, resamples: int, rng: Any) -> Any:
    """``resamples`` draws of (c* - b*) for a paired bootstrap of n problems (int64 array).

    Equal in distribution to resampling problem indices with replacement and summing
    ``y_new - y_base``: (b*, n - b* - c*, c*) ~ Multinomial(n, (b/n, ., c/n)), drawn as
    m = b* + c* ~ Bin(n, (b+c)/n) and c* | m ~ Bin(m, c/(b+c)).
    """
    import numpy as np

    if b + c == 0:
        return np.zeros(resamples, dtype=np.int64)
    m = rng.binomial(n, (b + c) / n, size=resamples)
    wins = rng.binomial(m, c / (b + c))
    return 2 * wins - m


@dataclass(frozen=True)
class BootstrapCI:
    ci_pp: tuple[float, float]
    method: BootstrapMethod
    confidence: float
    resamples: int
    seed: int
    se_pp: float  # standard deviation of the bootstrap distribution


def bootstrap_delta_ci(b: int, c: int, n: int, *, resamples: int = 10_000, seed: int = 0,
                       confidence: float = 0.95, method: BootstrapMethod = "percentile") -> BootstrapCI:
    """Seeded paired bootstrap CI of delta = acc_new - acc_base, in percentage points.

    ``percentile``: the alpha/2 and 1 - alpha/2 quantiles of the resampled deltas.
    ``bca``: bias-corrected and accelerated (Efron 1987), with the same conventions as
    ``scipy.stats.bootstrap``: z0 from the mid-rank of delta-hat among the resamples,
    acceleration from the leave-one-problem-out jackknife (three distinct values, weighted by
    their counts).
    """
    import numpy as np

    if n <= 0:
        raise ValueError("n must be positive")
    rng = np.random.default_rng(seed)
    diffs = bootstrap_differences(b, c, n, resamples, rng)
    alpha = 1.0 - confidence
    if method == "percentile":
        levels = (alpha / 2, 1 - alpha / 2)
    elif method == "bca":
        levels = _bca_levels(b, c, n, diffs, alpha)
    else:
        raise ValueError(f"unknown bootstrap method {method!r}")
    lo, hi = np.quantile(diffs, levels)
    return BootstrapCI((100.0 * float(lo) / n, 100.0 * float(hi) / n), method, confidence, resamples, seed,
                       100.0 * float(np.std(diffs, ddof=1)) / n)


def _bca_levels(b: int, c: int, n: int, diffs: Any, alpha: float) -> tuple[float, float]:
    import numpy as np

    normal = NormalDist()
    theta = c - b  # in units of 1/n, like diffs
    below = np.count_nonzero(diffs < theta)
    at_or_below = np.count_nonzero(diffs <= theta)
    share = (below + at_or_below) / (2 * len(diffs))
    if share <= 0.0 or share >= 1.0:  # degenerate bootstrap distribution: percentile is all we can say
        return alpha / 2, 1 - alpha / 2
    z0 = normal.inv_cdf(share)
    # jackknife: leaving out one problem with difference d gives (theta - d) / (n - 1)
    total = c - b
    values = np.array([(total + 1) / (n - 1), total / (n - 1), (total - 1) / (n - 1)])  # drop a -1, 0, +1
    weights = np.array([b, n - b - c, c], dtype=float)
    mean = float(np.sum(weights * values) / n)
    dev = mean - values
    num = float(np.sum(weights * dev**3))
    den = 6.0 * float(np.sum(weights * dev**2)) ** 1.5
    accel = num / den if den > 0 else 0.0
    levels = []
    for z in (normal.inv_cdf(alpha / 2), normal.inv_cdf(1 - alpha / 2)):
        levels.append(normal.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z))))
    return levels[0], levels[1]


def clt_se_pp(b: int, c: int, n: int) -> float:
    """CLT standard error of the paired delta, in pp: sqrt(((b + c)/n - delta^2) / n)."""
    delta = (c - b) / n
    return 100.0 * math.sqrt(max(0.0, ((b + c) / n - delta * delta) / n))


# --------------------------------------------------------------------------- the canonical comparison


@dataclass(frozen=True)
class PairedComparison:
    """The SOP's canonical report of one paired comparison (new vs baseline)."""

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
    ci_pp: tuple[float, float]         # paired bootstrap
    ci_method: BootstrapMethod
    confidence: float
    resamples: int
    seed: int
    se_pp: float                       # CLT
    bootstrap_se_pp: float
    discordance: float                 # (b + c) / n
    mde_pp: float | None               # minimal detectable effect at 80% power, alpha 0.05 (rlexp.core.power)
    power_at_3pp: float | None         # power to detect rlexp.core.power.WIN_THRESHOLD_PP (+3pp) at this n and discordance

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("acc_base_ci", "acc_new_ci", "ci_pp"):
            out[key] = list(out[key])
        return out


def compare_counts(counts: PairedCounts, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
                   method: BootstrapMethod = "percentile") -> PairedComparison:
    n, b, c = counts.n, counts.b, counts.c
    if n <= 0:
        raise ValueError("no paired problems")
    correct_base = counts.n11 + b
    correct_new = counts.n11 + c
    boot = bootstrap_delta_ci(b, c, n, resamples=resamples, seed=seed, confidence=confidence, method=method)
    discordance = (b + c) / n
    mde, power3 = _power(n, discordance)
    return PairedComparison(
        n=n, correct_base=correct_base, correct_new=correct_new,
        acc_base=correct_base / n, acc_new=correct_new / n,
        acc_base_ci=wilson_ci(correct_base, n, confidence), acc_new_ci=wilson_ci(correct_new, n, confidence),
        delta_pp=100.0 * (c - b) / n, b=b, c=c,
        mcnemar_p=mcnemar_exact_p(b, c), mcnemar_midp=mcnemar_midp(b, c),
        ci_pp=boot.ci_pp, ci_method=method, confidence=confidence, resamples=resamples, seed=seed,
        se_pp=clt_se_pp(b, c, n), bootstrap_se_pp=boot.se_pp, discordance=discordance,
        mde_pp=mde, power_at_3pp=power3,
    )


def paired_comparison(y_base: Sequence[int], y_new: Sequence[int], **kwargs: Any) -> PairedComparison:
    """Compare two aligned 0/1 outcome sequences (same problems, same order)."""
    return compare_counts(paired_counts(y_base, y_new), **kwargs)


def _power(n: int, discordance: float) -> tuple[float | None, float | None]:
    """MDE and power at the win threshold from rlexp.core.power (Miller 2024); None where the
    discordance makes them undefined. The threshold is ``rlexp.core.power.WIN_THRESHOLD_PP``, the
    default that tests/test_sop.py keeps equal to the SOP's ``gate_1b.min_delta_pp``."""
    from rlexp.core.power import WIN_THRESHOLD_PP, mde_pp, power_at

    if discordance <= 0.0:
        return None, None
    return float(mde_pp(n, discordance)), float(power_at(WIN_THRESHOLD_PP, n, discordance))


# --------------------------------------------------------------------------- several samples per problem


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) from n samples with c correct, in the stable product form
    1 - prod_{i=n-c+1}^{n} (1 - k/i), which avoids the huge binomial coefficients of 1 - C(n-c,k)/C(n,k)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(samples: Sequence[tuple[int, int]], k: int) -> float:
    """Mean unbiased pass@k over problems given (n, c) per problem."""
    if not samples:
        raise ValueError("no problems")
    return sum(pass_at_k(n, c, k) for n, c in samples) / len(samples)


@dataclass(frozen=True)
class ClusteredMean:
    mean: float
    se: float           # cluster-robust (problems are clusters)
    se_naive: float     # as if every sample were independent
    n_clusters: int
    n_samples: int


def cluster_robust_mean(values: Sequence[float], clusters: Sequence[Any]) -> ClusteredMean:
    """Mean of per-sample scores with a cluster-robust SE (Miller 2024 §2.2; CR0, no small-sample
    correction): SE = sqrt(sum_g (sum_{i in g} (x_i - mean))^2) / N. Samples of the same problem
    are correlated, so treating them as independent understates the SE."""
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
