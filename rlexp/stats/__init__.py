"""Paired statistics for two models scored on the same problems, and the power of such comparisons.

The conventions are those of :mod:`scipy.stats`: a test returns a frozen result object with
``statistic`` and ``pvalue``, its ``confidence_interval(confidence_level=0.95, ...)`` method
returns a :class:`ConfidenceInterval` ``(low, high)``, one-sided tests take
``alternative="greater"`` or ``"less"``, and random resampling takes ``rng`` (``None``, an
integer seed or a :class:`numpy.random.Generator`). Effects are proportions
(``delta = 0.03`` is three percentage points); percentage points appear only in
:class:`PairedComparison`, the canonical report whose ``*_pp`` fields the decision files store.

With paired 0/1 outcomes the per-problem difference ``y_new - y_base`` takes three values
(-1, 0, +1), so the whole sample is described by ``b`` (base right, new wrong), ``c`` (base
wrong, new right) and ``n``:

- the exact McNemar test is the binomial test of ``c`` among the ``b + c`` discordant problems
  at probability 1/2;
- the paired bootstrap (resampling the n problems with replacement) is the same as drawing the
  counts of the three values from Multinomial(n, (b/n, 1 - (b+c)/n, c/n)). We draw that
  multinomial as two vectorised binomials (the number of discordant draws
  m ~ Bin(n, (b+c)/n), then the wins among them ~ Bin(m, c/(b+c))), which is exactly how a
  multinomial factorises; 10,000 resamples take about a millisecond
  (benchmarks/bench_bootstrap.py).

The main entry points:

- :func:`paired_test` -- exact (or mid-p) McNemar test on two aligned 0/1 sequences, returning
  a :class:`PairedTestResult` with ``delta``, ``b``, ``c``, ``n``, ``statistic``, ``pvalue`` and a
  paired-bootstrap ``confidence_interval`` (percentile, basic or BCa);
- :func:`pair` -- align two mappings ``problem id -> 0/1`` into a :class:`PairedOutcomes`,
  refusing different problem sets unless ``intersect=True`` (and then reporting what was dropped);
- :func:`adjust_pvalues` -- Bonferroni, Holm, Benjamini-Hochberg and Benjamini-Yekutieli
  adjusted p-values for a family of tests;
- :func:`paired_comparison` / :func:`compare_counts` -- the canonical report of one comparison;
- :func:`wilson_ci`, :func:`pass_at_k`, :func:`cluster_robust_mean` for single accuracies;
- :func:`power_report`, :func:`mde_pp`, :func:`power_at` -- the power of a planned comparison by
  Miller's (2024) z approximation; :func:`mcnemar_power`, :func:`mcnemar_mde` -- the same for the
  exact McNemar test; :func:`gate_1b_pass_probability`, :func:`gate_1b_effect_for_power` -- the
  chance that a true effect passes the SOP's Gate-1b (standard library only: ``rlexp plan``
  prints them);
- :func:`mean_score_comparison`, :func:`clustered_se` -- per-item scores beyond 0/1 (paired t,
  paired bootstrap, cluster-robust SE).

The layout is scipy's: private modules (``_paired``, ``_resampling``, ``_intervals``, ...) and
this one public namespace. Only numpy and scipy are needed, both imported inside the functions
that use them; each name's private module is imported on first use (PEP 562 ``__getattr__``),
so ``rlexp plan``, which needs the power functions only, loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

# the public names, by the private module that defines them (in the order of the docs above)
_MODULE_OF_NAMES: dict[str, tuple[str, ...]] = {
    "_common": ("ConfidenceInterval",),
    "_paired": ("PairedTestResult", "paired_test"),
    "_pairing": ("PairedOutcomes", "PairingError", "pair"),
    "_multiple": ("adjust_pvalues",),
    "_counts": ("PairedCounts", "paired_counts"),
    "_mcnemar": ("mcnemar_exact_p", "mcnemar_midp"),
    "_resampling": ("bootstrap_differences", "BootstrapCI", "bootstrap_delta_ci", "bootstrap_delta_ci_many"),
    "_intervals": ("newcombe_paired_ci", "newcombe_paired_ci_arrays", "clt_se_pp", "wilson_ci"),
    "_comparison": ("PairedComparison", "compare_counts", "paired_comparison"),
    "_samples": ("pass_at_k", "mean_pass_at_k", "ClusteredMean", "cluster_robust_mean"),
    "_power": ("WIN_THRESHOLD_PP", "DEFAULT_DISCORDANCE", "PowerReport", "power_report", "mde_pp",
        "power_at", "n_for_mde"),
    "_gate_power": ("mcnemar_power", "mcnemar_mde", "gate_1b_pass_probability", "gate_1b_effect_for_power",
        "gate_1b_best_of_k_normal", "DELTA_CORRELATION_OF_RHO"),
    "_mean_scores": ("mean_score_comparison", "paired_bootstrap_ci", "clustered_se", "CLUSTER_WARN_BELOW",
        "design_effect", "clustered_gate_figures"),
}
_MODULE = {name: module for module, names in _MODULE_OF_NAMES.items() for name in names}

__all__ = list(_MODULE)


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
