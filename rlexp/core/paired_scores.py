"""Moved: paired statistics of per-item scores beyond 0/1 are part of :mod:`rlexp.stats`; this path stays
for old imports."""

from rlexp.stats._mean_scores import (
    CLUSTER_WARN_BELOW,
    clustered_se,
    mean_score_comparison,
    paired_bootstrap_ci,
)

__all__ = ["CLUSTER_WARN_BELOW", "clustered_se", "mean_score_comparison", "paired_bootstrap_ci"]
