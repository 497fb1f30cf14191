"""The canonical report of one paired comparison, in percentage points (what decision.json stores)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rlexp.stats._common import (
    COMPARISON_CI_METHODS,
    ComparisonCIMethod,
    _check_choice,
)
from rlexp.stats._counts import PairedCounts, paired_counts
from rlexp.stats._gate_power import mcnemar_mde, mcnemar_power
from rlexp.stats._intervals import newcombe_paired_ci, wilson_ci
from rlexp.stats._mcnemar import _mcnemar_pvalue
from rlexp.stats._paired import _result
from rlexp.stats._power import WIN_THRESHOLD_PP
from rlexp.stats._resampling import _bootstrap

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class PairedComparison:
    """The canonical report of one paired comparison (new vs baseline), in percentage points.

    The fields are those stored in ``decision.json`` and printed by ``rlexp compare``.
    """

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
    ci_pp: tuple[float, float]         # paired bootstrap, or Newcombe's hybrid score interval
    ci_method: ComparisonCIMethod
    confidence: float
    resamples: int
    seed: int
    se_pp: float                       # CLT
    bootstrap_se_pp: float
    discordance: float                 # (b + c) / n
    mde_pp: float | None               # minimal detectable effect at 80% power of the exact McNemar test, alpha 0.05
    power_at_3pp: float | None         # exact McNemar power at WIN_THRESHOLD_PP (+3pp), this n and discordance

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("acc_base_ci", "acc_new_ci", "ci_pp"):
            out[key] = list(out[key])
        return out


def compare_counts(counts: PairedCounts, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
                   method: ComparisonCIMethod = "percentile") -> PairedComparison:
    """The canonical report from a 2x2 paired table (see :func:`paired_comparison`).

    ``method`` picks the interval ``ci_pp``: a paired bootstrap (``percentile``, ``basic``,
    ``bca``) or ``newcombe`` (:func:`newcombe_paired_ci`, no resampling). The bootstrap standard
    deviation ``bootstrap_se_pp`` comes from the seeded bootstrap in every case.

    Examples
    --------
    >>> cmp = compare_counts(PairedCounts(n11=677, b=61, c=57, n00=205))
    >>> cmp.delta_pp, cmp.b, cmp.c, cmp.ci_pp
    (-0.4, 61, 57, (-2.6, 1.7))
    """
    if counts.n <= 0:
        raise ValueError("no paired problems")
    test = _result(counts, "two-sided", "exact")
    n, b, c = test.n, test.b, test.c
    method = _check_choice(method, "method", COMPARISON_CI_METHODS)  # type: ignore[assignment]
    low, high, spread = _bootstrap(b, c, n, confidence_level=confidence,
                                   method="percentile" if method == "newcombe" else method, n_resamples=resamples,
                                   rng=seed, alternative="two-sided")
    if method == "newcombe":
        interval = newcombe_paired_ci(counts, confidence)
        low, high = n * interval.low, n * interval.high
    mde, power3 = _power(n, test.discordance)
    return PairedComparison(
        n=n, correct_base=test.correct_base, correct_new=test.correct_new,
        acc_base=test.accuracy_base, acc_new=test.accuracy_new,
        acc_base_ci=tuple(wilson_ci(test.correct_base, n, confidence)),
        acc_new_ci=tuple(wilson_ci(test.correct_new, n, confidence)),
        delta_pp=100.0 * (c - b) / n, b=b, c=c,
        mcnemar_p=test.pvalue, mcnemar_midp=_mcnemar_pvalue(b, c, "two-sided", "midp"),
        ci_pp=(100.0 * low / n, 100.0 * high / n), ci_method=method, confidence=confidence,
        resamples=resamples, seed=seed, se_pp=100.0 * test.standard_error, bootstrap_se_pp=100.0 * spread / n,
        discordance=test.discordance, mde_pp=mde, power_at_3pp=power3,
    )


def paired_comparison(y_base: ArrayLike, y_new: ArrayLike, **kwargs: Any) -> PairedComparison:
    """The canonical report of two aligned 0/1 outcome sequences (same problems, same order).

    Accuracies with Wilson intervals, ``delta_pp``, ``b``, ``c``, the exact McNemar p and its
    mid-p, a seeded paired-bootstrap interval (``resamples``, ``seed``, ``confidence``,
    ``method`` as keyword arguments), the CLT and bootstrap standard errors, and the minimal
    detectable effect and power at the win threshold of the exact McNemar test
    (:func:`mcnemar_mde`, :func:`mcnemar_power`).

    Examples
    --------
    >>> cmp = paired_comparison([1, 1, 1, 0, 0, 1, 0, 1], [1, 1, 0, 1, 1, 1, 1, 1], seed=0)
    >>> cmp.b, cmp.c, cmp.delta_pp, round(cmp.mcnemar_p, 3)
    (1, 3, 25.0, 0.625)
    """
    return compare_counts(paired_counts(y_base, y_new), **kwargs)


def _power(n: int, discordance: float) -> tuple[float | None, float | None]:
    """MDE (80% power) and power at the win threshold of the exact two-sided McNemar test at α = 0.05,
    the test the SOP runs (:func:`mcnemar_mde`, :func:`mcnemar_power`;
    the z approximation of :func:`power_at` overstates the power by about 2 points at N = 1000);
    None where the discordance makes them undefined (no effect within it reaches 80%; a threshold
    beyond it). The threshold is ``WIN_THRESHOLD_PP``, the default that
    tests/test_sop.py keeps equal to the SOP's ``gate_1b.min_delta_pp``."""
    if discordance <= 0.0:
        return None, None
    power = mcnemar_power(WIN_THRESHOLD_PP, n, discordance) if 100.0 * discordance >= WIN_THRESHOLD_PP else None
    return mcnemar_mde(n, discordance), power
