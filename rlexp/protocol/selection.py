"""The selected checkpoint's Δ corrected for selection: inference on the winner of K checkpoints.

``rlexp decide`` reports the checkpoint with the largest Δ of the K pre-registered ones. Its raw
Δ is biased upwards (the winner's curse): the largest of K noisy estimates overstates its own
true effect, by about +0.7 pp for K = 3 checkpoints of one run at N = 1000 and 12% discordance.

The correction is the hybrid inference of Andrews, Kitagawa & McCloskey (2024), "Inference on
Winners", Quarterly Journal of Economics 139(1):305-358, which they recommend. With X the K
estimates, approximately N(μ, Σ), and the winner k̂ = argmax X, write each other estimate as
X_j = Z_j + c_j X_k̂ with c_j = Σ_jk̂ / Σ_k̂k̂ (Z independent of X_k̂). Given Z, "k̂ wins" is an
interval [L, U] for X_k̂:

    (1 − c_j) X_k̂ ≥ Z_j  for every j ≠ k̂   (a lower bound where c_j < 1, an upper one where c_j > 1)

so, conditionally on the selection and Z, X_k̂ is normal with mean μ_k̂ and variance Σ_k̂k̂ truncated to
[L, U]. The *conditional* inference inverts that truncated normal alone: median-unbiased, but when
the winner barely won (X_k̂ close to L) its estimate and lower bound run far below every
checkpoint's own interval. The *hybrid* first takes the level-(1 − β) projection interval
X_k̂ ± c_β σ_k̂ (c_β the 1 − β quantile of max_j |ξ_j| / σ_j, ξ ~ N(0, Σ): simultaneous over all K,
valid whatever was selected) and conditions also on μ_k̂ lying in it, i.e. truncates to
[max(L, μ − c_β σ), min(U, μ + c_β σ)]. With F^H that CDF, the estimate solves F^H(X_k̂; μ̂) = 1/2
(median bias at most β/2) and the interval is [μ_lo, μ_hi] with F^H(X_k̂; μ_lo) = 1 − a,
F^H(X_k̂; μ_hi) = a, a = (α − β) / (2(1 − β)): it lies inside the projection interval and covers μ_k̂
with probability at least 1 − α. β = α/10, the authors' choice. β = 0 gives the conditional inference.

Σ is estimated from the K paired outcome vectors themselves (the per-problem differences
d_k = y_new,k − y_base against one baseline on the same problems): Σ_jk = cov(d_j, d_k) / n.
tests/test_selection.py checks both against an independent implementation (scipy's truncated normal
and multivariate normal CDF) and by simulation under the model of ``rlexp sop calibrate``;
benchmarks/bench_selection.py tabulates bias, RMSE, coverage and width of raw, conditional and hybrid.

Pure; numpy and scipy are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

METHOD = "Andrews, Kitagawa & McCloskey (2024) hybrid inference on the winner (β = α/10)"
_LOW_T, _HIGH_T = -400.0, 60.0   # search range of (μ − X_k̂) / sd: beyond, Δ would pass ±100 pp
_BISECTIONS = 80
DRAWS = 20_000   # normal vectors behind the projection critical value c_β


@dataclass(frozen=True)
class WinnerEstimate:
    """The winner's raw Δ and its selection-adjusted estimate and interval, in pp."""

    winner: int
    k: int
    raw_pp: float
    adjusted_pp: float | None
    ci_pp: tuple[float, float] | None
    confidence: float
    method: str = METHOD

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci_pp"] = list(self.ci_pp) if self.ci_pp is not None else None
        return out


def _truncated_cdf(x: Any, mu: Any, sd: Any, low: Any, high: Any) -> Any:
    """P(Y ≤ x | low ≤ Y ≤ high), Y ~ N(mu, sd²), stable in both tails (log Φ)."""
    import numpy as np
    from scipy.special import log_ndtr

    a, b, t = (low - mu) / sd, (high - mu) / sd, (x - mu) / sd
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # upper side (a > 0): with S the survival function, F = (S(a) − S(t)) / (S(a) − S(b))
        sa, st, sb = log_ndtr(-a), log_ndtr(-t), log_ndtr(-b)
        upper = -np.expm1(st - sa) / -np.expm1(sb - sa)
        # otherwise: F = (Φ(t) − Φ(a)) / (Φ(b) − Φ(a))
        fa, ft, fb = log_ndtr(a), log_ndtr(t), log_ndtr(b)
        lower = (np.exp(ft - fb) - np.exp(fa - fb)) / -np.expm1(fa - fb)
    out = np.where(a > 0, upper, lower)
    return np.clip(np.nan_to_num(out, nan=0.5), 0.0, 1.0)


