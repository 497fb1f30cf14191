"""The one-page report of an attempt: SOP §11.24 §9's eight deliverables, plus four plots.

``reports/<experiment>/<attempt>.md`` (GitHub-flavoured markdown, PNGs beside it) from the files
the stages wrote: the spec (recipe diff), ``launch/provenance.json`` (hashes), ``plan.json`` (the
planned LR), ``metrics.jsonl`` (stability, monitor), ``eval/selection.json`` and the eval records
(K=3 and baselines), ``decision.json`` (paired stats, gates), ``guards/*.json``. A missing piece
renders as "not available" — the report of a half-finished attempt is still useful — and a
missing decision says so plainly.

Plots use matplotlib's Agg backend (no display), imported inside :func:`render_plots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.storage.files import atomic_write_text, read_json, sha256_file
from rlexp.storage.layout import AttemptDir
from rlexp.storage.records import checkpoint_step, eval_accuracies

NA = "not available"
SET_ORDER = ("ood_primary", "id", "sanity", "ood_monitor")
IN_RUN_GATES = ("g3", "g5")  # written by `rlexp launch` (rlexp.adapters.monitor); shown with stability
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


@dataclass
class ReportInputs:
    """What the report reads, each piece optional."""

    attempt_id: str
    experiment: str
    experiment_dir: str = ""
    parent: str | None = None
    change: dict[str, Any] = field(default_factory=dict)
    diff: list[tuple[str, Any, Any, str]] = field(default_factory=list)  # key, parent, value, kind
    trainer: dict[str, Any] = field(default_factory=dict)
    hashes: dict[str, str | None] = field(default_factory=dict)  # role -> sha256 (at launch if launched)
    hash_changed: list[str] = field(default_factory=list)  # roles whose file changed since launch
    argv: dict[str, Any] | None = None  # launch/argv.json
    decoding: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    selection: dict[str, Any] | None = None
    accuracies: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    decision: dict[str, Any] | None = None
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)
    audit_review_pending: bool = False  # 50 cases drawn for review, no verdicts recorded yet
    state: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    smoothing_window: int = 3


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    if isinstance(value, list | tuple):
        return " ".join(_fmt(v, digits) for v in value)
    return str(value)


def _cell(value: Any) -> str:
    """Table cell text: pipes escaped, one line."""
    return " ".join(_fmt(value).replace("|", "\\|").split())


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


# ---------------------------------------------------------------------------- gathering

def gather(attempt_dir: str | Path) -> ReportInputs:
    """Read every input the report can use from an attempt directory."""
    from rlexp.adapters.ingest import read_metrics
    from rlexp.adapters.monitor import read_plan
    from rlexp.core.spec import diff_against_parent, load_attempt

    att = load_attempt(attempt_dir)
    attempt_dir = Path(att.attempt_dir)
    inputs = ReportInputs(attempt_id=att.id, experiment=Path(att.experiment_dir).name,
                          experiment_dir=str(att.experiment_dir), parent=att.parent_id,
                          change=dict(att.change or {}))
    inputs.trainer = {"name": att.trainer.name, "version": att.trainer.version}
    if att.parent is not None:
        inputs.diff = [(d.key, d.parent, d.value, d.kind) for d in diff_against_parent(att)]
    inputs.decoding = {"temperature": att.eval.temperature, "n": att.eval.num_samples,
                       "max_tokens": att.eval.max_tokens, "top_p": att.eval.top_p, "engine": att.eval.engine,
                       "prompt_suffix": att.eval.prompt_suffix}
    prov_path = AttemptDir(attempt_dir).provenance
    inputs.provenance = read_json(prov_path) if prov_path.exists() else None
    recorded = (inputs.provenance or {}).get("datasets") or {}
    for role, ref in att.datasets.items():
        at_launch = (recorded.get(role) or {}).get("sha256")
        now = sha256_file(ref.path) if ref.path is not None and ref.path.is_file() else None
        inputs.hashes[role] = at_launch or now
        if at_launch and now and at_launch != now:  # the file was edited after the run started
            inputs.hash_changed.append(role)
    argv_path = AttemptDir(attempt_dir).argv
    if argv_path.exists():
        inputs.argv = read_json(argv_path)
    inputs.plan = read_plan(attempt_dir)
    if AttemptDir(attempt_dir).metrics.exists():
        inputs.metrics = read_metrics(AttemptDir(attempt_dir).metrics)
    if AttemptDir(attempt_dir).selection.exists():
        inputs.selection = read_json(AttemptDir(attempt_dir).selection)
    inputs.accuracies = eval_accuracies(attempt_dir)
    if AttemptDir(attempt_dir).decision.exists():
        inputs.decision = read_json(AttemptDir(attempt_dir).decision)
        if not isinstance(inputs.decision, dict):
            raise InputError(AttemptDir(attempt_dir).decision, None, "expected a JSON object")
    guards = AttemptDir(attempt_dir).guards_dir
    if guards.is_dir():
        for path in sorted(guards.glob("*.json")):
            doc = read_json(path)
            # verdict files only (rlexp.stages.guard.Verdict: name, passed, rule, numbers, notes,
            # details): guards/ also holds samples' metadata (e.g. g4_samples.meta.json)
            if isinstance(doc, dict) and {"name", "passed", "rule"} <= doc.keys():
                if doc["passed"] not in (True, False, None):
                    raise InputError(path, "passed", f"must be true, false or null, got {doc['passed']!r}")
                inputs.guards[path.stem] = doc
        inputs.audit_review_pending = AttemptDir(attempt_dir).audit_review.exists()
    if AttemptDir(attempt_dir).state.exists():
        inputs.state = read_json(AttemptDir(attempt_dir).state)
    try:
        from rlexp.core.sop import load_sop

        inputs.smoothing_window = load_sop().early_stop.smoothing_window
    except InputError:
        pass
    return inputs


# ---------------------------------------------------------------------------- plots

def render_plots(inputs: ReportInputs, out_dir: Path, stem: str) -> dict[str, Path]:
    """The four plots as PNGs (only those with data); returns name -> path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlexp.adapters.monitor import monitor_points, planned_lr_table
    from rlexp.core.settings import guard_settings

    spike_grad_norm = guard_settings().spikes.grad_norm  # the SOP's spike threshold

    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def save(fig, name: str) -> None:
        path = out_dir / f"{stem}_{name}.png"
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.tight_layout()
        fig.savefig(tmp, dpi=90)
        plt.close(fig)
        tmp.replace(path)  # atomic, like every other file we write
        made[name] = path

    planned = planned_lr_table(inputs.plan)
    logged = [(r["global_step"], r["actor_lr"]) for r in inputs.metrics if "actor_lr" in r]
    if planned or logged:
        fig, ax = plt.subplots(figsize=(5, 2.6))
        if planned:
            steps = sorted(planned)
            ax.plot(steps, [planned[s] for s in steps], label="planned (plan.json)", color="0.5", lw=2)
        if logged:
            ax.plot([s for s, _ in logged], [v for _, v in logged], ".", ms=3, label="logged actor_lr")
        ax.set(xlabel="global step", ylabel="LR", title="LR schedule: planned vs logged")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        ax.legend(fontsize=7)
        save(fig, "lr")

    points = monitor_points(inputs.metrics)
    if points:
        from rlexp.core.gates import smooth

        fig, ax = plt.subplots(figsize=(5, 2.6))
        ax.plot([s for s, _ in points], [v * 100 for _, v in points], "o-", ms=3, lw=1, alpha=0.6, label="raw")
        sm = [(s, v) for s, v in smooth(points, inputs.smoothing_window) if v is not None]
        if sm:
            ax.plot([s for s, _ in sm], [v * 100 for _, v in sm], lw=2,
                    label=f"{inputs.smoothing_window}-point mean")
        for role, color in (("final", "C3"), ("mid", "C2"), ("best_by_monitor", "C4")):
            step = (inputs.selection or {}).get(role)
            if isinstance(step, int):
                ax.axvline(step, color=color, ls="--", lw=1, label=f"K=3 {role} ({step})")
        ax.set(xlabel="global step", ylabel="accuracy (%)", title="In-run OOD monitor")
        ax.legend(fontsize=6)
        save(fig, "monitor")

    grad = [(r["global_step"], r["grad_norm"]) for r in inputs.metrics if "grad_norm" in r]
    if grad:
        fig, ax = plt.subplots(figsize=(5, 2.6))
        ax.plot([s for s, _ in grad], [v for _, v in grad], lw=1, label="grad norm")
        high = [(s, v) for s, v in grad if v > spike_grad_norm]
        if high:
            ax.plot([s for s, _ in high], [v for _, v in high], "rv", ms=5, label=f"spike > {spike_grad_norm:g}")
        ax.axhline(spike_grad_norm, color="r", lw=0.8, ls=":")
        if max(v for _, v in grad) > 10 * max(min(v for _, v in grad), 1e-9):
            ax.set_yscale("log")
        ax.set(xlabel="global step", ylabel="grad norm", title="Gradient norm and spikes")
        ax.legend(fontsize=7)
        save(fig, "grad_norm")

    checkpoints = (inputs.decision or {}).get("checkpoints") or {}
    bars = [(name, v.get("b"), v.get("c")) for name, v in checkpoints.items()
            if isinstance(v, Mapping) and isinstance(v.get("b"), int) and isinstance(v.get("c"), int)]
    if bars:
        fig, ax = plt.subplots(figsize=(5, 2.6))
        xs = range(len(bars))
        ax.bar([x - 0.2 for x in xs], [b for _, b, _ in bars], 0.4, label="b: baseline right, new wrong", color="C3")
        ax.bar([x + 0.2 for x in xs], [c for _, _, c in bars], 0.4, label="c: baseline wrong, new right", color="C2")
        ax.set_xticks(list(xs), [n.replace("global_step", "step ") for n, _, _ in bars])
        ax.set(ylabel="problems", title="Discordant pairs vs baseline")
        ax.legend(fontsize=7)
        save(fig, "discordant")
    return made


