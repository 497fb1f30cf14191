"""The SOP's decision rules as pure functions (each rule and its reason: sop/README.md).

Every rule takes its numbers from a :class:`rlexp.spec.sop.Sop` (no thresholds live here) and
returns a small frozen verdict with ``passed`` (or ``stop``), the numbers it looked at, and
the rule text it applied, so a decision can be read and re-checked by a person.

Rules: Gate-1a / Gate-1b (per checkpoint, and for the K=3 family with Holm-adjusted p),
Gate-2 (replication over seeds) with the ID-200 guardrail, STOP-3a / STOP-3b, the gray-zone
"third run" advice, the in-run early-stop rule, K=3 checkpoint selection and the fault tree
(classes A-D) computed from whatever diagnostics exist.

Comparisons at a threshold: values within ``EPS`` of a threshold count as equal to it, so
``delta >= +2.0pp`` passes at exactly 2.0pp and ``CI low > -0.5pp`` fails at exactly -0.5pp,
whatever the floating-point rounding of (c - b) / N.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlexp.errors import InputError
from rlexp.experiment.layout import (
    MAX_GLOBAL_STEP,
    Checkpoint,
    canonical_checkpoint_step,
    checkpoint_name,
    checkpoint_step,
)
from rlexp.numbers import finite_number
from rlexp.protocol.verdict import Verdict
from rlexp.spec.sop import Sop

EPS = 1e-9


def _ge(x: float, threshold: float) -> bool:
    return x >= threshold - EPS


def _gt(x: float, threshold: float) -> bool:
    return x > threshold + EPS


def _lt(x: float, threshold: float) -> bool:
    return x < threshold - EPS


def _pp(x: float) -> str:
    # one decimal, as the SOP writes its thresholds; more where a threshold has them (+3.75pp)
    text = f"{x:+.1f}pp"
    return text if abs(float(text[:-2]) - x) < EPS else f"{x:+.2f}pp"


class ComparisonLike(Protocol):
    """What the gates need from a paired comparison (rlexp.stats.PairedComparison has it)."""

    delta_pp: float
    mcnemar_p: float
    ci_pp: tuple[float, float] | None




# --------------------------------------------------------------------------- Gate-1a / Gate-1b


def _ci_name(sop: Sop) -> str:
    """How the rules name the SOP's interval (``bootstrap.method``)."""
    return "Newcombe CI" if sop.bootstrap.method == "newcombe" else "bootstrap CI"


def gate_1a_rule(sop: Sop) -> str:
    g = sop.gate_1a
    return (
        f"Gate-1a: OOD delta >= {_pp(g.min_delta_pp)} AND (McNemar exact p < {g.max_mcnemar_p:g} "
        f"OR {_ci_name(sop)} low > {_pp(g.min_ci_low_pp)})"
    )


def gate_1b_rule(sop: Sop) -> str:
    g = sop.gate_1b
    return (
        f"Gate-1b: OOD delta >= {_pp(g.min_delta_pp)} AND McNemar exact p < {g.max_mcnemar_p:g} "
        f"AND {_ci_name(sop)} low > {_pp(g.min_ci_low_pp)} (if computed)"
    )


def gate_1a(cmp: ComparisonLike, sop: Sop, *, p_value: float | None = None, label: str = "") -> Verdict:
    """Exploration gate: worth a confirmation seed. ``p_value`` overrides McNemar p (Holm)."""
    g = sop.gate_1a
    p = cmp.mcnemar_p if p_value is None else p_value
    ci_low = cmp.ci_pp[0] if cmp.ci_pp is not None else None
    delta_ok = _ge(cmp.delta_pp, g.min_delta_pp)
    p_ok = _lt(p, g.max_mcnemar_p)
    ci_ok = ci_low is not None and _gt(ci_low, g.min_ci_low_pp)
    notes = () if ci_low is not None else ("no bootstrap CI: only the McNemar branch can pass",)
    return Verdict(
        name=f"gate_1a{label}",
        passed=delta_ok and (p_ok or ci_ok),
        rule=gate_1a_rule(sop) + (" [p Holm-adjusted over K]" if p_value is not None else ""),
        numbers={"delta_pp": cmp.delta_pp, "p": p, "ci_low_pp": ci_low,
                 "delta_ok": delta_ok, "p_ok": p_ok, "ci_ok": ci_ok},
        notes=notes,
    )