def _solve(x: Any, sd: Any, low: Any, high: Any, q: float, crit: Any) -> Any:
    """μ with F(x; μ) = q (F decreases in μ), by bisection on t = (μ − x) / sd, elementwise.

    F is the CDF of N(μ, sd²) truncated to [low, high] ∩ [μ − crit·sd, μ + crit·sd]: the selection
    event, and (hybrid) the event that μ lies in the projection interval, i.e. |x − μ| ≤ crit·sd.
    With a finite crit the search stays inside the projection interval t ∈ [−crit, crit], where F
    runs from 1 to 0; crit = ∞ is the conditional inference.
    """
    import numpy as np

    lo = np.maximum(np.full(np.shape(x), _LOW_T), -crit)
    hi = np.minimum(np.full(np.shape(x), _HIGH_T), crit)
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        mu = x + mid * sd
        above = _truncated_cdf(x, mu, sd, np.maximum(low, mu - crit * sd), np.minimum(high, mu + crit * sd)) > q
        lo = np.where(above, mid, lo)   # μ too small
        hi = np.where(above, hi, mid)
    return x + (lo + hi) / 2 * sd


def projection_critical_value(cov: Any, beta: float, *, draws: int = DRAWS) -> Any:
    """c_β of AKM's level-(1 − β) projection interval X_j ± c_β σ_j: the 1 − β quantile of
    max_j |ξ_j| / σ_j with ξ ~ N(0, Σ), simultaneous over all K estimates.

    ``cov``: (..., K, K). The quantile is taken over ``draws`` fixed pseudo-random normal vectors
    (seed 0, the same for every call, so a report is reproducible), and kept between its exact
    bounds: the one-estimate value Φ⁻¹(1 − β/2) and Bonferroni's Φ⁻¹(1 − β/(2K)).
    """
    import numpy as np
    from scipy.special import ndtri

    sigma = np.asarray(cov, dtype=float)
    k = sigma.shape[-1]
    single, bonferroni = float(ndtri(1 - beta / 2)), float(ndtri(1 - beta / (2 * k)))
    if k == 1:
        return np.full(sigma.shape[:-2], single)
    sd = np.sqrt(np.clip(np.diagonal(sigma, axis1=-2, axis2=-1), 0.0, None))
    safe = np.where(sd > 0, sd, 1.0)
    corr = sigma / safe[..., :, None] / safe[..., None, :]
    # a symmetric square root (eigen-decomposition) also handles singular Σ (identical checkpoints)
    vals, vecs = np.linalg.eigh(corr)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))[..., None, :]
    normals = np.random.default_rng(0).standard_normal((draws, k))
    # one quantile per distinct correlation matrix (a broadcast Σ is computed once)
    _, where = np.unique(corr.reshape(-1, k * k), axis=0, return_inverse=True)
    flat_root = root.reshape(-1, k, k)[np.unique(where.reshape(-1), return_index=True)[1]]
    out = np.empty(flat_root.shape[0])
    chunk = max(1, 4_000_000 // (draws * k))
    for i in range(0, flat_root.shape[0], chunk):
        xi = np.einsum("dk,bjk->bdj", normals, flat_root[i:i + chunk])
        out[i:i + chunk] = np.quantile(np.abs(xi).max(axis=-1), 1 - beta, axis=-1)
    return np.clip(out[where.reshape(-1)].reshape(sigma.shape[:-2]), single, bonferroni)


def winner_inference(estimates: Any, cov: Any, confidence: float = 0.95, winner: Any = None,
                     step: float = 0.0, *, beta: float | None = None, draws: int = DRAWS) -> dict[str, Any]:
    """Hybrid (default) or conditional estimate and equal-tailed interval of the winner's mean.

    ``estimates``: (..., K); ``cov``: (..., K, K), the estimates' covariance; ``winner``: the index
    selected (default argmax; the caller's tie-break when given); ``step``: the lattice step of the
    differences X_k̂ − X_j (1/n for accuracies on n problems), for a continuity correction: ties go to
    the first index (as ``decide``'s role order and ``argmax``), so on the lattice "k̂ wins" is
    X_k̂ − X_j ≥ 0 for j after k̂ and ≥ step for j before it, i.e. X_k̂ − X_j > ∓step/2 in the normal
    approximation (without it a tie puts X_k̂ on its own truncation point and the interval
    collapses). ``beta``: the projection level of the hybrid, α/10 when None (AKM's choice);
    0 gives the purely conditional inference. Returns arrays of shape (...):
    ``winner``, ``raw``, ``estimate``, ``low``, ``high`` (in the units of ``estimates``), the
    selection's truncation bounds and the projection half-width; NaN where the winner's variance is 0.
    """
    import numpy as np

    x = np.asarray(estimates, dtype=float)
    sigma = np.asarray(cov, dtype=float)
    if x.shape[-1] < 1 or sigma.shape != x.shape + x.shape[-1:]:
        raise ValueError(f"estimates (..., K) and cov (..., K, K) do not match: {x.shape}, {sigma.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    alpha = 1.0 - confidence
    beta = alpha / 10 if beta is None else float(beta)
    if not 0.0 <= beta < alpha:
        raise ValueError(f"beta must be in [0, alpha), got {beta!r}")
    k = x.shape[-1]
    win = np.argmax(x, axis=-1) if winner is None else np.broadcast_to(np.asarray(winner), x.shape[:-1])
    xw = np.take_along_axis(x, win[..., None], axis=-1)[..., 0]
    col = np.take_along_axis(sigma, win[..., None, None], axis=-1)[..., 0]   # Σ_{j k̂}, shape (..., K)
    var = np.take_along_axis(col, win[..., None], axis=-1)[..., 0]
    ok = var > 0
    safe_var = np.where(ok, var, 1.0)
    c = col / safe_var[..., None]
    z = x - c * xw[..., None]
    one_minus = 1.0 - c
    others = np.arange(k) != win[..., None]
    tol = 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = (z + np.where(np.arange(k) < win[..., None], step, -step) / 2.0) / one_minus
    lower = np.where(others & (one_minus > tol), bound, -np.inf).max(axis=-1)
    upper = np.where(others & (one_minus < -tol), bound, np.inf).min(axis=-1)
    # the observed winner lies in [L, U] by construction (up to rounding, and the caller's tie-break)
    lower = np.minimum(lower, xw)
    upper = np.maximum(upper, xw)
    sd = np.sqrt(safe_var)
    if beta > 0:
        crit = projection_critical_value(np.where(ok[..., None, None], sigma, np.eye(k)), beta, draws=draws)
        tail = (alpha - beta) / (2 * (1 - beta))   # the hybrid test's level (α − β)/(1 − β), split equally
    else:
        crit, tail = np.full(xw.shape, np.inf), alpha / 2
    estimate = _solve(xw, sd, lower, upper, 0.5, crit)
    low = _solve(xw, sd, lower, upper, 1.0 - tail, crit)
    high = _solve(xw, sd, lower, upper, tail, crit)
    nan = np.full(xw.shape, np.nan)
    return {"winner": win, "raw": xw, "estimate": np.where(ok, estimate, nan), "low": np.where(ok, low, nan),
            "high": np.where(ok, high, nan), "lower_bound": lower, "upper_bound": upper,
            "projection_half_width": np.where(ok, crit * sd, nan)}


def difference_covariance(y_base: Sequence[int], y_news: Sequence[Sequence[int]],
                          clusters: Sequence[Any] | None = None) -> Any:
    """Covariance (K, K) of the K paired Δ estimates, proportions: cov(d_j, d_k) / n with
    d_k = y_new,k − y_base per problem (population covariance, as the CLT SE of :mod:`rlexp.stats`).
    With ``clusters`` (each problem's cluster) the cluster-robust CR1 covariance: the centred
    differences summed within each cluster, their outer products summed over the G clusters, / n²,
    times G / (G − 1) (its diagonal is the squared SE of :func:`rlexp.stats.clustered_se`)."""
    import numpy as np

    base = np.asarray(y_base, dtype=float)
    d = np.asarray(y_news, dtype=float) - base[None, :]
    n = base.shape[0]
    centred = d - d.mean(axis=1, keepdims=True)
    if clusters is None:
        return centred @ centred.T / (n * n)
    _, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    g = int(codes.max()) + 1
    sums = np.zeros((d.shape[0], g))
    for k in range(d.shape[0]):
        sums[k] = np.bincount(codes, weights=centred[k], minlength=g)
    return sums @ sums.T / (n * n) * (g / (g - 1) if g > 1 else 1.0)


def adjusted_winner(y_base: Sequence[int], y_news: Sequence[Sequence[int]], winner: int, *,
                    confidence: float = 0.95, clusters: Sequence[Any] | None = None) -> WinnerEstimate:
    """The selection-adjusted Δ of checkpoint ``winner`` among the K whose outcomes are ``y_news``,
    all against the baseline outcomes ``y_base`` on the same problems (same order), in pp; with
    ``clusters``, on the cluster-robust covariance of the K Δs (:func:`difference_covariance`)."""
    import numpy as np

    base = np.asarray(y_base, dtype=float)
    news = np.asarray(y_news, dtype=float)
    if news.ndim != 2 or news.shape[1] != base.shape[0] or base.shape[0] == 0:
        raise ValueError("y_news must be K outcome vectors as long as y_base")
    x = (news - base[None, :]).mean(axis=1)
    res = winner_inference(x, difference_covariance(base, news, clusters), confidence, winner=winner,
                           step=1.0 / base.shape[0])
    raw = 100.0 * float(res["raw"])
    if not np.isfinite(res["estimate"]):
        return WinnerEstimate(winner, len(x), raw, None, None, confidence)
    def clip(v: Any) -> float:
        return float(min(100.0, max(-100.0, 100.0 * float(v))))

    return WinnerEstimate(winner, len(x), raw, clip(res["estimate"]), (clip(res["low"]), clip(res["high"])),
                          confidence)
