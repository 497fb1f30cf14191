"""The selected checkpoint's Δ corrected for selection: inference on the winner of K checkpoints.

``rlexp decide`` reports the checkpoint with the largest Δ of the K pre-registered ones. Its raw
Δ is biased upwards (the winner's curse): the largest of K noisy estimates overstates its own
true effect, by about +0.7 pp for K = 3 checkpoints of one run at N = 1000 and 12% discordance.

The correction is the conditional inference of Andrews, Kitagawa & McCloskey (2024), "Inference on
Winners", Quarterly Journal of Economics 139(1):305-358. With X the K estimates, approximately
N(μ, Σ), and the winner k̂ = argmax X, write each other estimate as X_j = Z_j + c_j X_k̂ with
c_j = Σ_jk̂ / Σ_k̂k̂ (Z independent of X_k̂). Given Z, "k̂ wins" is an interval [L, U] for X_k̂:

    (1 − c_j) X_k̂ ≥ Z_j  for every j ≠ k̂   (a lower bound where c_j < 1, an upper one where c_j > 1)

so, conditionally on the selection and Z, X_k̂ is normal with mean μ_k̂ and variance Σ_k̂k̂ truncated to
[L, U]. The estimate μ̂ solves F(X_k̂; μ̂) = 1/2, F that truncated normal's CDF: it is
**median-unbiased** conditionally on the winner (hence unconditionally), and the equal-tailed
interval [μ_lo, μ_hi] with F(X_k̂; μ_lo) = 1 − α/2, F(X_k̂; μ_hi) = α/2 covers μ_k̂ with probability
1 − α conditionally, hence unconditionally. The interval is wide when the winner barely won
(X_k̂ close to L): that is the price of not knowing which checkpoint is really best.

Σ is estimated from the K paired outcome vectors themselves (the per-problem differences
d_k = y_new,k − y_base against one baseline on the same problems): Σ_jk = cov(d_j, d_k) / n.
tests/test_selection.py checks the median bias and the coverage by simulation under the model of
``rlexp sop calibrate`` (binary outcomes, correlated checkpoints).

Pure; numpy and scipy are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

METHOD = "Andrews, Kitagawa & McCloskey (2024) conditional inference on the winner (median-unbiased)"
_LOW_T, _HIGH_T = -400.0, 60.0   # search range of (μ − X_k̂) / sd: beyond, Δ would pass ±100 pp
_BISECTIONS = 80


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


def _solve(x: Any, sd: Any, low: Any, high: Any, q: float) -> Any:
    """μ with F(x; μ) = q (F decreases in μ), by bisection on (μ − x) / sd, elementwise."""
    import numpy as np

    lo = np.full(np.shape(x), _LOW_T)
    hi = np.full(np.shape(x), _HIGH_T)
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        above = _truncated_cdf(x, x + mid * sd, sd, low, high) > q  # μ too small
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return x + (lo + hi) / 2 * sd


def winner_inference(estimates: Any, cov: Any, confidence: float = 0.95, winner: Any = None,
                     step: float = 0.0) -> dict[str, Any]:
    """Conditional median-unbiased estimate and equal-tailed interval of the winner's mean.

    ``estimates``: (..., K); ``cov``: (..., K, K), the estimates' covariance; ``winner``: the index
    selected (default argmax; the caller's tie-break when given); ``step``: the lattice step of the
    differences X_k̂ − X_j (1/n for accuracies on n problems), for a continuity correction: ties go to
    the first index (as ``decide``'s role order and ``argmax``), so on the lattice "k̂ wins" is
    X_k̂ − X_j ≥ 0 for j after k̂ and ≥ step for j before it, i.e. X_k̂ − X_j > ∓step/2 in the normal
    approximation (without it a tie puts X_k̂ on its own truncation point and the interval
    collapses). Returns arrays of shape (...):
    ``winner``, ``raw``, ``estimate``, ``low``, ``high`` (in the units of ``estimates``); NaN where
    the winner's variance is 0.
    """
    import numpy as np

    x = np.asarray(estimates, dtype=float)
    sigma = np.asarray(cov, dtype=float)
    if x.shape[-1] < 1 or sigma.shape != x.shape + x.shape[-1:]:
        raise ValueError(f"estimates (..., K) and cov (..., K, K) do not match: {x.shape}, {sigma.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
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
    alpha = 1.0 - confidence
    estimate = _solve(xw, sd, lower, upper, 0.5)
    low = _solve(xw, sd, lower, upper, 1.0 - alpha / 2)
    high = _solve(xw, sd, lower, upper, alpha / 2)
    nan = np.full(xw.shape, np.nan)
    return {"winner": win, "raw": xw, "estimate": np.where(ok, estimate, nan), "low": np.where(ok, low, nan),
            "high": np.where(ok, high, nan), "lower_bound": lower, "upper_bound": upper}


def difference_covariance(y_base: Sequence[int], y_news: Sequence[Sequence[int]]) -> Any:
    """Covariance (K, K) of the K paired Δ estimates, proportions: cov(d_j, d_k) / n with
    d_k = y_new,k − y_base per problem (population covariance, as the CLT SE of :mod:`rlexp.stats`)."""
    import numpy as np

    base = np.asarray(y_base, dtype=float)
    d = np.asarray(y_news, dtype=float) - base[None, :]
    n = base.shape[0]
    centred = d - d.mean(axis=1, keepdims=True)
    return centred @ centred.T / (n * n)


def adjusted_winner(y_base: Sequence[int], y_news: Sequence[Sequence[int]], winner: int, *,
                    confidence: float = 0.95) -> WinnerEstimate:
    """The selection-adjusted Δ of checkpoint ``winner`` among the K whose outcomes are ``y_news``,
    all against the baseline outcomes ``y_base`` on the same problems (same order), in pp."""
    import numpy as np

    base = np.asarray(y_base, dtype=float)
    news = np.asarray(y_news, dtype=float)
    if news.ndim != 2 or news.shape[1] != base.shape[0] or base.shape[0] == 0:
        raise ValueError("y_news must be K outcome vectors as long as y_base")
    x = (news - base[None, :]).mean(axis=1)
    res = winner_inference(x, difference_covariance(base, news), confidence, winner=winner, step=1.0 / base.shape[0])
    raw = 100.0 * float(res["raw"])
    if not np.isfinite(res["estimate"]):
        return WinnerEstimate(winner, len(x), raw, None, None, confidence)
    def clip(v: Any) -> float:
        return float(min(100.0, max(-100.0, 100.0 * float(v))))

    return WinnerEstimate(winner, len(x), raw, clip(res["estimate"]), (clip(res["low"]), clip(res["high"])),
                          confidence)
