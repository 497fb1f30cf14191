"""This attempt against its parent, paired by problem at the same checkpoint roles: read by the
report, by ``rlexp decide`` (its regression flags) and by the MLflow mirror."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.experiment.layout import AttemptDir
from rlexp.reporting.inputs import ROLES, role_checkpoints


def compare_with_parent(attempt_dir: str | Path, sop: Any = None) -> dict[str, dict[str, Any]]:
    """This attempt against its parent at the same checkpoint roles (final vs final, ...) on the
    primary set, paired by problem: the effect of the one changed variable, without the seed gap
    that a comparison with SOTA (another attempt's seed) carries. role -> comparison; empty when
    there is no parent or either side is not evaluated."""
    from rlexp.experiment.paired import pair_files
    from rlexp.spec import load_attempt
    from rlexp.stats import paired_comparison

    att = load_attempt(attempt_dir)
    if att.parent is None:
        return {}
    if sop is None:
        from rlexp.spec.sop import load_sop

        sop = load_sop()
    primary = sop.primary.set_role
    parent_dir, mine_dir = AttemptDir(att.parent.attempt_dir), AttemptDir(att.attempt_dir)
    parent_roles = role_checkpoints(parent_dir.evals.read_selection() if parent_dir.evals.selection.exists() else None)
    mine = role_checkpoints(mine_dir.evals.read_selection() if mine_dir.evals.selection.exists() else None)
    b = sop.bootstrap
    ref = att.datasets.get(primary)
    by_hash = None
    if ref is not None and ref.cluster is not None and ref.exists and ref.path is not None:
        # a clustered primary set: compared with the parent as decide tests it
        from rlexp.evaluation.arithmetic_task import cluster_labels

        by_hash = cluster_labels(ref.path, ref.cluster, declared_in=f"{att.display_path}: datasets.{primary}.cluster")
    out: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        if role not in mine or role not in parent_roles:
            continue
        base_path = parent_dir.evals.records(parent_roles[role], primary)
        new_path = mine_dir.evals.records(mine[role], primary)
        if not (base_path.exists() and new_path.exists()):
            continue
        paired = pair_files(base_path, new_path)
        cmp = paired_comparison(paired.y_baseline, paired.y_new, resamples=b.resamples, seed=b.seed,
                                confidence=b.confidence, method=b.method)
        out[role] = {"base": parent_roles[role], "new": mine[role], "acc_base": cmp.acc_base,
                     "acc_new": cmp.acc_new, "delta_pp": cmp.delta_pp, "b": cmp.b, "c": cmp.c,
                     "mcnemar_p": cmp.mcnemar_p, "ci_pp": list(cmp.ci_pp), "n": cmp.n}
        if by_hash is not None and all(r.problem_hash in by_hash for r in paired.records):
            from rlexp.protocol.decision import clustered_comparison

            clustered = clustered_comparison(cmp, paired.y_baseline, paired.y_new,
                                             [by_hash[r.problem_hash] for r in paired.records],
                                             confidence=b.confidence)
            out[role].update(mcnemar_p=clustered.mcnemar_p, ci_pp=list(clustered.ci_pp), test=clustered.test,
                             naive_mcnemar_p=clustered.naive_p)
    return out
