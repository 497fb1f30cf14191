"""The one-page markdown report, verdict first: the decision, its reason and the next command;
Δ against SOTA, the parent and S0; then the eight deliverables a reviewer needs, gates as numbers
beside the SOP's thresholds. A missing piece renders as "not available"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlexp.experiment import layout
from rlexp.experiment.layout import checkpoint_name
from rlexp.experiment.records import checkpoint_step
from rlexp.reporting.formatters import (
    cell,
    fmt,
    guard_reason,
    guard_status,
    in_run_reason,
    interval_plain,
    interval_pp,
    mark,
    p_value,
    pct,
    signed_pp,
    table,
)
from rlexp.reporting.inputs import (
    ReportInputs,
    checkpoint_items,
    checkpoint_label,
    role_checkpoints,
)

NA = "not available"
SET_ORDER = ("ood_primary", "id", "sanity", "ood_monitor")
IN_RUN_GATES = ("g3", "g5", "mismatch", "resume")  # written by `rlexp launch` (rlexp.training.monitor); shown with stability
DELIVERABLES = (
    "1. Recipe diff",
    "2. Pool and probe SHA-256",
    "3. Decoding",
    "4. Primary baselines and K=3 checkpoints",
    "5. Paired statistics",
    "6. Stability",
    "7. Parser ceiling check",
    "8. Decision",
)


def next_step(inputs: ReportInputs) -> tuple[str, str]:
    """(what to do next, the command to run) for the attempt as it stands."""
    at = f"{inputs.commands_prefix}{inputs.attempt_id}"
    decision = (inputs.decision or {}).get("decision")
    if decision is None:
        if inputs.plan is None:
            return "plan the attempt", f"rlexp plan {at}"
        if inputs.state is None:
            return "launch the training run", f"rlexp launch {at}"
        if inputs.selection is None:
            return "evaluate the K=3 checkpoints and the baselines", f"rlexp eval {at}"
        return "decide under the SOP", f"rlexp decide {at}"
    siblings = [m["attempt"] for m in inputs.family if m["relation"] == "seed sibling"]
    seed_id = f"{inputs.attempt_id}s{len(siblings) + 2}"
    seed_cmd = (f"cp {at}/attempt.yaml into {inputs.commands_prefix}{seed_id}/ with id {seed_id} and another "
                f"recipe.seed, then: rlexp plan {inputs.commands_prefix}{seed_id}")
    if decision == "CONFIRM":
        return "run a confirmation seed (same pool, same config, another seed)", seed_cmd
    if decision == "STOP-1":
        return (f"release candidate; the next one-variable child starts from {inputs.attempt_id}",
                f"write {inputs.commands_prefix}<next>/attempt.yaml with parent: {inputs.attempt_id} and one change,"
                f" then: rlexp plan {inputs.commands_prefix}<next>")
    if decision == "DEBUG":
        return "fix the parser, then re-evaluate", f"rlexp guard audit {at} --draw"
    if decision in ("STOP-3a", "STOP-3b"):
        fault = (inputs.decision or {}).get("fault_tree") or {}
        advice = fault.get("suggestion") or fault.get("class") or "the fault tree's first branch"
        return f"enter the fault tree: {advice}", f"write the next attempt from the fault tree, then: rlexp plan {inputs.commands_prefix}<next>"
    gray = ((inputs.decision or {}).get("gates") or {}).get("gray_zone") or {}
    if gray.get("passed"):
        return "gray zone: a third run (new seed) is allowed before STOP-3", seed_cmd
    base = inputs.parent or inputs.attempt_id
    return (f"change one variable from {base}",
            f"write {inputs.commands_prefix}<next>/attempt.yaml with parent: {base}, then: rlexp plan "
            f"{inputs.commands_prefix}<next>")


def _primary_checkpoint(inputs: ReportInputs) -> str | None:
    decision = inputs.decision or {}
    if decision.get("primary_checkpoint"):
        return decision["primary_checkpoint"]
    items = checkpoint_items(inputs)
    return items[0][0] if items else None


def _sota_label(inputs: ReportInputs) -> str:
    named = inputs.sota_name
    if not named:
        return "SOTA (pin not recorded)"
    ck = layout.checkpoint_label(str(named.get("checkpoint") or "?"))
    return f"SOTA = {named['attempt']} {ck}" + (f" ({pct(named.get('acc'))})" if named.get("acc") is not None else "")


def _delta_rows(inputs: ReportInputs) -> list[tuple[Any, ...]]:
    """Δ of each K=3 checkpoint against SOTA, the parent and S0 on the primary set, step order."""
    primary = (inputs.decision or {}).get("primary_set") or "ood_primary"
    role_of = {ck: role for role, ck in role_checkpoints(inputs.selection).items()}
    rows = []
    for name, v in checkpoint_items(inputs):
        label = checkpoint_label(inputs, name)
        vs = v.get("vs") or {}
        sota = (vs.get("baseline_sota") or {}).get(primary)
        if sota is None and (inputs.decision or {}).get("baseline") == "baseline_sota":
            sota = v
        for who, cmp in ((_sota_label(inputs), sota),
                         (f"parent {inputs.parent} {layout.checkpoint_label(str((inputs.vs_parent.get(role_of.get(name, '')) or {}).get('base', '')))}".strip()
                          if inputs.parent else None, inputs.vs_parent.get(role_of.get(name, ""))),
                         ("S0 (base model)", (vs.get("baseline_s0") or {}).get(primary))):
            if who is None or not cmp:
                continue
            rows.append((label, who, f"{pct(cmp.get('acc_base'))} → {pct(cmp.get('acc_new'))}",
                         signed_pp(cmp.get("delta_pp")), f"{fmt(cmp.get('b'))}/{fmt(cmp.get('c'))}",
                         p_value(cmp.get("mcnemar_p")), interval_pp(cmp.get("ci_pp"))))
    return rows


def _headline(inputs: ReportInputs) -> str:
    """The primary checkpoint's Δ against the three baselines, in one line."""
    ck = _primary_checkpoint(inputs)
    v = dict(((inputs.decision or {}).get("checkpoints") or {}).get(ck) or {})
    if not ck or not v:
        return ""
    primary = (inputs.decision or {}).get("primary_set") or "ood_primary"
    vs = v.get("vs") or {}
    parts = [f"{checkpoint_label(inputs, ck)}" + (f" {pct(v['acc_new'])}" if v.get("acc_new") is not None else "")
             + f" on {primary}"]
    sota = (vs.get("baseline_sota") or {}).get(primary)
    if sota is None and (inputs.decision or {}).get("baseline") == "baseline_sota":
        sota = v
    if sota:
        parts.append(f"Δ {signed_pp(sota.get('delta_pp'))} pp vs {_sota_label(inputs)}")
    role = {c: r for r, c in role_checkpoints(inputs.selection).items()}.get(ck)
    par = inputs.vs_parent.get(role or "")
    if par:
        parts.append(f"Δ {signed_pp(par['delta_pp'])} pp vs parent {inputs.parent} ({pct(par['acc_base'])})")
    s0 = (vs.get("baseline_s0") or {}).get(primary)
    if s0:
        parts.append(f"Δ {signed_pp(s0['delta_pp'])} pp vs S0 ({pct(s0['acc_base'])})")
    return " · ".join(parts)


