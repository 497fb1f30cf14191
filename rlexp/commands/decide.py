"""`rlexp decide ATTEMPT`: the SOP's mechanical decision for one evaluated attempt.

Reads the attempt spec, the pre-registered checkpoints (``eval/selection.json``), the eval
records of those checkpoints and of the baselines (``eval/<checkpoint>/<set>.jsonl``), the
parser audit and the experiment's ledger. Compares every checkpoint with Baseline-S0 and
Baseline-SOTA on every set (paired: Δ, b/c, McNemar, bootstrap CI), applies Gate-1a/1b per
checkpoint and with Holm over K, Gate-2 with the ID guardrail, STOP-3a/3b, the gray zone and
the fault tree, then writes ``decision.json`` and the SOP §1 paired records, appends the ledger
and moves the SOTA pin only on STOP-1 (Gate-1b and Gate-2).

Everything is read and computed before anything is written, so bad input (exit 2) leaves the
attempt untouched.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

BASELINES = ("baseline_s0", "baseline_sota")
ROLE_ORDER = ("final", "mid", "best_by_monitor")
# Recipe keys that do not make a different recipe for Gate-2 / STOP-3b: the seed, and the pool file itself.
NOT_RECIPE = ("seed", "prompt_data", "prompt_data_probs")


def decide(
    attempt: Annotated[Path, typer.Argument(help="The attempt directory or its attempt.yaml.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print decision.json instead of the summary.")] = False,
    sop_file: Annotated[Path | None, typer.Option("--sop", help="SOP file (default: the version in force).")] = None,
) -> None:
    """Apply the SOP gates to an evaluated attempt; write decision.json, append the ledger."""
    result = decide_attempt(attempt, sop_path=sop_file)
    if json_out:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
    else:
        _print_summary(result)


# --------------------------------------------------------------------------- reading


def _read_selection(eval_dir: Path) -> tuple[list[str], dict[str, str], str | None]:
    """Checkpoint names in role order, name -> role(s), and the SHA-256 of the SOP file the
    selection was made under, from eval/selection.json."""
    from rlexp.errors import InputError
    from rlexp.storage.files import read_json

    path = eval_dir / "selection.json"
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "expected a JSON object")
    names: list[str] = []
    roles: dict[str, str] = {}
    for role in ROLE_ORDER:
        step = data.get(role)
        if step is None:
            continue
        if isinstance(step, bool) or not isinstance(step, int):
            raise InputError(path, role, f"must be a global step (integer) or null, got {step!r}")
        name = f"global_step{step}"
        if name not in names:
            names.append(name)
        roles[name] = f"{roles[name]}+{role}" if name in roles else role
    listed = data.get("checkpoints")
    if listed is not None:
        if not (isinstance(listed, list) and all(isinstance(x, str) and x.startswith("global_step") for x in listed)):
            raise InputError(path, "checkpoints", "must be a list of 'global_step{N}' names")
        for name in listed:
            if name not in names:
                names.append(name)
                roles[name] = "pre-registered"
    if not names:
        raise InputError(path, "checkpoints", "no checkpoint selected")
    return names, roles, data.get("sop_sha256")


def _parser_audit(attempt_dir: Path) -> dict[str, Any] | None:
    """guards/parser_audit.json (a ``rlexp.stages.guard.GuardVerdict``, written by ``rlexp guard
    audit``) → {"misparse_rate", "audit_passed", "file"}; None when the audit was not run."""
    from rlexp.errors import InputError
    from rlexp.storage.files import finite_number, read_json

    path = attempt_dir / "guards" / "parser_audit.json"
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "expected a JSON object (a guard verdict written by `rlexp guard audit`)")
    passed = data.get("passed")
    if not isinstance(passed, bool):
        raise InputError(path, "passed", f"must be true or false, got {passed!r}")
    numbers = data.get("numbers")
    if not isinstance(numbers, dict) or "mis_parse_rate" not in numbers:
        raise InputError(path, "numbers.mis_parse_rate", "missing (write the file with `rlexp guard audit ATTEMPT "
                         "--verdicts FILE`)")
    rate = finite_number(numbers["mis_parse_rate"])
    if rate is None or not 0.0 <= rate <= 1.0:
        raise InputError(path, "numbers.mis_parse_rate", f"must be a fraction in [0, 1], got "
                         f"{numbers['mis_parse_rate']!r}")
    return {"misparse_rate": rate, "audit_passed": passed, "file": str(path)}


def _recipe_sha256(att: Any) -> str:
    from rlexp.core.spec import RECIPE_KEYS, TRAINING
    from rlexp.storage.files import sha256_text

    recipe = {k: att.recipe.get(k) for k, meta in RECIPE_KEYS.items() if meta.kind == TRAINING and k not in NOT_RECIPE}
    recipe["trainer"] = [att.trainer.name, att.trainer.version]
    return sha256_text(json.dumps(recipe, sort_keys=True, default=str))


def _changed(att: Any) -> tuple[str, ...]:
    from rlexp.core.spec import TRAINING, diff_against_parent

    return tuple(sorted({d.key for d in diff_against_parent(att) if d.kind == TRAINING}))


# --------------------------------------------------------------------------- deciding


def decide_attempt(path: str | Path, *, sop_path: str | Path | None = None, now: str | None = None) -> dict[str, Any]:
    """Compute the decision, then write decision.json, paired records, the ledger line and the pin."""
    from rlexp.core import gates
    from rlexp.core.sop import load_sop
    from rlexp.core.spec import load_attempt
    from rlexp.errors import InputError
    from rlexp.stats import compare_counts, paired_counts
    from rlexp.storage.files import atomic_write_json, sha256_file
    from rlexp.storage.ledger import (
        LedgerEntry,
        SotaPin,
        latest_by_attempt,
        pin_sota,
        read_ledger,
        read_sota,
        record_decision,
    )
    from rlexp.storage.paired import pair_files, write_pairs_for_attempt

    att = load_attempt(path)
    sop = load_sop(sop_path)
    attempt_dir, exp_dir = Path(att.attempt_dir), Path(att.experiment_dir)
    eval_dir = attempt_dir / "eval"
    decided_at = now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    names, roles, selected_under = _read_selection(eval_dir)
    notes: list[str] = []
    if selected_under is not None and selected_under != sop.sha256:
        # K=3 (smoothing window, ties) was applied under another SOP file than the gates are now
        notes.append(f"the K=3 checkpoints were selected under another SOP file (sha256 {selected_under[:12]}) "
                     f"than this decision's ({sop.sha256[:12]}): rerun `rlexp eval` to reselect")

    # ---- which baselines and sets exist
    pin = read_sota(exp_dir)
    primary_role, id_role, sanity_role = sop.primary.set_role, sop.primary.secondary_role, sop.primary.sanity_role
    present = [b for b in BASELINES if (eval_dir / b / f"{primary_role}.jsonl").exists()]
    if "baseline_s0" not in present:
        raise InputError(eval_dir / "baseline_s0" / f"{primary_role}.jsonl", None,
                         "file not found: Baseline-S0 must be evaluated with the same pipeline (SOP §0)")
    pin_is_self = pin is not None and pin.attempt == att.id  # re-deciding the attempt that moved the pin
    if pin_is_self:
        notes.append("this attempt holds the SOTA pin (re-decided)")
    if pin is not None and not pin_is_self and "baseline_sota" not in present:
        raise InputError(eval_dir / "baseline_sota" / f"{primary_role}.jsonl", None,
                         f"file not found: a SOTA is pinned ({pin.attempt}/{pin.checkpoint}) but was not evaluated")
    decision_baseline = sop.primary.decision_baseline
    if decision_baseline not in present:
        decision_baseline = sop.primary.fallback_baseline
        notes.append(f"no {sop.primary.decision_baseline} records (no SOTA pinned yet): gates are taken against "
                     f"{decision_baseline}")
    for name in names:
        if not (eval_dir / name / f"{primary_role}.jsonl").exists():
            raise InputError(eval_dir / name / f"{primary_role}.jsonl", None,
                             "file not found: every pre-registered checkpoint must be evaluated (SOP §3)")

    # ---- every paired comparison (reading only)
    b = sop.bootstrap
    comparisons: dict[tuple[str, str, str], Any] = {}
    joined: dict[tuple[str, str, str], Any] = {}
    for baseline in present:
        for name in names:
            for role in (primary_role, id_role, sanity_role):
                base_file, new_file = eval_dir / baseline / f"{role}.jsonl", eval_dir / name / f"{role}.jsonl"
                if role != primary_role and not (base_file.exists() and new_file.exists()):
                    if base_file.exists() or new_file.exists():
                        notes.append(f"{role}: records of {baseline} or {name} missing; that comparison is skipped")
                    continue
                ps = pair_files(base_file, new_file)
                counts = paired_counts(ps.y_baseline, ps.y_new)
                joined[(baseline, name, role)] = ps
                comparisons[(baseline, name, role)] = compare_counts(
                    counts, resamples=b.resamples, seed=b.seed, confidence=b.confidence, method=b.method)

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

    # ---- history
    pool = att.datasets.get("pool")
    pool_sha = sha256_file(pool.path) if pool is not None and pool.path is not None and pool.path.is_file() else None
    if pool_sha is None:
        notes.append("pool file not found: pool SHA-256 unknown (STOP-3 and Gate-2 cannot match pools)")
    seed = att.recipe.get("seed")
    recipe_sha = _recipe_sha256(att)
    changed = _changed(att)
    history = {k: v for k, v in latest_by_attempt(read_ledger(exp_dir)).items() if k != att.id}
    current = gates.AttemptOutcome(att.id, att.parent_id, changed, pool_sha, prim.delta_pp, prim.ci_pp, prim.mcnemar_p,
                                   recipe_sha, pool.size if pool else None, None, seed)
    siblings = [e for e in history.values() if e.parent == att.parent_id and e.recipe_sha256 == recipe_sha
                and e.pool_sha256 == pool_sha and pool_sha is not None and e.seed != seed
                and e.baseline == decision_baseline]
    gate2 = gates.gate_2([prim.delta_pp, *[e.delta_pp for e in siblings]],
                         s0_id.delta_pp if s0_id is not None else None, sop)
    stop3a = gates.stop_3a(current, [e.outcome() for e in history.values()], sop)
    stop3b = gates.stop_3b(current, [e.outcome() for e in history.values()], sop)
    gray = gates.gray_zone(prim.delta_pp, sop)
    audit = _parser_audit(attempt_dir)
    # blocked by the rate under the SOP in force, or by the audit's own verdict (a stricter SOP)
    audit_blocks = audit is not None and (audit["misparse_rate"] > sop.parser_audit.max_misparse_rate + gates.EPS
                                          or not audit["audit_passed"])
    if audit is None:
        notes.append("no parser audit (guards/parser_audit.json): SOP §7 asks for one before the fault tree")

    # ---- the decision
    if audit_blocks:
        decision = "DEBUG"
        if audit["misparse_rate"] > sop.parser_audit.max_misparse_rate + gates.EPS:
            why = f"mis-parse rate {audit['misparse_rate']:.1%} > {sop.parser_audit.max_misparse_rate:.0%}"
        else:
            why = f"failed (guards/parser_audit.json, mis-parse rate {audit['misparse_rate']:.1%})"
        reason = f"parser audit: {why}: fix the parser and re-evaluate first (SOP §7)"
    elif g1b_pass and gate2.passed:
        decision, reason = "STOP-1", "Gate-1b and Gate-2 pass: release candidate; the SOTA pin moves"
    elif (g1a_pass or g1b_pass) and not siblings:
        decision = "CONFIRM"
        reason = ("Gate-1b" if g1b_pass else "Gate-1a") + " passes: run a confirmation seed (same pool, same config)"
    elif stop3a.passed:
        decision, reason = "STOP-3a", "same-pool stagnation: enter the fault tree"
    elif stop3b.passed:
        decision, reason = "STOP-3b", "pool-variance stagnation: enter the fault tree"
    else:
        decision = "CONTINUE"
        reason = "no gate passes" if not (g1a_pass or g1b_pass) else "a gate passed but replication (Gate-2) failed"
        if gray.passed:
            reason += "; gray zone: a third run is allowed"

    tree = gates.fault_tree(_diagnostics(att, comparisons, primary_ck, primary_role, id_role, sop), sop)

    # ---- the record
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
        for (baseline, ck, role), c in comparisons.items():
            if ck == name:
                entry["vs"].setdefault(baseline, {})[role] = _brief(c)
        checkpoints[name] = entry

    def family_dict(gate: str) -> dict[str, Any]:
        per = getattr(family, gate)
        first = next(iter(per.values()))
        return {"passed": any(v.passed for v in per.values()), "rule": first.rule,
                "per_checkpoint": {n: {k: v for k, v in per[n].to_dict().items() if k != "rule"} for n in names}}

    result: dict[str, Any] = {
        "attempt": att.id,
        "decision": decision,
        "reason": reason,
        "baseline": decision_baseline,
        "primary_set": primary_role,
        "primary_checkpoint": primary_ck,
        "decide_on": sop.checkpoints.decide_on,
        "gates": {
            "gate_1a": family_dict("gate_1a"), "gate_1b": family_dict("gate_1b"),
            "gate_1a_holm": family_dict("gate_1a_holm"), "gate_1b_holm": family_dict("gate_1b_holm"),
            "gate_2": gate2.to_dict() | {"siblings": [e.attempt for e in siblings]},
            "stop_3a": stop3a.to_dict(), "stop_3b": stop3b.to_dict(), "gray_zone": gray.to_dict(),
            "parser_audit": {"passed": None if audit is None else not audit_blocks, "rule": f"mis-parse rate <= "
                             f"{sop.parser_audit.max_misparse_rate:.0%} (SOP §7)", **(audit or {"misparse_rate": None})},
        },
        "checkpoints": checkpoints,
        "sop_version": sop.version,
        "sop_sha256": sop.sha256,
        "fault_tree": tree.to_dict(),
        "pool_sha256": pool_sha,
        "recipe_sha256": recipe_sha,
        "changed": list(changed),
        "seed": seed,
        "sota_moved": False,
        "sota": pin.to_dict() if pin else None,
        "notes": notes,
        "decided_at": decided_at,
    }

    # ---- writing (all input was read and validated above)
    write_pairs_for_attempt(attempt_dir, present, names, (primary_role, id_role, sanity_role), joined=joined)
    if decision == "STOP-1":
        winners = [n for n in names if getattr(family, "gate_1b_holm" if holm_mode else "gate_1b")[n].passed]
        best = max(winners, key=lambda n: (primary[n].delta_pp, -names.index(n)))
        ck_dir = attempt_dir / "checkpoints" / f"{best}_hf"
        new_pin = SotaPin(att.id, best, str(ck_dir.relative_to(exp_dir)) if ck_dir.is_relative_to(exp_dir)
                          else str(ck_dir), decided_at)
        if not (pin_is_self and pin.checkpoint == best):
            result["sota_moved"], result["sota"] = True, new_pin.to_dict()
    atomic_write_json(attempt_dir / "decision.json", result)
    record_decision(exp_dir, LedgerEntry(
        attempt=att.id, parent=att.parent_id, changed=changed, pool_sha256=pool_sha,
        pool_size=pool.size if pool else None, pool_method=None, recipe_sha256=recipe_sha,
        seed=seed if isinstance(seed, int) else None, checkpoint=primary_ck, baseline=decision_baseline,
        delta_pp=prim.delta_pp, ci_pp=prim.ci_pp, mcnemar_p=prim.mcnemar_p, decision=decision,
        sop_version=sop.version, decided_at=decided_at))
    if result["sota_moved"]:
        pin_sota(exp_dir, SotaPin(**result["sota"]))
    return result


def _brief(cmp: Any) -> dict[str, Any]:
    return {"n": cmp.n, "acc_base": cmp.acc_base, "acc_new": cmp.acc_new, "delta_pp": cmp.delta_pp, "b": cmp.b,
            "c": cmp.c, "mcnemar_p": cmp.mcnemar_p, "ci_pp": list(cmp.ci_pp)}


def _diagnostics(att: Any, comparisons: dict, primary_ck: str, primary_role: str, id_role: str, sop: Any) -> Any:
    """Whatever §8 diagnostics exist: metrics.jsonl trends, the monitor peak, the LR window, G4 pass@k."""
    from rlexp.core.gates import Diagnostics, select_k3
    from rlexp.storage.files import finite_number, read_json, read_jsonl

    attempt_dir = Path(att.attempt_dir)
    ood = comparisons.get(("baseline_s0", primary_ck, primary_role))
    idc = comparisons.get(("baseline_s0", primary_ck, id_role))
    kw: dict[str, Any] = {"ood_delta_pp": ood.delta_pp if ood else None, "id_delta_pp": idc.delta_pp if idc else None}
    metrics = attempt_dir / "metrics.jsonl"
    if metrics.exists():
        rows = sorted((r for r in read_jsonl(metrics) if isinstance(r.get("global_step"), int)),
                      key=lambda r: r["global_step"])

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
            sel = select_k3(monitor, rows[-1]["global_step"], None, [s for s, _ in monitor], sop)
            kw["peak_step"] = sel.best_by_monitor
            if lr and sel.best_by_monitor is not None and kw.get("lr_final_fraction") is not None:
                at_peak = [v for s, v in lr if s <= sel.best_by_monitor]
                kw["lr_at_peak_fraction"] = at_peak[-1] / max(v for _, v in lr) if at_peak else None
    # G4 (rlexp.stages.guard): pass@k sampled on the problems the baseline gets wrong greedily, so greedy
    # pass@1 on that set is 0 by construction and pass@k is the whole gap the fault tree's class A asks about.
    g4 = attempt_dir / "guards" / "g4.json"
    if g4.exists():
        data = read_json(g4)
        numbers = data.get("numbers") if isinstance(data, dict) else None
        if isinstance(numbers, dict) and isinstance(numbers.get("k"), int):
            k = numbers["k"]
            pk = finite_number(numbers.get(f"pass_at_{k}"))
            if pk is not None:
                kw["pass_at_1"], kw["pass_at_k"], kw["k"] = 0.0, pk, k
    return Diagnostics(**kw)


# --------------------------------------------------------------------------- human output


def _print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{result['attempt']} vs {result['baseline']} on {result['primary_set']} "
                        f"(SOP {result['sop_version']})")
    table.add_column("checkpoint", no_wrap=True, min_width=len(max(result["checkpoints"], key=len)))
    for col in ("role", "acc", "Δ pp", "b", "c", "McNemar p", "Holm p", "95% CI pp", "1a", "1b"):
        table.add_column(col, justify="right" if col != "role" else "left")
    for name, ck in result["checkpoints"].items():
        table.add_row(name, str(ck["role"]), f"{ck['acc_new']:.1%}", f"{ck['delta_pp']:+.2f}", str(ck["b"]),
                      str(ck["c"]), f"{ck['mcnemar_p']:.4f}", f"{ck['holm_p']:.4f}",
                      f"[{ck['ci_pp'][0]:+.2f}, {ck['ci_pp'][1]:+.2f}]",
                      "pass" if ck["gate_1a"] else "-", "pass" if ck["gate_1b"] else "-")
    console.print(table)
    g = result["gates"]
    for key in ("gate_2", "stop_3a", "stop_3b", "parser_audit"):
        verdict = {True: "PASS", False: "no", None: "not run"}[g[key]["passed"]]
        console.print(f"{key}: {verdict} — {g[key]['rule']}")
    if result["fault_tree"]["suggestion"]:
        console.print(f"fault tree: {result['fault_tree']['suggestion']}")
    for note in result["notes"]:
        console.print(f"note: {note}")
    console.print(f"[bold]decision: {result['decision']}[/bold] — {result['reason']}"
                  + (" (SOTA pin moved)" if result["sota_moved"] else ""))