# ---------------------------------------------------------------------------- markdown

def render_markdown(inputs: ReportInputs, plots: Mapping[str, Path] | None = None) -> str:
    from rlexp.adapters.monitor import stability

    plots = plots or {}
    decision = inputs.decision
    state = (inputs.state or {}).get("state", "not launched")
    lines = [f"# {inputs.experiment} / {inputs.attempt_id}", ""]
    verdict = decision.get("decision") if decision else "no decision yet (run `rlexp decide`)"
    lines.append(f"**Decision: {verdict}** · parent {inputs.parent or '—'} · trainer "
                 f"{inputs.trainer.get('name', '?')} {inputs.trainer.get('version', '')} · run {state} · "
                 f"{len(inputs.metrics)} global steps logged")
    git = ((inputs.provenance or {}).get("git") or {})
    if git.get("sha"):
        lines.append(f"· git {git['sha'][:12]}{' (dirty)' if git.get('dirty') else ''}")
    lines.append("")
    if inputs.argv and inputs.argv.get("argv"):  # SOP §10.3: the exact command, folded
        import shlex

        lines += [f"<details><summary>exact command ({inputs.argv.get('backend', '?')} backend)</summary>", "",
                  "```", shlex.join(str(a) for a in inputs.argv["argv"]), "```", "</details>", ""]

    lines.append(f"## {DELIVERABLES[0]}")
    if inputs.diff:
        lines += _table(["key", "parent", "this attempt", "kind"], inputs.diff)
        training = [d for d in inputs.diff if d[3] == "training"]
        if len(training) != 1:
            lines.append(f"\n⚠ {len(training)} training variables changed (the SOP allows one).")
    elif inputs.parent is None:
        lines.append("No parent: this attempt is a root.")
    else:
        lines.append("No difference from the parent.")
    lines.append("")

    lines.append(f"## {DELIVERABLES[1]}")
    if inputs.hashes:
        lines += _table(["set", "SHA-256"], [(r, (f"`{h}`" if h else NA)
                                               + (" ⚠ file changed since launch" if r in inputs.hash_changed else ""))
                                              for r, h in inputs.hashes.items()])
    else:
        lines.append(NA)
    lines.append("")

    lines.append(f"## {DELIVERABLES[2]}")
    d = inputs.decoding
    lines.append(f"temperature {_fmt(d.get('temperature'))} · n {_fmt(d.get('n'))} · max_tokens "
                 f"{_fmt(d.get('max_tokens'))} · top_p {_fmt(d.get('top_p'))} · engine {_fmt(d.get('engine'))} · "
                 f"suffix `{d.get('prompt_suffix', '')!r}`" if d else NA)
    lines.append("")

    lines.append(f"## {DELIVERABLES[3]}")
    lines += _accuracy_table(inputs)
    lines.append("")

    lines.append(f"## {DELIVERABLES[4]}")
    checkpoints = (decision or {}).get("checkpoints") or {}
    if checkpoints:
        rows = []
        for name, v in checkpoints.items():
            ci = v.get("ci_pp")
            ci_text = f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]" if isinstance(ci, list | tuple) and len(ci) == 2 else "—"
            rows.append((name, _fmt(v.get("delta_pp"), 2), f"{_fmt(v.get('b'))}/{_fmt(v.get('c'))}",
                         _fmt(v.get("mcnemar_p"), 4), ci_text, _fmt(v.get("holm_p"), 4)))
        lines += _table(["checkpoint", "Δ pp", "b/c", "McNemar p", "bootstrap 95% CI pp", "Holm p"], rows)
        lines += _power_lines(checkpoints)
        if decision.get("baseline"):
            lines.append(f"\nBaseline: {decision['baseline']}.")
    else:
        lines.append(NA + " (no decision.json)" if decision is None else NA)
    if "discordant" in plots:
        lines.append(f"\n![discordant pairs]({plots['discordant'].name})")
    lines.append("")

    lines.append(f"## {DELIVERABLES[5]}")
    if inputs.metrics:
        st = stability(inputs.metrics)
        lines.append(f"spikes (grad norm > {st.spike_threshold:g}): **{st.spike_count}** of {st.steps} steps"
                     + (f" (steps {', '.join(str(s.global_step) for s in st.spikes[:8])}"
                        f"{'…' if st.spike_count > 8 else ''})" if st.spikes else "")
                     + f" · max grad norm {_fmt(st.max_grad_norm, 2)} (step {_fmt(st.max_grad_norm_step)})"
                     + f" · ratio_max {_fmt(st.ratio_max, 3)} · log_ratio_abs_p99 max {_fmt(st.log_ratio_abs_p99_max, 3)},"
                     + f" median {_fmt(st.log_ratio_abs_p99_median, 3)}")
    else:
        lines.append(NA + " (no metrics.jsonl)")
    run_guards = [(g, inputs.guards[g]) for g in IN_RUN_GATES if g in inputs.guards]
    if run_guards:
        lines.append("")
        lines += _table(["in-run gate", "verdict", "reason"], [(g, _guard_status(v), _in_run_reason(v))
                                                                for g, v in run_guards])
    images = [f"![{n}]({plots[n].name})" for n in ("lr", "monitor", "grad_norm") if n in plots]
    if images:
        lines += ["", " ".join(images)]
    lines.append("")

    lines.append(f"## {DELIVERABLES[6]}")
    audit = inputs.guards.get("parser_audit")
    if audit:
        lines.append(f"{_guard_status(audit)} — {_guard_reason(audit)}")
    elif inputs.audit_review_pending:
        lines.append("cases drawn into `guards/parser_audit_review.jsonl`, awaiting human verdicts "
                     "(`rlexp guard audit ATTEMPT --verdicts FILE`)")
    else:
        lines.append(NA + " (run `rlexp guard audit ATTEMPT --draw`)")
    lines.append("")

    lines.append(f"## {DELIVERABLES[7]}")
    if decision is None:
        lines.append("No decision yet: `decision.json` is missing (run `rlexp decide`).")
    else:
        lines.append(f"**{decision.get('decision', '?')}** under SOP {decision.get('sop_version', '?')}"
                     f" (`{str(decision.get('sop_sha256', ''))[:12]}`)")
        gates = decision.get("gates") or {}
        if gates:
            # "met", not PASS/FAIL: a STOP rule or the gray zone being met is not a success
            lines += [""] + _table(["gate / rule", "met", "detail"],
                                   [(g, _gate_met(v), _gate_detail(v)) for g, v in gates.items()])
        fault = decision.get("fault_tree") or {}
        if fault:
            summary = fault.get("class") or fault.get("bottleneck") or fault.get("suggestion") or ""
            lines.append(f"\nFault tree: {_cell(summary) or _cell(fault)}")
    other = [(g, v) for g, v in inputs.guards.items() if g not in (*IN_RUN_GATES, "parser_audit")]
    if other:
        lines += ["", "Guardrails:", ""]
        lines += _table(["guard", "verdict", "detail"], [(g, _guard_status(v), _guard_reason(v)) for g, v in other])
    lines.append("")
    return "\n".join(lines)