def gate_1b(cmp: ComparisonLike, sop: Sop, *, p_value: float | None = None, label: str = "") -> Verdict:
    """Win gate: a claimable effect. ``p_value`` overrides McNemar p (Holm)."""
    g = sop.gate_1b
    p = cmp.mcnemar_p if p_value is None else p_value
    ci_low = cmp.ci_pp[0] if cmp.ci_pp is not None else None
    delta_ok = _ge(cmp.delta_pp, g.min_delta_pp)
    p_ok = _lt(p, g.max_mcnemar_p)
    ci_ok = ci_low is None or _gt(ci_low, g.min_ci_low_pp)  # "if computed"
    return Verdict(
        name=f"gate_1b{label}",
        passed=delta_ok and p_ok and ci_ok,
        rule=gate_1b_rule(sop) + (" [p Holm-adjusted over K]" if p_value is not None else ""),
        numbers={"delta_pp": cmp.delta_pp, "p": p, "ci_low_pp": ci_low,
                 "delta_ok": delta_ok, "p_ok": p_ok, "ci_ok": ci_ok},
        notes=() if ci_low is not None else ("no bootstrap CI computed: CI clause skipped",),
    )


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, as a list (:func:`rlexp.stats.adjust_pvalues`)."""
    from rlexp.stats import adjust_pvalues

    return [float(p) for p in adjust_pvalues(list(pvalues), method="holm")]


@dataclass(frozen=True)
class FamilyVerdict:
    """Gate-1a/1b over the K checkpoints: per checkpoint, and with Holm-adjusted p."""

    holm_p: Mapping[str, float]
    gate_1a: Mapping[str, Verdict]
    gate_1b: Mapping[str, Verdict]
    gate_1a_holm: Mapping[str, Verdict]
    gate_1b_holm: Mapping[str, Verdict]

    def any_passed(self, gate: str, *, holm: bool) -> bool:
        verdicts = getattr(self, f"{gate}_holm" if holm else gate)
        return any(v.passed for v in verdicts.values())


def family_gates(comparisons: Mapping[str, ComparisonLike], sop: Sop) -> FamilyVerdict:
    names = list(comparisons)
    holm = dict(zip(names, holm_adjust([comparisons[n].mcnemar_p for n in names]), strict=True))
    return FamilyVerdict(
        holm_p=holm,
        gate_1a={n: gate_1a(comparisons[n], sop) for n in names},
        gate_1b={n: gate_1b(comparisons[n], sop) for n in names},
        gate_1a_holm={n: gate_1a(comparisons[n], sop, p_value=holm[n], label="_holm") for n in names},
        gate_1b_holm={n: gate_1b(comparisons[n], sop, p_value=holm[n], label="_holm") for n in names},
    )


# --------------------------------------------------------------------------- Gate-2 + ID guardrail


def id_guardrail(id_delta_pp: float, mean_ood_delta_pp: float, sop: Sop) -> Verdict:
    """ID-200 must not regress by more than 3pp vs Baseline-S0 (5pp when mean OOD delta >= +6pp)."""
    g = sop.id_guardrail
    relaxed = _ge(mean_ood_delta_pp, g.relaxed_when_mean_ood_delta_pp)
    limit = g.relaxed_min_delta_pp if relaxed else g.min_delta_pp
    passed = _ge(id_delta_pp, limit)
    notes = ()
    if relaxed:
        notes = (f"relaxed limit {_pp(limit)} applies (mean OOD delta {_pp(mean_ood_delta_pp)}): "
                 "the ID regression must be reported explicitly",)
    return Verdict(
        name="id_guardrail",
        passed=passed,
        rule=(f"ID delta vs Baseline-S0 >= {_pp(g.min_delta_pp)}; >= {_pp(g.relaxed_min_delta_pp)} "
              f"when mean OOD delta >= {_pp(g.relaxed_when_mean_ood_delta_pp)}"),
        numbers={"id_delta_pp": id_delta_pp, "mean_ood_delta_pp": mean_ood_delta_pp,
                 "limit_pp": limit, "relaxed": relaxed},
        notes=notes,
    )


def gate_2(seed_deltas_pp: Sequence[float], id_delta_pp: float | None, sop: Sop) -> Verdict:
    """Replication: every seed delta > 0, mean delta >= +3pp (>= +4pp "gold"), ID guardrail holds."""
    g = sop.gate_2
    deltas = [float(d) for d in seed_deltas_pp]
    delta = "selection-adjusted delta" if g.estimate == "selection_adjusted" else "delta"
    rule = (f"Gate-2: >= {g.min_seeds} seeds (same pool SHA, same config), each {delta} > {_pp(g.min_each_delta_pp)}, "
            f"mean {delta} >= {_pp(g.min_mean_delta_pp)} (gold >= {_pp(g.gold_mean_delta_pp)}), ID guardrail holds")
    if len(deltas) < g.min_seeds:
        return Verdict("gate_2", False, rule,
                           {"seed_deltas_pp": deltas, "seeds": len(deltas), "mean_delta_pp": None, "gold": False},
                           (f"needs {g.min_seeds} seeds, has {len(deltas)}: run a confirmation seed",))
    mean = sum(deltas) / len(deltas)
    each_ok = all(_gt(d, g.min_each_delta_pp) for d in deltas)
    mean_ok = _ge(mean, g.min_mean_delta_pp)
    notes: list[str] = []
    if id_delta_pp is None:
        guard_ok = False
        notes.append("no ID record set: the ID guardrail cannot be checked")
        guard = None
    else:
        guard = id_guardrail(id_delta_pp, mean, sop)
        guard_ok = guard.passed
        notes.extend(guard.notes)
    passed = each_ok and mean_ok and guard_ok
    return Verdict(
        "gate_2", passed, rule,
        {"seed_deltas_pp": deltas, "seeds": len(deltas), "mean_delta_pp": mean, "each_positive": each_ok,
         "mean_ok": mean_ok, "gold": passed and _ge(mean, g.gold_mean_delta_pp),
         "id_guardrail": guard.to_dict() if guard else None},
        tuple(notes),
    )


# --------------------------------------------------------------------------- STOP-3a / STOP-3b / gray zone


@dataclass(frozen=True)
class AttemptOutcome:
    """What STOP-3 needs to know about one decided attempt (a ledger line)."""

    attempt: str
    parent: str | None
    changed: tuple[str, ...]
    pool_sha256: str | None
    delta_pp: float
    ci_pp: tuple[float, float] | None
    mcnemar_p: float | None
    recipe_sha256: str | None = None
    pool_size: int | None = None
    pool_method: str | None = None
    seed: int | None = None


def is_flat(delta_pp: float, ci_pp: tuple[float, float] | None, mcnemar_p: float | None, sop: Sop) -> bool:
    """STOP-3's "no effect": delta < +1.0pp AND the CI includes 0 (McNemar not significant without a CI)."""
    s = sop.stop_3
    if not _lt(delta_pp, s.max_delta_pp):
        return False
    if ci_pp is not None:
        return ci_pp[0] <= EPS and ci_pp[1] >= -EPS
    return mcnemar_p is not None and _ge(mcnemar_p, s.not_significant_p)


