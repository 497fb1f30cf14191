"""Power of a paired accuracy comparison (stdlib only: ``statistics.NormalDist``).

Miller (2024), "Adding Error Bars to Evals", eq. for paired differences: to detect a difference
``δ`` between two models scored on the same ``n`` questions,

    n = (z_{α/2} + z_β)² · (ω² + σ²_A/K_A + σ²_B/K_B) / δ²

with ``ω²`` the variance of the per-question score difference and the ``σ²/K`` terms the
sampling variance of each model's answer (zero for greedy decoding, K = 1 sample, which is how
the SOP scores). For 0/1 scores the per-question difference is −1, 0 or +1, so under a null of
no difference ``ω²`` equals the discordance rate ``(b + c) / n`` — the share of questions on
which the two models disagree (Baseline-S0 against Baseline-SOTA of the campaign behind the SOP
disagreed on 118 of 1,000: ω² ≈ 0.118). Solving for ``δ``:

    MDE = (z_{1−α/2} + z_{power}) · sqrt(ω² / n)

which gives ≈ 3.0 pp for n = 1,000 at 12 % discordance, and 6.8 pp for the 202-problem
in-run monitor set: the SOP's +3.0 pp win threshold was invisible on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

_Z = NormalDist()

# Default only: the SOP file's gate_1b.min_delta_pp (+3.0 pp, sop/README.md#gate-1b) is the threshold in force.
# This module stays stdlib-only (``rlexp plan`` imports it), so it does not read the SOP; a caller
# holding a Sop can pass ``sop.gate_1b.min_delta_pp`` as ``power_report(win_threshold_pp=...)``.
# tests/test_sop.py fails if this default and the SOP file in force ever disagree.
WIN_THRESHOLD_PP = 3.0
DEFAULT_DISCORDANCE = 0.12  # Baseline-S0 vs Baseline-SOTA: b + c = 118 of 1,000


def _validate(n: int, discordance: float, alpha: float) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 < discordance <= 1.0:
        raise ValueError(f"discordance must be in (0, 1], got {discordance}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def mde_pp(
    n: int, discordance: float = DEFAULT_DISCORDANCE, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Minimal detectable effect (percentage points) of a paired, two-sided comparison.

    Examples
    --------
    >>> round(mde_pp(1000, 0.12), 2)   # N = 1,000 problems, 12% discordance: the SOP's shape
    3.07
    """
    _validate(n, discordance, alpha)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    z = _Z.inv_cdf(1 - alpha / 2) + _Z.inv_cdf(power)
    return 100.0 * z * math.sqrt(discordance / n)


def power_at(delta_pp: float, n: int, discordance: float = DEFAULT_DISCORDANCE, alpha: float = 0.05) -> float:
    """Probability that a two-sided paired z-test at level ``alpha`` detects a true ``delta_pp``.

    Examples
    --------
    >>> round(power_at(3.0, 1000, 0.12), 2)
    0.78
    """
    _validate(n, discordance, alpha)
    se = math.sqrt(discordance / n)
    shift = (delta_pp / 100.0) / se
    z = _Z.inv_cdf(1 - alpha / 2)
    return _Z.cdf(shift - z) + _Z.cdf(-shift - z)


def n_for_mde(delta_pp: float, discordance: float = DEFAULT_DISCORDANCE, alpha: float = 0.05,
              power: float = 0.8) -> int:  # fmt: skip
    """Problems needed to detect ``delta_pp`` (Miller's n, rounded up).

    Examples
    --------
    >>> n_for_mde(3.0, 0.12)
    1047
    """
    if delta_pp <= 0:
        raise ValueError(f"delta_pp must be > 0, got {delta_pp}")
    z = _Z.inv_cdf(1 - alpha / 2) + _Z.inv_cdf(power)
    return math.ceil(z * z * discordance / (delta_pp / 100.0) ** 2)


