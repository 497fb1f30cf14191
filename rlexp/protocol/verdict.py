"""The one verdict type: a rule applied to numbers, with its outcome.

Preflight checks (``rlexp plan``), guardrails (``guards/<name>.json``), the decision gates and
STOP rules (``decision.json``) and the in-run early-stop rule all say the same thing: which rule,
whether it passed, on which numbers, and why. One frozen type says it, and one ``to_dict`` writes
it everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlexp.errors import InputError

ERROR = "error"  # a failed check that blocks (the launch, the plan)
WARNING = "warning"  # a failed check that is printed
SEVERITIES = (ERROR, WARNING)


@dataclass(frozen=True)
class Verdict:
    """One rule applied.

    ``passed`` is True or False, or None while the verdict is pending (an in-run gate whose step
    the run has not reached, a guard that was not run). For a STOP rule or the early-stop rule,
    ``passed`` means the rule's condition is met. A preflight check is a verdict that did not pass
    (``passed`` False) with a ``severity`` (error or warning) and a ``ref`` to the SOP rule or
    lesson behind it. ``rule`` is the criterion in words, ``numbers`` the values it looked at,
    ``notes`` the why (the first note is the reason, when there is one), ``details`` per-item
    evidence (e.g. mismatching samples, a smoothed curve).
    """

    name: str
    passed: bool | None
    rule: str
    numbers: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    details: tuple[Any, ...] = ()
    severity: str | None = None
    ref: str | None = None

    @property
    def status(self) -> str:
        """PASS | FAIL | PENDING."""
        return verdict_status(self.passed)

    @property
    def reason(self) -> str:
        """The first note, else the rule."""
        return self.notes[0] if self.notes else self.rule

    @classmethod
    def from_dict(cls, data: Any, source: Any = None, where: str = "") -> Verdict:
        """The verdict :meth:`to_dict` wrote (``guards/<name>.json``, a plan's checks, a decision's
        gates), each field of its type; else an InputError naming ``source`` (the file) and the field
        (under ``where``, the verdict's place in that file). ``details`` items written from tuples
        (a smoothed curve's points) come back as tuples."""
        def bad(field: str, what: str, value: Any) -> InputError:
            return InputError(source, f"{where}{field}", f"must be {what}, got {value!r:.60}")

        if not isinstance(data, Mapping):
            raise InputError(source, where.rstrip(".") or None, f"must be an object (a verdict), got {data!r:.60}")
        name, passed, rule = data.get("name"), data.get("passed"), data.get("rule")
        if not isinstance(name, str):
            raise bad("name", "a string", name)
        if passed is not None and not isinstance(passed, bool):
            raise bad("passed", "true, false or null", passed)
        if not isinstance(rule, str):
            raise bad("rule", "a string", rule)
        numbers, notes, details = data.get("numbers", {}), data.get("notes", []), data.get("details", [])
        if not isinstance(numbers, Mapping):
            raise bad("numbers", "an object", numbers)
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise bad("notes", "a list of strings", notes)
        if not isinstance(details, list):
            raise bad("details", "a list", details)
        severity, ref = data.get("severity"), data.get("ref")
        if severity is not None and severity not in SEVERITIES:
            raise bad("severity", f"one of {', '.join(SEVERITIES)}", severity)
        if ref is not None and not isinstance(ref, str):
            raise bad("ref", "a string", ref)
        return cls(name, passed, rule, dict(numbers), tuple(notes),
                   tuple(tuple(d) if isinstance(d, list) else d for d in details), severity, ref)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "passed": self.passed, "rule": self.rule,
                                "numbers": dict(self.numbers), "notes": list(self.notes),
                                "details": [list(d) if isinstance(d, tuple) else d for d in self.details]}
        if self.severity is not None:
            data["severity"] = self.severity
        if self.ref is not None:
            data["ref"] = self.ref
        return data


def verdict_status(passed: bool | None) -> str:
    """A verdict's ``passed`` as PASS | FAIL | PENDING."""
    return "PENDING" if passed is None else ("PASS" if passed else "FAIL")


def check(name: str, severity: str, message: str, ref: str) -> Verdict:
    """A preflight finding: a verdict that did not pass, with its severity."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
    return Verdict(name=name, passed=False, rule=message, severity=severity, ref=ref)