def _flat_rule(sop: Sop) -> str:
    return f"delta < {_pp(sop.stop_3.max_delta_pp)} AND CI includes 0 (or McNemar p >= {sop.stop_3.not_significant_p:g})"


def stop_3a(current: AttemptOutcome, history: Sequence[AttemptOutcome], sop: Sop) -> Verdict:
    """Same-pool stagnation: this attempt and its parent (both single-variable, same pool SHA) are flat.

    "Consecutive" is read along the parent chain: the previous attempt is this one's parent
    as recorded in the ledger (its latest decision).
    """
    n = sop.stop_3.consecutive_attempts
    rule = f"STOP-3a: {n} consecutive single-variable attempts with the same pool SHA-256 are flat: {_flat_rule(sop)}"
    by_id = {h.attempt: h for h in history}
    chain = [current]
    notes: list[str] = []
    while len(chain) < n:
        parent = by_id.get(chain[-1].parent or "")
        if parent is None:
            notes.append(f"parent {chain[-1].parent!r} of {chain[-1].attempt} is not in the ledger")
            break
        chain.append(parent)
    flat = [is_flat(a.delta_pp, a.ci_pp, a.mcnemar_p, sop) for a in chain]
    single = [len(a.changed) == 1 for a in chain]
    same_pool = len({a.pool_sha256 for a in chain}) == 1 and chain[0].pool_sha256 is not None
    passed = len(chain) >= n and all(flat) and all(single) and same_pool
    return Verdict(
        "stop_3a", passed, rule,
        {"attempts": [a.attempt for a in chain], "delta_pp": [a.delta_pp for a in chain], "flat": flat,
         "single_variable": single, "same_pool": same_pool},
        tuple(notes),
    )