def _gate1_numbers(doc: Mapping[str, Any], thresholds: Any, *, either: bool) -> str:
    n = doc.get("numbers") or {}
    if not n:
        return cell(doc.get("rule") or "")
    t = thresholds
    d = f"Δ {signed_pp(n.get('delta_pp'))} ≥ {signed_pp(t.min_delta_pp) if t else '?'} {mark(n.get('delta_ok'))}"
    p = f"p {p_value(n.get('p'))} < {t.max_mcnemar_p:g} {mark(n.get('p_ok'))}" if t else f"p {p_value(n.get('p'))}"
    ci = (f"CI low {signed_pp(n.get('ci_low_pp'))} > {signed_pp(t.min_ci_low_pp)} {mark(n.get('ci_ok'))}" if t
          else f"CI low {signed_pp(n.get('ci_low_pp'))}")
    return f"{d} AND ({p} OR {ci})" if either else f"{d} AND {p} AND {ci}"


def _gate_rows(inputs: ReportInputs) -> list[tuple[str, str, str]]:
    """Each gate as (gate, ✓/✗, the numbers that decided it beside their thresholds)."""
    decision = inputs.decision or {}
    gates = decision.get("gates") or {}
    sop = inputs.sop
    rows: list[tuple[str, str, str]] = []
    holm = decision.get("decide_on") == "holm"
    for gate in ("gate_1a", "gate_1b"):
        key = f"{gate}_holm" if holm else gate
        family = gates.get(key) or gates.get(gate)
        if not isinstance(family, Mapping):
            continue
        per = family.get("per_checkpoint") or {}
        thresholds = getattr(sop, gate, None) if sop is not None else None
        label = gate.replace("gate_", "Gate-") + (" (Holm p)" if key.endswith("holm") else "")
        if not per:
            rows.append((label, mark(family.get("passed")), cell(family.get("rule") or "")))
        for name in sorted(per, key=lambda c: (checkpoint_step(c) or 0, c)):
            rows.append((f"{label} · {checkpoint_label(inputs, name)}", mark(per[name].get("passed")),
                         _gate1_numbers(per[name], thresholds, either=gate == "gate_1a")))
    g2 = gates.get("gate_2")
    if isinstance(g2, Mapping):
        n = g2.get("numbers") or {}
        t = sop.gate_2 if sop is not None else None
        seeds = n.get("seeds")
        parts = [f"seeds {seeds} ≥ {t.min_seeds if t else '?'} {mark(seeds >= t.min_seeds if t and isinstance(seeds, int) else None)}"]
        deltas = n.get("seed_deltas_pp") or []
        sib = n.get("siblings") or []
        parts.append("seed Δs " + ", ".join(signed_pp(d) for d in deltas) + (f" (with {', '.join(sib)})" if sib else "")
                     + (f" each > {signed_pp(t.min_each_delta_pp)} {mark(n.get('each_positive'))}" if t and "each_positive" in n else ""))
        if n.get("mean_delta_pp") is not None and t:
            digits = 1 if round(t.min_mean_delta_pp, 1) == t.min_mean_delta_pp else 2  # +3.75 as the SOP writes it
            parts.append(f"mean {signed_pp(n['mean_delta_pp'], digits)} ≥ {signed_pp(t.min_mean_delta_pp, digits)} "
                         f"{mark(n.get('mean_ok'))}")
        guard = n.get("id_guardrail") or {}
        gn = guard.get("numbers") or {}
        if gn:
            parts.append(f"ID Δ vs S0 {signed_pp(gn.get('id_delta_pp'))} ≥ {signed_pp(gn.get('limit_pp'))} {mark(guard.get('passed'))}")
        rows.append(("Gate-2 (replication)", mark(g2.get("passed")), " · ".join(parts)))
    s3 = sop.stop_3 if sop is not None else None
    for key, label in (("stop_3a", "STOP-3a (same pool)"), ("stop_3b", "STOP-3b (pool variance)")):
        doc = gates.get(key)
        if not isinstance(doc, Mapping):
            continue
        n = doc.get("numbers") or {}
        attempts = n.get("attempts") or []
        deltas = n.get("delta_pp") or []
        flat = n.get("flat") or []
        need = s3.consecutive_attempts if s3 else "?"
        text = (f"{len(attempts)} of {need} attempts: "
                + ", ".join(f"{a} Δ {signed_pp(d)} {'flat' if f else 'not flat'}"
                            for a, d, f in zip(attempts, deltas, flat, strict=False))
                + (f" (flat: Δ < {signed_pp(s3.max_delta_pp)} and CI includes 0)" if s3 else ""))
        rows.append((label, mark(doc.get("passed")), text))
    gray = gates.get("gray_zone")
    if isinstance(gray, Mapping):
        d = (gray.get("numbers") or {}).get("delta_pp")
        band = f"[{signed_pp(s3.gray_zone_low_pp)}, {signed_pp(s3.gray_zone_high_pp)})" if s3 else "the gray band"
        inside = gray.get("passed")
        if decision.get("decision") in ("CONTINUE", "STOP-3a", "STOP-3b"):
            rows.append(("gray zone", mark(inside), f"Δ {signed_pp(d)} {'in' if inside else 'outside'} {band}"
                         + (": a third run is allowed" if inside else "")))
        else:  # a gate passed: the gray zone is STOP-3's exception and does not apply
            rows.append(("gray zone", "n/a", f"Δ {signed_pp(d)} {'in' if inside else 'outside'} {band}; applies only "
                         f"when no gate passes (decision {decision.get('decision')})"))
    audit = gates.get("parser_audit")
    if isinstance(audit, Mapping):
        rate = (audit.get("numbers") or {}).get("misparse_rate")
        limit = f"{sop.parser_audit.max_misparse_rate:.0%}" if sop is not None else "?"
        rows.append(("parser audit", mark(audit.get("passed")),
                     f"mis-parse rate {pct(rate)} ≤ {limit}" if rate is not None
                     else f"not run yet (limit {limit}): rlexp guard audit ATTEMPT --draw, then --verdicts FILE"))
    return rows


