"""What the report shows, as one typed object (:class:`ReportInputs`: the report stage gathers it
from the attempt's files), and the views of it the renderers share: the K=3 checkpoints in step
order and the roles each was selected for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlexp.experiment import layout
from rlexp.experiment.layout import checkpoint_name
from rlexp.experiment.records import checkpoint_step

ROLES = ("final", "mid", "best_by_monitor")


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
    sop: Any = None  # rlexp.spec.sop.Sop in force (thresholds beside each gate's numbers)
    sota_name: dict[str, Any] | None = None  # {attempt, checkpoint} the baseline_sota records were made from
    vs_parent: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> comparison vs the parent
    vs_parent_note: str | None = None  # why there is no parent comparison
    family: list[dict[str, Any]] = field(default_factory=list)  # parent, seed siblings, children (+ self)
    family_monitor: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # attempt -> monitor
    commands_prefix: str = ""  # how a command names this experiment's attempts (experiments/<exp>/)


def role_checkpoints(selection: Mapping[str, Any] | None) -> dict[str, str]:
    """role -> checkpoint name (final, mid, best_by_monitor), from eval/selection.json."""
    return {role: checkpoint_name(selection[role]) for role in ROLES
            if isinstance((selection or {}).get(role), int)}


def selected_roles(selection: Mapping[str, Any] | None) -> list[tuple[str, int]]:
    return [(role, selection[role]) for role in ROLES if isinstance((selection or {}).get(role), int)]


def checkpoint_items(inputs: ReportInputs) -> list[tuple[str, Mapping[str, Any]]]:
    """decision.json's checkpoints in step order (the order of every table and plot)."""
    checkpoints = (inputs.decision or {}).get("checkpoints") or {}
    items = [(n, v) for n, v in checkpoints.items() if isinstance(v, Mapping)]
    return sorted(items, key=lambda kv: (checkpoint_step(kv[0]) is None, checkpoint_step(kv[0]) or 0, kv[0]))


def roles_of(inputs: ReportInputs) -> dict[str, list[str]]:
    roles: dict[str, list[str]] = {}
    for role, step in selected_roles(inputs.selection):
        roles.setdefault(checkpoint_name(step), []).append(role.replace("_", " "))
    return roles


def checkpoint_label(inputs: ReportInputs, name: str) -> str:
    roles = roles_of(inputs).get(name)
    short = layout.checkpoint_label(name)
    return f"{short} ({', '.join(roles)})" if roles else short
