"""The chance that a true effect passes Gate-1b, and the effect that passes it with 80%.

The z-test power of :mod:`rlexp.core.power` answers "would McNemar reject at this effect?"; the
SOP asks more of a claim: Gate-1b needs the observed Δ to reach ``min_delta_pp`` (+3 pp) as well
as McNemar exact p < ``max_mcnemar_p``. At a true +3 pp the observed Δ falls short about half
the time whatever n is, so the gate-pass power is far below the test's power (N=1000, 12%
discordance: 78% for the test, 52% for the gate).

Model (the same as ``rlexp sop calibrate`` for one checkpoint): the number of discordant
problems M ~ Bin(n, d); the new model wins each of them with probability (d + Δ) / (2d), so
C | M ~ Bin(M, (d + Δ)/(2d)) and Δ̂ = (2C − M)/n. The gate passes when 2C − M ≥ n·min_delta and
the exact two-sided McNemar p of (M − C, C) is below the limit; this sums P(M = m)·P(C ≥ c_m)
exactly over m (scipy's binomial distribution). The gate's third clause (bootstrap CI low > 0)
is left out: where McNemar rejects it almost always holds, and a test checks the result against
the simulation of ``rlexp.core.calibrate``.
"""

from __future__ import annotations

import math

EPS = 1e-9


def gate_1b_pass_probability(delta_pp: float, n: int, discordance: float, *, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05) -> float:
    """P(Gate-1b's Δ and McNemar clauses pass) for a true effect ``delta_pp`` at ``n`` problems."""
    import numpy as np
    from scipy.stats import binom

    d = discordance
    if not 0.0 < d <= 1.0:
        raise ValueError(f"discordance must be in (0, 1], got {d}")
    delta = delta_pp / 100.0
    if abs(delta) > d:
        raise ValueError(f"|delta| {delta_pp} pp cannot exceed the discordance {100 * d:g} pp")
    win = (d + delta) / (2.0 * d)
    sd = math.sqrt(n * d * (1.0 - d))
    m = np.arange(max(1, math.floor(n * d - 9 * sd)), min(n, math.ceil(n * d + 9 * sd)) + 1)
    # smallest c with exact two-sided p = 2 P(X >= c) strictly below the limit, X ~ Bin(m, 1/2)
    c_test = binom.isf(max_mcnemar_p / 2.0, m, 0.5) + 1
    c_test = np.where(2.0 * binom.sf(c_test - 1, m, 0.5) >= max_mcnemar_p - EPS, c_test + 1, c_test)
    c_delta = np.ceil((m + n * min_delta_pp / 100.0) / 2.0 - EPS)
    c_need = np.maximum(c_test, c_delta)
    return float(np.sum(binom.pmf(m, n, d) * binom.sf(c_need - 1, m, win)))


def gate_1b_effect_for_power(n: int, discordance: float, *, power: float = 0.8, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05) -> float | None:
    """The true effect (pp) that passes Gate-1b with probability ``power``; None if none can."""
    def passes(delta_pp: float) -> float:
        return gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=min_delta_pp,
                                        max_mcnemar_p=max_mcnemar_p)

    lo, hi = 0.0, 100.0 * discordance * (1 - 1e-9)
    if passes(hi) < power:
        return None
    for _ in range(40):  # the pass probability increases with the effect: bisection to ~1e-10 pp
        mid = (lo + hi) / 2.0
        if passes(mid) < power:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