def _relative(text: str, inputs: ReportInputs) -> str:
    """Absolute paths of this machine rendered relative to the experiment directory."""
    exp = inputs.experiment_dir
    if exp:
        for form in {str(Path(exp)), str(Path(exp).resolve())}:
            text = text.replace(form + "/", "").replace(form, ".")
    return text


def _display_arg(arg: str, inputs: ReportInputs) -> str:
    if arg.startswith("/"):
        relative = _relative(arg, inputs)
        return relative if relative != arg else Path(arg).name  # e.g. the interpreter: its name only
    return _relative(arg, inputs)


def render_markdown(inputs: ReportInputs, plots: Mapping[str, Path] | None = None) -> str:
    """The one-page report: the decision and the numbers behind it first, then the SOP's deliverables in order."""
    plots = plots or {}
    lines = [*_header_lines(inputs), *_delta_lines(inputs), *_gate_lines(inputs), *_family_lines(inputs, plots),
             *_command_lines(inputs), *_difference_lines(inputs), *_hash_lines(inputs), *_decoding_lines(inputs),
             *_accuracy_lines(inputs), *_checkpoint_lines(inputs, plots), *_stability_lines(inputs, plots),
             *_audit_lines(inputs), *_decision_lines(inputs)]
    return _relative("\n".join(lines), inputs)