def _guard_status(doc: Mapping[str, Any]) -> str:
    """A ``guards/`` verdict's ``passed``: PASS, FAIL, or pending (an in-run gate not decided yet)."""
    return {True: "PASS", False: "FAIL", None: "pending"}[doc["passed"]]


def _notes(doc: Mapping[str, Any]) -> list[str]:
    notes = doc.get("notes")
    return [str(n) for n in notes] if isinstance(notes, list | tuple) else []


def _guard_reason(doc: Mapping[str, Any]) -> str:
    """A guard's rule and its first notes."""
    text = "; ".join([str(doc.get("rule") or ""), *_notes(doc)[:2]]).strip("; ")
    if not text and doc.get("numbers"):
        text = _cell(doc["numbers"])
    return text[:200]


def _in_run_reason(doc: Mapping[str, Any]) -> str:
    """An in-run gate's reason (its first note), else its rule."""
    notes = _notes(doc)
    return (notes[0] if notes else str(doc.get("rule") or ""))[:200]


def _gate_met(doc: Any) -> str:
    """A decision gate (``decision.json`` ``gates``) as met: yes / no / not run. "met", not
    PASS/FAIL: a STOP rule or the gray zone being met is not a success."""
    if isinstance(doc, bool):
        return "yes" if doc else "no"
    if isinstance(doc, Mapping) and "passed" in doc:
        return {True: "yes", False: "no", None: "not run"}.get(doc["passed"], _cell(doc["passed"]))
    return "—"


