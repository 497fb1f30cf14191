"""How often do the SOP's gates pass when nothing works, and when a real +3pp effect exists?

``rlexp sop calibrate`` simulates paired studies shaped like the final comparison of the campaign
behind the SOP (sop/README.md, "Calibration"): N=1000 problems, a baseline with true accuracy
drawn uniformly from 67-74%, about 12% of problems discordant between a checkpoint and the
baseline, and K=3 checkpoints of one run that are correlated with each other (they share most
of their flips, as checkpoints of one run do).

Model, per simulated study: baseline outcomes y0_i ~ Bernoulli(p0). A checkpoint flips a problem
the baseline got right with probability q1 = (d - delta) / (2 p0) and one it got wrong with
probability q0 = (d + delta) / (2 (1 - p0)), so the expected discordance is d and the true
effect is delta. Flips of the K checkpoints are correlated through a Gaussian copula: checkpoint
k flips problem i when sqrt(rho) Z_i + sqrt(1 - rho) E_ik < Phi^-1(q). A second seed (for
Gate-2) is an independent run against the same baseline outcomes.

How it is drawn (exactly that model, without one draw per problem): problems are independent
given p0, and the copula makes the K checkpoints exchangeable, so a problem's flip pattern
(which of the K checkpoints flip it) has a probability that depends only on how many flip,
pi_j = integral of phi(z) g(z)^j (1 - g(z))^(K - j) dz with g(z) = Phi((Phi^-1(q) - sqrt(rho) z)
/ sqrt(1 - rho)) (:func:`pattern_probabilities`, a trapezoid rule on a grid fine enough for the
rule's error to be negligible, interpolated in p0 by :func:`patterns_for_p0`). A study is then: the number of problems the baseline gets
right ~ Bin(N, p0), and for each run, the counts of the 2^K patterns among those problems and
among the others ~ Multinomial. b_k and c_k are sums of pattern counts. :func:`simulate_counts_per_problem`
draws the same model problem by problem (the definition; tests check that both agree).

Each study is then judged by the rule ``rlexp decide`` applies: McNemar exact p, Holm over the K
checkpoints, the interval of the SOP's ``bootstrap`` section (its method, resamples, seed and
confidence: a seeded bootstrap is a function of (b, c, n), computed once per distinct (b, c)
with :func:`rlexp.stats.bootstrap_delta_ci_many`, and only where it can change a verdict), and
the comparisons of :mod:`rlexp.protocol.gates`, vectorised. A test checks the verdicts against
:func:`rlexp.protocol.decision.decide`, study by study. 100,000 studies take seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlexp.protocol.gates import EPS
from rlexp.spec.sop import Sop

DEFAULT_CORRELATIONS = (0.3, 0.6, 0.9)
BELOW_BAR_EFFECTS = (1.0, 2.0, 2.5)
GATES = ("gate_1a", "gate_1b", "mcnemar")
GATE_LABELS = {"gate_1a": "Gate-1a", "gate_1b": "Gate-1b", "mcnemar": "McNemar p<0.05 alone",
               "confirm": "CONFIRM (decide, seed 1)", "stop_1": "STOP-1 (1b + Gate-2)"}
_GRID_HALF_WIDTH = 8.5   # phi(8.5) ~ 1e-16: the copula integral's tails beyond are negligible
_GRID_CELLS = 2_000_000  # grid points x thresholds evaluated at once (memory)
_CHEBYSHEV_POINTS = 24


@dataclass(frozen=True)
class CalibrationSettings:
    sims: int = 20_000
    seed: int = 0
    n: int = 1000
    base_acc_low: float = 0.67
    base_acc_high: float = 0.74
    discordance: float = 0.12
    k: int = 3
    correlations: tuple[float, ...] = DEFAULT_CORRELATIONS  # latent flip correlation rho of two checkpoints
    effect_pp: float = 3.0           # the true effect of the alternative scenario
    # true effects below the SOP's +3pp bar at which STOP-1's rate is reported too, with 0 (the null
    # scenario): the winner's curse lets the best of K reach the bar when the truth is below it.
    # `rlexp sop calibrate` asks for BELOW_BAR_EFFECTS; empty: not simulated (each costs a scenario)
    below_bar_effects: tuple[float, ...] = ()
    chunk: int = 50_000              # studies drawn at once


@dataclass(frozen=True)
class Rate:
    """A pass rate over the simulated studies and its Monte-Carlo standard error."""

    rate: float
    se: float

    def pct(self) -> str:
        return f"{100 * self.rate:.2f}% ± {100 * self.se:.2f}%"


@dataclass(frozen=True)
class CalibrationRow:
    correlation: float               # rho of the copula
    delta_correlation: float         # the resulting correlation of two checkpoints' observed deltas
    gate: str
    scenario: str                    # "null (0pp)" or "+3pp"
    per_checkpoint: Rate             # a single pre-registered checkpoint
    best_of_k: Rate                  # any of the K checkpoints passes
    holm_best_of_k: Rate | None      # any passes with Holm-adjusted p (None: the rule has no p)


@dataclass(frozen=True)
class Calibration:
    settings: CalibrationSettings
    sop_version: str
    sop_sha256: str
    ci_method: str
    resamples: int
    rows: tuple[CalibrationRow, ...]
    mean_discordance: float
    mean_base_acc: float
    distinct_intervals: int = field(default=0, compare=False)  # distinct (b, c) whose interval was computed
    # (correlation, true effect pp, STOP-1 rate) at 0 and each of settings.below_bar_effects
    stop_1_below_bar: tuple[tuple[float, float, Rate], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        s = asdict(self.settings)
        s["correlations"] = list(self.settings.correlations)
        return {"settings": s, "sop_version": self.sop_version, "sop_sha256": self.sop_sha256,
                "ci_method": self.ci_method, "resamples": self.resamples,
                "mean_discordance": self.mean_discordance, "mean_base_acc": self.mean_base_acc,
                "mc_error": "binomial sqrt(p(1-p)/sims) for best of K, CONFIRM and STOP-1; for a single "
                            "checkpoint, the standard deviation of each study's mean over its K checkpoints "
                            "over sqrt(sims)",
                "rows": [asdict(r) for r in self.rows],
                "stop_1_below_bar": [{"correlation": rho, "effect_pp": effect, "rate": r.rate, "se": r.se}
                                     for rho, effect, r in self.stop_1_below_bar]}

    def markdown(self) -> str:
        s = self.settings
        lines = [
            f"Simulated paired studies: {s.sims} per scenario and correlation, seed {s.seed}, N={s.n}, baseline "
            f"accuracy U({s.base_acc_low:.2f}, {s.base_acc_high:.2f}) (mean {self.mean_base_acc:.3f}), "
            f"discordance {s.discordance:.2f} (observed {self.mean_discordance:.3f}), K={s.k} checkpoints, "
            f"CI {self.ci_method}" + (f" ({self.resamples} resamples)" if self.ci_method != "newcombe" else "")
            + f", SOP {self.sop_version}. Rates ± one Monte-Carlo standard error.",
            "",
            "| gate | true effect | ρ (Δ corr.) | per checkpoint | best of K | best of K, Holm p |",
            "|---|---|---|---|---|---|",
        ]
        order = {label: i for i, label in enumerate(GATE_LABELS.values())}
        for r in sorted(self.rows, key=lambda r: (r.scenario != "null (0pp)", order[r.gate], r.correlation)):
            holm = r.holm_best_of_k.pct() if r.holm_best_of_k is not None else "-"
            lines.append(f"| {r.gate} | {r.scenario} | {r.correlation:g} ({r.delta_correlation:.2f}) | "
                         f"{r.per_checkpoint.pct()} | {r.best_of_k.pct()} | {holm} |")
        if self.stop_1_below_bar:
            effects = sorted({e for _, e, _ in self.stop_1_below_bar})
            rhos = sorted({rho for rho, _, _ in self.stop_1_below_bar})
            rate = {(rho, e): r for rho, e, r in self.stop_1_below_bar}
            lines += ["", "STOP-1 (release candidate, SOTA moves) at true effects below the +3pp bar: the best "
                      "of K's raw Δ overstates its true effect (the winner's curse; `rlexp decide` shows the "
                      "selection-adjusted Δ beside it).", "",
                      "| ρ | " + " | ".join(f"true {e:+g}pp" for e in effects) + " |",
                      "|---|" + "---|" * len(effects)]
            for rho in rhos:
                lines.append(f"| {rho:g} | " + " | ".join(rate[(rho, e)].pct() if (rho, e) in rate else "-"
                                                          for e in effects) + " |")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the model


def flip_probabilities(settings: CalibrationSettings, effect_pp: float, p0: Any) -> tuple[Any, Any]:
    """(q1, q0): a checkpoint's flip probability on problems the baseline gets right / wrong."""
    import numpy as np

    s = settings
    delta = effect_pp / 100.0
    q1 = np.clip((s.discordance - delta) / (2 * p0), 1e-12, 1 - 1e-12)
    q0 = np.clip((s.discordance + delta) / (2 * (1 - p0)), 1e-12, 1 - 1e-12)
    return q1, q0


