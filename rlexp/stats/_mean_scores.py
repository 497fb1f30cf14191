"""Paired statistics of per-item scores beyond 0/1: the mean-score mode, clustered SE, Holm.

For two models scored on the same n items, with per-item mean scores (several epochs or samples
per item are averaged first, partial credit kept as it is): d_i = new_i − base_i, Δ = mean(d),
SE = sd(d)/√n, a paired t-test on d (df = n − 1, as ``scipy.stats.ttest_rel``), and the paired
bootstrap CI of Δ (items resampled with replacement). The cluster-robust SE treats items of one
cluster (a passage, a source document) as one unit. A family's p-values are adjusted with
:func:`rlexp.stats.adjust_pvalues`.
0/1 scores use :mod:`rlexp.stats` (McNemar, the counts bootstrap) instead.

numpy and scipy are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

from rlexp.stats._power import WIN_THRESHOLD_PP
from rlexp.stats._samples import cluster_robust_mean

_Z = NormalDist()


def mean_score_comparison(base_means: Sequence[float], new_means: Sequence[float], *, resamples: int = 10_000,
                          seed: int = 0, confidence: float = 0.95, method: str = "percentile") -> dict[str, Any]:
    """Paired comparison of per-item mean scores: Δ, SE = sd(d)/√n, paired t-test, paired bootstrap CI.

    Examples
    --------
    >>> r = mean_score_comparison([0.5, 0.25, 1.0, 0.0], [0.75, 0.5, 1.0, 0.25])
    >>> r["delta_pp"], r["t"], r["df"], r["ci_pp"]
    (18.75, 3.0, 3, [6.25, 25.0])
    """
    import numpy as np
    from scipy import stats as sps

    base = np.asarray(base_means, dtype=float)
    new = np.asarray(new_means, dtype=float)
    d = new - base
    n = len(d)
    if n < 2:
        raise ValueError(f"the mean-score mode needs at least 2 paired items, got {n}")
    delta = float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    if se > 0:
        t = delta / se
        p = float(2.0 * sps.t.sf(abs(t), df=n - 1))
    else:  # every item moved by the same amount: no sampling variability to test against
        t = math.inf if delta else 0.0
        p = 0.0 if delta else 1.0
    ci = paired_bootstrap_ci(d, resamples=resamples, seed=seed, confidence=confidence, method=method)
    unit = all(0.0 <= x <= 1.0 for x in np.concatenate([base, new]))
    z = _Z.inv_cdf(0.975) + _Z.inv_cdf(0.8)
    mde = z * se if se > 0 else None
    power3 = None
    if unit and se > 0:
        shift = (WIN_THRESHOLD_PP / 100.0) / se
        power3 = _Z.cdf(shift - _Z.inv_cdf(0.975)) + _Z.cdf(-shift - _Z.inv_cdf(0.975))
    scale = 100.0 if unit else 1.0
    return {
        "mode": "mean-score", "test": "paired t", "n": n,
        "mean_base": float(base.mean()), "mean_new": float(new.mean()),
        "delta": delta, "delta_pp": delta * 100.0 if unit else None,
        "sd_d": sd, "se": se, "se_pp": se * 100.0 if unit else None,
        "t": t if math.isfinite(t) else None, "df": n - 1, "p_value": p,
        "ci": [ci[0], ci[1]], "ci_pp": [ci[0] * scale, ci[1] * scale] if unit else None,
        "ci_method": method, "confidence": confidence, "resamples": resamples, "seed": seed,
        "items_improved": int((d > 0).sum()), "items_worse": int((d < 0).sum()),
        "mde": mde, "mde_pp": mde * 100.0 if (mde is not None and unit) else None,
        "power_at_3pp": power3,
    }


def paired_bootstrap_ci(d: Any, *, resamples: int, seed: int, confidence: float, method: str) -> tuple[float, float]:
    """CI of mean(d) by resampling items with replacement (the paired bootstrap). ``bca`` uses
    ``scipy.stats.bootstrap``; ``percentile`` and ``basic`` (the percentile interval reflected
    about the estimate) are computed here, in chunks (bounded memory).

    Examples
    --------
    >>> paired_bootstrap_ci([0.25, 0.25, 0.0, 0.25], resamples=1000, seed=0, confidence=0.95,
    ...                     method="percentile")
    (0.0625, 0.25)
    """
    import numpy as np

    d = np.asarray(d, dtype=float)
    alpha = 1.0 - confidence
    if float(d.std()) == 0.0:
        return float(d[0]), float(d[0])
    if method == "bca":
        from scipy import stats as sps

        res = sps.bootstrap((d,), np.mean, n_resamples=resamples, confidence_level=confidence, method="BCa",
                            rng=np.random.default_rng(seed))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    rng = np.random.default_rng(seed)
    n = len(d)
    chunk = max(1, 2_000_000 // n)
    means = []
    done = 0
    while done < resamples:
        size = min(chunk, resamples - done)
        means.append(d[rng.integers(0, n, size=(size, n))].mean(axis=1))
        done += size
    lo, hi = np.quantile(np.concatenate(means), (alpha / 2, 1 - alpha / 2))
    if method == "basic":
        estimate = float(d.mean())
        return 2 * estimate - float(hi), 2 * estimate - float(lo)
    return float(lo), float(hi)


# Below this many clusters ``compare --cluster`` warns. The CR1 t-test with G − 1 degrees of freedom is
# exact for equal-size clusters with normal cluster means (it is then the t-test on the cluster
# means) but over-rejects when cluster sizes differ: a simulation (half the clusters of 2 items, half
# of 8, cluster and item effects N(0, 1), 20,000 studies each, seed 1; tests/test_sop_texts.py
# repeats it) measured a 5% test rejecting 7.8% of true nulls at G = 5, 7.3% at
# 10, 6.5% at 20 and 5.6% at 30. Cameron & Miller (2015) put "few clusters" in the same range.
CLUSTER_WARN_BELOW = 30


def clustered_se(base_means: Sequence[float], new_means: Sequence[float], labels: Sequence[Any], *,
                 confidence: float = 0.95, unit: bool = True) -> dict[str, Any]:
    """Cluster-robust inference on Δ = mean(d), d_i = new_i − base_i, via
    :func:`rlexp.stats.cluster_robust_mean`.

    ``se_clustered`` is CR0, sqrt(Σ_g (Σ_{i∈g} (d_i − Δ))²) / n; ``se_clustered_cr1`` multiplies
    it by sqrt(G/(G − 1)) (CR1, statsmodels' ``use_correction=True`` for one regressor). The
    p-value, the interval Δ ± t_{G−1}·SE_CR1, the MDE (t_{G−1, 1−α/2} + t_{G−1, 0.8})·SE_CR1 and
    the power at the win threshold (noncentral t with G − 1 df) use CR1 with ``cluster_df`` =
    G − 1, as statsmodels' ``OLS(d, 1).fit(cov_type="cluster", use_t=True)``. With one cluster
    nothing can be inferred: the inference keys are None.

    Examples
    --------
    >>> r = clustered_se([0.5, 0.25, 1.0, 0.0], [0.75, 0.5, 1.0, 0.5], ["a", "a", "b", "b"])
    >>> r["n_clusters"], r["cluster_df"], r["ci_clustered"]   # Δ = 0.25 in every item
    (2, 1, [0.25, 0.25])
    """
    from scipy import stats as sps

    d = [n - b for b, n in zip(base_means, new_means, strict=True)]
    res = cluster_robust_mean(d, labels)
    out: dict[str, Any] = {"se_clustered": res.se, "n_clusters": res.n_clusters,
                           "se_clustered_cr1": None, "cluster_df": None, "t_clustered": None,
                           "p_clustered": None, "ci_clustered": None, "mde_clustered": None,
                           "power_at_3pp_clustered": None}
    g = res.n_clusters
    if g < 2:
        return out
    se, df = res.se_cr1, g - 1
    out.update(se_clustered_cr1=se, cluster_df=df)
    alpha = 1.0 - confidence
    if se > 0:
        t = res.mean / se
        out.update(t_clustered=t, p_clustered=float(2.0 * sps.t.sf(abs(t), df)))
        half = float(sps.t.ppf(1 - alpha / 2, df)) * se
        out["ci_clustered"] = [res.mean - half, res.mean + half]
        out["mde_clustered"] = float((sps.t.ppf(0.975, df) + sps.t.ppf(0.8, df)) * se)
        if unit:
            crit, shift = float(sps.t.ppf(0.975, df)), (WIN_THRESHOLD_PP / 100.0) / se
            out["power_at_3pp_clustered"] = float(sps.nct.sf(crit, df, shift) + sps.nct.cdf(-crit, df, shift))
    else:
        out.update(p_clustered=0.0 if res.mean else 1.0, ci_clustered=[res.mean, res.mean])
    return out


def design_effect(cluster_sizes: Sequence[int], icc: float) -> float:
    """The variance inflation of a mean over clustered problems: 1 + (m̃ − 1)·ICC, with m̃ = Σ m_g² / Σ m_g
    the size-weighted mean cluster size (Kish's design effect for unequal clusters; m̃ is the plain
    size when all clusters are equal).

    >>> round(design_effect([20] * 50, 0.05), 4)   # 50 documents of 20 questions, ICC 0.05
    1.95
    >>> round(design_effect([1, 3], 0.1), 4)       # m̃ = (1 + 9) / 4 = 2.5
    1.15
    """
    total = sum(cluster_sizes)
    if total <= 0:
        raise ValueError("cluster sizes must add up to at least one problem")
    return 1.0 + (sum(m * m for m in cluster_sizes) / total - 1.0) * icc


def clustered_gate_figures(se_pp: float, df: int, *, min_delta_pp: float = 3.0, max_p: float = 0.05, k: int = 3,
                           alpha: float = 0.05, power: float = 0.8,
                           effect_pp: float = WIN_THRESHOLD_PP) -> dict[str, Any]:
    """What a clustered comparison with standard error ``se_pp`` (CR1, pp) and ``df`` = G − 1 can see,
    all from one model: T = Δ̂ / SE is noncentral t (df, noncentrality Δ / SE).

    - ``mde_pp``: (t_{df, 1−α/2} + t_{df, power})·SE, as :func:`clustered_se`'s;
    - ``power_at_win_threshold``: the two-sided t-test's power at ``effect_pp``;
    - ``gate_1b_pass_power_at_win_threshold``: Gate-1b passes where Δ̂ ≥ ``min_delta_pp`` and the
      clustered p < ``max_p``, i.e. T ≥ max(min_delta / SE, t_{df, 1 − max_p/2}); its probability at
      ``effect_pp`` for one checkpoint, and ``gate_1b_effect_80_pp`` the effect passing it with ``power``;
    - ``gate_1b_best_of_k_at_win_threshold``: the best of ``k`` checkpoints, that per-checkpoint rate
      carried through the Gaussian copula of :func:`rlexp.stats.gate_1b_best_of_k_normal`, one rate per
      checkpoint correlation of :data:`rlexp.stats.DELTA_CORRELATION_OF_RHO`.

    >>> f = clustered_gate_figures(2.0, 49)   # SE_CR1 2pp over 50 clusters
    >>> round(f["mde_pp"], 2)                 # (t_49,0.975 + t_49,0.8) · 2 = (2.0096 + 0.8489) · 2
    5.72
    >>> round(f["gate_1b_pass_power_at_win_threshold"], 2)   # one checkpoint, at a true +3pp
    0.31
    """
    from scipy import optimize
    from scipy import stats as sps

    from rlexp.stats._gate_power import DELTA_CORRELATION_OF_RHO, gate_1b_best_of_k_normal

    if not se_pp > 0 or df < 1:
        raise ValueError("a clustered power needs a positive SE and at least two clusters")
    crit = float(sps.t.ppf(1 - alpha / 2, df))
    shift = effect_pp / se_pp
    cut = max(min_delta_pp / se_pp, float(sps.t.ppf(1 - max_p / 2, df)))

    def passes(delta_pp: float) -> float:
        return float(sps.nct.sf(cut, df, delta_pp / se_pp))

    at = passes(effect_pp)
    effect = optimize.brentq(lambda d: passes(d) - power, 0.0, cut * se_pp + 20 * se_pp, xtol=1e-6)
    rates = [gate_1b_best_of_k_normal(effect_pp, 1, 1.0, k=k, delta_correlation=r, per_checkpoint=at)
             for r in DELTA_CORRELATION_OF_RHO.values()]
    return {"se_pp": se_pp, "df": df,
            "mde_pp": float((crit + sps.t.ppf(power, df)) * se_pp),
            "power_at_win_threshold": float(sps.nct.sf(crit, df, shift) + sps.nct.cdf(-crit, df, shift)),
            "gate_1b_pass_power_at_win_threshold": at, "gate_1b_effect_80_pp": float(effect),
            "gate_1b_best_of_k_at_win_threshold": {"k": k, "correlations": list(DELTA_CORRELATION_OF_RHO),
                                                   "rates": rates}}
