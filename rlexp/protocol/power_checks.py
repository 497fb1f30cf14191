"""The preflight's power family: whether the planned comparison on the primary set can see the win
threshold (the McNemar power from the baseline's discordance, or the cluster-robust one where the set
declares clusters).
"""

from __future__ import annotations

import math
from typing import Any

from rlexp.protocol.verdict import WARNING, Verdict, check
from rlexp.spec import Attempt
from rlexp.stats import WIN_THRESHOLD_PP, PowerReport, power_report


def primary_power(att: Attempt) -> PowerReport | None:
    ref = att.datasets.get("ood_primary")
    if ref is None or not ref.size:
        return None
    return power_report(ref.size, att.baseline.discordance, att.baseline.accuracy)


def clustered_primary_power(att: Attempt) -> dict[str, Any] | None:
    """The power of the planned comparison on a primary set that declares a cluster column (None
    otherwise), from the cluster-robust model decide will test with: SE = sqrt(discordance / n ·
    design effect), the design effect 1 + (m̃ − 1)·ICC (:func:`rlexp.stats.design_effect`) over the
    set's own cluster sizes where its file is there (else ``baseline.cluster_size`` clusters of equal
    size, stated as assumed), ICC ``baseline.cluster_icc`` (unset: 1, the worst case), t with G − 1
    df (:func:`rlexp.stats.clustered_gate_figures`: MDE, the test's power, Gate-1b's pass rates)."""
    ref = att.datasets.get("ood_primary")
    if ref is None or ref.cluster is None or not ref.size:
        return None
    out: dict[str, Any] = {"column": ref.cluster, "n": ref.size, "discordance": att.baseline.discordance}
    if ref.cluster_sizes:
        sizes, out["clusters_from"] = list(ref.cluster_sizes), "the set's rows"
    elif att.baseline.cluster_size is not None:
        g = max(2, round(ref.size / att.baseline.cluster_size))
        sizes, out["clusters_from"] = [ref.size / g] * g, "assumed (baseline.cluster_size)"
    else:
        out.update(clusters_from=None, n_clusters=None, mde_pp=None,
                   note=f"{ref.cluster!r} clusters unknown until the set's file is there (or state "
                        "baseline.cluster_size): no clustered power")
        return out
    from rlexp.spec.sop import load_sop
    from rlexp.stats import clustered_gate_figures, design_effect

    icc = att.baseline.cluster_icc
    out["icc"], out["icc_from"] = (1.0, "worst case (baseline.cluster_icc unset)") if icc is None else (
        icc, "assumed (baseline.cluster_icc)")
    deff = design_effect(sizes, out["icc"])
    g = len(sizes)
    out.update(n_clusters=g, mean_cluster_size=sum(m * m for m in sizes) / sum(sizes), design_effect=deff,
               effective_n=ref.size / deff)
    sop = load_sop()
    se_pp = 100.0 * math.sqrt(att.baseline.discordance / ref.size * deff)
    out.update(clustered_gate_figures(se_pp, g - 1, min_delta_pp=sop.gate_1b.min_delta_pp,
                                      max_p=sop.gate_1b.max_mcnemar_p, k=sop.checkpoints.k))
    return out


def check_power(att: Attempt, power: PowerReport | None, clustered: dict[str, Any] | None = None) -> list[Verdict]:
    if clustered is not None and clustered.get("mde_pp") is not None:
        if clustered["mde_pp"] <= WIN_THRESHOLD_PP:
            return []
        return [check(
            "power.underpowered", WARNING,
            f"MDE {clustered['mde_pp']:.2f} pp at 80% power on ood_primary clustered by {clustered['column']} "
            f"({clustered['n_clusters']} clusters, design effect {clustered['design_effect']:.2f} at ICC "
            f"{clustered['icc']:g}, {clustered['icc_from']}) is above the +{WIN_THRESHOLD_PP:.1f} pp win threshold: "
            f"power to see +{WIN_THRESHOLD_PP:.1f} pp is {clustered['power_at_win_threshold']:.0%} (cluster-robust "
            f"t, {clustered['df']} df)",
            "docs/plan.md#power-of-the-planned-comparison",
        )]  # fmt: skip
    if power is None:
        return [check("power.no_primary", WARNING,
                      "no datasets.ood_primary: the power of the planned comparison is unknown",
                      "sop/README.md#primary-metric")]  # fmt: skip
    if power.mde_pp > power.win_threshold_pp:
        return [check(
            "power.underpowered", WARNING,
            f"MDE {power.mde_pp:.2f} pp at {power.power_target:.0%} power on ood_primary (n={power.n:,}, "
            f"{power.discordance:.1%} discordance) is above the +{power.win_threshold_pp:.1f} pp win threshold: power to "
            f"see +{power.win_threshold_pp:.1f} pp is {power.power_at_win_threshold:.0%}; "
            f"n >= {power.n_for_win_threshold:,} needed (z approximation; the exact McNemar test: MDE "
            + (f"{power.mde_exact_pp:.2f} pp" if power.mde_exact_pp is not None else "beyond the discordance")
            + (f", power {power.power_exact_at_win_threshold:.0%}" if power.power_exact_at_win_threshold is not None
               else "") + ")",
            "docs/plan.md#power-of-the-planned-comparison",
        )]  # fmt: skip
    return []