def _seed_siblings(inputs: ReportInputs) -> list[str]:
    return [m["attempt"] for m in inputs.family if m["relation"] == "seed sibling"]


def _header_lines(inputs: ReportInputs) -> list[str]:
    """The title, the decision and what to do next, the headline, the decision's caveats, the facts line."""
    decision = inputs.decision
    lines: list[str] = []
    state = (inputs.state or {}).get("state", "not launched")
    lines += [f"# {inputs.experiment} / {inputs.attempt_id}", ""]
    what, command = next_step(inputs)
    if decision:
        from rlexp.protocol.decision import regression_lines

        for line in regression_lines(decision) + _parent_regressions(inputs, decision):  # first, whatever the decision
            lines += [f"**⚠ {line}.**", ""]
        lines.append(f"**Decision: {decision.get('decision', '?')}** — {decision.get('reason', '')}.")
    else:
        lines.append("**Decision: none yet** — `decision.json` is missing.")
    lines += ["", f"**Next:** {what}: `{command}`", ""]
    headline = _headline(inputs)
    if headline:
        lines += [headline, ""]
    if decision:
        from rlexp.protocol.decision import calibration_line, cluster_line, selection_line, sota_reuse_line

        adjusted = selection_line(decision)
        if adjusted:
            lines += [adjusted, ""]
        clustered = cluster_line(decision)
        if clustered:
            lines += [clustered, ""]
        reuse = sota_reuse_line(decision)
        if reuse:
            lines += [reuse, ""]
        if decision.get("sop_version"):
            lines += [calibration_line(decision) + ".", ""]
    siblings = _seed_siblings(inputs)
    facts = [f"parent {inputs.parent}" if inputs.parent else "root attempt (no parent)"]
    if siblings:
        facts.append("seed siblings " + ", ".join(f"[{s}]({s}.md)" for s in siblings))
    facts += [f"trainer {inputs.trainer.get('name', '?')} {inputs.trainer.get('version', '')}".rstrip(),
              f"run {state}", f"{len(inputs.metrics)} global steps logged"]
    git = ((inputs.provenance or {}).get("git") or {})
    if git.get("sha"):
        facts.append(f"git {git['sha'][:12]}{' (dirty)' if git.get('dirty') else ''}")
    lines += [" · ".join(facts), ""]

    return lines


def _delta_lines(inputs: ReportInputs) -> list[str]:
    """The Δ against each baseline, per checkpoint (paired)."""
    decision = inputs.decision
    lines: list[str] = []
    rows = _delta_rows(inputs)
    if rows:
        primary = (decision or {}).get("primary_set") or "ood_primary"
        lines.append(f"## Δ against the baselines ({primary}, paired)")
        from rlexp.protocol.decision import p_label

        lines += table(["checkpoint", "against", "accuracy", "Δ pp", "b/c", p_label(decision or {}), "95% CI pp"],
                       rows)
        if inputs.vs_parent_note and inputs.parent:
            lines.append(f"\nParent: {inputs.vs_parent_note}.")
        lines.append("")
    return lines