@dataclass(frozen=True)
class PowerReport:
    """The planned comparison on one eval set."""

    n: int
    discordance: float
    alpha: float
    power_target: float
    win_threshold_pp: float
    mde_pp: float
    power_at_win_threshold: float
    n_for_win_threshold: int
    baseline_accuracy: float | None = None
    se_single_pp: float | None = None  # SE of one accuracy (unpaired), for context
    mde_unpaired_pp: float | None = None  # what two independent samples would need
    # What a claim needs (rlexp.stats.gate_1b_pass_probability): the chance that a true effect at the win threshold
    # passes Gate-1b (Δ >= threshold AND McNemar p < alpha), and the effect that passes it with 80%.
    gate_1b_pass_power_at_win_threshold: float | None = None
    gate_1b_effect_80_pp: float | None = None
    # The exact McNemar test the SOP runs (rlexp.stats.mcnemar_mde, mcnemar_power): ``mde_pp`` and ``power_at_win_threshold``
    # above are Miller's z approximation, about 2 points optimistic at N = 1000 (80.0% vs 78.0% at its MDE, 12% discordance)
    mde_exact_pp: float | None = None
    power_exact_at_win_threshold: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "discordance": self.discordance,
            "alpha": self.alpha,
            "power_target": self.power_target,
            "win_threshold_pp": self.win_threshold_pp,
            "mde_pp": self.mde_pp,
            "power_at_win_threshold": self.power_at_win_threshold,
            "n_for_win_threshold": self.n_for_win_threshold,
            "baseline_accuracy": self.baseline_accuracy,
            "se_single_pp": self.se_single_pp,
            "mde_unpaired_pp": self.mde_unpaired_pp,
            "gate_1b_pass_power_at_win_threshold": self.gate_1b_pass_power_at_win_threshold,
            "gate_1b_effect_80_pp": self.gate_1b_effect_80_pp,
            "mde_exact_pp": self.mde_exact_pp,
            "power_exact_at_win_threshold": self.power_exact_at_win_threshold,
        }


def power_report(n: int, discordance: float = DEFAULT_DISCORDANCE, baseline_accuracy: float | None = None,
                 alpha: float = 0.05, power: float = 0.8,
                 win_threshold_pp: float = WIN_THRESHOLD_PP) -> PowerReport:  # fmt: skip
    """The power of a planned comparison on ``n`` problems, as ``rlexp plan`` prints it: Miller's z
    approximation, the exact McNemar test, and the chance that a true effect passes Gate-1b.

    Examples
    --------
    >>> r = power_report(1000, 0.12)
    >>> round(r.mde_pp, 2), round(r.mde_exact_pp, 2), round(r.gate_1b_pass_power_at_win_threshold, 2)
    (3.07, 3.14, 0.52)
    """
    se_single = mde_unpaired = None
    if baseline_accuracy is not None:
        p = baseline_accuracy
        se_single = 100.0 * math.sqrt(p * (1 - p) / n)
        z = _Z.inv_cdf(1 - alpha / 2) + _Z.inv_cdf(power)
        mde_unpaired = 100.0 * z * math.sqrt(2 * p * (1 - p) / n)
    return PowerReport(
        n=n,
        discordance=discordance,
        alpha=alpha,
        power_target=power,
        win_threshold_pp=win_threshold_pp,
        mde_pp=mde_pp(n, discordance, alpha, power),
        power_at_win_threshold=power_at(win_threshold_pp, n, discordance, alpha),
        n_for_win_threshold=n_for_mde(win_threshold_pp, discordance, alpha, power),
        baseline_accuracy=baseline_accuracy,
        se_single_pp=se_single,
        mde_unpaired_pp=mde_unpaired,
        **_gate_1b_power(n, discordance, alpha, power, win_threshold_pp),
    )


def _gate_1b_power(n: int, discordance: float, alpha: float, power: float,
                   win_threshold_pp: float) -> dict[str, float | None]:
    from rlexp.stats._gate_power import (
        gate_1b_effect_for_power,
        gate_1b_pass_probability,
        mcnemar_mde,
        mcnemar_power,
    )

    limits = {"min_delta_pp": win_threshold_pp, "max_mcnemar_p": alpha}
    possible = win_threshold_pp <= 100.0 * discordance
    at_threshold = gate_1b_pass_probability(win_threshold_pp, n, discordance, **limits) if possible else 0.0
    return {"gate_1b_pass_power_at_win_threshold": at_threshold,
            "gate_1b_effect_80_pp": gate_1b_effect_for_power(n, discordance, power=power, **limits),
            "mde_exact_pp": mcnemar_mde(n, discordance, alpha=alpha, power=power),
            "power_exact_at_win_threshold": (mcnemar_power(win_threshold_pp, n, discordance, alpha=alpha)
                                             if possible else None)}
