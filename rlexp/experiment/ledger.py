"""The experiment's history: ``ledger.jsonl`` (one line per decided attempt) and the SOTA pin.

The ledger is what STOP-3 and Gate-2 read: which attempts were decided, on which pool, with
which changed variable, seed and primary delta. It is appended one complete line at a time
(``rlexp.experiment.files.append_jsonl``). Re-deciding an attempt with the same outcome appends nothing;
a different outcome appends a new line, and readers take the latest line per attempt, so the
file keeps the full history of decisions.

``sota.json`` pins the Baseline-SOTA checkpoint. Only ``rlexp decide`` moves it, and only when
Gate-1b and Gate-2 both pass (STOP-1).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import (
    append_jsonl,
    atomic_write_json,
    finite_number,
    iter_jsonl,
    read_json,
    repair_torn_tail,
)
from rlexp.experiment.layout import ExperimentDir
from rlexp.protocol.gates import AttemptOutcome

DECISIONS = ("STOP-1", "CONFIRM", "CONTINUE", "STOP-3a", "STOP-3b", "DEBUG")


@dataclass(frozen=True)
class LedgerEntry:
    attempt: str
    parent: str | None
    changed: tuple[str, ...]          # names of the recipe variables changed vs the parent
    pool_sha256: str | None
    pool_size: int | None
    pool_method: str | None
    recipe_sha256: str | None         # the recipe without seed and pool path: "same recipe" for Gate-2/STOP-3b
    seed: int | None
    checkpoint: str                   # the primary checkpoint (the one whose delta is recorded)
    baseline: str                     # baseline_sota | baseline_s0
    delta_pp: float
    ci_pp: tuple[float, float] | None
    mcnemar_p: float | None
    decision: str
    sop_version: str
    decided_at: str
    # the primary checkpoint's selection-adjusted Δ (against SOTA, corrected for the pin's own selection:
    # decision.json's selection_adjusted.replication_pp), which a SOP whose Gate-2 reads it
    # (gate_2.estimate) averages over seeds; absent from lines written before it
    adjusted_delta_pp: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["changed"] = list(self.changed)
        out["ci_pp"] = list(self.ci_pp) if self.ci_pp is not None else None
        if self.adjusted_delta_pp is None:
            out.pop("adjusted_delta_pp")  # as lines were written before the field existed
        return out

    def outcome(self) -> AttemptOutcome:
        return AttemptOutcome(self.attempt, self.parent, self.changed, self.pool_sha256, self.delta_pp, self.ci_pp,
                              self.mcnemar_p, self.recipe_sha256, self.pool_size, self.pool_method, self.seed)

    def same_result(self, other: LedgerEntry) -> bool:
        a, b = self.to_dict(), other.to_dict()
        a.pop("decided_at")
        b.pop("decided_at")
        return a == b


_FIELDS = {f.name for f in fields(LedgerEntry)}
_OPTIONAL = {"adjusted_delta_pp"}


def _entry(path: Path, number: int, rec: dict[str, Any]) -> LedgerEntry:
    unknown = sorted(set(rec) - _FIELDS)
    if unknown:
        raise InputError(path, f"line {number}: {unknown[0]}", "unknown key")
    missing = sorted(_FIELDS - set(rec) - _OPTIONAL)
    if missing:
        raise InputError(path, f"line {number}: {missing[0]}", "missing key")

    def need(key: str, kinds: tuple[type, ...], optional: bool = False) -> Any:
        value = rec[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise InputError(path, f"line {number}: {key}", f"wrong type {type(value).__name__}")
        return value

    delta = finite_number(rec["delta_pp"])
    if delta is None:
        raise InputError(path, f"line {number}: delta_pp", "must be a finite number")
    ci = rec["ci_pp"]
    if ci is not None:
        if not (isinstance(ci, list) and len(ci) == 2 and all(finite_number(v) is not None for v in ci)):
            raise InputError(path, f"line {number}: ci_pp", "must be [low, high] or null")
        ci = (float(ci[0]), float(ci[1]))
    p = rec["mcnemar_p"]
    if p is not None and finite_number(p) is None:
        raise InputError(path, f"line {number}: mcnemar_p", "must be a finite number or null")
    changed = rec["changed"]
    if not (isinstance(changed, list) and all(isinstance(c, str) for c in changed)):
        raise InputError(path, f"line {number}: changed", "must be a list of variable names")
    if rec["decision"] not in DECISIONS:
        raise InputError(path, f"line {number}: decision", f"must be one of {', '.join(DECISIONS)}")
    return LedgerEntry(
        attempt=need("attempt", (str,)), parent=need("parent", (str,), True), changed=tuple(changed),
        pool_sha256=need("pool_sha256", (str,), True), pool_size=need("pool_size", (int,), True),
        pool_method=need("pool_method", (str,), True), recipe_sha256=need("recipe_sha256", (str,), True),
        seed=need("seed", (int,), True), checkpoint=need("checkpoint", (str,)), baseline=need("baseline", (str,)),
        delta_pp=delta, ci_pp=ci, mcnemar_p=float(p) if p is not None else None, decision=rec["decision"],
        sop_version=need("sop_version", (str,)), decided_at=need("decided_at", (str,)),
        adjusted_delta_pp=_optional_number(path, number, rec, "adjusted_delta_pp"),
    )


def _optional_number(path: Path, number: int, rec: dict[str, Any], key: str) -> float | None:
    if rec.get(key) is None:
        return None
    value = finite_number(rec[key])
    if value is None:
        raise InputError(path, f"line {number}: {key}", "must be a finite number or null")
    return value


def read_ledger(experiment_dir: str | Path) -> list[LedgerEntry]:
    """Every line of the ledger in order (empty list when there is no ledger yet)."""
    path = ExperimentDir(experiment_dir).ledger
    if not path.exists():
        return []
    return [_entry(path, number, rec) for number, rec in iter_jsonl(path)]


def latest_by_attempt(entries: list[LedgerEntry]) -> dict[str, LedgerEntry]:
    latest: dict[str, LedgerEntry] = {}
    for entry in entries:
        latest[entry.attempt] = entry
    return latest


def record_decision(experiment_dir: str | Path, entry: LedgerEntry) -> bool:
    """Append ``entry`` unless the attempt's latest line already says the same. Returns True if appended."""
    repair_torn_tail(ExperimentDir(experiment_dir).ledger)  # a decide killed mid-append must not poison the ledger
    current = latest_by_attempt(read_ledger(experiment_dir)).get(entry.attempt)
    if current is not None and current.same_result(entry):
        return False
    append_jsonl(ExperimentDir(experiment_dir).ledger, entry.to_dict())
    return True