def _gate_detail(doc: Any) -> str:
    if not isinstance(doc, Mapping):
        return ""
    for key in ("reason", "rule", "message"):
        if doc.get(key):
            text = str(doc[key])
            notes = _notes(doc)
            if notes:
                text += "; " + "; ".join(notes[:2])
            return text[:200]
    numbers = doc.get("numbers")
    return _cell(numbers)[:200] if numbers else ""


def _accuracy_table(inputs: ReportInputs) -> list[str]:
    if not inputs.accuracies:
        return [NA + " (no eval records)"]
    sets = sorted({s for _, s in inputs.accuracies}, key=lambda s: (SET_ORDER.index(s) if s in SET_ORDER else 99, s))
    roles = {}
    for role in ("final", "mid", "best_by_monitor"):
        step = (inputs.selection or {}).get(role)
        if isinstance(step, int):
            roles.setdefault(f"global_step{step}", []).append(role.replace("_", " "))
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
    return _table(["checkpoint", *sets], rows)


# ---------------------------------------------------------------------------- entry point

def default_reports_dir(experiment_dir: Path) -> Path:
    """``reports/`` beside the ``experiments/`` folder that holds the experiment (the project
    layout), else ``reports/`` in the working directory."""
    experiment_dir = Path(experiment_dir).resolve()
    if experiment_dir.parent.name == "experiments":
        return experiment_dir.parent.parent / "reports"
    return Path("reports")


