"""The chance that a true effect passes Gate-1b, and the effect that passes it with 80%.

The z-test power of :mod:`rlexp.core.power` answers "would McNemar reject at this effect?"; the
SOP asks more of a claim: Gate-1b needs the observed Δ to reach ``min_delta_pp`` (+3 pp) as well
as McNemar exact p < ``max_mcnemar_p``. At a true +3 pp the observed Δ falls short about half
the time whatever n is, so the gate-pass power is far below the test's power (N=1000, 12%
discordance: 78% for the test, 52% for the gate).

Model (the same as ``rlexp sop calibrate`` for one checkpoint): the number of discordant
problems M ~ Bin(n, d); the new model wins each of them with probability (d + Δ) / (2d), so
C | M ~ Bin(M, (d + Δ)/(2d)) and Δ̂ = (2C − M)/n. The gate passes when 2C − M ≥ n·min_delta and
the exact two-sided McNemar p of (M − C, C) is below the limit, i.e. when C reaches a threshold
c_m that depends on m only; the probability is the sum of P(M = m)·P(C ≥ c_m) over m, computed
exactly (terms below 1e-15 of the total are left out). The gate's third clause (bootstrap CI
low > 0) is left out: where McNemar rejects it almost always holds, and a test checks the result
against the simulation of ``rlexp.core.calibrate``.

Standard library only: ``rlexp plan`` prints these figures before any GPU is used and must stay
fast (a few milliseconds per probability at N=1000).
"""

from __future__ import annotations

import math
from functools import lru_cache

EPS = 1e-9
_NEGLIGIBLE = 1e-15


def _log_pmf(k: int, m: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == m else -math.inf
    return (math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
            + k * math.log(p) + (m - k) * math.log1p(-p))


def _upper_tail(c: int, m: int, p: float) -> float:
    """P(X >= c) for X ~ Bin(m, p): summed outward from the largest term (the mode, or c when the
    mode is below c) with the pmf ratio, each direction until its terms are negligible."""
    if c <= 0:
        return 1.0
    if c > m or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    odds = p / (1.0 - p)
    first = min(m, max(c, math.floor((m + 1) * p)))
    start = math.exp(_log_pmf(first, m, p))
    total = term = start
    for k in range(first, m):  # upward: pmf(k + 1) = pmf(k) (m - k) / (k + 1) odds
        term *= (m - k) / (k + 1) * odds
        total += term
        if term < _NEGLIGIBLE * total:
            break
    term = start
    for k in range(first, c, -1):  # downward to c: pmf(k - 1) = pmf(k) k / ((m - k + 1) odds)
        term *= k / ((m - k + 1) * odds)
        total += term
        if term < _NEGLIGIBLE * total:
            break
    return min(1.0, total)


@lru_cache(maxsize=64)
def _thresholds(n: int, d: float, min_delta_pp: float, max_mcnemar_p: float) -> tuple[tuple[int, float, int], ...]:
    """(m, P(M = m), c_m) over the m that matter: c_m is the fewest wins that pass the gate."""
    sd = math.sqrt(n * d * (1.0 - d))
    out = []
    for m in range(max(1, math.floor(n * d - 9 * sd)), min(n, math.ceil(n * d + 9 * sd)) + 1):
        pm = math.exp(_log_pmf(m, n, d))
        if pm < _NEGLIGIBLE:
            continue
        # fewest wins c with the exact two-sided McNemar p = 2 P(X >= c), X ~ Bin(m, 1/2), below the limit
        c_test, tail = m + 1, 0.0
        for k in range(m, (m - 1) // 2, -1):
            tail += math.exp(_log_pmf(k, m, 0.5))
            if 2.0 * tail >= max_mcnemar_p - EPS:
                break
            c_test = k
        c_delta = math.ceil((m + n * min_delta_pp / 100.0) / 2.0 - EPS)
        out.append((m, pm, max(c_test, c_delta)))
    return tuple(out)


def gate_1b_pass_probability(delta_pp: float, n: int, discordance: float, *, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05) -> float:
    """P(Gate-1b's Δ and McNemar clauses pass) for a true effect ``delta_pp`` at ``n`` problems."""
    d = discordance
    if not 0.0 < d <= 1.0:
        raise ValueError(f"discordance must be in (0, 1], got {d}")
    delta = delta_pp / 100.0
    if abs(delta) > d:
        raise ValueError(f"|delta| {delta_pp} pp cannot exceed the discordance {100 * d:g} pp")
    win = (d + delta) / (2.0 * d)
    return min(1.0, sum(pm * _upper_tail(c, m, win) for m, pm, c in _thresholds(n, d, min_delta_pp, max_mcnemar_p)))


def gate_1b_effect_for_power(n: int, discordance: float, *, power: float = 0.8, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05, tolerance_pp: float = 1e-3) -> float | None:
    """The true effect (pp) that passes Gate-1b with probability ``power`` (to ``tolerance_pp``);
    None if no effect within the discordance can."""
    def passes(delta_pp: float) -> float:
        return gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=min_delta_pp,
                                        max_mcnemar_p=max_mcnemar_p)

    lo, hi = 0.0, 100.0 * discordance * (1 - 1e-9)
    if passes(hi) < power:
        return None
    while hi - lo > tolerance_pp:  # the pass probability increases with the effect
        mid = (lo + hi) / 2.0
        if passes(mid) < power:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def mcnemar_power(delta_pp: float, n: int, discordance: float, *, alpha: float = 0.05) -> float:
    """Power of the exact two-sided McNemar test at level ``alpha`` for a true ``delta_pp`` (same model as
    above): it rejects when the wins C reach c_m or the losses M − C do (the two tails are disjoint, and
    P(M − C ≥ c_m) at Δ is P(C ≥ c_m) at −Δ). Unlike :func:`rlexp.core.power.power_at` (the z
    approximation, 80.0% at Miller's MDE for N = 1000 and 12% discordance) this is the test the SOP
    runs (77.8% there)."""
    no_delta_clause = -200.0  # Δ̂ ≥ −200 pp always holds: the McNemar clause alone
    return min(1.0, gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=no_delta_clause,
                                             max_mcnemar_p=alpha)
               + gate_1b_pass_probability(-delta_pp, n, discordance, min_delta_pp=no_delta_clause,
                                          max_mcnemar_p=alpha))


@lru_cache(maxsize=256)
def mcnemar_mde(n: int, discordance: float, *, alpha: float = 0.05, power: float = 0.8,
                tolerance_pp: float = 1e-3) -> float | None:
    """The smallest true effect (pp, to ``tolerance_pp``) the exact McNemar test detects with
    ``power``; None if no effect within the discordance can."""
    def rejects(delta_pp: float) -> float:
        return mcnemar_power(delta_pp, n, discordance, alpha=alpha)

    lo, hi = 0.0, 100.0 * discordance * (1 - 1e-9)
    if rejects(hi) < power:
        return None
    while hi - lo > tolerance_pp:  # the power increases with the effect
        mid = (lo + hi) / 2.0
        if rejects(mid) < power:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