def _gate_lines(inputs: ReportInputs) -> list[str]:
    """The gates with their numbers and thresholds."""
    decision = inputs.decision
    lines: list[str] = []
    gate_rows = _gate_rows(inputs)
    if gate_rows:
        lines.append(f"## Gates (SOP {decision.get('sop_version', '?')}, `{str(decision.get('sop_sha256', ''))[:12]}`)")
        lines += table(["gate", "met", "numbers vs threshold"], gate_rows)
        lines.append("")
    return lines


def _family_lines(inputs: ReportInputs, plots: Mapping[str, Path]) -> list[str]:
    """The attempt's family: parent, seed siblings, children, with their decisions."""
    lines: list[str] = []
    if len(inputs.family) > 1:
        lines.append("## Family")
        lines += table(["attempt", "relation", "change", "seed", "decision", "primary Δ pp (vs)"],
                        [(m["attempt"] if m["relation"] == "this attempt" else f"[{m['attempt']}]({m['attempt']}.md)",
                          m["relation"], ", ".join(f"{k}={v}" for k, v in m["change"].items()) or "—",
                          m["seed"], m["decision"] or "not decided",
                          f"{signed_pp(m['delta_pp'])} ({str(m.get('baseline') or '—').replace('baseline_', '')}, "
                          f"{layout.checkpoint_label(str(m.get('checkpoint') or '—'))})"
                          if m["delta_pp"] is not None else "—")
                         for m in inputs.family])
        if "family" in plots:
            lines.append(f"\n![monitor curves of the family]({plots['family'].name})")
        lines.append("")

    return lines


def _command_lines(inputs: ReportInputs) -> list[str]:
    """The exact command, folded (provenance)."""
    lines: list[str] = []
    if inputs.argv and inputs.argv.get("argv"):  # the exact command, folded (provenance)
        import shlex

        lines += [f"<details><summary>exact command ({inputs.argv.get('backend', '?')} backend; paths relative "
                  "to the experiment)</summary>", "",
                  "```", shlex.join(_display_arg(str(a), inputs) for a in inputs.argv["argv"]), "```", "</details>",
                  ""]

    return lines


def _difference_lines(inputs: ReportInputs) -> list[str]:
    """What changed against the parent."""
    siblings = _seed_siblings(inputs)
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[0]}")
    if inputs.diff:
        lines += table(["key", "parent", "this attempt", "kind"], inputs.diff)
        training = [d for d in inputs.diff if d[3] == "training"]
        if len(training) != 1:
            lines.append(f"\n⚠ {len(training)} training variables changed (the SOP allows one).")
    elif inputs.parent is None:
        lines.append("No parent: this attempt is a root" + (f"; seed sibling of {', '.join(siblings)} (same recipe, "
                                                             "another seed)." if siblings else "."))
    else:
        lines.append("No difference from the parent.")
    lines.append("")

    return lines


def _hash_lines(inputs: ReportInputs) -> list[str]:
    """The eval sets' SHA-256 digests."""
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[1]}")
    if inputs.hashes:
        lines += table(["set", "SHA-256"], [(r, (f"`{h}`" if h else NA)
                                               + (" ⚠ file changed since launch" if r in inputs.hash_changed else ""))
                                              for r, h in inputs.hashes.items()])
    else:
        lines.append(NA)
    lines.append("")

    return lines


def _decoding_lines(inputs: ReportInputs) -> list[str]:
    """The decoding settings of the eval."""
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[2]}")
    d = inputs.decoding
    lines.append(f"temperature {fmt(d.get('temperature'))} · n {fmt(d.get('n'))} · max_tokens "
                 f"{fmt(d.get('max_tokens'))} · top_p {fmt(d.get('top_p'))} · engine {fmt(d.get('engine'))} · "
                 f"suffix `{d.get('prompt_suffix', '')!r}`" if d else NA)
    lines.append("")

    return lines


def _accuracy_lines(inputs: ReportInputs) -> list[str]:
    """Accuracy per checkpoint and set."""
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[3]}")
    lines += _accuracy_table(inputs)
    lines.append("")

    return lines


