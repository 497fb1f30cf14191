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

SEVERITIES = ("error", "warning")


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