@dataclass(frozen=True)
class SotaPin:
    attempt: str
    checkpoint: str
    path: str
    decided_at: str
    # how far the pinned checkpoint's accuracy on the primary set is estimated to overstate its own (pp):
    # it won the best of K on those problems (rlexp.protocol.decision.pin_correction); absent on older pins
    selection_correction_pp: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.selection_correction_pp is None:
            out.pop("selection_correction_pp")  # as pins were written before the field existed
        return out


_PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def read_sota(experiment_dir: str | Path) -> SotaPin | None:
    path = ExperimentDir(experiment_dir).sota
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "expected a JSON object")
    for key in ("attempt", "checkpoint", "path", "decided_at"):
        if not isinstance(data.get(key), str):
            raise InputError(path, key, "missing or not a string")
    unknown = sorted(set(data) - {"attempt", "checkpoint", "path", "decided_at", "selection_correction_pp"})
    if unknown:
        raise InputError(path, unknown[0], "unknown key")
    # the attempt and checkpoint name directories of this experiment: bare names, never a path
    for key in ("attempt", "checkpoint"):
        if not _PIN_NAME.fullmatch(data[key]):
            raise InputError(path, key, f"not an attempt or checkpoint name ({data[key]!r:.60}): letters, digits, "
                                        "'_', '.', '-', no path")
    if len(data["path"]) > 4096 or len(data["decided_at"]) > 64:
        raise InputError(path, "path" if len(data["path"]) > 4096 else "decided_at", "longer than a path or a time")
    correction = data.get("selection_correction_pp")
    if correction is not None and finite_number(correction) is None:
        raise InputError(path, "selection_correction_pp", "must be a finite number or null")
    return SotaPin(data["attempt"], data["checkpoint"], data["path"], data["decided_at"],
                   float(correction) if correction is not None else None)


def pin_sota(experiment_dir: str | Path, pin: SotaPin) -> Path:
    """Move the SOTA pin (atomically). Callers must have checked Gate-1b and Gate-2."""
    return atomic_write_json(ExperimentDir(experiment_dir).sota, pin.to_dict())