def pattern_bits(k: int) -> Any:
    """(2^k, k) 0/1 matrix: row j says which checkpoints flip in pattern j (bit i = checkpoint i)."""
    import numpy as np

    return (np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1


def pattern_probabilities(q: Any, k: int, rho: float) -> Any:
    """Probability of each of the 2^k flip patterns of one problem, for flip probabilities ``q``.

    Under the copula a pattern with j flips has probability integral phi(z) g^j (1 - g)^(k - j) dz,
    g(z) = Phi((Phi^-1(q) - sqrt(rho) z) / sqrt(1 - rho)). rho = 0 and rho = 1 are closed forms.
    Otherwise a trapezoid rule over z in [-8.5, 8.5] with a step h of at most a third of g's width
    w = sqrt((1 - rho) / rho) (and at most 0.25): for these smooth, fast-decaying integrands the
    rule's error is of the order of their Fourier transform at 2 pi / h, about exp(-(2 pi w / h)^2 / 2)
    < 1e-70; a test checks it against scipy's multivariate normal CDF and a grid ten times finer.
    Returns an array of shape q.shape + (2^k,); each row sums to 1.
    """
    import numpy as np
    from scipy.special import ndtr, ndtri

    q = np.asarray(q, dtype=float)
    flat = q.ravel()
    ones = pattern_bits(k).sum(axis=1)
    if rho <= 0.0:
        per_j = flat[:, None] ** np.arange(k + 1) * (1 - flat[:, None]) ** (k - np.arange(k + 1))
    elif rho >= 1.0:
        per_j = np.zeros((len(flat), k + 1))
        per_j[:, 0], per_j[:, k] = 1 - flat, flat
    else:
        step = min(0.25, math.sqrt((1 - rho) / rho) / 3)
        z = np.linspace(-_GRID_HALF_WIDTH, _GRID_HALF_WIDTH, int(math.ceil(2 * _GRID_HALF_WIDTH / step)) + 1)
        weights = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * (z[1] - z[0])
        weights[[0, -1]] *= 0.5
        per_j = np.empty((len(flat), k + 1))
        thresholds = ndtri(flat)
        rows = max(1, _GRID_CELLS // len(z))
        for start in range(0, len(flat), rows):
            g = ndtr((thresholds[start:start + rows, None] - math.sqrt(rho) * z[None, :]) / math.sqrt(1 - rho))
            miss = 1 - g
            for j in range(k + 1):
                per_j[start:start + rows, j] = (_power(g, j) * _power(miss, k - j)) @ weights
    probs = per_j[:, ones]  # per pattern: per_j is the probability of one given pattern with j flips
    probs /= probs.sum(axis=1, keepdims=True)  # the quadrature's tiny error; Multinomial wants sum 1
    return probs.reshape(q.shape + (2**k,))


def patterns_for_p0(settings: CalibrationSettings, effect_pp: float, rho: float, p0: Any) -> tuple[Any, Any]:
    """:func:`pattern_probabilities` of (q1, q0) at each baseline accuracy ``p0``, by interpolation.

    Both are analytic functions of p0 on the short interval [base_acc_low, base_acc_high], so a
    Chebyshev interpolant through 24 points reproduces them to about 1e-15 (a test checks 1e-12
    against the direct computation) at the cost of 24 quadratures instead of one per study.
    """
    import numpy as np
    from numpy.polynomial import chebyshev

    s = settings
    low, high = s.base_acc_low, s.base_acc_high
    if high - low < 1e-9:
        q1, q0 = flip_probabilities(s, effect_pp, p0)
        return pattern_probabilities(q1, s.k, rho), pattern_probabilities(q0, s.k, rho)
    degree = _CHEBYSHEV_POINTS - 1
    x = np.cos(np.pi * (np.arange(_CHEBYSHEV_POINTS) + 0.5) / _CHEBYSHEV_POINTS)  # in [-1, 1]
    q1, q0 = flip_probabilities(s, effect_pp, low + (x + 1) * (high - low) / 2)
    at = 2 * (np.asarray(p0, dtype=float) - low) / (high - low) - 1
    out = []
    for q in (q1, q0):
        coef = chebyshev.chebfit(x, pattern_probabilities(q, s.k, rho), degree)
        probs = np.clip(chebyshev.chebval(at, coef).T, 0.0, 1.0)
        out.append(probs / probs.sum(axis=-1, keepdims=True))
    return out[0], out[1]


def _power(x: Any, j: int) -> Any:
    """x ** j by repeated multiplication (far cheaper than a float power for small j)."""
    out = x.copy() if j else x * 0 + 1
    for _ in range(j - 1):
        out *= x
    return out


def simulate_counts(settings: CalibrationSettings, effect_pp: float, rho: float, rng: Any, sims: int
                    ) -> dict[str, Any]:
    """b and c per (study, run, checkpoint) for ``sims`` studies; two runs (seeds) per study.

    Also ``right``: the number of problems the baseline gets right, per study (n11 = right - b,
    n00 = N - right - c), ``base_acc`` = right / N, and ``joint`` (sims, 2, K, K): the problems both
    checkpoint j and checkpoint k flip (the diagonal is b + c), which the covariance of the K paired
    Δ's needs (:func:`delta_covariance`).
    """
    import numpy as np

    s = settings
    p0 = rng.uniform(s.base_acc_low, s.base_acc_high, size=sims)
    right = rng.binomial(s.n, p0)
    patterns_right, patterns_wrong = patterns_for_p0(s, effect_pp, rho, p0)
    bits = pattern_bits(s.k)
    b = np.empty((sims, 2, s.k), dtype=np.int64)
    c = np.empty((sims, 2, s.k), dtype=np.int64)
    joint = np.empty((sims, 2, s.k, s.k), dtype=np.int64)
    both = (bits[:, :, None] * bits[:, None, :]).reshape(2**s.k, s.k * s.k)
    for run in range(2):
        on_right = rng.multinomial(right, patterns_right)
        on_wrong = rng.multinomial(s.n - right, patterns_wrong)
        b[:, run] = on_right @ bits
        c[:, run] = on_wrong @ bits
        joint[:, run] = ((on_right + on_wrong) @ both).reshape(sims, s.k, s.k)
    return {"b": b, "c": c, "right": right, "base_acc": right / s.n, "joint": joint}


def simulate_counts_per_problem(settings: CalibrationSettings, effect_pp: float, rho: float, rng: Any, sims: int
                                ) -> dict[str, Any]:
    """The same model drawn problem by problem (the definition, and the previous implementation):
    memory and time grow with sims x N x K. For tests and benchmarks/bench_calibrate.py."""
    import numpy as np
    from scipy.special import ndtri

    s = settings
    p0 = rng.uniform(s.base_acc_low, s.base_acc_high, size=sims)
    y0 = rng.random((sims, s.n)) < p0[:, None]
    q1, q0 = flip_probabilities(s, effect_pp, p0)
    threshold = np.where(y0, ndtri(q1)[:, None], ndtri(q0)[:, None])  # (sims, n)
    b = np.empty((sims, 2, s.k), dtype=np.int64)
    c = np.empty((sims, 2, s.k), dtype=np.int64)
    joint = np.empty((sims, 2, s.k, s.k), dtype=np.int64)
    for run in range(2):
        shared = rng.standard_normal((sims, s.n, 1))
        own = rng.standard_normal((sims, s.n, s.k))
        flips = math.sqrt(rho) * shared + math.sqrt(1 - rho) * own < threshold[:, :, None]
        b[:, run] = np.sum(flips & y0[:, :, None], axis=1)
        c[:, run] = np.sum(flips & ~y0[:, :, None], axis=1)
        joint[:, run] = np.einsum("snj,snk->sjk", flips.astype(np.int64), flips.astype(np.int64))
    right = y0.sum(axis=1)
    return {"b": b, "c": c, "right": right, "base_acc": right / s.n, "joint": joint}


# --------------------------------------------------------------------------- the SOP's rule, vectorised


def mcnemar_exact_vec(b: Any, c: Any) -> Any:
    """Exact two-sided McNemar p for arrays of (b, c): min(1, 2 * BinomCDF(min(b, c); b + c, 1/2)),
    evaluated once per distinct (b + c, min(b, c))."""
    import numpy as np
    from scipy.stats import binom

    b, c = np.asarray(b), np.asarray(c)
    m, low = (b + c).ravel(), np.minimum(b, c).ravel()
    keys, inverse = np.unique(np.stack([m, low]), axis=1, return_inverse=True)
    p = np.minimum(1.0, 2.0 * binom.cdf(keys[1], np.maximum(keys[0], 1), 0.5))
    p = np.where(keys[0] == 0, 1.0, p)
    return p[inverse.ravel()].reshape(b.shape)


def holm_vec(p: Any) -> Any:
    """Holm-adjusted p along the last axis (:func:`rlexp.stats.adjust_pvalues`)."""
    from rlexp.stats import adjust_pvalues

    return adjust_pvalues(p, method="holm", axis=-1)


def gate_passes(delta_pp: Any, p: Any, ci_low: Any, gate: Any, *, ci_is_alternative: bool) -> Any:
    """Vectorised Gate-1a (``ci_is_alternative``: p OR CI) / Gate-1b (p AND CI), rlexp.protocol.gates semantics."""
    delta_ok = delta_pp >= gate.min_delta_pp - EPS
    p_ok = p < gate.max_mcnemar_p - EPS
    ci_ok = ci_low > gate.min_ci_low_pp + EPS
    return delta_ok & ((p_ok | ci_ok) if ci_is_alternative else (p_ok & ci_ok))


class IntervalTable:
    """CI low bound (pp) of a paired table, by the rule of the SOP's ``bootstrap`` section, cached.

    A seeded bootstrap interval is a function of (b, c, n), so each distinct (b, c) is computed
    once (:func:`rlexp.stats.bootstrap_delta_ci_many`, equal to what ``decide`` computes) and
    reused across chunks, scenarios and correlations. Newcombe's interval needs all four cells and
    no resampling: it is computed directly, vectorised.
    """

    def __init__(self, sop: Sop, n: int, method: str | None = None) -> None:
        self.method = method or sop.bootstrap.method
        self.boot = sop.bootstrap
        self.n = n
        self.cache: dict[tuple[int, int], float] = {}

    def low(self, b: Any, c: Any, right: Any) -> Any:
        import numpy as np

        if self.method == "newcombe":
            from rlexp.stats import newcombe_paired_ci_arrays

            low, _ = newcombe_paired_ci_arrays(right - b, b, c, self.n - right - c, self.boot.confidence)
            return 100.0 * low
        from rlexp.stats import bootstrap_delta_ci_many

        pairs, inverse = np.unique(np.stack([b, c], axis=-1), axis=0, return_inverse=True)
        keys = [(int(x), int(y)) for x, y in pairs]
        missing = [key for key in keys if key not in self.cache]
        if missing:
            found = bootstrap_delta_ci_many(missing, self.n, resamples=self.boot.resamples, seed=self.boot.seed,
                                            confidence=self.boot.confidence, method=self.method)
            self.cache.update({key: ci[0] for key, ci in found.items()})
        return np.array([self.cache[key] for key in keys], dtype=float)[inverse.ravel()]


def delta_covariance(b: Any, c: Any, joint: Any, n: int) -> Any:
    """Covariance (..., K, K) of K paired Δ's (proportions) from counts, as
    :func:`rlexp.protocol.selection.difference_covariance` computes it from the outcome vectors: with
    d_k = y_k − y_base per problem (±1 where checkpoint k flips the problem, else 0),
    d_j d_k = 1 exactly where both flip, so Σ d_j d_k = ``joint``[j, k] and
    Σ_jk = (joint_jk / n − Δ_j Δ_k) / n."""
    import numpy as np

    x = (np.asarray(c) - np.asarray(b)) / n
    return (np.asarray(joint) / n - x[..., :, None] * x[..., None, :]) / n


def selection_adjusted_pp(b: Any, c: Any, joint: Any, n: int, confidence: float) -> Any:
    """The best checkpoint's selection-adjusted Δ (pp) of each (study, run), as ``decide`` computes it
    (:func:`rlexp.protocol.selection.winner_inference`: the hybrid, ties to the first checkpoint, the
    1/n continuity step); NaN where the winner's variance is 0."""
    from rlexp.protocol.selection import winner_inference

    x = (c - b) / n
    res = winner_inference(x, delta_covariance(b, c, joint, n), confidence, step=1.0 / n)
    return 100.0 * res["estimate"]


def replication_passes(gate_1b_any: Any, primary_pp: Any, gate2: Any, min_mean_delta_pp: float) -> Any:
    """STOP-1 per study: Gate-1b on some checkpoint of the first run, and Gate-2 over both runs'
    primary Δ's (``primary_pp`` (sims, 2): raw or selection-adjusted, NaN fails), every one
    > ``gate2.min_each_delta_pp`` and their mean >= ``min_mean_delta_pp`` (the ID guardrail taken to hold)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        each = np.all(primary_pp > gate2.min_each_delta_pp + EPS, axis=1)
        mean = primary_pp.mean(axis=1) >= min_mean_delta_pp - EPS
    return gate_1b_any & each & mean


def judge(b: Any, c: Any, right: Any, n: int, sop: Sop, intervals: IntervalTable, joint: Any = None,
          ) -> dict[str, Any]:
    """Verdicts for simulated (b, c) of shape (sims, 2 runs, K), as ``decide`` judges the first run.

    Per checkpoint of the first run: Gate-1a, Gate-1b (with McNemar p, and with Holm-adjusted p)
    and a bare McNemar p < 0.05. Per study: CONFIRM (what ``decide`` answers for the first seed,
    before a sibling exists: Gate-1a or Gate-1b passes on some checkpoint, per-checkpoint or Holm
    as ``checkpoints.decide_on`` says) and STOP-1 (that Gate-1b, and Gate-2 over both runs'
    primary deltas; the primary checkpoint is the one with the largest delta, as ``decide``
    picks it; the ID guardrail, part of Gate-2, is taken to hold: the simulation has no ID set).
    Gate-2 reads each run's raw primary Δ, or its selection-adjusted one where the SOP's
    ``gate_2.estimate`` says so (``joint`` then needed: :func:`simulate_counts`' joint flips); it is
    computed where Gate-1b passes (elsewhere STOP-1 fails whatever it is) and returned as
    ``primary_adjusted`` (NaN elsewhere), beside ``primary_raw`` and ``gate_1b_any``.
    """
    import numpy as np

    delta = 100.0 * (c - b) / n
    first_b, first_c, first_delta = b[:, 0, :], c[:, 0, :], delta[:, 0, :]
    p = mcnemar_exact_vec(first_b, first_c)
    holm = holm_vec(p)
    # The interval is computed only where it can change a verdict: Gate-1b when delta and p pass,
    # Gate-1a when delta passes and p does not (Holm p >= p, so the Holm variants are covered).
    g1a, g1b = sop.gate_1a, sop.gate_1b
    need = (((first_delta >= g1b.min_delta_pp - EPS) & (p < g1b.max_mcnemar_p - EPS))
            | ((first_delta >= g1a.min_delta_pp - EPS) & (holm >= g1a.max_mcnemar_p - EPS)))
    ci_low = np.full(first_delta.shape, -np.inf)
    if need.any():
        rights = np.broadcast_to(right[:, None], first_b.shape)
        ci_low[need] = intervals.low(first_b[need], first_c[need], rights[need])
    out = {
        "gate_1a": gate_passes(first_delta, p, ci_low, g1a, ci_is_alternative=True),
        "gate_1b": gate_passes(first_delta, p, ci_low, g1b, ci_is_alternative=False),
        "gate_1a_holm": gate_passes(first_delta, holm, ci_low, g1a, ci_is_alternative=True),
        "gate_1b_holm": gate_passes(first_delta, holm, ci_low, g1b, ci_is_alternative=False),
        "mcnemar": p < 0.05,
    }
    suffix = "_holm" if sop.checkpoints.decide_on == "holm" else ""
    g1b_any = out[f"gate_1b{suffix}"].any(axis=1)
    out["confirm"] = out[f"gate_1a{suffix}"].any(axis=1) | g1b_any
    g2 = sop.gate_2
    primary = delta.max(axis=2)  # (sims, 2): each run's largest delta
    adjusted = np.full(primary.shape, np.nan)
    if joint is not None and g1b_any.any():
        adjusted[g1b_any] = selection_adjusted_pp(b[g1b_any], c[g1b_any], joint[g1b_any], n,
                                                  sop.bootstrap.confidence)
    elif g2.estimate == "selection_adjusted" and g1b_any.any():
        raise ValueError("judge: the SOP's Gate-2 reads the selection-adjusted Δ: pass the joint flips")
    out["stop_1"] = replication_passes(g1b_any, adjusted if g2.estimate == "selection_adjusted" else primary, g2,
                                       g2.min_mean_delta_pp)
    out["gate_1b_any"] = g1b_any
    out["primary_raw"] = primary
    out["primary_adjusted"] = adjusted
    out["delta"] = delta
    return out


# --------------------------------------------------------------------------- the table


def _joint_if_needed(sop: Sop, sim: dict[str, Any]) -> Any:
    """The joint flips when the SOP's Gate-2 reads the selection-adjusted Δ (its cost: one inference
    per run where Gate-1b passes), else None."""
    return sim["joint"] if sop.gate_2.estimate == "selection_adjusted" else None


def _rate(hits: Any) -> Rate:
    """Pass rate of one indicator per study, with the binomial Monte-Carlo error."""
    rate = float(hits.mean())
    return Rate(rate, math.sqrt(rate * (1 - rate) / len(hits)))


def _per_checkpoint_rate(hits: Any) -> Rate:
    """Mean pass rate of a single checkpoint (sims, K): the K checkpoints are exchangeable, so all are
    used; its Monte-Carlo error comes from each study's mean over K (the K are correlated)."""
    per_study = hits.mean(axis=1)
    sd = float(per_study.std(ddof=1)) if len(per_study) > 1 else 0.0
    return Rate(float(per_study.mean()), sd / math.sqrt(len(per_study)))


def check_settings(settings: CalibrationSettings) -> None:
    """ValueError naming the setting when the model cannot be simulated."""
    s = settings
    if not s.correlations:
        raise ValueError("correlations: at least one value")
    for rho in s.correlations:
        if not (0.0 <= rho <= 0.99 or rho == 1.0):
            raise ValueError(f"correlations: {rho} is outside [0, 0.99] (or exactly 1)")
    if not 1 <= s.k <= 10:
        raise ValueError(f"k: {s.k} checkpoints, expected 1 to 10")
    if abs(s.effect_pp) / 100.0 >= s.discordance:
        raise ValueError("effect_pp: the effect must be smaller than the discordance")
    if (s.discordance + abs(s.effect_pp) / 100.0) / 2 >= min(s.base_acc_low, 1 - s.base_acc_high):
        raise ValueError("discordance: too large for the baseline accuracy range (a flip probability would "
                         "exceed 1)")


def calibrate(sop: Sop, settings: CalibrationSettings | None = None, *, ci_method: str | None = None
              ) -> Calibration:
    """Pass rates of each gate under no effect and under ``settings.effect_pp``, per correlation, seeded.

    ``ci_method`` replaces the SOP's ``bootstrap.method`` (what the gates would do under an SOP
    that chose it); the other bootstrap settings stay the SOP's.
    """
    import numpy as np

    s = settings or CalibrationSettings()
    check_settings(s)
    intervals = IntervalTable(sop, s.n, ci_method)
    rows: list[CalibrationRow] = []
    below: list[tuple[float, float, Rate]] = []
    disc: list[float] = []
    accs: list[float] = []
    scenarios = (("null (0pp)", 0.0), (f"{s.effect_pp:+g}pp", s.effect_pp))
    for rho_index, rho in enumerate(s.correlations):
        for scenario_index, (scenario, effect) in enumerate(scenarios):
            rng = np.random.default_rng([s.seed, rho_index, scenario_index])
            tallies: dict[str, list[Any]] = {}
            done = 0
            while done < s.sims:
                size = min(s.chunk, s.sims - done)
                sim = simulate_counts(s, effect, rho, rng, size)
                verdicts = judge(sim["b"], sim["c"], sim["right"], s.n, sop, intervals, _joint_if_needed(sop, sim))
                if effect == 0.0:
                    disc.append(float(((sim["b"] + sim["c"]) / s.n).mean()))
                    accs.append(float(sim["base_acc"].mean()))
                for key, value in verdicts.items():
                    tallies.setdefault(key, []).append(value[:, 0, :] if key == "delta" else value)
                done += size
            joined = {k: np.concatenate(v, axis=0) for k, v in tallies.items()}
            first = joined["delta"]
            delta_corr = float(np.corrcoef(first[:, 0], first[:, 1])[0, 1]) if s.k > 1 else 1.0
            for gate in GATES:
                hits = joined[gate]
                holm = joined[f"{gate}_holm"] if gate != "mcnemar" else None
                rows.append(CalibrationRow(
                    rho, delta_corr, GATE_LABELS[gate], scenario, _per_checkpoint_rate(hits),
                    _rate(hits.any(axis=1)), _rate(holm.any(axis=1)) if holm is not None else None))
            for family in ("confirm", "stop_1"):
                rate = _rate(joined[family])
                rows.append(CalibrationRow(rho, delta_corr, GATE_LABELS[family], scenario, rate, rate, None))
            if scenario_index == 0 and s.below_bar_effects:
                below.append((rho, 0.0, _rate(joined["stop_1"])))
        for effect_index, effect in enumerate(s.below_bar_effects):
            if effect / 100.0 >= s.discordance or (s.discordance + effect / 100.0) / 2 >= min(
                    s.base_acc_low, 1 - s.base_acc_high):
                continue  # not a possible effect at this discordance (as check_settings says of effect_pp)
            rng = np.random.default_rng([s.seed, rho_index, 2 + effect_index])
            hits = []
            done = 0
            while done < s.sims:
                size = min(s.chunk, s.sims - done)
                sim = simulate_counts(s, effect, rho, rng, size)
                hits.append(judge(sim["b"], sim["c"], sim["right"], s.n, sop, intervals,
                                  _joint_if_needed(sop, sim))["stop_1"])
                done += size
            below.append((rho, effect, _rate(np.concatenate(hits))))
    return Calibration(s, sop.version, sop.sha256, intervals.method, sop.bootstrap.resamples, tuple(rows),
                       float(np.mean(disc)), float(np.mean(accs)), len(intervals.cache), tuple(below))


def gate_1b_best_of_k(effect_pp: float, n: int, discordance: float, *, k: int = 3,
                      correlations: tuple[float, ...] = DEFAULT_CORRELATIONS, sims: int = 10_000, seed: int = 0,
                      min_delta_pp: float = 3.0, max_mcnemar_p: float = 0.05) -> tuple[float, ...] | None:
    """P(some checkpoint of K passes Gate-1b's Δ and McNemar clauses) at a true ``effect_pp``, one
    rate per correlation, under this module's model with the baseline accuracy fixed at 0.7 (the
    per-checkpoint rate, :func:`rlexp.stats.gate_1b_pass_probability`, does not depend
    on it). What a decision on the best of K gets, beside the per-checkpoint rate. Simulated
    (``sims`` studies, seeded: Monte-Carlo error at most 0.5/sqrt(sims)); the interval clause is left
    out as there. None when the effect or discordance is not possible under the model."""
    import numpy as np

    s = CalibrationSettings(sims=sims, seed=seed, n=n, base_acc_low=0.7, base_acc_high=0.7,
                            discordance=discordance, k=k, correlations=correlations, effect_pp=effect_pp)
    try:
        check_settings(s)
    except ValueError:
        return None
    q1, q0 = flip_probabilities(s, effect_pp, np.float64(0.7))
    bits = pattern_bits(k)
    out = []
    for index, rho in enumerate(correlations):  # simulate_counts for one run, with the patterns drawn once
        rng = np.random.default_rng([seed, index])
        right = rng.binomial(n, 0.7, size=sims)
        b = rng.multinomial(right, pattern_probabilities(q1, k, rho)) @ bits
        c = rng.multinomial(n - right, pattern_probabilities(q0, k, rho)) @ bits
        delta = 100.0 * (c - b) / n
        passes = (delta >= min_delta_pp - EPS) & (mcnemar_exact_vec(b, c) < max_mcnemar_p - EPS)
        out.append(float(passes.any(axis=1).mean()))
    return tuple(out)


class _NormalIntervals:
    """The interval clause in its normal approximation (Wald on the paired Δ, the SOP's confidence):
    for the plan's claim probability, where the seeded bootstrap of every distinct (b, c) would
    cost seconds; Gate-1b's interval clause rarely binds once its McNemar clause holds."""

    def __init__(self, n: int, confidence: float) -> None:
        from scipy.special import ndtri

        self.n, self.z = n, float(ndtri(1 - (1 - confidence) / 2))

    def low(self, b: Any, c: Any, right: Any) -> Any:
        import numpy as np

        delta = (c - b) / self.n
        se = np.sqrt(np.clip((b + c) / self.n - delta ** 2, 0.0, None) / self.n)
        return 100.0 * (delta - self.z * se)


def claim_probability(sop: Sop, effect_pp: float, n: int, discordance: float, *,
                      correlations: tuple[float, ...] = DEFAULT_CORRELATIONS, sims: int = 4000,
                      seed: int = 0) -> dict[str, Any] | None:
    """P(STOP-1) at a true ``effect_pp`` for every checkpoint of both runs: the whole claim rule of
    :func:`judge` (Gate-1b on the best of the K checkpoints of the first run, Gate-2 over both runs'
    selected Δ's), one rate per latent checkpoint correlation, with its Monte-Carlo SE. The model of
    :func:`calibrate` with the baseline accuracy fixed at 0.7 and the interval clause in its normal
    approximation (:class:`_NormalIntervals`), so that ``plan`` can print it in a fraction of a
    second. None when the effect or discordance is not possible under the model."""
    import numpy as np

    s = CalibrationSettings(sims=sims, seed=seed, n=n, base_acc_low=0.7, base_acc_high=0.7,
                            discordance=discordance, k=sop.checkpoints.k, correlations=correlations,
                            effect_pp=effect_pp)
    try:
        check_settings(s)
    except ValueError:
        return None
    intervals = _NormalIntervals(n, sop.bootstrap.confidence)
    rates, ses = [], []
    for index, rho in enumerate(correlations):
        sim = simulate_counts(s, effect_pp, rho, np.random.default_rng([seed, index]), sims)
        hit = judge(sim["b"], sim["c"], sim["right"], n, sop, intervals,  # type: ignore[arg-type]
                    _joint_if_needed(sop, sim))["stop_1"]
        rate = _rate(hit)
        rates.append(rate.rate)
        ses.append(rate.se)
    return {"effect_pp": effect_pp, "k": sop.checkpoints.k, "correlations": list(correlations), "rates": rates,
            "mc_se": ses, "sims": sims}


# --------------------------------------------------------------------------- the claim rule, calibrated

CLAIM_EFFECTS = (0.0, 1.0, 2.0, 3.0, 5.0)   # true effects of the STOP-1 table (pp)
ESTIMATES = ("raw", "selection_adjusted")   # what Gate-2 can average (rlexp.spec.sop.Gate2Thresholds.estimate)
THRESHOLD_STEP_PP = 0.05                    # the grid Gate-2's mean threshold is chosen on
THRESHOLD_MAX_PP = 10.0


@dataclass(frozen=True)
class ClaimTargets:
    """What the claim rule is calibrated to: a true Δ at or below ``below_effect_pp`` reaches STOP-1 at
    most at ``max_rate_below``, and a true ``at_effect_pp`` at least at ``min_rate_at``, at every
    checkpoint correlation simulated."""

    below_effect_pp: float = 2.0
    max_rate_below: float = 0.10
    at_effect_pp: float = 3.0
    min_rate_at: float = 0.33


@dataclass(frozen=True)
class ClaimRule:
    """STOP-1 with Gate-2 averaging ``estimate`` against ``threshold_pp`` (None: no threshold on the
    grid meets the bound below), its rate per (correlation, true effect) and the worst cases."""

    estimate: str
    threshold_pp: float | None
    rates: tuple[tuple[float, float, Rate], ...]     # (rho, true effect pp, STOP-1 rate)
    rate_below: Rate | None                          # the largest rate at a true effect <= below_effect_pp
    rate_at: Rate | None                             # the smallest rate at at_effect_pp
    meets_targets: bool

    def rate(self, rho: float, effect: float) -> Rate | None:
        return next((r for x, e, r in self.rates if x == rho and e == effect), None)


@dataclass(frozen=True)
class ClaimCalibration:
    settings: CalibrationSettings
    targets: ClaimTargets
    sop_version: str
    sop_sha256: str
    effects: tuple[float, ...]
    as_written: ClaimRule                 # the SOP's own Gate-2 (its estimate and min_mean_delta_pp)
    candidates: tuple[ClaimRule, ...]     # per estimate, at the threshold chosen for it
    chosen: ClaimRule | None              # the candidate meeting both targets with the most power

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        def rule(r: ClaimRule | None) -> dict[str, Any] | None:
            if r is None:
                return None
            return {"estimate": r.estimate, "threshold_pp": r.threshold_pp, "meets_targets": r.meets_targets,
                    "rate_below": asdict(r.rate_below) if r.rate_below else None,
                    "rate_at": asdict(r.rate_at) if r.rate_at else None,
                    "rates": [{"correlation": x, "effect_pp": e, "rate": v.rate, "se": v.se} for x, e, v in r.rates]}

        s = asdict(self.settings)
        s["correlations"] = list(self.settings.correlations)
        return {"settings": s, "targets": asdict(self.targets), "sop_version": self.sop_version,
                "sop_sha256": self.sop_sha256, "effects_pp": list(self.effects),
                "as_written": rule(self.as_written), "candidates": [rule(r) for r in self.candidates],
                "chosen": rule(self.chosen), "sop_section": self.sop_section()}

    def sop_section(self) -> dict[str, Any] | None:
        """The chosen rule as a SOP file states it: ``gate_2``'s two keys and ``claim_calibration``."""
        r = self.chosen
        if r is None or r.rate_below is None or r.rate_at is None:
            return None
        t = self.targets
        return {"gate_2": {"min_mean_delta_pp": r.threshold_pp, "estimate": r.estimate},
                "claim_calibration": {
                    "below_effect_pp": t.below_effect_pp, "max_rate_below": t.max_rate_below,
                    "at_effect_pp": t.at_effect_pp, "min_rate_at": t.min_rate_at,
                    "rate_below": round(r.rate_below.rate, 4), "rate_at": round(r.rate_at.rate, 4),
                    "mc_se": round(max(r.rate_below.se, r.rate_at.se), 4), "sims": self.settings.sims,
                    "seed": self.settings.seed}}

    def markdown(self) -> str:
        s, t = self.settings, self.targets
        lines = [f"STOP-1 rate (± one Monte-Carlo SE), {s.sims} simulated studies per true effect and "
                 f"correlation, seed {s.seed}, N={s.n}, discordance {s.discordance:.2f}, K={s.k}, SOP "
                 f"{self.sop_version} for Gate-1b. Targets: a true Δ ≤ {t.below_effect_pp:+g}pp reaches STOP-1 "
                 f"at most {t.max_rate_below:.0%} of the time, a true {t.at_effect_pp:+g}pp at least "
                 f"{t.min_rate_at:.0%}, at every ρ.", "",
                 "| Gate-2 averages | mean ≥ | ρ | " + " | ".join(f"true {e:+g}pp" for e in self.effects) + " |",
                 "|---|---|---|" + "---|" * len(self.effects)]
        shown = [self.as_written, *[r for r in self.candidates if r != self.as_written]]
        for r in shown:
            label = "raw best-of-K Δ" if r.estimate == "raw" else "selection-adjusted Δ"
            threshold = f"{r.threshold_pp:+.2f}pp" if r.threshold_pp is not None else "none meets"
            for rho in s.correlations:
                cells = [(v.pct() if (v := r.rate(rho, e)) is not None else "-") for e in self.effects]
                lines.append(f"| {label} | {threshold} | {rho:g} | " + " | ".join(cells) + " |")
        lines.append("")
        for r in shown:
            label = "raw" if r.estimate == "raw" else "selection-adjusted"
            if r.threshold_pp is None or r.rate_below is None or r.rate_at is None:
                lines.append(f"- {label}: no threshold up to {THRESHOLD_MAX_PP:g}pp holds the bound below.")
                continue
            lines.append(f"- {label}, mean ≥ {r.threshold_pp:+.2f}pp: worst case at true ≤ {t.below_effect_pp:+g}pp "
                         f"{r.rate_below.pct()}, at true {t.at_effect_pp:+g}pp {r.rate_at.pct()}: "
                         + ("meets both targets" if r.meets_targets else "misses " + (
                             "the power target" if r.rate_below.rate <= t.max_rate_below + EPS else
                             "the bound below")))
        if self.chosen is not None:
            lines.append(f"- chosen: Gate-2 on the {self.chosen.estimate.replace('_', '-')} Δ, mean ≥ "
                         f"{self.chosen.threshold_pp:+.2f}pp")
        else:
            lines.append("- chosen: none (no rule meets both targets at this N and discordance)")
        return "\n".join(lines) + "\n"


def _claim_outcomes(sop: Sop, s: CalibrationSettings, effect: float, rho: float, rng: Any,
                    intervals: IntervalTable, adjusted: bool) -> dict[str, Any]:
    """Gate-1b's verdict and both runs' raw and adjusted primary Δ's of ``s.sims`` studies."""
    import numpy as np

    parts: dict[str, list[Any]] = {"gate_1b_any": [], "primary_raw": [], "primary_adjusted": []}
    done = 0
    while done < s.sims:
        size = min(s.chunk, s.sims - done)
        sim = simulate_counts(s, effect, rho, rng, size)
        verdicts = judge(sim["b"], sim["c"], sim["right"], s.n, sop, intervals, sim["joint"] if adjusted else None)
        for key, value in parts.items():
            value.append(verdicts[key])
        done += size
    return {key: np.concatenate(value, axis=0) for key, value in parts.items()}


def calibrate_claim(sop: Sop, settings: CalibrationSettings | None = None, targets: ClaimTargets | None = None,
                    estimates: tuple[str, ...] = ESTIMATES) -> ClaimCalibration:
    """Choose Gate-2's mean threshold, for the raw and for the selection-adjusted Δ, by simulating the
    whole claim rule (Gate-1b on the best of K of a first seed, a second seed, Gate-2; the rest of the
    SOP as written) at the true effects of :data:`CLAIM_EFFECTS` (and the targets') per correlation.

    For each estimate the threshold is the smallest on a 0.05pp grid whose STOP-1 rate at every true
    effect ≤ ``targets.below_effect_pp`` and every correlation is at most ``targets.max_rate_below``;
    a rule meets the targets when its smallest rate at ``targets.at_effect_pp`` is at least
    ``targets.min_rate_at``. Of those meeting both, the one with the most power there is chosen.
    The same simulated studies judge every threshold and both estimates (paired comparisons).
    ``estimates``: the candidates weighed (the SOP's own is always simulated).
    """
    import numpy as np

    s = settings or CalibrationSettings(sims=2000)
    t = targets or ClaimTargets()
    check_settings(s)
    effects = tuple(sorted(set(CLAIM_EFFECTS) | {t.below_effect_pp, t.at_effect_pp}))
    for effect in effects:
        check_settings(replace_effect(s, effect))
    unknown = [e for e in estimates if e not in ESTIMATES]
    if unknown or not estimates:
        raise ValueError(f"estimates: {unknown or 'none'}, expected some of {', '.join(ESTIMATES)}")
    need_adjusted = "selection_adjusted" in estimates or sop.gate_2.estimate == "selection_adjusted"
    intervals = IntervalTable(sop, s.n)
    outcomes = {}
    for rho_index, rho in enumerate(s.correlations):
        for effect_index, effect in enumerate(effects):
            rng = np.random.default_rng([s.seed, rho_index, 100 + effect_index])
            outcomes[(rho, effect)] = _claim_outcomes(sop, s, effect, rho, rng, intervals, need_adjusted)
    g2 = sop.gate_2
    grid = np.round(np.arange(0.0, THRESHOLD_MAX_PP + THRESHOLD_STEP_PP / 2, THRESHOLD_STEP_PP), 10)

    def rates_over(estimate: str, thresholds: Any) -> dict[tuple[float, float], Any]:
        """STOP-1 rate at each threshold, per scenario (arrays over ``thresholds``)."""
        out = {}
        for key, o in outcomes.items():
            primary = o["primary_adjusted" if estimate == "selection_adjusted" else "primary_raw"]
            hits = np.stack([replication_passes(o["gate_1b_any"], primary, g2, float(x)) for x in thresholds])
            out[key] = hits.mean(axis=1)
        return out

    def rule(estimate: str, threshold: float | None) -> ClaimRule:
        if threshold is None:
            return ClaimRule(estimate, None, (), None, None, False)
        rates = []
        for (rho, effect), o in outcomes.items():
            primary = o["primary_adjusted" if estimate == "selection_adjusted" else "primary_raw"]
            rates.append((rho, effect, _rate(replication_passes(o["gate_1b_any"], primary, g2, threshold))))
        below = max((r for _, e, r in rates if e <= t.below_effect_pp + EPS), key=lambda r: r.rate)
        at = min((r for _, e, r in rates if abs(e - t.at_effect_pp) < EPS), key=lambda r: r.rate)
        meets = below.rate <= t.max_rate_below + EPS and at.rate >= t.min_rate_at - EPS
        return ClaimRule(estimate, threshold, tuple(rates), below, at, meets)

    candidates = []
    for estimate in estimates:
        per_scenario = rates_over(estimate, grid)
        worst = np.max([v for (rho, e), v in per_scenario.items() if e <= t.below_effect_pp + EPS], axis=0)
        ok = np.nonzero(worst <= t.max_rate_below + EPS)[0]
        candidates.append(rule(estimate, float(grid[ok[0]]) if len(ok) else None))
    as_written = rule(g2.estimate, g2.min_mean_delta_pp)
    meeting = [r for r in candidates if r.meets_targets and r.rate_at is not None]
    chosen = max(meeting, key=lambda r: r.rate_at.rate) if meeting else None  # type: ignore[union-attr]
    return ClaimCalibration(s, t, sop.version, sop.sha256, effects, as_written, tuple(candidates), chosen)


def replace_effect(settings: CalibrationSettings, effect_pp: float) -> CalibrationSettings:
    from dataclasses import replace

    return replace(settings, effect_pp=effect_pp)
