"""The one-page report of an attempt: the verdict first, then the deliverables a reviewer needs, with plots.

``reports/<experiment>/<attempt>.md`` (GitHub-flavoured markdown, PNGs beside it) from the files
the stages wrote: the spec (recipe diff), ``launch/provenance.json`` (hashes), ``plan.json`` (the
planned LR), ``metrics.jsonl`` (stability, monitor), ``eval/selection.json`` and the eval records
(K=3 and baselines), ``decision.json`` (paired stats, gates), ``guards/*.json``. A missing piece
renders as "not available" — the report of a half-finished attempt is still useful — and a
missing decision says so plainly.

Plots use matplotlib's Agg backend (no display), imported inside :func:`render_plots`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.storage.files import atomic_write_text, read_json, sha256_file
from rlexp.storage.layout import AttemptDir
from rlexp.storage.records import checkpoint_step, eval_accuracies

NA = "not available"
ROLES = ("final", "mid", "best_by_monitor")
# Okabe-Ito: distinguishable under the common colour-vision deficiencies
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
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
    sop: Any = None  # rlexp.core.sop.Sop in force (thresholds beside each gate's numbers)
    sota_name: dict[str, Any] | None = None  # {attempt, checkpoint} the baseline_sota records were made from
    vs_parent: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> comparison vs the parent
    vs_parent_note: str | None = None  # why there is no parent comparison
    family: list[dict[str, Any]] = field(default_factory=list)  # parent, seed siblings, children (+ self)
    family_monitor: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # attempt -> monitor
    commands_prefix: str = ""  # how a command names this experiment's attempts (experiments/<exp>/)


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
    ad = AttemptDir(attempt_dir)
    inputs = ReportInputs(attempt_id=att.id, experiment=Path(att.experiment_dir).name,
                          experiment_dir=str(att.experiment_dir), parent=att.parent_id,
                          change=dict(att.change or {}))
    inputs.trainer = {"name": att.trainer.name, "version": att.trainer.version}
    if att.parent is not None:
        inputs.diff = [(d.key, d.parent, d.value, d.kind) for d in diff_against_parent(att)]
    inputs.decoding = {"temperature": att.eval.temperature, "n": att.eval.num_samples,
                       "max_tokens": att.eval.max_tokens, "top_p": att.eval.top_p, "engine": att.eval.engine,
                       "prompt_suffix": att.eval.prompt_suffix}
    inputs.provenance = ad.read_provenance()
    recorded = (inputs.provenance or {}).get("datasets") or {}
    for role, ref in att.datasets.items():
        entry = recorded.get(role)
        at_launch = entry.get("sha256") if isinstance(entry, dict) else None
        now = sha256_file(ref.path) if ref.path is not None and ref.path.is_file() else None
        inputs.hashes[role] = at_launch or now
        if at_launch and now and at_launch != now:  # the file was edited after the run started
            inputs.hash_changed.append(role)
    inputs.argv = ad.read_argv()
    inputs.plan = read_plan(attempt_dir)
    if ad.metrics.exists():
        inputs.metrics = read_metrics(ad.metrics)
    inputs.selection = ad.read_selection()
    inputs.accuracies = eval_accuracies(attempt_dir)
    inputs.decision = ad.read_decision()
    guards = ad.guards_dir
    if guards.is_dir():
        for path in sorted(guards.glob("*.json")):
            doc = read_json(path)
            # verdict files only (rlexp.stages.guard.Verdict: name, passed, rule, numbers, notes,
            # details): guards/ also holds samples' metadata (e.g. g4_samples.meta.json); a file
            # named like a verdict must be one
            if not path.name.endswith(".meta.json") and not (isinstance(doc, dict)
                                                             and {"name", "passed", "rule"} <= doc.keys()):
                raise InputError(path, None, "not a guard verdict (an object with name, passed and rule)")
            if isinstance(doc, dict) and {"name", "passed", "rule"} <= doc.keys():
                if doc["passed"] not in (True, False, None):
                    raise InputError(path, "passed", f"must be true, false or null, got {doc['passed']!r}")
                inputs.guards[path.stem] = doc
        inputs.audit_review_pending = ad.audit_review.exists()
    inputs.state = ad.read_state()
    try:
        from rlexp.core.sop import load_sop

        inputs.sop = load_sop()
        inputs.smoothing_window = inputs.sop.early_stop.smoothing_window
    except InputError:
        pass
    experiment_dir = Path(att.experiment_dir)
    inputs.commands_prefix = (f"experiments/{experiment_dir.name}/" if experiment_dir.resolve().parent.name
                              == "experiments" else f"{experiment_dir.name}/")
    inputs.sota_name = _sota_name(attempt_dir, inputs)
    _gather_vs_parent(att, inputs)
    _gather_family(att, inputs)
    return inputs


def _checkpoint_of(path: str | None) -> dict[str, Any] | None:
    """``<experiment>/<attempt>/checkpoints/global_step64_hf`` -> {attempt, checkpoint}."""
    if not path:
        return None
    parts = Path(path).parts
    if "checkpoints" in parts:
        i = len(parts) - 1 - parts[::-1].index("checkpoints")
        if 0 < i < len(parts) - 1:
            return {"attempt": parts[i - 1], "checkpoint": parts[i + 1].removesuffix("_hf")}
    return None


def _sota_name(attempt_dir: Path, inputs: ReportInputs) -> dict[str, Any] | None:
    """Which attempt and checkpoint Baseline-SOTA was when this attempt was evaluated: the
    records' meta (the adapter they were made from), else the decision's pin, else sota.json."""
    from rlexp.storage.records import meta_path, read_meta

    primary = "ood_primary"
    if inputs.sop is not None:
        primary = inputs.sop.primary.set_role
    records = AttemptDir(attempt_dir).records("baseline_sota", primary)
    named = None
    if meta_path(records).exists():
        named = _checkpoint_of(read_meta(records).get("adapter_path"))
    if named is None:
        pin = (inputs.decision or {}).get("sota")
        if isinstance(pin, Mapping) and pin.get("attempt") and not (inputs.decision or {}).get("sota_moved"):
            named = {"attempt": pin["attempt"], "checkpoint": pin.get("checkpoint")}
    if named is None and ("baseline_sota", primary) in inputs.accuracies:
        from rlexp.storage.ledger import read_sota

        pin = read_sota(AttemptDir(attempt_dir).experiment.root)
        named = {"attempt": pin.attempt, "checkpoint": pin.checkpoint} if pin else None
    if named is not None:
        acc = inputs.accuracies.get(("baseline_sota", primary))
        named["acc"] = acc["acc"] if acc else None
    return named


def _role_checkpoints(selection: Mapping[str, Any] | None) -> dict[str, str]:
    """role -> checkpoint name (final, mid, best_by_monitor), from eval/selection.json."""
    return {role: f"global_step{selection[role]}" for role in ROLES
            if isinstance((selection or {}).get(role), int)}


def compare_with_parent(attempt_dir: str | Path, sop: Any = None) -> dict[str, dict[str, Any]]:
    """This attempt against its parent at the same checkpoint roles (final vs final, ...) on the
    primary set, paired by problem: the effect of the one changed variable, without the seed gap
    that a comparison with SOTA (another attempt's seed) carries. role -> comparison; empty when
    there is no parent or either side is not evaluated."""
    from rlexp.core.spec import load_attempt
    from rlexp.stats import paired_comparison
    from rlexp.storage.paired import pair_files

    att = load_attempt(attempt_dir)
    if att.parent is None:
        return {}
    if sop is None:
        from rlexp.core.sop import load_sop

        sop = load_sop()
    primary = sop.primary.set_role
    parent_dir, mine_dir = AttemptDir(att.parent.attempt_dir), AttemptDir(att.attempt_dir)
    parent_roles = _role_checkpoints(parent_dir.read_selection() if parent_dir.selection.exists() else None)
    mine = _role_checkpoints(mine_dir.read_selection() if mine_dir.selection.exists() else None)
    b = sop.bootstrap
    out: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        if role not in mine or role not in parent_roles:
            continue
        base_path = parent_dir.records(parent_roles[role], primary)
        new_path = mine_dir.records(mine[role], primary)
        if not (base_path.exists() and new_path.exists()):
            continue
        paired = pair_files(base_path, new_path)
        cmp = paired_comparison(paired.y_baseline, paired.y_new, resamples=b.resamples, seed=b.seed,
                                confidence=b.confidence, method=b.method)
        out[role] = {"base": parent_roles[role], "new": mine[role], "acc_base": cmp.acc_base,
                     "acc_new": cmp.acc_new, "delta_pp": cmp.delta_pp, "b": cmp.b, "c": cmp.c,
                     "mcnemar_p": cmp.mcnemar_p, "ci_pp": list(cmp.ci_pp), "n": cmp.n}
    return out


def _gather_vs_parent(att: Any, inputs: ReportInputs) -> None:
    if att.parent is None:
        inputs.vs_parent_note = "a root attempt: no parent to compare with"
        return
    inputs.vs_parent = compare_with_parent(att.attempt_dir, inputs.sop)
    if not inputs.vs_parent:
        inputs.vs_parent_note = (f"no primary-set records of the same checkpoint roles in {att.parent_id} and this "
                                 f"attempt (`rlexp eval {inputs.commands_prefix}{att.parent_id}`)")


def _gather_family(att: Any, inputs: ReportInputs) -> None:
    """The attempt's family in the experiment: its parent, its seed siblings (same recipe and pool
    SHA-256, another seed: ``decision.json``'s recipe/pool digests) and its children."""
    from rlexp.adapters.ingest import read_metrics
    from rlexp.adapters.monitor import monitor_points
    from rlexp.storage.layout import ExperimentDir

    mine = inputs.decision or {}
    members: list[dict[str, Any]] = []
    for other in ExperimentDir(att.experiment_dir).attempts():
        try:
            from rlexp.storage.files import load_yaml

            spec = load_yaml(other.spec)
        except InputError:
            continue
        if not isinstance(spec, Mapping):
            continue
        other_id = str(spec.get("id") or other.id)
        decision = other.read_decision() if other.decision.exists() else None
        decision = decision if isinstance(decision, Mapping) else {}
        if other_id == att.id:
            relation = "this attempt"
        elif other_id == att.parent_id:
            relation = "parent"
        elif spec.get("parent") == att.id:
            relation = "child"
        elif (mine.get("recipe_sha256") and decision.get("recipe_sha256") == mine.get("recipe_sha256")
              and decision.get("pool_sha256") == mine.get("pool_sha256")):
            relation = "seed sibling"
        else:
            continue
        primary_ck = decision.get("primary_checkpoint")
        numbers = (decision.get("checkpoints") or {}).get(primary_ck) or {}
        members.append({"attempt": other_id, "relation": relation, "change": dict(spec.get("change") or {}),
                        "seed": decision.get("seed"), "decision": decision.get("decision"),
                        "checkpoint": primary_ck, "delta_pp": numbers.get("delta_pp"),
                        "acc": numbers.get("acc_new"), "baseline": decision.get("baseline")})
        if other.metrics.exists():
            points = monitor_points(read_metrics(other.metrics))
            if points:
                inputs.family_monitor[other_id] = points
    order = {"parent": 0, "this attempt": 1, "seed sibling": 2, "child": 3}
    inputs.family = sorted(members, key=lambda m: (order[m["relation"]], m["attempt"]))


# ---------------------------------------------------------------------------- plots

def render_plots(inputs: ReportInputs, out_dir: Path, stem: str) -> dict[str, Path]:
    """The plots as PNGs (only those with data); returns name -> path.

    Sized to read (7x3.6 in at 110 dpi), axes scaled to the data (a threshold is drawn only when
    it lies within the data's range), legends beside the axes rather than over the data, and the
    Okabe-Ito palette."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlexp.adapters.monitor import monitor_points, planned_lr_table
    from rlexp.core.settings import guard_settings

    spike_grad_norm = guard_settings().spikes.grad_norm  # the SOP's spike threshold

    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def figure():
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.grid(True, color="0.9", lw=0.6)
        return fig, ax

    def save(fig, ax, name: str) -> None:
        import io

        from rlexp.storage.files import atomic_write_bytes

        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        path = out_dir / f"{stem}_{name}.png"
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        plt.close(fig)
        # a uniquely named temp file, then a rename: parallel reports of one attempt never share it
        atomic_write_bytes(path, buffer.getvalue())
        made[name] = path

    planned = planned_lr_table(inputs.plan)
    logged = [(r["global_step"], r["actor_lr"]) for r in inputs.metrics
              if "actor_lr" in r and math.isfinite(r["actor_lr"])]  # a NaN LR: in the stability section
    if planned or logged:
        fig, ax = figure()
        if planned:
            steps = sorted(planned)
            ax.plot(steps, [planned[s] for s in steps], label="planned\n(plan.json)", color=PALETTE[6], lw=2,
                    alpha=0.5)
        if logged:
            ax.plot([s for s, _ in logged], [v for _, v in logged], "o", ms=3, color=PALETTE[0],
                    label="logged actor_lr")
        ax.set(xlabel="global step", ylabel="learning rate", title="LR schedule: planned vs logged")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        save(fig, ax, "lr")

    points = monitor_points(inputs.metrics)
    if points:
        from rlexp.core.gates import smooth

        fig, ax = figure()
        ax.plot([s for s, _ in points], [v * 100 for _, v in points], "o-", ms=3, lw=1, alpha=0.6,
                color=PALETTE[0], label="raw")
        sm = [(s, v) for s, v in smooth(points, inputs.smoothing_window) if v is not None]
        if sm:
            ax.plot([s for s, _ in sm], [v * 100 for _, v in sm], lw=2, color=PALETTE[0],
                    label=f"{inputs.smoothing_window}-point mean")
        for (role, step), color, style in zip(_selected(inputs.selection), PALETTE[1:4], ("--", ":", "-."),
                                              strict=False):
            ax.axvline(step, color=color, ls=style, lw=1.5, label=f"K=3 {role.replace('_', ' ')} ({step})")
        ax.set(xlabel="global step", ylabel="accuracy (%)", title="In-run OOD monitor")
        save(fig, ax, "monitor")

    if len(inputs.family_monitor) > 1:
        fig, ax = figure()
        relation = {m["attempt"]: m["relation"] for m in inputs.family}
        for i, (attempt, pts) in enumerate(sorted(inputs.family_monitor.items(),
                                                  key=lambda kv: (kv[0] != inputs.attempt_id, kv[0]))):
            mine = attempt == inputs.attempt_id
            ax.plot([s for s, _ in pts], [v * 100 for _, v in pts], "o-" if mine else ".-",
                    lw=2.2 if mine else 1.2, ms=4 if mine else 3, color=PALETTE[i % len(PALETTE)],
                    label=f"{attempt} ({relation.get(attempt, '')})")
        ax.set(xlabel="global step", ylabel="monitor accuracy (%)", title="In-run OOD monitor: the family")
        save(fig, ax, "family")

    grad = [(r["global_step"], r["grad_norm"]) for r in inputs.metrics
            if "grad_norm" in r and math.isfinite(r["grad_norm"])]
    grad_nonfinite = [r["global_step"] for r in inputs.metrics
                      if "grad_norm" in r and not math.isfinite(r["grad_norm"])]
    if grad:
        fig, ax = figure()
        values = [v for _, v in grad]
        ax.plot([s for s, _ in grad], values, lw=1, color=PALETTE[0], label="grad norm")
        for i, step in enumerate(grad_nonfinite[:20]):  # a NaN/inf grad norm: a spike with no height
            ax.axvline(step, color=PALETTE[3], lw=1, ls="--", label="grad norm NaN/inf" if i == 0 else None)
        high = [(s, v) for s, v in grad if v > spike_grad_norm]
        if high:
            ax.plot([s for s, _ in high], [v for _, v in high], "v", color=PALETTE[3], ms=6,
                    label=f"spike > {spike_grad_norm:g}")
        title = "Gradient norm and spikes"
        if max(values) > 10 * max(min(values), 1e-9):
            ax.set_yscale("log")
        if spike_grad_norm <= 1.2 * max(values):  # in range: draw it; else it would flatten the curve
            ax.axhline(spike_grad_norm, color=PALETTE[3], lw=1, ls=":", label=f"spike threshold {spike_grad_norm:g}")
        else:
            title += f" (spike threshold {spike_grad_norm:g}, far above the data)"
        ax.set(xlabel="global step", ylabel="grad norm", title=title)
        save(fig, ax, "grad_norm")

    bars = [(name, v.get("b"), v.get("c")) for name, v in _checkpoint_items(inputs)
            if isinstance(v.get("b"), int) and isinstance(v.get("c"), int)]
    if bars:
        fig, ax = figure()
        xs = range(len(bars))
        ax.bar([x - 0.2 for x in xs], [b for _, b, _ in bars], 0.4, label="b: baseline right,\nnew wrong",
               color=PALETTE[3])
        ax.bar([x + 0.2 for x in xs], [c for _, _, c in bars], 0.4, label="c: baseline wrong,\nnew right",
               color=PALETTE[0])
        ax.set_xticks(list(xs), [_checkpoint_label(inputs, n) for n, _, _ in bars])
        ax.set(ylabel="problems", title=f"Discordant pairs vs {(inputs.decision or {}).get('baseline', 'baseline')}")
        save(fig, ax, "discordant")
    return made


def _selected(selection: Mapping[str, Any] | None) -> list[tuple[str, int]]:
    return [(role, selection[role]) for role in ROLES if isinstance((selection or {}).get(role), int)]


def _checkpoint_items(inputs: ReportInputs) -> list[tuple[str, Mapping[str, Any]]]:
    """decision.json's checkpoints in step order (the order of every table and plot)."""
    checkpoints = (inputs.decision or {}).get("checkpoints") or {}
    items = [(n, v) for n, v in checkpoints.items() if isinstance(v, Mapping)]
    return sorted(items, key=lambda kv: (checkpoint_step(kv[0]) is None, checkpoint_step(kv[0]) or 0, kv[0]))


def _roles_of(inputs: ReportInputs) -> dict[str, list[str]]:
    roles: dict[str, list[str]] = {}
    for role, step in _selected(inputs.selection):
        roles.setdefault(f"global_step{step}", []).append(role.replace("_", " "))
    return roles


def _checkpoint_label(inputs: ReportInputs, name: str) -> str:
    roles = _roles_of(inputs).get(name)
    short = name.replace("global_step", "step ")
    return f"{short} ({', '.join(roles)})" if roles else short


# ---------------------------------------------------------------------------- markdown

def _pp(value: Any, digits: int = 1) -> str:
    """A signed percentage-point number: +2.5, -1.3 (— when missing)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    return f"{value:+.{digits}f}"


def _pct(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, int | float) and not isinstance(value, bool) else "—"


def _p(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _ci(ci: Any) -> str:
    return f"[{_pp(ci[0])}, {_pp(ci[1])}]" if isinstance(ci, list | tuple) and len(ci) == 2 else "—"


def _mark(ok: Any) -> str:
    return {True: "✓", False: "✗"}.get(ok, "–")


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
    items = _checkpoint_items(inputs)
    return items[0][0] if items else None


def _sota_label(inputs: ReportInputs) -> str:
    named = inputs.sota_name
    if not named:
        return "SOTA (pin not recorded)"
    ck = str(named.get("checkpoint") or "?").replace("global_step", "step ")
    return f"SOTA = {named['attempt']} {ck}" + (f" ({_pct(named.get('acc'))})" if named.get("acc") is not None else "")


def _delta_rows(inputs: ReportInputs) -> list[tuple[Any, ...]]:
    """Δ of each K=3 checkpoint against SOTA, the parent and S0 on the primary set, step order."""
    primary = (inputs.decision or {}).get("primary_set") or "ood_primary"
    role_of = {ck: role for role, ck in _role_checkpoints(inputs.selection).items()}
    rows = []
    for name, v in _checkpoint_items(inputs):
        label = _checkpoint_label(inputs, name)
        vs = v.get("vs") or {}
        sota = (vs.get("baseline_sota") or {}).get(primary)
        if sota is None and (inputs.decision or {}).get("baseline") == "baseline_sota":
            sota = v
        for who, cmp in ((_sota_label(inputs), sota),
                         (f"parent {inputs.parent} {str((inputs.vs_parent.get(role_of.get(name, '')) or {}).get('base', '')).replace('global_step', 'step ')}".strip()
                          if inputs.parent else None, inputs.vs_parent.get(role_of.get(name, ""))),
                         ("S0 (base model)", (vs.get("baseline_s0") or {}).get(primary))):
            if who is None or not cmp:
                continue
            rows.append((label, who, f"{_pct(cmp.get('acc_base'))} → {_pct(cmp.get('acc_new'))}",
                         _pp(cmp.get("delta_pp")), f"{_fmt(cmp.get('b'))}/{_fmt(cmp.get('c'))}",
                         _p(cmp.get("mcnemar_p")), _ci(cmp.get("ci_pp"))))
    return rows


def _headline(inputs: ReportInputs) -> str:
    """The primary checkpoint's Δ against the three baselines, in one line."""
    ck = _primary_checkpoint(inputs)
    v = dict(((inputs.decision or {}).get("checkpoints") or {}).get(ck) or {})
    if not ck or not v:
        return ""
    primary = (inputs.decision or {}).get("primary_set") or "ood_primary"
    vs = v.get("vs") or {}
    parts = [f"{_checkpoint_label(inputs, ck)}" + (f" {_pct(v['acc_new'])}" if v.get("acc_new") is not None else "")
             + f" on {primary}"]
    sota = (vs.get("baseline_sota") or {}).get(primary)
    if sota is None and (inputs.decision or {}).get("baseline") == "baseline_sota":
        sota = v
    if sota:
        parts.append(f"Δ {_pp(sota.get('delta_pp'))} pp vs {_sota_label(inputs)}")
    role = {c: r for r, c in _role_checkpoints(inputs.selection).items()}.get(ck)
    par = inputs.vs_parent.get(role or "")
    if par:
        parts.append(f"Δ {_pp(par['delta_pp'])} pp vs parent {inputs.parent} ({_pct(par['acc_base'])})")
    s0 = (vs.get("baseline_s0") or {}).get(primary)
    if s0:
        parts.append(f"Δ {_pp(s0['delta_pp'])} pp vs S0 ({_pct(s0['acc_base'])})")
    return " · ".join(parts)


def _gate1_numbers(doc: Mapping[str, Any], thresholds: Any, *, either: bool) -> str:
    n = doc.get("numbers") or {}
    if not n:
        return _cell(doc.get("rule") or "")
    t = thresholds
    d = f"Δ {_pp(n.get('delta_pp'))} ≥ {_pp(t.min_delta_pp) if t else '?'} {_mark(n.get('delta_ok'))}"
    p = f"p {_p(n.get('p'))} < {t.max_mcnemar_p:g} {_mark(n.get('p_ok'))}" if t else f"p {_p(n.get('p'))}"
    ci = (f"CI low {_pp(n.get('ci_low_pp'))} > {_pp(t.min_ci_low_pp)} {_mark(n.get('ci_ok'))}" if t
          else f"CI low {_pp(n.get('ci_low_pp'))}")
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
            rows.append((label, _mark(family.get("passed")), _cell(family.get("rule") or "")))
        for name in sorted(per, key=lambda c: (checkpoint_step(c) or 0, c)):
            rows.append((f"{label} · {_checkpoint_label(inputs, name)}", _mark(per[name].get("passed")),
                         _gate1_numbers(per[name], thresholds, either=gate == "gate_1a")))
    g2 = gates.get("gate_2")
    if isinstance(g2, Mapping):
        n = g2.get("numbers") or {}
        t = sop.gate_2 if sop is not None else None
        seeds = n.get("seeds")
        parts = [f"seeds {seeds} ≥ {t.min_seeds if t else '?'} {_mark(seeds >= t.min_seeds if t and isinstance(seeds, int) else None)}"]
        deltas = n.get("seed_deltas_pp") or []
        sib = n.get("siblings") or []
        parts.append("seed Δs " + ", ".join(_pp(d) for d in deltas) + (f" (with {', '.join(sib)})" if sib else "")
                     + (f" each > {_pp(t.min_each_delta_pp)} {_mark(n.get('each_positive'))}" if t and "each_positive" in n else ""))
        if n.get("mean_delta_pp") is not None and t:
            parts.append(f"mean {_pp(n['mean_delta_pp'])} ≥ {_pp(t.min_mean_delta_pp)} {_mark(n.get('mean_ok'))}")
        guard = n.get("id_guardrail") or {}
        gn = guard.get("numbers") or {}
        if gn:
            parts.append(f"ID Δ vs S0 {_pp(gn.get('id_delta_pp'))} ≥ {_pp(gn.get('limit_pp'))} {_mark(guard.get('passed'))}")
        rows.append(("Gate-2 (replication)", _mark(g2.get("passed")), " · ".join(parts)))
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
                + ", ".join(f"{a} Δ {_pp(d)} {'flat' if f else 'not flat'}"
                            for a, d, f in zip(attempts, deltas, flat, strict=False))
                + (f" (flat: Δ < {_pp(s3.max_delta_pp)} and CI includes 0)" if s3 else ""))
        rows.append((label, _mark(doc.get("passed")), text))
    gray = gates.get("gray_zone")
    if isinstance(gray, Mapping):
        d = (gray.get("numbers") or {}).get("delta_pp")
        band = f"[{_pp(s3.gray_zone_low_pp)}, {_pp(s3.gray_zone_high_pp)})" if s3 else "the gray band"
        inside = gray.get("passed")
        if decision.get("decision") in ("CONTINUE", "STOP-3a", "STOP-3b"):
            rows.append(("gray zone", _mark(inside), f"Δ {_pp(d)} {'in' if inside else 'outside'} {band}"
                         + (": a third run is allowed" if inside else "")))
        else:  # a gate passed: the gray zone is STOP-3's exception and does not apply
            rows.append(("gray zone", "n/a", f"Δ {_pp(d)} {'in' if inside else 'outside'} {band}; applies only "
                         f"when no gate passes (decision {decision.get('decision')})"))
    audit = gates.get("parser_audit")
    if isinstance(audit, Mapping):
        rate = (audit.get("numbers") or {}).get("misparse_rate")
        limit = f"{sop.parser_audit.max_misparse_rate:.0%}" if sop is not None else "?"
        rows.append(("parser audit", _mark(audit.get("passed")),
                     f"mis-parse rate {_pct(rate)} ≤ {limit}" if rate is not None
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
    from rlexp.adapters.monitor import stability

    plots = plots or {}
    decision = inputs.decision
    state = (inputs.state or {}).get("state", "not launched")
    lines = [f"# {inputs.experiment} / {inputs.attempt_id}", ""]
    what, command = next_step(inputs)
    if decision:
        from rlexp.core.decision import regression_lines

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
        from rlexp.core.decision import selection_line

        adjusted = selection_line(decision)
        if adjusted:
            lines += [adjusted, ""]
    siblings = [m["attempt"] for m in inputs.family if m["relation"] == "seed sibling"]
    facts = [f"parent {inputs.parent}" if inputs.parent else "root attempt (no parent)"]
    if siblings:
        facts.append("seed siblings " + ", ".join(f"[{s}]({s}.md)" for s in siblings))
    facts += [f"trainer {inputs.trainer.get('name', '?')} {inputs.trainer.get('version', '')}".rstrip(),
              f"run {state}", f"{len(inputs.metrics)} global steps logged"]
    git = ((inputs.provenance or {}).get("git") or {})
    if git.get("sha"):
        facts.append(f"git {git['sha'][:12]}{' (dirty)' if git.get('dirty') else ''}")
    lines += [" · ".join(facts), ""]

    rows = _delta_rows(inputs)
    if rows:
        primary = (decision or {}).get("primary_set") or "ood_primary"
        lines.append(f"## Δ against the baselines ({primary}, paired)")
        lines += _table(["checkpoint", "against", "accuracy", "Δ pp", "b/c", "McNemar p", "95% CI pp"], rows)
        if inputs.vs_parent_note and inputs.parent:
            lines.append(f"\nParent: {inputs.vs_parent_note}.")
        lines.append("")
    gate_rows = _gate_rows(inputs)
    if gate_rows:
        lines.append(f"## Gates (SOP {decision.get('sop_version', '?')}, `{str(decision.get('sop_sha256', ''))[:12]}`)")
        lines += _table(["gate", "met", "numbers vs threshold"], gate_rows)
        lines.append("")
    if len(inputs.family) > 1:
        lines.append("## Family")
        lines += _table(["attempt", "relation", "change", "seed", "decision", "primary Δ pp (vs)"],
                        [(m["attempt"] if m["relation"] == "this attempt" else f"[{m['attempt']}]({m['attempt']}.md)",
                          m["relation"], ", ".join(f"{k}={v}" for k, v in m["change"].items()) or "—",
                          m["seed"], m["decision"] or "not decided",
                          f"{_pp(m['delta_pp'])} ({str(m.get('baseline') or '—').replace('baseline_', '')}, "
                          f"{str(m.get('checkpoint') or '—').replace('global_step', 'step ')})"
                          if m["delta_pp"] is not None else "—")
                         for m in inputs.family])
        if "family" in plots:
            lines.append(f"\n![monitor curves of the family]({plots['family'].name})")
        lines.append("")

    if inputs.argv and inputs.argv.get("argv"):  # the exact command, folded (provenance)
        import shlex

        lines += [f"<details><summary>exact command ({inputs.argv.get('backend', '?')} backend; paths relative "
                  "to the experiment)</summary>", "",
                  "```", shlex.join(_display_arg(str(a), inputs) for a in inputs.argv["argv"]), "```", "</details>",
                  ""]

    lines.append(f"## {DELIVERABLES[0]}")
    if inputs.diff:
        lines += _table(["key", "parent", "this attempt", "kind"], inputs.diff)
        training = [d for d in inputs.diff if d[3] == "training"]
        if len(training) != 1:
            lines.append(f"\n⚠ {len(training)} training variables changed (the SOP allows one).")
    elif inputs.parent is None:
        lines.append("No parent: this attempt is a root" + (f"; seed sibling of {', '.join(siblings)} (same recipe, "
                                                             "another seed)." if siblings else "."))
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
    items = _checkpoint_items(inputs)
    if items:
        rows = []
        for name, v in items:
            rows.append((name, _fmt(v.get("delta_pp"), 2), f"{_fmt(v.get('b'))}/{_fmt(v.get('c'))}",
                         _fmt(v.get("mcnemar_p"), 4), _ci_plain(v.get("ci_pp")), _fmt(v.get("holm_p"), 4)))
        lines += _table(["checkpoint", "Δ pp", "b/c", "McNemar p", "bootstrap 95% CI pp", "Holm p"], rows)
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

    lines.append(f"## {DELIVERABLES[5]}")
    if inputs.metrics:
        st = stability(inputs.metrics)
        lines.append(f"spikes (grad norm > {st.spike_threshold:g}): **{st.spike_count}** of {st.steps} steps"
                     + (f" (steps {', '.join(str(s.global_step) for s in st.spikes[:8])}"
                        f"{'…' if st.spike_count > 8 else ''})" if st.spikes else "")
                     + f" · max grad norm {_fmt(st.max_grad_norm, 2)} (step {_fmt(st.max_grad_norm_step)})"
                     + f" · ratio_max {_fmt(st.ratio_max, 3)} · log_ratio_abs_p99 max {_fmt(st.log_ratio_abs_p99_max, 3)},"
                     + f" median {_fmt(st.log_ratio_abs_p99_median, 3)}")
        if st.nonfinite_steps:
            flagged = [f"step {r['global_step']}: "
                       + ", ".join(k for k, v in r.items() if isinstance(v, float) and not math.isfinite(v))
                       for r in inputs.metrics if r["global_step"] in set(st.nonfinite_steps)]
            lines.append(f"\n**NaN/inf** in {len(flagged)} of {st.steps} steps (kept in metrics.jsonl; "
                         f"means and maxima above are over the finite values): " + "; ".join(flagged[:10])
                         + ("; …" if len(flagged) > 10 else ""))
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
        lines.append(f"**{decision.get('decision', '?')}** under SOP {decision.get('sop_version', '?')}: "
                     f"{decision.get('reason', '')}. The gates with their numbers are at the top.")
        fault = decision.get("fault_tree") or {}
        # the SOP calls for the fault tree on stagnation (STOP-3a/3b), not on a passing gate
        if fault and decision.get("decision") in ("STOP-3a", "STOP-3b"):
            summary = fault.get("class") or fault.get("bottleneck") or fault.get("suggestion") or ""
            lines.append(f"\nFault tree: {_cell(summary) or _cell(fault)}")
        notes = [str(n) for n in decision.get("notes") or [] if "is not in the ledger" not in str(n)]
        if notes:
            lines.append("\nNotes: " + "; ".join(_relative(n, inputs) for n in notes))
    other = [(g, v) for g, v in inputs.guards.items() if g not in (*IN_RUN_GATES, "parser_audit")]
    if other:
        lines += ["", "Guardrails:", ""]
        lines += _table(["guard", "verdict", "detail"], [(g, _guard_status(v), _guard_reason(v)) for g, v in other])
    lines.append("")
    return _relative("\n".join(lines), inputs)


def _ci_plain(ci: Any) -> str:
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]" if isinstance(ci, list | tuple) and len(ci) == 2 else "—"


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

def report_html(markdown_path: Path) -> str:
    """The report as one self-contained HTML page (plots inlined as data URIs), for viewers that
    show markdown as text, such as MLflow's artifact pane."""
    import base64
    import re

    from markdown_it import MarkdownIt

    text = Path(markdown_path).read_text(encoding="utf-8")

    def inline(match: re.Match) -> str:
        png = Path(markdown_path).parent / match.group(2)
        if not (png.suffix == ".png" and png.is_file()):
            return match.group(0)
        data = base64.b64encode(png.read_bytes()).decode()
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    text = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", inline, text)
    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:1em auto;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>{body}</body></html>"


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
    from rlexp.adapters.episode_report import episode_section

    text += episode_section(attempt_dir)  # empty unless the attempt is an environment task
    return atomic_write_text(out_dir / f"{inputs.attempt_id}.md", text)


def _parent_regressions(inputs: ReportInputs, decision: Mapping[str, Any]) -> list[str]:
    """Regressions against the parent for decision files written before ``decide`` flagged them
    (it now records them in ``regressions``): the same rule, from the report's parent comparisons."""
    if "regressions" in decision:
        return []
    from rlexp.core.decision import regression_lines

    alpha = 1.0 - (inputs.sop.bootstrap.confidence if inputs.sop is not None else 0.95)
    rows = [{"checkpoint": c["new"], "against": "parent", "set": "primary", "delta_pp": c["delta_pp"],
             "mcnemar_p": c["mcnemar_p"], "ci_pp": c["ci_pp"]} for c in inputs.vs_parent.values()
            if c["mcnemar_p"] < alpha and c["ci_pp"][1] < 0]
    return regression_lines({"regressions": rows})


def _power_lines(checkpoints: Mapping[str, Any]) -> list[str]:
    """What each comparison could see: the exact McNemar test's MDE, and what a claim needs
    (rlexp.core.gate_power): the chance that a true effect at Gate-1b's threshold (+3 pp) passes it at
    this n and discordance for that one checkpoint, and the effect that passes it with 80%; then, once,
    the chance that the best of the SOP's K checkpoints passes it (rlexp.core.calibrate.gate_1b_best_of_k,
    per checkpoint correlation), which is what a decision on K checkpoints gets. Rows without n, b and
    c (older decision files) are left out."""
    from rlexp.core.calibrate import DEFAULT_CORRELATIONS, gate_1b_best_of_k
    from rlexp.core.gate_power import gate_1b_effect_for_power, gate_1b_pass_probability, mcnemar_mde
    from rlexp.core.sop import load_sop

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