def _checkpoint_lines(inputs: ReportInputs, plots: Mapping[str, Path]) -> list[str]:
    """The per-checkpoint statistics of the decision."""
    decision = inputs.decision
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[4]}")
    items = checkpoint_items(inputs)
    if items:
        rows = []
        for name, v in items:
            rows.append((name, fmt(v.get("delta_pp"), 2), f"{fmt(v.get('b'))}/{fmt(v.get('c'))}",
                         fmt(v.get("mcnemar_p"), 4), interval_plain(v.get("ci_pp")), fmt(v.get("holm_p"), 4)))
        from rlexp.protocol.decision import p_label

        clustered = p_label(decision) != "McNemar p"
        lines += table(["checkpoint", "Δ pp", "b/c", p_label(decision),
                        "cluster-robust 95% CI pp" if clustered else "bootstrap 95% CI pp", "Holm p"], rows)
        lines += _power_lines(dict(items))
        if decision.get("baseline"):
            baseline = decision["baseline"]
            named = f" ({_sota_label(inputs)})" if baseline == "baseline_sota" else ""
            lines.append(f"\nBaseline: {baseline}{named}.")
    else:
        lines.append(NA + " (no decision.json)" if decision is None else NA)
    if "discordant" in plots:
        lines.append(f"\n![discordant pairs]({plots['discordant'].name})")
    lines.append("")

    return lines


def _stability_lines(inputs: ReportInputs, plots: Mapping[str, Path]) -> list[str]:
    """Training stability and the in-run gates."""
    from rlexp.training.monitor import stability

    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[5]}")
    if inputs.metrics:
        st = stability(inputs.metrics)
        lines.append(f"spikes (grad norm > {st.spike_threshold:g}): **{st.spike_count}** of {st.steps} steps"
                     + (f" (steps {', '.join(str(s.global_step) for s in st.spikes[:8])}"
                        f"{'…' if st.spike_count > 8 else ''})" if st.spikes else "")
                     + f" · max grad norm {fmt(st.max_grad_norm, 2)} (step {fmt(st.max_grad_norm_step)})"
                     + f" · ratio_max {fmt(st.ratio_max, 3)} · log_ratio_abs_p99 max {fmt(st.log_ratio_abs_p99_max, 3)},"
                     + f" median {fmt(st.log_ratio_abs_p99_median, 3)}")
        if st.nonfinite_steps:
            flagged = [f"step {r['global_step']}: "
                       + ", ".join(k for k, v in r.items() if isinstance(v, float) and not math.isfinite(v))
                       for r in inputs.metrics if r["global_step"] in set(st.nonfinite_steps)]
            lines.append(f"\n**NaN/inf** in {len(flagged)} of {st.steps} steps (kept in metrics.jsonl; "
                         f"means and maxima above are over the finite values): " + "; ".join(flagged[:10])
                         + ("; …" if len(flagged) > 10 else ""))
        lines += _mismatch_lines(inputs.metrics)
    else:
        lines.append(NA + " (no metrics.jsonl)")
    run_guards = [(g, inputs.guards[g]) for g in IN_RUN_GATES if g in inputs.guards]
    if run_guards:
        lines.append("")
        lines += table(["in-run gate", "verdict", "reason"], [(g, guard_status(v), in_run_reason(v))
                                                                for g, v in run_guards])
    images = [f"![{n}]({plots[n].name})" for n in ("lr", "monitor", "grad_norm") if n in plots]
    if images:
        lines += ["", " ".join(images)]
    lines.append("")

    return lines


def _audit_lines(inputs: ReportInputs) -> list[str]:
    """The answer parser's audit."""
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[6]}")
    audit = inputs.guards.get("parser_audit")
    if audit:
        lines.append(f"{guard_status(audit)} — {guard_reason(audit)}")
    elif inputs.audit_review_pending:
        lines.append("cases drawn into `guards/parser_audit_review.jsonl`, awaiting human verdicts "
                     "(`rlexp guard audit ATTEMPT --verdicts FILE`)")
    else:
        lines.append(NA + " (run `rlexp guard audit ATTEMPT --draw`)")
    lines.append("")

    return lines