def stop_3b(current: AttemptOutcome, history: Sequence[AttemptOutcome], sop: Sop) -> Verdict:
    """Pool-variance stagnation: same recipe, different pool subsamples (same size and method), all flat."""
    n = sop.stop_3.consecutive_attempts
    rule = (f"STOP-3b: {n} attempts with the same recipe on different pool subsamples (different SHA-256, "
            f"same size and selection method) are all flat: {_flat_rule(sop)}")
    notes: list[str] = []
    if current.recipe_sha256 is None or current.pool_sha256 is None:
        return Verdict("stop_3b", False, rule, {"attempts": [current.attempt]},
                           ("recipe or pool SHA-256 unknown: STOP-3b cannot be evaluated",))
    peers = [h for h in history if h.attempt != current.attempt and h.recipe_sha256 == current.recipe_sha256
             and h.pool_sha256 not in (None, current.pool_sha256)
             and h.pool_size == current.pool_size and h.pool_method == current.pool_method]
    # one attempt per distinct pool: the latest decision for it
    by_pool: dict[str, AttemptOutcome] = {}
    for h in peers:
        by_pool[h.pool_sha256 or ""] = h
    group = [current, *by_pool.values()]
    flat = [is_flat(a.delta_pp, a.ci_pp, a.mcnemar_p, sop) for a in group]
    passed = len(group) >= n and all(flat)
    if len(group) < n:
        notes.append(f"only {len(group)} pool subsample(s) of this recipe decided; needs {n}")
    return Verdict(
        "stop_3b", passed, rule,
        {"attempts": [a.attempt for a in group], "pools": [a.pool_sha256 for a in group],
         "delta_pp": [a.delta_pp for a in group], "flat": flat},
        tuple(notes),
    )


def gray_zone(delta_pp: float, sop: Sop) -> Verdict:
    """+1pp <= delta < +3pp: ambiguous; the SOP allows a third run before STOP-3."""
    s = sop.stop_3
    inside = _ge(delta_pp, s.gray_zone_low_pp) and _lt(delta_pp, s.gray_zone_high_pp)
    return Verdict(
        "gray_zone", inside,
        f"gray zone: {_pp(s.gray_zone_low_pp)} <= delta < {_pp(s.gray_zone_high_pp)} -> a third run is allowed",
        {"delta_pp": delta_pp},
        ("ambiguous result: a third run (new seed) may be used before declaring STOP-3",) if inside else (),
    )


# --------------------------------------------------------------------------- in-run monitor: stop rule, K=3


