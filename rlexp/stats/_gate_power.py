"""The chance that a true effect passes Gate-1b, and the effect that passes it with 80%.

The z-test power of :func:`~rlexp.stats.power_at` answers "would McNemar reject at this effect?"; the
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
against the simulation of ``rlexp.protocol.calibrate``.

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


def _pmf(k: int, m: int, log_p: float, log_q: float) -> float:
    """P(X = k) for X ~ Bin(m, p) from log(p) and log(1 - p), which the callers compute once for every
    m they sum over; 0 outside 0..m."""
    if k < 0 or k > m:
        return 0.0
    lgamma = math.lgamma
    return math.exp(lgamma(m + 1) - lgamma(k + 1) - lgamma(m - k + 1) + k * log_p + (m - k) * log_q)


def _upper_tail(c: int, m: int, p: float, log_p: float, log_q: float, odds: float) -> float:
    """P(X >= c) for X ~ Bin(m, p): summed outward from the largest term (the mode, or c when the
    mode is below c) with the pmf ratio, each direction until its terms are negligible.

    ``log_p``, ``log_q`` and ``odds`` are log(p), log(1 - p) and p / (1 - p), which the caller
    computes once for every m it sums over (the same values :func:`_log_pmf` would compute: the
    tail is the same number to the last bit, at a fraction of the calls ``rlexp plan`` makes)."""
    if c <= 0:
        return 1.0
    if c > m or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    first = min(m, max(c, math.floor((m + 1) * p)))
    start = _pmf(first, m, log_p, log_q)
    total = term = start
    negligible = _NEGLIGIBLE
    for k in range(first, m):  # upward: pmf(k + 1) = pmf(k) (m - k) / (k + 1) odds
        term *= (m - k) / (k + 1) * odds
        total += term
        if term < negligible * total:
            break
    term = start
    for k in range(first, c, -1):  # downward to c: pmf(k - 1) = pmf(k) k / ((m - k + 1) odds)
        term *= k / ((m - k + 1) * odds)
        total += term
        if term < negligible * total:
            break
    return min(1.0, total)


# Above this many discordant counts in the window, the tails are carried from one m to the next (O(1) each)
# instead of summed afresh (O(√m) each): compare on 10^6 items sums about 5,900 of them per probability and
# a few dozen probabilities. Below it (every plan, and compare up to about 10,000 items) each tail is summed
# as above, so those figures stay the same to the last bit. (The critical counts are carried at every size:
# they are integers, the same as summed afresh.)
CARRY_ABOVE = 600


@lru_cache(maxsize=64)
def _thresholds(n: int, d: float, min_delta_pp: float, max_mcnemar_p: float) -> tuple[tuple[int, float, int], ...]:
    """(m, P(M = m), c_m) over the m that matter: c_m is the fewest wins that pass the gate."""
    sd = math.sqrt(n * d * (1.0 - d))
    first, last = max(1, math.floor(n * d - 9 * sd)), min(n, math.ceil(n * d + 9 * sd))
    critical = _critical_wins_run(first, last, max_mcnemar_p)
    out = []
    for m in range(first, last + 1):
        pm = math.exp(_log_pmf(m, n, d))
        if pm < _NEGLIGIBLE:
            continue
        c_delta = math.ceil((m + n * min_delta_pp / 100.0) / 2.0 - EPS)
        out.append((m, pm, max(critical[m - first], c_delta)))
    return tuple(out)


def _critical_wins_run(first: int, last: int, max_mcnemar_p: float) -> list[int]:
    """:func:`_mcnemar_critical_wins` for every m in [first, last], carried forward: one more
    discordant problem can only raise P(X ≥ c) (X ~ Bin(m, 1/2)), and raises P(X ≥ c + 1) no higher
    than P(X ≥ c) was, so c_m is c_{m-1} or c_{m-1} + 1 — one tail per m decides which. The tail
    follows m through P_m(X ≥ c) = P_{m-1}(X ≥ c) + P_{m-1}(X = c - 1) / 2 and is summed afresh every
    ``_REANCHOR`` steps, so its rounding never builds up (tests/test_gate_power.py checks every m of
    a window against the function itself)."""
    limit = max_mcnemar_p - EPS
    c = _mcnemar_critical_wins(first, max_mcnemar_p)
    out = [c]
    tail = _half_tail(c, first)
    for m in range(first + 1, last + 1):
        if (m - first) % _REANCHOR == 0:
            tail = _half_tail(c, m)
        else:
            tail += 0.5 * _pmf(c - 1, m - 1, _LOG_HALF, _LOG_HALF)
        if 2.0 * tail >= limit:  # c no longer rejects at m: c + 1 does (the proof above)
            tail -= _pmf(c, m, _LOG_HALF, _LOG_HALF)
            c += 1
        out.append(c)
    return out


_REANCHOR = 256
_LOG_HALF = math.log(0.5)


def _half_tail(c: int, m: int) -> float:
    return _upper_tail(c, m, 0.5, _LOG_HALF, _LOG_HALF, 1.0)


def _tails_carried(table: tuple[tuple[int, float, int], ...], win: float, log_p: float, log_q: float,
                   odds: float) -> float:
    """Σ P(M = m) P(C ≥ c_m) over ``table`` (consecutive m, c_m rising by 0 or 1 per m) with each tail
    carried from the last — P_m(C ≥ c) = P_{m-1}(C ≥ c) + w P_{m-1}(C = c - 1), then less P_m(C = c)
    where c_m is one higher — and summed afresh every ``_REANCHOR`` steps or where m skips."""
    total = 0.0
    prev_m = prev_c = -1
    tail = 0.0
    for i, (m, pm, c) in enumerate(table):
        if m != prev_m + 1 or c - prev_c not in (0, 1) or i % _REANCHOR == 0:
            tail = _upper_tail(c, m, win, log_p, log_q, odds)
        else:
            tail += win * _pmf(prev_c - 1, m - 1, log_p, log_q)
            if c == prev_c + 1:
                tail -= _pmf(prev_c, m, log_p, log_q)
        prev_m, prev_c = m, c
        total += pm * min(1.0, max(0.0, tail))
    return total


@lru_cache(maxsize=4096)
def _mcnemar_critical_wins(m: int, max_mcnemar_p: float) -> int:
    """The fewest wins c among ``m`` discordant problems with the exact two-sided McNemar
    p = 2 P(X >= c), X ~ Bin(m, 1/2), below the limit (m + 1 when no c is). It depends on m alone,
    so every n, discordance and Δ clause shares it; the tail is summed downward from k = m with the
    pmf ratio P(X = k - 1) = P(X = k) k / (m - k + 1), from the exact value wherever it is too
    small for the ratio (2^-m underflows beyond m = 1074)."""
    c_test, term, tail = m + 1, 0.0, 0.0
    for k in range(m, (m - 1) // 2, -1):
        if term < 1e-250:
            term = math.exp(_log_pmf(k, m, 0.5))
        tail += term
        if 2.0 * tail >= max_mcnemar_p - EPS:
            break
        c_test = k
        term *= k / (m - k + 1)
    return c_test


def gate_1b_pass_probability(delta_pp: float, n: int, discordance: float, *, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05) -> float:
    """P(Gate-1b's Δ and McNemar clauses pass) for a true effect ``delta_pp`` at ``n`` problems.

    Examples
    --------
    >>> round(gate_1b_pass_probability(3.0, 1000, 0.12), 3)   # a true +3pp passes about half the time
    0.517
    """
    d = discordance
    if not 0.0 < d <= 1.0:
        raise ValueError(f"discordance must be in (0, 1], got {d}")
    delta = delta_pp / 100.0
    if abs(delta) > d:
        raise ValueError(f"|delta| {delta_pp} pp cannot exceed the discordance {100 * d:g} pp")
    win = (d + delta) / (2.0 * d)
    if 0.0 < win < 1.0:
        log_p, log_q, odds = math.log(win), math.log1p(-win), win / (1.0 - win)
    else:  # _upper_tail answers these before it needs them
        log_p = log_q = odds = math.nan
    table = _thresholds(n, d, min_delta_pp, max_mcnemar_p)
    if len(table) > CARRY_ABOVE and 0.0 < win < 1.0:
        return min(1.0, _tails_carried(table, win, log_p, log_q, odds))
    return min(1.0, sum(pm * _upper_tail(c, m, win, log_p, log_q, odds) for m, pm, c in table))


def gate_1b_effect_for_power(n: int, discordance: float, *, power: float = 0.8, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05, tolerance_pp: float = 1e-3) -> float | None:
    """The true effect (pp) that passes Gate-1b with probability ``power`` (to ``tolerance_pp``);
    None if no effect within the discordance can.

    Examples
    --------
    >>> round(gate_1b_effect_for_power(1000, 0.12), 1)
    3.9
    """
    def passes(delta_pp: float) -> float:
        return gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=min_delta_pp,
                                        max_mcnemar_p=max_mcnemar_p)

    return _effect_reaching(passes, power, 100.0 * discordance * (1 - 1e-9), tolerance_pp)


def _effect_reaching(probability, target: float, most: float, tolerance_pp: float) -> float | None:
    """The effect in [0, ``most``] at which the increasing, smooth ``probability`` reaches
    ``target`` (to ``tolerance_pp``); None if it does not reach it there.

    The Illinois method: a bracketing secant step whose stale end has its value halved, so the
    bracket shrinks from both sides. On these curves it takes about half the evaluations of
    bisection (each evaluation sums a few thousand binomial terms: ``rlexp plan`` pays for them).
    """
    lo, hi = 0.0, most
    f_lo, f_hi = probability(lo) - target, probability(hi) - target
    if f_hi < 0:
        return None
    if f_lo >= 0:
        return lo
    kept = 0  # which end the last steps kept: -1 the low end moved, +1 the high end
    previous = math.inf
    while hi - lo > tolerance_pp:
        x = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        x = min(max(x, lo + tolerance_pp / 4), hi - tolerance_pp / 4)  # strictly inside the bracket
        if abs(x - previous) < tolerance_pp / 4:  # converging superlinearly: the root is this close
            return x
        previous = x
        f_x = probability(x) - target
        if f_x < 0:
            lo, f_lo = x, f_x
            if kept == -1:
                f_hi /= 2.0
            kept = -1
        else:
            hi, f_hi = x, f_x
            if kept == 1:
                f_lo /= 2.0
            kept = 1
    return (lo + hi) / 2.0


def mcnemar_power(delta_pp: float, n: int, discordance: float, *, alpha: float = 0.05) -> float:
    """Power of the exact two-sided McNemar test at level ``alpha`` for a true ``delta_pp`` (same model as
    above): it rejects when the wins C reach c_m or the losses M − C do (the two tails are disjoint, and
    P(M − C ≥ c_m) at Δ is P(C ≥ c_m) at −Δ). Unlike :func:`~rlexp.stats.power_at` (the z
    approximation, 80.0% at Miller's MDE for N = 1000 and 12% discordance) this is the test the SOP
    runs (78.0% there).

    Examples
    --------
    >>> round(mcnemar_power(3.0, 1000, 0.12), 2)
    0.76
    """
    no_delta_clause = -200.0  # Δ̂ ≥ −200 pp always holds: the McNemar clause alone
    return min(1.0, gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=no_delta_clause,
                                             max_mcnemar_p=alpha)
               + gate_1b_pass_probability(-delta_pp, n, discordance, min_delta_pp=no_delta_clause,
                                          max_mcnemar_p=alpha))


@lru_cache(maxsize=256)
def mcnemar_mde(n: int, discordance: float, *, alpha: float = 0.05, power: float = 0.8,
                tolerance_pp: float = 1e-3) -> float | None:
    """The smallest true effect (pp, to ``tolerance_pp``) the exact McNemar test detects with
    ``power``; None if no effect within the discordance can.

    Examples
    --------
    >>> round(mcnemar_mde(1000, 0.12), 2)
    3.14
    """
    def rejects(delta_pp: float) -> float:
        return mcnemar_power(delta_pp, n, discordance, alpha=alpha)

    return _effect_reaching(rejects, power, 100.0 * discordance * (1 - 1e-9), tolerance_pp)


# The correlation of two checkpoints' observed Δ at a true +3 pp under the model of `rlexp sop calibrate`
# (N = 1000, 12% discordance, 20,000 studies, seed 0: its "ρ (Δ corr.)" column) for the latent flip
# correlations ρ = 0.3, 0.6 and 0.9 that it tabulates.
DELTA_CORRELATION_OF_RHO = {0.3: 0.29, 0.6: 0.46, 0.9: 0.73}


def gate_1b_best_of_k_normal(delta_pp: float, n: int, discordance: float, *, k: int = 3,
                             delta_correlation: float, min_delta_pp: float = 3.0,
                             max_mcnemar_p: float = 0.05, per_checkpoint: float | None = None) -> float:
    """P(some of K checkpoints passes Gate-1b's Δ and McNemar clauses), standard library only (for
    ``rlexp plan``): the per-checkpoint probability p₁ (:func:`gate_1b_pass_probability`, exact)
    carried to K checkpoints through a Gaussian copula with the checkpoints' Δ correlation r, i.e.
    1 − ∫ φ(z) Φ((t − √r z)/√(1 − r))^K dz with Φ(t) = 1 − p₁ (exact for K = 1 and for r = 0 or
    1). tests/test_gate_power.py checks it against the simulation of
    :func:`rlexp.protocol.calibrate.gate_1b_best_of_k` (within 3 points; 1 at the SOP's 12% discordance).

    Examples
    --------
    >>> round(gate_1b_best_of_k_normal(3.0, 1000, 0.12, k=3, delta_correlation=0.46), 2)
    0.78
    """
    from statistics import NormalDist

    one = (gate_1b_pass_probability(delta_pp, n, discordance, min_delta_pp=min_delta_pp, max_mcnemar_p=max_mcnemar_p)
           if per_checkpoint is None else per_checkpoint)   # a per-checkpoint rate of another test (clustered)
    r = delta_correlation
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"delta_correlation must be in [0, 1], got {r}")
    if one <= 0.0 or one >= 1.0 or r >= 1.0 or k == 1:
        return one
    if r <= 0.0:
        return 1.0 - (1.0 - one) ** k
    t = NormalDist().inv_cdf(1.0 - one)
    step, half = 0.01, 8.5
    last = int(2 * half / step)
    sqrt_r, spread = math.sqrt(r), math.sqrt(1.0 - r)
    # φ and Φ of N(0, 1) as statistics.NormalDist computes them (the same floats), without a method
    # call per point: 1,701 points per rate, three rates per plan
    pdf_scale, sqrt2, erf, exp = math.sqrt(math.tau), math.sqrt(2.0), math.erf, math.exp
    total = 0.0
    for i in range(last + 1):
        z = -half + i * step
        weight = 0.5 if i in (0, last) else 1.0
        pdf = exp(z ** 2.0 / -2.0) / pdf_scale
        cdf = 0.5 * (1.0 + erf(((t - sqrt_r * z) / spread) / sqrt2))
        total += weight * pdf * cdf ** k
    return min(1.0, max(0.0, 1.0 - total * step))


def claim_probability_normal(delta_pp: float, n: int, discordance: float, *, k: int = 3,
                             delta_correlation: float, min_delta_pp: float = 3.0, max_mcnemar_p: float = 0.05,
                             min_each_delta_pp: float = 0.0, min_mean_delta_pp: float = 3.0,
                             per_checkpoint: float | None = None) -> float:
    """P(STOP-1) at a true ``delta_pp`` for every checkpoint, standard library only (for ``rlexp plan``):
    Gate-1b passes on some of the K checkpoints of the first seed, and Gate-2 on the two seeds'
    selected (largest) Δ's: each above ``min_each_delta_pp`` and their mean at least
    ``min_mean_delta_pp``. The K observed Δ's of a seed are N(Δ, s²), s² = (d − Δ²)/n, with correlation
    r; Gate-1b on a checkpoint is its standardized Δ above t₁, Φ(t₁) = 1 − p₁ with p₁ the exact
    per-checkpoint probability (:func:`gate_1b_pass_probability`, as :func:`gate_1b_best_of_k_normal`).
    With F the CDF of the maximum M of K such standardized Δ's (F(x) = ∫ φ(z) Φ((x − √r z)/√(1 − r))^K dz)
    and the two seeds independent, P = ∫ 1{x ≥ max(t₁, e)} (1 − F(max(e, 2m − x))) dF(x), e and m the
    Gate-2 bars standardized. tests/test_gate_power.py checks it against the simulation of the whole
    rule (:func:`rlexp.protocol.calibrate.claim_probability`).
    """
    from statistics import NormalDist

    d, mu = discordance, delta_pp / 100.0
    one = per_checkpoint if per_checkpoint is not None else gate_1b_pass_probability(
        delta_pp, n, d, min_delta_pp=min_delta_pp, max_mcnemar_p=max_mcnemar_p)
    if one <= 0.0:
        return 0.0
    r = delta_correlation
    if not 0.0 <= r < 1.0:
        raise ValueError(f"delta_correlation must be in [0, 1), got {r}")
    sd = math.sqrt(max(d - mu * mu, 1e-12) / n)
    t1 = NormalDist().inv_cdf(1.0 - one) if one < 1.0 else -math.inf
    e = (min_each_delta_pp / 100.0 - mu) / sd
    m2 = 2 * (min_mean_delta_pp / 100.0 - mu) / sd
    sqrt_r, spread, sqrt2, erf, exp = math.sqrt(r), math.sqrt(1.0 - r), math.sqrt(2.0), math.erf, math.exp
    zs = [-7.0 + 0.2 * i for i in range(71)]   # trapezoid on a Gaussian integrand: accurate at this step
    weights = [0.2 * exp(z * z / -2.0) / math.sqrt(math.tau) for z in zs]
    low, step, points = -8.0, 0.05, 341      # F tabulated on [−8, 9], interpolated linearly between

    def tabulated(x: float) -> float:
        total = 0.0
        for z, w in zip(zs, weights, strict=True):
            total += w * (0.5 * (1.0 + erf(((x - sqrt_r * z) / spread) / sqrt2))) ** k
        return min(1.0, total)

    table = [tabulated(low + step * i) for i in range(points)]

    def cdf_max(x: float) -> float:
        pos = (x - low) / step
        if pos <= 0:
            return table[0] if pos == 0 else 0.0
        if pos >= points - 1:
            return 1.0
        i = int(pos)
        return table[i] + (pos - i) * (table[i + 1] - table[i])

    start = max(t1, e, low)
    total, previous, x = 0.0, cdf_max(start), start
    while x < low + step * (points - 1):
        now = cdf_max(x + step)
        total += (now - previous) * (1.0 - cdf_max(max(e, m2 - (x + step / 2))))
        previous, x = now, x + step
    return min(1.0, max(0.0, total))


def add_best_of_k(power_json: dict, sop: object) -> None:
    """Beside the per-checkpoint Gate-1b pass probability of a plan's power figures (``n``,
    ``discordance``): the chance that the best of the SOP's K checkpoints passes Gate-1b at a true
    effect at the threshold, one rate per latent checkpoint correlation ρ of ``rlexp sop calibrate``
    (:func:`gate_1b_best_of_k_normal`), as ``gate_1b_best_of_k_at_win_threshold``."""
    n, d = power_json.get("n"), power_json.get("discordance")
    power_json["gate_1b_best_of_k_at_win_threshold"] = None
    power_json["claim_probability_at_win_threshold"] = None
    gate, k = sop.gate_1b, sop.checkpoints.k  # type: ignore[attr-defined]
    if not n or not d or gate.min_delta_pp > 100.0 * d:
        return
    # the exact per-checkpoint pass probability, the same for every correlation: computed once
    one = gate_1b_pass_probability(gate.min_delta_pp, n, d, min_delta_pp=gate.min_delta_pp,
                                   max_mcnemar_p=gate.max_mcnemar_p)
    rates = [gate_1b_best_of_k_normal(gate.min_delta_pp, n, d, k=k, delta_correlation=r,
                                      min_delta_pp=gate.min_delta_pp, max_mcnemar_p=gate.max_mcnemar_p,
                                      per_checkpoint=one)
             for r in DELTA_CORRELATION_OF_RHO.values()]
    power_json["gate_1b_best_of_k_at_win_threshold"] = {"k": k, "correlations": list(DELTA_CORRELATION_OF_RHO),
                                                        "rates": rates}
    g2 = sop.gate_2  # type: ignore[attr-defined]
    claim = [claim_probability_normal(gate.min_delta_pp, n, d, k=k, delta_correlation=r,
                                      min_delta_pp=gate.min_delta_pp, max_mcnemar_p=gate.max_mcnemar_p,
                                      min_each_delta_pp=g2.min_each_delta_pp, min_mean_delta_pp=g2.min_mean_delta_pp,
                                      per_checkpoint=one)
             for r in DELTA_CORRELATION_OF_RHO.values()]
    power_json["claim_probability_at_win_threshold"] = {
        "k": k, "correlations": list(DELTA_CORRELATION_OF_RHO), "rates": claim, "effect_pp": gate.min_delta_pp,
        "rule": "STOP-1: Gate-1b on the best of K, a second seed, Gate-2 on both seeds' selected Δ"}