def write_report(attempt_dir: str | Path, reports_dir: str | Path | None = None) -> Path:
    """Render ``<reports_dir>/<experiment>/<attempt>.md`` and its PNGs; returns the markdown path."""
    inputs = gather(attempt_dir)
    if reports_dir is None:
        reports_dir = default_reports_dir(Path(inputs.experiment_dir))
    out_dir = Path(reports_dir) / inputs.experiment
    plots = render_plots(inputs, out_dir, inputs.attempt_id)
    text = render_markdown(inputs, plots)
    return atomic_write_text(out_dir / f"{inputs.attempt_id}.md", text)


def _power_lines(checkpoints: Mapping[str, Any]) -> list[str]:
    """What each comparison could see: the test's MDE, and what a claim needs (rlexp.core.gate_power):
    the chance that a true effect at Gate-1b's threshold (+3 pp) passes it at this n and discordance, and the effect that
    passes it with 80%. Rows without n, b and c (older decision files) are left out."""
    from rlexp.core.gate_power import gate_1b_effect_for_power, gate_1b_pass_probability
    from rlexp.core.power import mde_pp
    from rlexp.core.sop import load_sop

    gate = load_sop().gate_1b
    limits = {"min_delta_pp": gate.min_delta_pp, "max_mcnemar_p": gate.max_mcnemar_p}
    out = []
    for name, v in checkpoints.items():
        n, b, c = v.get("n"), v.get("b"), v.get("c")
        if not (isinstance(n, int) and isinstance(b, int) and isinstance(c, int)) or n <= 0 or b + c <= 0:
            continue
        d = (b + c) / n
        threshold = gate.min_delta_pp
        at = gate_1b_pass_probability(threshold, n, d, **limits) if threshold <= 100 * d else 0.0
        effect = gate_1b_effect_for_power(n, d, **limits)
        out.append(f"- {name}: n {n}, discordance {d:.1%}: MDE {mde_pp(n, d):.2f} pp (80% power of the test); "
                   f"a true +{threshold:g} pp passes Gate-1b {at:.0%} of the time; 80% needs "
                   + (f"{effect:.2f} pp" if effect is not None else "more than the discordance allows"))
    return [""] + out if out else []
