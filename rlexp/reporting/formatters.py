"""How the report writes numbers, intervals, verdicts and tables (GitHub-flavoured markdown):
``—`` for a missing value, signed percentage points, p-values to three decimals (two significant
digits below 0.001)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    if isinstance(value, list | tuple):
        return " ".join(fmt(v, digits) for v in value)
    return str(value)


def cell(value: Any) -> str:
    """Table cell text: pipes escaped, one line."""
    return " ".join(fmt(value).replace("|", "\\|").split())


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def signed_pp(value: Any, digits: int = 1) -> str:
    """A signed percentage-point number: +2.5, -1.3 (— when missing)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    return f"{value:+.{digits}f}"


def pct(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, int | float) and not isinstance(value, bool) else "—"


def p_value(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def interval_pp(ci: Any) -> str:
    return f"[{signed_pp(ci[0])}, {signed_pp(ci[1])}]" if isinstance(ci, list | tuple) and len(ci) == 2 else "—"


def interval_plain(ci: Any) -> str:
    return f"[{fmt(ci[0], 2)}, {fmt(ci[1], 2)}]" if isinstance(ci, list | tuple) and len(ci) == 2 else "—"


def mark(ok: Any) -> str:
    return {True: "✓", False: "✗"}.get(ok, "–")


def guard_status(doc: Mapping[str, Any]) -> str:
    """A ``guards/`` verdict's ``passed``: PASS, FAIL, or pending (an in-run gate not decided yet)."""
    return {True: "PASS", False: "FAIL", None: "pending"}[doc["passed"]]


def notes_of(doc: Mapping[str, Any]) -> list[str]:
    notes = doc.get("notes")
    return [str(n) for n in notes] if isinstance(notes, list | tuple) else []


def guard_reason(doc: Mapping[str, Any]) -> str:
    """A guard's rule and its first notes."""
    text = "; ".join([str(doc.get("rule") or ""), *notes_of(doc)[:2]]).strip("; ")
    if not text and doc.get("numbers"):
        text = cell(doc["numbers"])
    return text[:200]


def in_run_reason(doc: Mapping[str, Any]) -> str:
    """An in-run gate's reason (its first note), else its rule."""
    notes = notes_of(doc)
    return (notes[0] if notes else str(doc.get("rule") or ""))[:200]
