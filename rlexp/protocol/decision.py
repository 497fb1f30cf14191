"""The SOP's decision for one evaluated attempt, as a pure function of its inputs.

:func:`decide` takes everything the stage gathered from disk (:class:`DecideInputs`: the
pre-registered checkpoints, the paired outcomes of every checkpoint against every baseline on
every set, the ledger's history, the parser audit, the training diagnostics) and the SOP in
force, and returns a :class:`Decision`. It reads and writes nothing; ``rlexp.stages.decide``
gathers the inputs and records the result (``decision.json``, paired records, the ledger, the
SOTA pin).

Order of the rules: a failed parser audit blocks everything (DEBUG); Gate-1b with Gate-2 is a
release candidate (STOP-1, the SOTA pin moves); a passing Gate-1a/1b without a sibling seed asks
for a confirmation seed (CONFIRM); then stagnation (STOP-3a same pool, STOP-3b pool variance);
otherwise CONTINUE, with the gray-zone note when it applies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rlexp.errors import InputError
from rlexp.protocol import gates
from rlexp.protocol.verdict import Verdict
from rlexp.spec.sop import Sop

BASELINES = ("baseline_s0", "baseline_sota")
ROLE_ORDER = ("final", "mid", "best_by_monitor")
# Recipe keys that do not make a different recipe for Gate-2 / STOP-3b: the seed, and the pool file itself.
NOT_RECIPE = ("seed", "prompt_data", "prompt_data_probs")


class AlignedOutcomes(Protocol):
    """Two 0/1 outcome vectors over the same problems (``rlexp.experiment.paired.PairedSet`` has them)."""

    y_baseline: Sequence[int]
    y_new: Sequence[int]


class HistoryEntry(Protocol):
    """A decided attempt as the ledger remembers it (``rlexp.experiment.ledger.LedgerEntry``)."""

    attempt: str
    parent: str | None
    recipe_sha256: str | None
    pool_sha256: str | None
    seed: int | None
    baseline: str
    delta_pp: float

    def outcome(self) -> gates.AttemptOutcome: ...


@dataclass(frozen=True)
class AttemptFacts:
    """What the decision needs to know about the attempt itself."""

    id: str
    parent: str | None
    changed: tuple[str, ...]
    pool_sha256: str | None
    pool_size: int | None
    recipe_sha256: str
    seed: Any


@dataclass(frozen=True)
class DecideInputs:
    """Everything :func:`decide` looks at, gathered from the experiment directory."""

    attempt: AttemptFacts
    checkpoints: tuple[str, ...]                  # pre-registered, in role order
    roles: Mapping[str, str]                      # checkpoint -> role(s)
    baselines: tuple[str, ...]                    # baselines with records on the primary set
    sets: tuple[str, str, str]                    # primary, ID, sanity set roles
    paired: Mapping[tuple[str, str, str], AlignedOutcomes]   # (baseline, checkpoint, set) -> outcomes
    history: Mapping[str, HistoryEntry]           # latest ledger entry of every other attempt
    sota: Mapping[str, Any] | None                # the SOTA pin, as a dict, or None
    pin_is_self: bool
    parser_audit: Mapping[str, Any] | None        # {"misparse_rate", "audit_passed", "file"} or None
    diagnostics: gates.Diagnostics
    selection_note: str | None = None             # the K=3 were selected under another SOP file
    skipped: tuple[str, ...] = ()                 # comparisons skipped because a set has no records
    # checkpoint -> its comparison with the parent's checkpoint of the same role on the primary set
    # (delta_pp, mcnemar_p, ci_pp, base, ...: rlexp.reporting.compare_with_parent), for the regression flags
    vs_parent: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # an environment task's primary metric (rlexp.spec.EnvironmentSettings.primary_metric):
    # "success" decides on the 0/1 outcomes above (McNemar); "mean_reward" on ``rewards``, the
    # per-episode rewards (baseline, new) of each paired key, aligned as ``paired``'s records
    primary_metric: str = "success"
    rewards: Mapping[tuple[str, str, str], tuple[Sequence[float], Sequence[float]]] = field(default_factory=dict)
    # sets whose problems come in clusters (set role -> the dataset column naming them) and, per
    # paired key on those sets, each paired problem's cluster in the order of ``paired``'s records:
    # the comparisons on those sets are cluster-robust (:func:`clustered_comparison`)
    clusters: Mapping[str, str] = field(default_factory=dict)
    cluster_labels: Mapping[tuple[str, str, str], Sequence[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class MeanRewardComparison:
    """A paired comparison of per-episode rewards in [0, 1] (rlexp.stats.mean_score_comparison), in the
    fields the gates read: Δ and its paired bootstrap CI in points of reward × 100 (pp), the paired
    t-test's p where the gates read McNemar's (``mcnemar_p``), ``b``/``c`` = episodes whose reward
    fell / rose. ``test`` says which test it is."""

    n: int
    acc_base: float  # mean reward
    acc_new: float
    delta_pp: float
    b: int
    c: int
    mcnemar_p: float  # the paired t-test's two-sided p
    mcnemar_midp: float
    ci_pp: tuple[float, float]
    se_pp: float
    mde_pp: float | None
    test: str = "paired t"


def mean_reward_comparison(base: Sequence[float], new: Sequence[float], *, resamples: int, seed: int,
                           confidence: float, method: str) -> MeanRewardComparison:
    """:func:`rlexp.stats.mean_score_comparison` as a :class:`MeanRewardComparison`."""
    from rlexp.stats import mean_score_comparison

    if not all(0.0 <= x <= 1.0 for x in [*base, *new]):
        raise ValueError("the mean-reward primary metric needs rewards in [0, 1]")
    r = mean_score_comparison(base, new, resamples=resamples, seed=seed, confidence=confidence, method=method)
    return MeanRewardComparison(n=r["n"], acc_base=r["mean_base"], acc_new=r["mean_new"], delta_pp=r["delta_pp"],
                                b=r["items_worse"], c=r["items_improved"], mcnemar_p=r["p_value"],
                                mcnemar_midp=r["p_value"], ci_pp=(r["ci_pp"][0], r["ci_pp"][1]), se_pp=r["se_pp"],
                                mde_pp=r["mde_pp"])  # fmt: skip


@dataclass(frozen=True)
class ClusteredComparison:
    """A paired comparison on a set whose problems come in clusters, in the fields the gates read:
    ``mcnemar_p`` (where the gates read McNemar's p) is the cluster-robust t-test's two-sided p and
    ``ci_pp`` its interval, Δ ± t_{G−1}·SE_CR1 (:func:`rlexp.stats.clustered_se`, statsmodels'
    ``OLS(d, 1).fit(cov_type="cluster")`` on the per-problem differences); ``se_pp`` is SE_CR1 and
    ``mde_pp`` the clustered MDE. Δ, the accuracies and b/c are the unclustered comparison's; its
    McNemar p and interval stay beside as ``naive_p`` and ``naive_ci_pp``."""

    n: int
    acc_base: float
    acc_new: float
    delta_pp: float
    b: int
    c: int
    mcnemar_p: float
    mcnemar_midp: float
    ci_pp: tuple[float, float]
    se_pp: float
    mde_pp: float | None
    naive_p: float
    naive_ci_pp: tuple[float, float]
    n_clusters: int
    cluster_df: int | None
    test: str


def clustered_comparison(cmp: Any, base: Sequence[float], new: Sequence[float], labels: Sequence[Any], *,
                         confidence: float) -> ClusteredComparison:
    """``cmp`` (a paired comparison of ``base`` and ``new``) with its p, interval, SE and MDE made
    cluster-robust over ``labels`` (at least two clusters: gather refuses fewer)."""
    from rlexp.stats import clustered_se

    r = clustered_se(base, new, labels, confidence=confidence, unit=True)
    g, df = r["n_clusters"], r["cluster_df"]
    if r["p_clustered"] is None:  # gather refuses a clustered set of one cluster
        raise ValueError("a cluster-robust comparison needs at least two clusters")
    p, ci = r["p_clustered"], (100.0 * r["ci_clustered"][0], 100.0 * r["ci_clustered"][1])
    se = 100.0 * r["se_clustered_cr1"]
    mde = 100.0 * r["mde_clustered"] if r["mde_clustered"] is not None else None
    return ClusteredComparison(n=cmp.n, acc_base=cmp.acc_base, acc_new=cmp.acc_new, delta_pp=cmp.delta_pp, b=cmp.b,
                               c=cmp.c, mcnemar_p=p, mcnemar_midp=p, ci_pp=ci, se_pp=se, mde_pp=mde,
                               naive_p=cmp.mcnemar_p, naive_ci_pp=tuple(cmp.ci_pp), n_clusters=g, cluster_df=df,
                               test=f"cluster-robust t (CR1, {g} clusters, df {df})")


@dataclass(frozen=True)
class Decision:
    """The decision and everything that decided it; ``to_dict()`` is ``decision.json``."""

    attempt: str
    decision: str
    reason: str
    record: Mapping[str, Any] = field(repr=False)
    new_sota_checkpoint: str | None = None        # the checkpoint a STOP-1 pins, when the pin moves

    @property
    def sota_moved(self) -> bool:
        return bool(self.record.get("sota_moved"))

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.record))

    @classmethod
    def from_dict(cls, data: Any, source: Any = None, *, attempt: str | None = None) -> Decision:
        """``decision.json`` as :meth:`to_dict` wrote it (``attempt``: the id when the file names
        none); a field of another type is an InputError naming ``source`` and the field."""
        if not isinstance(data, Mapping):
            raise InputError(source, None, f"must be an object (a decision), got {data!r:.60}")
        name, decision, reason = data.get("attempt", attempt), data.get("decision"), data.get("reason")
        for key, value in (("attempt", name), ("decision", decision)):
            if not isinstance(value, str):
                raise InputError(source, key, f"must be a string, got {value!r:.60}")
        if reason is not None and not isinstance(reason, str):
            raise InputError(source, "reason", f"must be a string, got {reason!r:.60}")
        for key in ("gates", "checkpoints", "fault_tree"):
            if data.get(key) is not None and not isinstance(data.get(key), Mapping):
                raise InputError(source, key, f"must be an object or null, got {data.get(key)!r:.60}")
        sota, moved = data.get("sota"), data.get("sota_moved")
        if moved is not None and not isinstance(moved, bool):
            raise InputError(source, "sota_moved", f"must be true or false, got {moved!r:.60}")
        if moved and not (isinstance(sota, Mapping) and isinstance(sota.get("checkpoint"), str)):
            raise InputError(source, "sota.checkpoint", "must name the pinned checkpoint when sota_moved is true")
        return cls(name, decision, reason or "", json.loads(json.dumps(dict(data))),
                   sota["checkpoint"] if moved else None)  # type: ignore[index]

    def gate(self, name: str) -> Verdict:
        """One gate or STOP rule of the record (``gate_2``, ``stop_3a``, ``parser_audit`` ...) as a verdict."""
        gates = self.record.get("gates") or {}
        return Verdict.from_dict(gates.get(name), None, f"gates.{name}.")


def recipe_sha256(recipe: Mapping[str, Any], training_keys: Sequence[str], trainer: tuple[str, Any]) -> str:
    """Digest of the training recipe without the seed and the pool path: "same recipe" for Gate-2."""
    from rlexp.numbers import sha256_text

    picked = {k: recipe.get(k) for k in training_keys if k not in NOT_RECIPE}
    picked["trainer"] = list(trainer)
    return sha256_text(json.dumps(picked, sort_keys=True, default=str))


def _brief(cmp: Any) -> dict[str, Any]:
    out = {"n": cmp.n, "acc_base": cmp.acc_base, "acc_new": cmp.acc_new, "delta_pp": cmp.delta_pp, "b": cmp.b,
           "c": cmp.c, "mcnemar_p": cmp.mcnemar_p, "ci_pp": list(cmp.ci_pp)}
    if isinstance(cmp, ClusteredComparison):
        out.update(test=cmp.test, naive_mcnemar_p=cmp.naive_p)
    return out


def _paired_comparisons(inputs: DecideInputs, sop: Sop, notes: list[str]) -> dict[tuple[str, str, str], Any]:
    """Every (baseline, checkpoint, set) pair of the inputs compared: McNemar and the bootstrap on 0/1
    outcomes, or the paired t on mean rewards; cluster-robust where the set names clusters."""
    from rlexp.stats import paired_comparison

    b = sop.bootstrap
    if inputs.primary_metric == "mean_reward":
        comparisons = {key: mean_reward_comparison(*inputs.rewards[key], resamples=b.resamples, seed=b.seed,
                                                   confidence=b.confidence, method=b.method)
                       for key in inputs.paired}
        notes.append("primary metric: mean reward per episode (paired t-test and paired bootstrap CI on the "
                     "rewards, read by the gates in place of McNemar's p and the accuracy CI)")
    else:
        comparisons = {key: paired_comparison(ps.y_baseline, ps.y_new, resamples=b.resamples, seed=b.seed,
                                              confidence=b.confidence, method=b.method)
                       for key, ps in inputs.paired.items()}
    for key, labels in inputs.cluster_labels.items():
        if key in comparisons:
            values = inputs.rewards[key] if inputs.primary_metric == "mean_reward" else (
                inputs.paired[key].y_baseline, inputs.paired[key].y_new)
            comparisons[key] = clustered_comparison(comparisons[key], *values, labels, confidence=b.confidence)
    return comparisons


def _decision(audit: Mapping[str, Any] | None, max_rate: float, audit_blocks: bool, g1a_pass: bool, g1b_pass: bool,
              gate2_passed: bool, has_siblings: bool, stop3a_passed: bool, stop3b_passed: bool,
              gray_passed: bool) -> tuple[str, str]:
    """The SOP's ladder, first match wins: a failed parser audit, STOP-1, CONFIRM, STOP-3a, STOP-3b,
    CONTINUE (with the gray zone's allowance)."""
    if audit_blocks:
        decision = "DEBUG"
        if audit["misparse_rate"] > max_rate + gates.EPS:
            why = f"mis-parse rate {audit['misparse_rate']:.1%} > {max_rate:.0%}"
        else:
            why = f"failed (guards/parser_audit.json, mis-parse rate {audit['misparse_rate']:.1%})"
        reason = f"parser audit: {why}: fix the parser and re-evaluate first"
    elif g1b_pass and gate2_passed:
        decision, reason = "STOP-1", "Gate-1b and Gate-2 pass: release candidate; the SOTA pin moves"
    elif (g1a_pass or g1b_pass) and not has_siblings:
        decision = "CONFIRM"
        reason = ("Gate-1b" if g1b_pass else "Gate-1a") + " passes: run a confirmation seed (same pool, same config)"
    elif stop3a_passed:
        decision, reason = "STOP-3a", "same-pool stagnation: enter the fault tree"
    elif stop3b_passed:
        decision, reason = "STOP-3b", "pool-variance stagnation: enter the fault tree"
    else:
        decision = "CONTINUE"
        reason = "no gate passes" if not (g1a_pass or g1b_pass) else "a gate passed but replication (Gate-2) failed"
        if gray_passed:
            reason += "; gray zone: a third run is allowed"
    return decision, reason


def _checkpoint_entries(names: list[str], primary: Mapping[str, Any], comparisons: Mapping[tuple[str, str, str], Any],
                        family: Any, roles: Mapping[str, Any]) -> dict[str, Any]:
    """decision.json's per-checkpoint entries: the primary comparison, its gates, and every other
    comparison of the checkpoint in brief."""
    checkpoints: dict[str, Any] = {}
    for name in names:
        cmp = primary[name]
        entry = {
            "role": roles.get(name), "n": cmp.n, "acc_base": cmp.acc_base, "acc_new": cmp.acc_new,
            "delta_pp": cmp.delta_pp, "b": cmp.b, "c": cmp.c, "mcnemar_p": cmp.mcnemar_p,
            "mcnemar_midp": cmp.mcnemar_midp, "ci_pp": list(cmp.ci_pp), "holm_p": family.holm_p[name],
            "se_pp": cmp.se_pp, "mde_pp": cmp.mde_pp,
            "gate_1a": family.gate_1a[name].passed, "gate_1b": family.gate_1b[name].passed,
            "gate_1a_holm": family.gate_1a_holm[name].passed, "gate_1b_holm": family.gate_1b_holm[name].passed,
            "vs": {},
        }
        if isinstance(cmp, ClusteredComparison):  # an unclustered checkpoint's entry is as it always was
            entry.update(test=cmp.test, n_clusters=cmp.n_clusters, naive_mcnemar_p=cmp.naive_p,
                         naive_ci_pp=list(cmp.naive_ci_pp))
        for (baseline, ck, role), c in comparisons.items():
            if ck == name:
                entry["vs"].setdefault(baseline, {})[role] = _brief(c)
        checkpoints[name] = entry
    return checkpoints


def _sota_after(decision: str, names: list[str], primary: Mapping[str, Any], family: Any, holm_mode: bool,
               inputs: DecideInputs, decided_at: str, adjusted: Mapping[str, Any],
               reuse: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, str | None, bool]:
    """The SOTA pin after the decision: a STOP-1 moves it to the best checkpoint that passed Gate-1b
    (unless the attempt already holds it there); returns (pin, the newly pinned checkpoint, moved)."""
    sota = dict(inputs.sota) if inputs.sota else None
    new_sota = None
    sota_moved = False
    if decision == "STOP-1":
        winners = [n for n in names if getattr(family, "gate_1b_holm" if holm_mode else "gate_1b")[n].passed]
        best = max(winners, key=lambda n: (primary[n].delta_pp, -names.index(n)))
        if not (inputs.pin_is_self and sota and sota.get("checkpoint") == best):
            # the pin's path (where the checkpoint lies) is filled in when the decision is recorded
            sota_moved, new_sota = True, best
            sota = {"attempt": inputs.attempt.id, "checkpoint": best, "path": None, "decided_at": decided_at,
                    "selection_correction_pp": pin_correction(adjusted, best, reuse)}
    return sota, new_sota, sota_moved


def _replication(inputs: DecideInputs, names: list[str], primary_ck: str, primary_delta_pp: float, s0_id: Any,
                 decision_baseline: str, primary_role: str, sop: Sop) -> tuple[list[Any], dict[str, Any],
                                                                              dict[str, Any] | None, Verdict]:
    """Gate-2's inputs and verdict: the sibling seeds of the same recipe and pool, the primary
    checkpoint's selection-adjusted Δ (and the SOTA's reuse correction), then the replication gate."""
    att = inputs.attempt
    siblings = [e for e in inputs.history.values() if e.parent == att.parent and e.recipe_sha256 == att.recipe_sha256
                and e.pool_sha256 == att.pool_sha256 and att.pool_sha256 is not None and e.seed != att.seed
                and e.baseline == decision_baseline]
    adjusted = selection_adjusted(inputs, names, primary_ck, decision_baseline, primary_role,
                                  sop.bootstrap.confidence)
    reuse = sota_reuse(inputs.sota if not inputs.pin_is_self else None, decision_baseline, primary_delta_pp,
                       adjusted.get("adjusted_pp"))
    if reuse is not None and reuse.get("adjusted_pp") is not None:
        adjusted["replication_pp"] = reuse["adjusted_pp"]
    elif adjusted.get("adjusted_pp") is not None:
        adjusted["replication_pp"] = adjusted["adjusted_pp"]
    gate2 = replication(primary_delta_pp, adjusted.get("replication_pp"), siblings,
                        s0_id.delta_pp if s0_id is not None else None, sop)
    return siblings, adjusted, reuse, gate2


def _family_dict(family: Any, gate: str, names: list[str], clustered_rule: str) -> dict[str, Any]:
    """decision.json's entry of one gate over the checkpoint family."""
    per = getattr(family, gate)
    first = next(iter(per.values()))
    return {"passed": any(v.passed for v in per.values()), "rule": first.rule + clustered_rule,
            "per_checkpoint": {n: {k: v for k, v in per[n].to_dict().items() if k != "rule"} for n in names}}


def _fault_tree(inputs: DecideInputs, comparisons: Mapping[tuple[str, str, str], Any], primary_ck: str,
                primary_role: str, id_role: str, sop: Sop) -> Any:
    """The fault tree on the gathered diagnostics and the primary checkpoint's Δ vs S0 (OOD and ID)."""
    ood = comparisons.get(("baseline_s0", primary_ck, primary_role))
    idc = comparisons.get(("baseline_s0", primary_ck, id_role))
    diagnostics = gates.Diagnostics(**{**inputs.diagnostics.__dict__,
                                       "ood_delta_pp": ood.delta_pp if ood else None,
                                       "id_delta_pp": idc.delta_pp if idc else None})
    return gates.fault_tree(diagnostics, sop)


def _clustered_sets(inputs: DecideInputs, comparisons: Mapping[tuple[str, str, str], Any]) -> dict[str, Any]:
    """decision.json's ``clustered`` entry: each clustered set's column, cluster count and test."""
    return {role: {"column": column, "n_clusters": next(
        (c.n_clusters for (_, _, r), c in comparisons.items() if r == role and isinstance(c, ClusteredComparison)),
        None), "test": "cluster-robust t (CR1, G − 1 df)"} for role, column in inputs.clusters.items()}


def _parser_audit(audit: Mapping[str, Any] | None, sop: Sop, notes: list[str]) -> tuple[float, bool]:
    """The parser audit's bound under the SOP in force, and whether the audit blocks the decision."""
    max_rate = sop.parser_audit.max_misparse_rate
    # blocked by the rate under the SOP in force, or by the audit's own verdict (a stricter SOP)
    audit_blocks = audit is not None and (audit["misparse_rate"] > max_rate + gates.EPS or not audit["audit_passed"])
    if audit is None:
        notes.append("no parser audit (guards/parser_audit.json): the SOP asks for one before the fault tree")
    return max_rate, audit_blocks


def decide(inputs: DecideInputs, sop: Sop, *, decided_at: str) -> Decision:
    """Apply the SOP's gates and STOP rules to the gathered inputs (pure: no reads, no writes)."""
    att = inputs.attempt
    names = list(inputs.checkpoints)
    notes = [inputs.selection_note] if inputs.selection_note else []
    if inputs.pin_is_self:
        notes.append("this attempt holds the SOTA pin (re-decided)")
    primary_role, id_role, _sanity_role = inputs.sets
    decision_baseline = sop.primary.decision_baseline
    if decision_baseline not in inputs.baselines:
        decision_baseline = sop.primary.fallback_baseline
        notes.append(f"no {sop.primary.decision_baseline} records (no SOTA pinned yet): gates are taken against "
                     f"{decision_baseline}")
    notes.extend(inputs.skipped)

    comparisons = _paired_comparisons(inputs, sop, notes)
    primary = {name: comparisons[(decision_baseline, name, primary_role)] for name in names}
    family = gates.family_gates(primary, sop)
    holm_mode = sop.checkpoints.decide_on == "holm"
    g1a_pass = family.any_passed("gate_1a", holm=holm_mode)
    g1b_pass = family.any_passed("gate_1b", holm=holm_mode)
    if len(names) > sop.checkpoints.k:
        notes.append(f"{len(names)} checkpoints evaluated, more than K={sop.checkpoints.k}: Holm covers all of them")

    # primary checkpoint: the largest delta vs the decision baseline (ties: role order)
    primary_ck = max(names, key=lambda n: (primary[n].delta_pp, -names.index(n)))
    prim = primary[primary_ck]
    s0_id = comparisons.get(("baseline_s0", primary_ck, id_role))

    if att.pool_sha256 is None:
        notes.append("pool file not found: pool SHA-256 unknown (STOP-3 and Gate-2 cannot match pools)")
    current = gates.AttemptOutcome(att.id, att.parent, att.changed, att.pool_sha256, prim.delta_pp, prim.ci_pp,
                                   prim.mcnemar_p, att.recipe_sha256, att.pool_size, None, att.seed)
    history = inputs.history
    siblings, adjusted, reuse, gate2 = _replication(inputs, names, primary_ck, prim.delta_pp, s0_id,
                                                    decision_baseline, primary_role, sop)
    stop3a = gates.stop_3a(current, [e.outcome() for e in history.values()], sop)
    stop3b = gates.stop_3b(current, [e.outcome() for e in history.values()], sop)
    gray = gates.gray_zone(prim.delta_pp, sop)
    audit = inputs.parser_audit
    max_rate, audit_blocks = _parser_audit(audit, sop, notes)

    decision, reason = _decision(audit, max_rate, audit_blocks, g1a_pass, g1b_pass, gate2.passed, bool(siblings),
                                 stop3a.passed, stop3b.passed, gray.passed)

    tree = _fault_tree(inputs, comparisons, primary_ck, primary_role, id_role, sop)

    checkpoints = _checkpoint_entries(names, primary, comparisons, family, inputs.roles)

    # on a clustered primary set the rules' "McNemar exact p" and CI are the cluster-robust t's
    clustered_rule = (f" [p and CI: cluster-robust t over {inputs.clusters[primary_role]} (CR1, G − 1 df), in place "
                      "of McNemar and the bootstrap]" if primary_role in inputs.clusters else "")

    if adjusted.get("note"):
        notes.append(adjusted["note"])
    flagged = regressions(comparisons, inputs.vs_parent, alpha=1.0 - sop.bootstrap.confidence)

    sota, new_sota, sota_moved = _sota_after(decision, names, primary, family, holm_mode, inputs, decided_at,
                                             adjusted, reuse)

    record: dict[str, Any] = {
        "attempt": att.id,
        "decision": decision,
        "reason": reason,
        "baseline": decision_baseline,
        "primary_set": primary_role,
        "primary_checkpoint": primary_ck,
        "decide_on": sop.checkpoints.decide_on,
        "gates": {
            **{gate: _family_dict(family, gate, names, clustered_rule)
               for gate in ("gate_1a", "gate_1b", "gate_1a_holm", "gate_1b_holm")},
            "gate_2": replace(gate2, numbers={**gate2.numbers, "siblings": [e.attempt for e in siblings]}).to_dict(),
            "stop_3a": stop3a.to_dict(), "stop_3b": stop3b.to_dict(), "gray_zone": gray.to_dict(),
            "parser_audit": Verdict("parser_audit", None if audit is None else not audit_blocks,
                                    f"mis-parse rate <= {max_rate:.0%}",
                                    dict(audit) if audit else {"misparse_rate": None}).to_dict(),
        },
        "checkpoints": checkpoints,
        "selection_adjusted": adjusted,
        "regressions": flagged,
        "sop_version": sop.version,
        "sop_sha256": sop.sha256,
        "sop_claim_calibration": sop.claim_calibration.to_dict() if sop.claim_calibration else None,
        "sota_reuse": reuse,
        "fault_tree": tree.to_dict(),
        "pool_sha256": att.pool_sha256,
        "recipe_sha256": att.recipe_sha256,
        "changed": list(att.changed),
        "seed": att.seed,
        "sota_moved": sota_moved,
        "sota": sota,
        "notes": notes,
        "decided_at": decided_at,
    }
    if inputs.clusters:  # an unclustered decision's record is as it always was
        record["clustered"] = _clustered_sets(inputs, comparisons)
    if inputs.primary_metric != "success":  # a success decision's record is as it always was
        record["primary_metric"] = {"name": inputs.primary_metric, "test": "paired t"}
    return Decision(att.id, decision, reason, record, new_sota)


def pin_correction(adjusted: Mapping[str, Any], pinned: str, reuse: Mapping[str, Any] | None) -> float | None:
    """How far the checkpoint a STOP-1 pins overstates its own accuracy on the primary set (pp): it won
    the best of K on those very problems, so its observed advantage over the decision baseline is its
    raw Δ minus its selection-adjusted Δ too high; against a SOTA that was itself corrected, that
    correction adds (the baseline's outcomes overstate its accuracy by as much). None where the pinned
    checkpoint is not the one adjusted (another checkpoint had the largest Δ but failed Gate-1b) or the
    estimate is missing."""
    if adjusted.get("checkpoint") != pinned or adjusted.get("adjusted_pp") is None:
        return None
    own = float(adjusted["raw_pp"]) - float(adjusted["adjusted_pp"])
    if str(adjusted.get("baseline")) == "baseline_sota":
        if reuse is None or reuse.get("correction_pp") is None:
            return None
        own += float(reuse["correction_pp"])
    return own


def sota_reuse(sota: Mapping[str, Any] | None, baseline: str, delta_pp: float, adjusted_pp: float | None
               ) -> dict[str, Any] | None:
    """Δ against Baseline-SOTA corrected for the selection that pinned it (None when the decision is not
    taken against a pinned SOTA). The pin won the best of K on the same problems this Δ is measured on,
    so its observed accuracy there overstates its own and every Δ against it starts low; the pin
    records that overstatement (``selection_correction_pp``, :func:`pin_correction`) and it is added
    back here, to the raw Δ and to the selection-adjusted one. Median-unbiased as the adjusted Δ is
    (benchmarks/bench_sota_reuse.py). A pin written before the correction existed has none: noted."""
    if baseline != "baseline_sota" or not sota:
        return None
    pin = f"{sota.get('attempt')}/{sota.get('checkpoint')}"
    correction = sota.get("selection_correction_pp")
    if correction is None:
        return {"pin": pin, "correction_pp": None, "delta_pp": delta_pp, "corrected_delta_pp": None,
                "adjusted_pp": None, "note": "the SOTA pin records no selection correction (pinned before it was "
                                             "recorded): Δ vs SOTA is biased low by the pin's winner's curse"}
    return {"pin": pin, "correction_pp": float(correction), "delta_pp": delta_pp,
            "corrected_delta_pp": delta_pp + float(correction),
            "adjusted_pp": adjusted_pp + float(correction) if adjusted_pp is not None else None}


def sota_reuse_line(record: Mapping[str, Any]) -> str | None:
    """The Δ vs SOTA corrected for the pin's own selection, in one sentence (None when not vs SOTA)."""
    r = record.get("sota_reuse")
    if not isinstance(r, Mapping):
        return None
    if r.get("correction_pp") is None:
        return f"Δ vs SOTA ({r.get('pin')}): {r.get('note')}."
    line = (f"Δ vs SOTA corrected for the selection that pinned {r['pin']} (its best-of-K accuracy overstates it "
            f"by {r['correction_pp']:+.2f} pp on these problems): raw {r['delta_pp']:+.2f} → "
            f"{r['corrected_delta_pp']:+.2f} pp")
    if r.get("adjusted_pp") is not None:
        line += f"; selection-adjusted {r['adjusted_pp']:+.2f} pp"
    return line + "."


def replication(raw_pp: float, adjusted_pp: float | None, siblings: Sequence[HistoryEntry],
                id_delta_pp: float | None, sop: Sop) -> Verdict:
    """Gate-2 over this attempt and its sibling seeds, on the Δ the SOP's ``gate_2.estimate`` names:
    each seed's raw primary Δ, or its selection-adjusted one (the siblings' from the ledger). A seed
    whose adjusted Δ is unknown (a ledger line written before it was recorded, or no estimate) fails
    the gate, with a note naming it."""
    if sop.gate_2.estimate != "selection_adjusted":
        return gates.gate_2([raw_pp, *[e.delta_pp for e in siblings]], id_delta_pp, sop)
    seeds = [("this attempt", adjusted_pp), *[(e.attempt, getattr(e, "adjusted_delta_pp", None)) for e in siblings]]
    known = [float(v) for _, v in seeds if v is not None]
    verdict = gates.gate_2(known, id_delta_pp, sop)
    unknown = [name for name, v in seeds if v is None]
    numbers = {**verdict.numbers, "estimate": "selection_adjusted"}
    if unknown:
        note = (f"no selection-adjusted Δ for {', '.join(unknown)} (re-decide it under this SOP): Gate-2 cannot "
                "pass without it")
        return replace(verdict, passed=False, numbers={**numbers, "gold": False}, notes=(*verdict.notes, note))
    return replace(verdict, numbers=numbers)


def selection_adjusted(inputs: DecideInputs, names: Sequence[str], winner: str, baseline: str, role: str,
                       confidence: float) -> dict[str, Any]:
    """The primary checkpoint's Δ adjusted for being the best of the K (:mod:`rlexp.protocol.selection`),
    from the K paired outcome vectors against the decision baseline on the primary set. Shown beside
    the raw Δ; the gates, STOP-3 and the ledger keep the raw Δ, as the SOP says."""
    from rlexp.protocol.selection import METHOD, adjusted_winner

    sets = [inputs.paired.get((baseline, name, role)) for name in names]
    if any(ps is None for ps in sets):
        return {"method": METHOD, "note": "selection-adjusted Δ not computed: a checkpoint has no paired records"}
    bases = [list(ps.y_baseline) for ps in sets]  # type: ignore[union-attr]
    if any(b != bases[0] for b in bases[1:]):
        return {"method": METHOD, "note": "selection-adjusted Δ not computed: the checkpoints' paired records do "
                                          "not share the baseline's problems in one order"}
    labels = inputs.cluster_labels.get((baseline, winner, role))
    est = adjusted_winner(bases[0], [list(ps.y_new) for ps in sets], names.index(winner),  # type: ignore[union-attr]
                          confidence=confidence, clusters=labels)
    return {"checkpoint": winner, "baseline": baseline, "set": role, **est.to_dict()}


def regressions(comparisons: Mapping[tuple[str, str, str], Any], vs_parent: Mapping[str, Mapping[str, Any]], *,
                alpha: float) -> list[dict[str, Any]]:
    """Every checkpoint significantly worse than a baseline (S0, SOTA) or the parent, at a
    family-wise error rate ``alpha`` per attempt. Flagged whatever the decision.

    The family is every comparison the flag looks at (each checkpoint against each baseline on each
    set compared, and against the parent): their McNemar exact two-sided p-values are Holm-adjusted
    together, and a comparison is flagged where its adjusted p < ``alpha`` and its Δ < 0. Holm's
    step-down holds the chance of flagging any of them, when none is truly worse, at most ``alpha``
    under any dependence between the comparisons (the same checkpoint against two baselines, close
    checkpoints against one), which the per-comparison test at ``alpha`` did not (5.8–15% of null
    attempts flagged). Each flag carries the family's size and its Holm p.
    """
    from rlexp.stats import adjust_pvalues

    rows = [(ck, baseline, role, cmp.delta_pp, cmp.mcnemar_p, list(cmp.ci_pp))
            for (baseline, ck, role), cmp in comparisons.items()]
    rows += [(ck, "parent", "primary", c["delta_pp"], c["mcnemar_p"], list(c["ci_pp"])) for ck, c in vs_parent.items()]
    if not rows:
        return []
    holm = adjust_pvalues([min(1.0, max(0.0, float(r[4]))) for r in rows], "holm")
    family = regression_family(len(rows))
    out = []
    tests = [cmp.test if isinstance(cmp, ClusteredComparison) else None for cmp in comparisons.values()]
    tests += [c.get("test") for c in vs_parent.values()]
    for (ck, against, role, delta, p, ci), adjusted, test in zip(rows, holm, tests, strict=True):
        if adjusted < alpha and delta < 0:
            flag = {"checkpoint": ck, "against": against, "set": role, "delta_pp": delta, "mcnemar_p": p,
                    "ci_pp": ci, "holm_p": float(adjusted), "family": family, "family_size": len(rows),
                    "alpha": alpha}
            if test is not None:  # p is the cluster-robust test's
                flag["test"] = test
            out.append(flag)
    return out


def regression_family(size: int) -> str:
    """The name of an attempt's regression family, as the flag prints it."""
    return (f"the attempt's {size} comparison{'s' if size != 1 else ''} (every checkpoint vs every baseline on "
            f"every set, and vs the parent)")


def regression_lines(record: Mapping[str, Any]) -> list[str]:
    """One sentence per flagged regression of a decision record (for ``decide`` and the report)."""
    lines = []
    for r in record.get("regressions") or []:
        line = (f"REGRESSION: {r['checkpoint']} is significantly worse than {r['against'].replace('baseline_', '')} "
                f"on {r['set']}: Δ {r['delta_pp']:+.1f} pp, {'clustered' if r.get('test') else 'McNemar'} p "
                f"{r['mcnemar_p']:.3g}, CI "
                f"[{r['ci_pp'][0]:+.1f}, {r['ci_pp'][1]:+.1f}] pp")
        if "holm_p" in r:   # decision files written before the family-wise flag carry the raw p only
            line += (f"; Holm p {r['holm_p']:.3g} < {r.get('alpha', 0.05):g} within {r['family']}")
        lines.append(line)
    return lines


def cluster_line(record: Mapping[str, Any]) -> str | None:
    """What a decision on a clustered primary set tested, in one sentence; None when its problems are
    independent (no cluster declared)."""
    primary = record.get("primary_set")
    info = (record.get("clustered") or {}).get(primary)
    if not info:
        return None
    g = info.get("n_clusters")
    naive = [f"{name} {ck['naive_mcnemar_p']:.3g}" for name, ck in (record.get("checkpoints") or {}).items()
             if isinstance(ck, Mapping) and isinstance(ck.get("naive_mcnemar_p"), int | float)]
    return (f"{primary} clustered by {info['column']}, {g} clusters: p, the 95% CI and the gates use the "
            f"cluster-robust paired t-test (CR1 SE, {g - 1 if isinstance(g, int) else '?'} df), not McNemar"
            + (f" (naive McNemar p: {', '.join(naive)})" if naive else "") + ".")


def p_label(record: Mapping[str, Any]) -> str:
    """The name of the p-value the gates read on the decision's primary set."""
    return "clustered p" if (record.get("clustered") or {}).get(record.get("primary_set")) else "McNemar p"


def selection_line(record: Mapping[str, Any]) -> str | None:
    """The raw best-of-K Δ with its selection-adjusted estimate beside it, in one sentence."""
    adj = record.get("selection_adjusted") or {}
    if adj.get("adjusted_pp") is None:
        return None
    low, high = adj["ci_pp"]
    return (f"{adj['checkpoint']} is the best of {adj['k']} checkpoints: raw Δ {adj['raw_pp']:+.2f} pp vs "
            f"{str(adj['baseline']).replace('baseline_', '')}; adjusted for that selection (hybrid of "
            f"Andrews, Kitagawa & McCloskey 2024) {adj['adjusted_pp']:+.2f} pp, {100 * adj['confidence']:g}% CI "
            f"[{low:+.2f}, {high:+.2f}] pp. " + _estimate_sentence(record))


def _estimate_sentence(record: Mapping[str, Any]) -> str:
    """Which Δ the record's SOP let Gate-2 average."""
    g2 = ((record.get("gates") or {}).get("gate_2") or {}).get("numbers") or {}
    if g2.get("estimate") == "selection_adjusted":
        return f"Gate-2 of SOP {record.get('sop_version')} averages the adjusted Δ over seeds."
    return "The SOP's gates use the raw Δ."


def calibration_line(record: Mapping[str, Any]) -> str:
    """The SOP version a decision was taken under and what its claim rule was calibrated to."""
    version = record.get("sop_version", "?")
    cal = record.get("sop_claim_calibration")
    if not isinstance(cal, Mapping):
        return (f"SOP {version}: claim rule (STOP-1) not calibrated against the winner's curse "
                "(sop/README.md#claim-calibration has its rates)")
    return (f"SOP {version}: claim rule calibrated by `rlexp sop calibrate-claim` ({cal['sims']} studies per "
            f"effect and ρ): a true Δ ≤ {cal['below_effect_pp']:+g} pp reaches STOP-1 at most "
            f"{100 * cal['rate_below']:.1f}% (target ≤ {100 * cal['max_rate_below']:g}%), a true "
            f"{cal['at_effect_pp']:+g} pp at least {100 * cal['rate_at']:.1f}% (target ≥ {100 * cal['min_rate_at']:g}%), "
            f"± {100 * cal['mc_se']:.1f}% Monte-Carlo SE")


def diagnostics_from(rows: Sequence[Mapping[str, Any]], g4_numbers: Mapping[str, Any] | None, sop: Sop
                     ) -> gates.Diagnostics:
    """The fault tree's training diagnostics from metrics rows and the G4 verdict's numbers.

    Rows are ``metrics.jsonl`` lines (already read); the OOD/ID deltas are added by :func:`decide`.
    """
    from rlexp.numbers import finite_number

    kw: dict[str, Any] = {}
    rows = sorted((r for r in rows if isinstance(r.get("global_step"), int)), key=lambda r: r["global_step"])

    def series(key: str) -> list[tuple[int, float]]:
        return [(r["global_step"], v) for r in rows if (v := finite_number(r.get(key))) is not None]

    def thirds(values: list[float]) -> tuple[float, float] | None:
        if len(values) < 3:
            return None
        k = max(1, len(values) // 3)
        return sum(values[:k]) / k, sum(values[-k:]) / k

    reward = thirds([v for _, v in series("reward")])
    if reward:
        kw["train_reward_trend_pp"] = 100.0 * (reward[1] - reward[0])
    tail = thirds([v for _, v in series("log_ratio_abs_p99")] or [v for _, v in series("ratio_max")])
    if tail:
        kw["ratio_tail_early"], kw["ratio_tail_late"] = tail
    lr = series("actor_lr")
    if lr:
        peak_lr = max(v for _, v in lr)
        if peak_lr > 0:
            kw["lr_final_fraction"] = lr[-1][1] / peak_lr
    monitor = series("monitor_acc")
    if rows:
        kw["total_steps"] = rows[-1]["global_step"]
    if monitor:
        # the fault tree asks where the in-run curve peaked (every monitor point counts), not
        # which saved checkpoint eval/selection.json chose: hence all monitor steps as "saved"
        sel = gates.select_k3(monitor, rows[-1]["global_step"], None, [s for s, _ in monitor], sop)
        kw["peak_step"] = sel.best_by_monitor
        if lr and sel.best_by_monitor is not None and kw.get("lr_final_fraction") is not None:
            at_peak = [v for s, v in lr if s <= sel.best_by_monitor]
            kw["lr_at_peak_fraction"] = at_peak[-1] / max(v for _, v in lr) if at_peak else None
    # G4: pass@k sampled on the problems the baseline gets wrong greedily, so greedy pass@1 on
    # that set is 0 by construction and pass@k is the whole gap the fault tree's class A asks about.
    if g4_numbers and isinstance(g4_numbers.get("k"), int):
        k = g4_numbers["k"]
        pk = finite_number(g4_numbers.get(f"pass_at_{k}"))
        if pk is not None:
            kw["pass_at_1"], kw["pass_at_k"], kw["k"] = 0.0, pk, k
    return gates.Diagnostics(**kw)