def _validate_points(points: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for i, point in enumerate(points):
        try:
            step, acc = point
        except (TypeError, ValueError):
            raise InputError(None, f"monitor_points[{i}]", "expected a (global_step, accuracy) pair") from None
        value = finite_number(acc)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InputError(None, f"monitor_points[{i}]", f"global_step must be a non-negative integer, got {step!r}")
        if value is None or not 0.0 <= value <= 1.0:
            raise InputError(None, f"monitor_points[{i}]", f"accuracy must be a fraction in [0, 1], got {acc!r}")
        if step in seen:
            raise InputError(None, f"monitor_points[{i}]", f"duplicate global_step {step}")
        seen.add(step)
        out.append((step, value))
    return sorted(out)


def smooth(points: Sequence[tuple[int, float]], window: int) -> list[tuple[int, float | None]]:
    """Trailing moving average over eval points (not steps); None until a full window exists."""
    values = [v for _, v in points]
    return [(step, sum(values[i - window + 1 : i + 1]) / window if i + 1 >= window else None)
            for i, (step, _) in enumerate(points)]




def early_stop(monitor_points: Iterable[tuple[int, float]], sop: Sop) -> Verdict:
    """The in-run stop rule (sop/README.md#early-stop) on (global_step, accuracy fraction) monitor points.

    Smoothed value = trailing mean of the last ``smoothing_window`` eval points. The best-so-far
    is set by the first full window and moves only on a gain of at least ``min_improvement_pp``
    (a smaller gain is noise and does not reset patience). Stop when ``patience_evals``
    consecutive smoothed points bring no such gain. Patience counts eval points present in the
    list, so a missed eval does not count as an eval without improvement.
    """
    e = sop.early_stop
    rule = (f"stop when {e.patience_evals} consecutive evals bring no gain >= {_pp(e.min_improvement_pp)} over the "
            f"best {e.smoothing_window}-point moving average of the in-run OOD monitor")
    points = _validate_points(monitor_points)
    smoothed = smooth(points, e.smoothing_window)
    best_step = best = None
    since = 0
    for step, value in smoothed:
        if value is None:
            continue
        if best is None or _ge((value - best) * 100.0, e.min_improvement_pp):
            best_step, best, since = step, value, 0
            continue
        since += 1
        if since >= e.patience_evals:
            return _early_stop_verdict(
                True,
                f"no gain >= {_pp(e.min_improvement_pp)} over best smoothed {best:.4f} (step {best_step}) "
                f"for {since} evals; stop at step {step}",
                rule, best_step, best, since, step, smoothed)
    if best is None:
        reason = f"{len(points)} monitor point(s): fewer than the {e.smoothing_window}-point window"
    else:
        reason = f"{since} of {e.patience_evals} evals without a gain >= {_pp(e.min_improvement_pp)}"
    return _early_stop_verdict(False, reason, rule, best_step, best, since, None, smoothed)


def _early_stop_verdict(stop: bool, reason: str, rule: str, best_step: int | None, best: float | None, since: int,
                        stop_step: int | None, smoothed: Sequence[tuple[int, float | None]]) -> Verdict:
    """``passed``: the stop rule is met (stop the run). ``details``: the smoothed monitor curve."""
    return Verdict("early_stop", stop, rule,
                   {"best_step": best_step, "best_smoothed": best, "evals_since_improvement": since,
                    "stop_step": stop_step},
                   (reason,), tuple(smoothed))


@dataclass(frozen=True)
class CheckpointSelection:
    """The K=3 checkpoints (global steps) to evaluate, and how each was chosen."""

    final: int
    mid: int | None
    best_by_monitor: int | None
    notes: tuple[str, ...]
    smoothed: tuple[tuple[int, float | None], ...] = field(default=(), compare=False)  # evidence, not written

    @property
    def steps(self) -> list[int]:
        """Distinct steps in role order (final, mid, best): what gets evaluated."""
        out: list[int] = []
        for step in (self.final, self.mid, self.best_by_monitor):
            if step is not None and step not in out:
                out.append(step)
        return out

    @property
    def roles(self) -> dict[str, int | None]:
        return {"final": self.final, "mid": self.mid, "best_by_monitor": self.best_by_monitor}

    def to_dict(self) -> dict[str, Any]:
        return {**self.roles, "checkpoints": [checkpoint_name(s) for s in self.steps], "notes": list(self.notes)}


SELECTION_ROLES = ("final", "mid", "best_by_monitor")


@dataclass(frozen=True)
class RegisteredSelection:
    """``eval/selection.json``: the K=3 checkpoints pre-registered before any is evaluated (their
    roles, the names evaluated, the notes), what the selection was made from and the SOP file it was
    made under. ``to_dict`` writes the file; ``from_dict`` reads it back, each field checked.

    ``checkpoints`` is the list of names in the file: a role's checkpoint is always among them, and
    a name in it that no role holds is pre-registered as well."""

    final: int | None
    mid: int | None
    best_by_monitor: int | None
    checkpoints: tuple[str, ...]
    notes: tuple[str, ...] = ()
    final_step_trained: int | None = None
    mid_preregistered: int | None = None
    saved_steps: tuple[int, ...] = ()
    monitor_points: int | None = None
    sop_version: str | None = None
    sop_sha256: str | None = None

    @classmethod
    def of(cls, selection: CheckpointSelection, **facts: Any) -> RegisteredSelection:
        listed = tuple(selection.to_dict()["checkpoints"])
        return cls(selection.final, selection.mid, selection.best_by_monitor, listed, tuple(selection.notes),
                   **{k: tuple(v) if k == "saved_steps" else v for k, v in facts.items()})

    @property
    def roles(self) -> dict[str, int | None]:
        return {"final": self.final, "mid": self.mid, "best_by_monitor": self.best_by_monitor}

    def selected(self) -> tuple[Checkpoint, ...]:
        """Each checkpoint to evaluate once: the roles' in role order (a step that holds two roles
        names both, ``final+best_by_monitor``), then a listed one no role holds (``pre-registered``)."""
        roles: dict[int, str] = {}
        for role, step in self.roles.items():
            if step is not None:
                roles[step] = f"{roles[step]}+{role}" if step in roles else role
        for name in self.checkpoints:
            roles.setdefault(checkpoint_step(name), "pre-registered")  # type: ignore[arg-type]  (checked names)
        return tuple(Checkpoint(step, role) for step, role in roles.items())

    def to_dict(self) -> dict[str, Any]:
        return {**self.roles, "checkpoints": list(self.checkpoints), "notes": list(self.notes),
                "final_step_trained": self.final_step_trained, "mid_preregistered": self.mid_preregistered,
                "saved_steps": list(self.saved_steps), "monitor_points": self.monitor_points,
                "sop_version": self.sop_version, "sop_sha256": self.sop_sha256}

    @classmethod
    def from_dict(cls, data: Any, source: Any = None) -> RegisteredSelection:
        """selection.json as :meth:`to_dict` wrote it; a field of another type is an InputError naming
        ``source`` and the field."""
        if not isinstance(data, Mapping):
            raise InputError(source, None, f"must be an object (the K=3 selection), got {data!r:.60}")
        steps: dict[str, int | None] = {}
        for role in (*SELECTION_ROLES, "final_step_trained", "mid_preregistered"):
            step = data.get(role)
            if step is not None and (isinstance(step, bool) or not isinstance(step, int)
                                     or not 0 <= step <= MAX_GLOBAL_STEP):
                raise InputError(source, role, f"must be a global step (an integer from 0 to {MAX_GLOBAL_STEP}) "
                                               f"or null, got {str(step)[:24]!r}")
            steps[role] = step
        listed = data.get("checkpoints")
        if listed is None:
            listed = [checkpoint_name(s) for s in dict.fromkeys(
                steps[r] for r in SELECTION_ROLES if steps[r] is not None)]
        if not (isinstance(listed, list) and all(canonical_checkpoint_step(x) is not None for x in listed)):
            raise InputError(source, "checkpoints", "must be a list of 'global_step{N}' names")
        if len(set(listed)) != len(listed):
            raise InputError(source, "checkpoints", "a checkpoint is listed twice")
        for role in SELECTION_ROLES:  # a role's checkpoint is one of the pre-registered ones
            if steps[role] is not None and checkpoint_name(steps[role]) not in listed:
                raise InputError(source, role, f"{checkpoint_name(steps[role])} is not among the checkpoints listed")
        notes, saved = data.get("notes"), data.get("saved_steps")
        notes, saved = [] if notes is None else notes, [] if saved is None else saved
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise InputError(source, "notes", f"must be a list of strings, got {notes!r:.60}")
        if not isinstance(saved, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in saved):
            raise InputError(source, "saved_steps", f"must be a list of global steps, got {saved!r:.60}")
        points = data.get("monitor_points")
        if points is not None and (isinstance(points, bool) or not isinstance(points, int)):
            raise InputError(source, "monitor_points", f"must be an integer, got {points!r:.60}")
        for key in ("sop_version", "sop_sha256"):
            if data.get(key) is not None and not isinstance(data.get(key), str):
                raise InputError(source, key, f"must be a string, got {data.get(key)!r:.60}")
        return cls(steps["final"], steps["mid"], steps["best_by_monitor"], tuple(listed), tuple(notes),
                   steps["final_step_trained"], steps["mid_preregistered"], tuple(saved), points,
                   data.get("sop_version"), data.get("sop_sha256"))


def select_k3(monitor_points: Iterable[tuple[int, float]], final_step: int, mid_step: int | None,
              saved_steps: Iterable[int], sop: Sop) -> CheckpointSelection:
    """Final, pre-registered mid, and best-by-monitor; every choice is a saved step.

    - final: ``final_step`` if saved, else the last saved step before it (OpenRLHF saves only on
      multiples of save_steps).
    - mid: the pre-registered step if saved, else the last saved step before it (never after: the
      rule must not depend on results).
    - best_by_monitor: the maximum of the smoothed monitor curve over saved steps that have a full
      smoothing window; ties go to the earliest step (a later step with the same smoothed value
      adds training without evidence). With fewer points than the window, a partial-window mean
      is used and noted. Monitor points at unsaved steps are skipped and noted. No monitor points:
      None (K drops to 2), noted.
    """
    window = sop.early_stop.smoothing_window
    saved = sorted({int(s) for s in saved_steps})
    if not saved:
        raise InputError(None, "saved_steps", "no saved checkpoints to select from")
    points = _validate_points(monitor_points)
    notes: list[str] = []

    before = [s for s in saved if s <= final_step]
    if final_step in saved:
        final = final_step
    elif before:
        final = before[-1]
        notes.append(f"final: step {final_step} has no saved checkpoint; using the last saved step {final}")
    else:
        final = saved[-1]
        notes.append(f"final: no saved step <= {final_step}; using the last saved step {final}")

    mid: int | None
    if mid_step is None:
        mid = None
        notes.append("mid: no pre-registered mid step")
    elif mid_step in saved:
        mid = mid_step
    else:
        lower = [s for s in saved if s <= mid_step]
        mid = lower[-1] if lower else None
        notes.append(f"mid: pre-registered step {mid_step} not saved; "
                     + (f"using the last saved step before it ({mid})" if mid is not None else "no saved step before it"))

    smoothed = smooth(points, window)
    full = [(s, v) for s, v in smoothed if v is not None]
    if not points:
        best = None
        notes.append("best_by_monitor: no in-run monitor points; not chosen (K=2)")
    else:
        if not full:
            values = [v for _, v in points]
            full = [(s, sum(values[: i + 1]) / (i + 1)) for i, (s, _) in enumerate(points)]
            notes.append(f"best_by_monitor: only {len(points)} monitor point(s) (< window {window}); "
                         "partial-window means used")
        candidates = [(s, v) for s, v in full if s in saved and s <= final_step]
        skipped = [s for s, _ in full if s not in saved]
        if skipped:
            notes.append(f"best_by_monitor: monitor points at unsaved steps skipped: {skipped}")
        if not candidates:
            best = None
            notes.append("best_by_monitor: no monitor point at a saved step; not chosen")
        else:
            top = max(v for _, v in candidates)
            tied = [s for s, v in candidates if abs(v - top) <= EPS]
            best = tied[0]
            if len(tied) > 1:
                notes.append(f"best_by_monitor: smoothed maximum {top:.4f} tied at steps {tied}; earliest chosen")
    if best is not None and best in (final, mid):
        notes.append(f"best_by_monitor coincides with {'final' if best == final else 'mid'} (step {best}); "
                     "evaluated once, no substitute (that would be picking among more than K)")
    return CheckpointSelection(final, mid, best, tuple(notes), tuple(smoothed))


# --------------------------------------------------------------------------- fault tree (sop/README.md#fault-tree)


@dataclass(frozen=True)
class Diagnostics:
    """Whatever diagnostics exist for an attempt; None = not measured."""

    pass_at_1: float | None = None          # fraction, fixed sample of prompts
    pass_at_k: float | None = None          # fraction, same prompts, k samples
    k: int | None = None
    train_reward_trend_pp: float | None = None   # late minus early mean train reward, in pp
    ood_delta_pp: float | None = None            # primary OOD delta vs Baseline-S0
    id_delta_pp: float | None = None
    peak_step: int | None = None                 # best smoothed monitor step
    total_steps: int | None = None
    lr_at_peak_fraction: float | None = None     # LR at the peak step / max LR
    lr_final_fraction: float | None = None       # LR at the last step / max LR
    ratio_tail_early: float | None = None        # mean log_ratio_abs_p99 (or ratio_max) early in the run
    ratio_tail_late: float | None = None


@dataclass(frozen=True)
class FaultClass:
    cls: str
    name: str
    indicated: bool | None      # None: not enough diagnostics to say
    evidence: str
    missing: tuple[str, ...]
    interventions: tuple[str, ...]


@dataclass(frozen=True)
class FaultTree:
    classes: tuple[FaultClass, ...]
    suggestion: str | None
    rule: str = "SOP fault tree (sop/README.md#fault-tree): classify the bottleneck, then change one variable"

    def to_dict(self) -> dict[str, Any]:
        return {"suggestion": self.suggestion, "rule": self.rule,
                "classes": {c.cls: {"name": c.name, "indicated": c.indicated, "evidence": c.evidence,
                                    "missing": list(c.missing), "interventions": list(c.interventions)}
                            for c in self.classes}}


def fault_tree(diag: Diagnostics, sop: Sop) -> FaultTree:
    """Advice, not a decision: which fault-tree class the available diagnostics point to, and what is missing."""
    ft = sop.fault_tree
    flat_pp = sop.stop_3.max_delta_pp
    out: list[FaultClass] = []

    # A) reward sparsity: pass@k >> pass@1 on the same prompts
    missing = tuple(n for n, v in (("pass_at_1", diag.pass_at_1), ("pass_at_k", diag.pass_at_k)) if v is None)
    if missing:
        a, ev = None, "pass@k vs pass@1 not measured"
    else:
        gap = (diag.pass_at_k - diag.pass_at_1) * 100.0
        a = _ge(gap, ft.passk_gap_pp)
        ev = f"pass@{diag.k or 'k'} - pass@1 = {gap:+.1f}pp (threshold {ft.passk_gap_pp:g}pp)"
    out.append(FaultClass("A", "reward sparsity / credit assignment", a, ev, missing,
                          ("increase n_samples_per_prompt (8 -> 16)", "light shaping bonus, incorrect stays 0")))

    # C) data distribution: train reward improves, OOD does not
    missing = tuple(n for n, v in (("train_reward_trend_pp", diag.train_reward_trend_pp),
                                   ("ood_delta_pp", diag.ood_delta_pp)) if v is None)
    if missing:
        c, ev = None, "train reward trend or OOD delta not available"
    else:
        c = _ge(diag.train_reward_trend_pp, ft.trend_min_pp) and _lt(diag.ood_delta_pp, ft.trend_min_pp)
        ev = f"train reward {diag.train_reward_trend_pp:+.1f}pp vs OOD delta {diag.ood_delta_pp:+.1f}pp"
    out.append(FaultClass("C", "data distribution / difficulty mismatch", c, ev, missing,
                          ("move the pool toward the OOD distribution", "curriculum / difficulty sampling")))

    # D) RL dynamics / schedule: peak well before the end while the LR decays; ratio tails collapse
    missing_d = []
    signals: list[bool] = []
    evidence: list[str] = []
    if diag.peak_step is None or diag.total_steps is None or diag.lr_final_fraction is None:
        missing_d.extend(n for n, v in (("peak_step", diag.peak_step), ("total_steps", diag.total_steps),
                                        ("lr_final_fraction", diag.lr_final_fraction)) if v is None)
    else:
        early_peak = diag.peak_step < ft.late_peak_fraction * diag.total_steps
        lr_low = _lt(diag.lr_final_fraction, ft.lr_low_fraction)
        signals.append(early_peak and lr_low)
        evidence.append(f"monitor peak at step {diag.peak_step}/{diag.total_steps}, final LR "
                        f"{diag.lr_final_fraction:.2f} x peak")
    if diag.ratio_tail_early is None or diag.ratio_tail_late is None:
        missing_d.extend(n for n, v in (("ratio_tail_early", diag.ratio_tail_early),
                                        ("ratio_tail_late", diag.ratio_tail_late)) if v is None)
    elif diag.ratio_tail_early > 0:
        shrink = diag.ratio_tail_late / diag.ratio_tail_early
        signals.append(_lt(shrink, ft.ratio_tail_shrink))
        evidence.append(f"ratio tail late/early = {shrink:.2f} (threshold {ft.ratio_tail_shrink:g})")
    d = any(signals) if signals else None
    out.append(FaultClass("D", "RL dynamics / schedule", d, "; ".join(evidence) or "LR window and ratio tails not available",
                          tuple(missing_d), ("raise min_lr (0.1x -> 0.2x peak)", "adjust init_kl_coef (separate A/B)")))

    # B) LoRA capacity: OOD and ID flat despite stable dynamics (the residual class)
    missing = tuple(n for n, v in (("ood_delta_pp", diag.ood_delta_pp), ("id_delta_pp", diag.id_delta_pp)) if v is None)
    if missing:
        b, ev = None, "OOD or ID delta not available"
    else:
        flat = abs(diag.ood_delta_pp) < flat_pp and abs(diag.id_delta_pp) < flat_pp
        b = flat and d is not True and a is not True
        ev = (f"OOD {diag.ood_delta_pp:+.1f}pp, ID {diag.id_delta_pp:+.1f}pp "
              f"({'flat' if flat else 'not flat'}, |delta| < {flat_pp:g}pp)"
              + ("; dynamics not known to be stable" if d is None else ""))
    out.append(FaultClass("B", "LoRA capacity", b, ev, missing,
                          ("increase LoRA rank (32 -> 64, alpha 128)", "widen target modules")))

    order = {"A": 0, "C": 1, "D": 2, "B": 3}
    out.sort(key=lambda fc: fc.cls)
    indicated = sorted((fc for fc in out if fc.indicated), key=lambda fc: order[fc.cls])
    suggestion = None
    if indicated:
        top = indicated[0]
        suggestion = f"{top.cls}) {top.name}: {top.interventions[0]}"
    return FaultTree(tuple(out), suggestion)