def _decision_lines(inputs: ReportInputs) -> list[str]:
    """The decision and the guardrails."""
    decision = inputs.decision
    lines: list[str] = []
    lines.append(f"## {DELIVERABLES[7]}")
    if decision is None:
        lines.append("No decision yet: `decision.json` is missing (run `rlexp decide`).")
    else:
        lines.append(f"**{decision.get('decision', '?')}** under SOP {decision.get('sop_version', '?')}: "
                     f"{decision.get('reason', '')}. The gates with their numbers are at the top.")
        fault = decision.get("fault_tree") or {}
        # the SOP calls for the fault tree on stagnation (STOP-3a/3b), not on a passing gate
        if fault and decision.get("decision") in ("STOP-3a", "STOP-3b"):
            summary = fault.get("class") or fault.get("bottleneck") or fault.get("suggestion") or ""
            lines.append(f"\nFault tree: {cell(summary) or cell(fault)}")
        notes = [str(n) for n in decision.get("notes") or [] if "is not in the ledger" not in str(n)]
        if notes:
            lines.append("\nNotes: " + "; ".join(_relative(n, inputs) for n in notes))
    other = [(g, v) for g, v in inputs.guards.items() if g not in (*IN_RUN_GATES, "parser_audit")]
    if other:
        lines += ["", "Guardrails:", ""]
        lines += table(["guard", "verdict", "detail"], [(g, guard_status(v), guard_reason(v)) for g, v in other])
    lines.append("")
    return lines


def _mismatch_lines(rows: Any) -> list[str]:
    """The training-inference mismatch of the run (rlexp.protocol.run_health, the SOP's levels): its curve
    as a sparkline, the verdict and the worst steps; nothing when the trainer logged no mismatch metric."""
    from rlexp.protocol.run_health import MISMATCH_METRICS, health_status, mismatch_verdict
    from rlexp.reporting.episodes import sparkline
    from rlexp.spec.sop import load_sop

    out = _staleness_lines(rows)
    if not any(m in r for r in rows for m in MISMATCH_METRICS):  # most runs: no SOP read for nothing
        return out
    verdict = mismatch_verdict(rows, load_sop().run_health.mismatch)
    if not verdict.numbers["metrics"]:
        return out
    out += ["", f"training–inference mismatch (sop/README.md#run-health): **{health_status(verdict)}** — "
                f"{verdict.reason}", ""]
    for metric in verdict.numbers["metrics"]:
        values = [float(r[metric]) for r in rows if isinstance(r.get(metric), int | float)]
        worst = ", ".join(f"step {s} ({v if isinstance(v, str) else format(v, '.3g')})"
                          for s, v in verdict.numbers["worst_steps"][metric][:3])
        out.append(f"- `{metric}` `{sparkline([v for v in values if math.isfinite(v)])}` "
                   f"max {fmt(verdict.numbers['max'][metric], 4)}; worst: {worst}")
    return out


def _staleness_lines(rows: Any) -> list[str]:
    """The observed policy lag, where the trainer logs one (verl's trajectory staleness)."""
    lag = [float(r["policy_lag_max"]) for r in rows if isinstance(r.get("policy_lag_max"), int | float)]
    if not lag:
        return []
    worst = max(range(len(lag)), key=lambda i: lag[i])
    steps = [r["global_step"] for r in rows if isinstance(r.get("policy_lag_max"), int | float)]
    return ["", f"off-policy staleness (observed): batches up to {lag[worst]:g} policy version(s) behind, "
                f"at step {steps[worst]}"]


def _accuracy_table(inputs: ReportInputs) -> list[str]:
    if not inputs.accuracies:
        return [NA + " (no eval records)"]
    sets = sorted({s for _, s in inputs.accuracies}, key=lambda s: (SET_ORDER.index(s) if s in SET_ORDER else 99, s))
    roles = {}
    for role in ("final", "mid", "best_by_monitor"):
        step = (inputs.selection or {}).get(role)
        if isinstance(step, int):
            roles.setdefault(checkpoint_name(step), []).append(role.replace("_", " "))
    names = sorted({c for c, _ in inputs.accuracies},
                   key=lambda c: (0 if checkpoint_step(c) is None else 1, checkpoint_step(c) or 0, c))
    rows = []
    for name in names:
        label = name + (f" ({', '.join(roles[name])})" if name in roles else "")
        cells = []
        for s in sets:
            acc = inputs.accuracies.get((name, s))
            cells.append(f"{acc['acc'] * 100:.1f}% (n={int(acc['n'])})" if acc else "—")
        rows.append((label, *cells))
    return table(["checkpoint", *sets], rows)


def _parent_regressions(inputs: ReportInputs, decision: Mapping[str, Any]) -> list[str]:
    """Regressions against the parent for decision files written before ``decide`` flagged them
    (it now records them in ``regressions``): the same rule, from the report's parent comparisons."""
    if "regressions" in decision:
        return []
    from rlexp.protocol.decision import regression_lines, regressions

    alpha = 1.0 - (inputs.sop.bootstrap.confidence if inputs.sop is not None else 0.95)
    parent = {c["new"]: c for c in inputs.vs_parent.values()}
    rows = regressions({}, parent, alpha=alpha)   # the parent comparisons are the whole family here
    return regression_lines({"regressions": rows})


def _power_lines(checkpoints: Mapping[str, Any]) -> list[str]:
    """What each comparison could see: the exact McNemar test's MDE, and what a claim needs
    (rlexp.stats): the chance that a true effect at Gate-1b's threshold (+3 pp) passes it at
    this n and discordance for that one checkpoint, and the effect that passes it with 80%; then, once,
    the chance that the best of the SOP's K checkpoints passes it (rlexp.protocol.calibrate.gate_1b_best_of_k,
    per checkpoint correlation), which is what a decision on K checkpoints gets. Rows without n, b and
    c (older decision files) are left out."""
    from rlexp.protocol.calibrate import DEFAULT_CORRELATIONS, gate_1b_best_of_k
    from rlexp.spec.sop import load_sop
    from rlexp.stats import gate_1b_effect_for_power, gate_1b_pass_probability, mcnemar_mde

    sop = load_sop()
    gate = sop.gate_1b
    limits = {"min_delta_pp": gate.min_delta_pp, "max_mcnemar_p": gate.max_mcnemar_p}
    out = []
    shapes = []
    threshold = gate.min_delta_pp
    for name, v in checkpoints.items():
        n, b, c = v.get("n"), v.get("b"), v.get("c")
        if not (isinstance(n, int) and isinstance(b, int) and isinstance(c, int)) or n <= 0 or b + c <= 0:
            continue
        if isinstance(v.get("n_clusters"), int):  # a clustered set: the cluster-robust t's figures
            out.append(_clustered_power_line(name, v, sop))
            continue
        d = (b + c) / n
        shapes.append((n, d))
        at = gate_1b_pass_probability(threshold, n, d, **limits) if threshold <= 100 * d else 0.0
        effect = gate_1b_effect_for_power(n, d, **limits)
        mde = mcnemar_mde(n, d)
        out.append(f"- {name}: n {n}, discordance {d:.1%}: MDE "
                   + (f"{mde:.2f} pp" if mde is not None else "beyond the discordance")
                   + " (80% power of the exact McNemar test); "
                   f"a true +{threshold:g} pp passes Gate-1b {at:.0%} of the time for this one checkpoint; 80% needs "
                   + (f"{effect:.2f} pp" if effect is not None else "more than the discordance allows"))
    if shapes and len(checkpoints) > 1:
        n = shapes[0][0]
        d = sum(x for _, x in shapes) / len(shapes)
        best = gate_1b_best_of_k(threshold, n, d, k=len(checkpoints), **limits)
        if best is not None:
            out.append(f"- best of the {len(checkpoints)} checkpoints (mean discordance {d:.1%}): a true "
                       f"+{threshold:g} pp passes Gate-1b on some checkpoint {min(best):.0%}–{max(best):.0%} of the "
                       f"time (checkpoint correlation ρ {max(DEFAULT_CORRELATIONS):g} to {min(DEFAULT_CORRELATIONS):g}; "
                       "simulated)")
    return [""] + out if out else []


def _clustered_power_line(name: str, v: Mapping[str, Any], sop: Any) -> str:
    """What a checkpoint's clustered comparison could see, from its CR1 SE and G − 1 df
    (:func:`rlexp.stats.clustered_gate_figures`, the model of decide's clustered test)."""
    from rlexp.stats import clustered_gate_figures

    g, se = v["n_clusters"], v.get("se_pp")
    if not isinstance(se, int | float) or not se > 0 or g < 2:
        return f"- {name}: n {v['n']} in {g} clusters: no spread between clusters, no power figure"
    threshold = sop.gate_1b.min_delta_pp
    fig = clustered_gate_figures(float(se), g - 1, min_delta_pp=threshold, max_p=sop.gate_1b.max_mcnemar_p,
                                 k=sop.checkpoints.k)
    return (f"- {name}: n {v['n']} in {g} clusters: MDE {fig['mde_pp']:.2f} pp (80% power of the cluster-robust t, "
            f"{g - 1} df, at the observed SE {se:.2f} pp); a true +{threshold:g} pp passes Gate-1b "
            f"{fig['gate_1b_pass_power_at_win_threshold']:.0%} of the time for this one checkpoint; 80% needs "
            f"{fig['gate_1b_effect_80_pp']:.2f} pp")
