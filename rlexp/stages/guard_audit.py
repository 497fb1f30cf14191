"""The parser audit (sop/README.md#parser-audit): incorrect cases drawn for a person, suspicious ones
flagged (a fallback after a bold answer, a trailing number in prose; an episode's whole trajectory);
the reviewed verdicts give the mis-parse rate, and ``decide`` blocks when it exceeds the SOP's
``parser_audit.max_misparse_rate`` (5%).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment import verdicts
from rlexp.experiment.files import atomic_write_text, iter_jsonl
from rlexp.experiment.layout import AttemptDir, checkpoint_name
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import sop_or_default

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


AUDIT_VERDICTS = ("ok", "misparse", "ambiguous")


_BOLD_NUMBER = re.compile(r"\*\*[^*\n]*\d[^*\n]*\*\*")
_CONTEXT_WORDS = re.compile(r"(?:base|step|part|case|page|figure|option|section|line|row|column)\s*$", re.IGNORECASE)


def suspicion_flags(record: dict[str, Any]) -> list[str]:
    """Why a wrong record may be a parser error rather than a model error.

    The patterns are those real audits found: a bold ``**N**`` answer the parser skipped for a
    later number, a trailing number in prose."""
    output = str(record.get("output") or "")
    method = record.get("parse_method")
    flags = []
    if method == "last_number" and _BOLD_NUMBER.search(output):
        flags.append("fallback_after_bold_answer")
    if method == "last_number":
        answer = str(record.get("answer") or "")
        plain = output.replace(",", "")  # "1,234" was extracted as "1234"
        spot = _last_occurrence(plain, answer)
        if spot is not None:
            before, after = plain[max(0, spot - 20) : spot], plain[spot + len(answer) : spot + len(answer) + 20]
            if re.match(r"\s*[A-Za-z]{2,}", after) or _CONTEXT_WORDS.search(before):
                flags.append("trailing_number_in_prose")
    if method == "none":
        flags.append("no_answer_parsed")
    if method == "unparsed":  # an answer that is not one number: the last box, or an expression
        flags.append("answer_not_one_number")
    if record.get("finish_reason") == "length":
        flags.append("truncated")
    gold = str(record.get("gold") or "")
    if gold and re.search(rf"(?<![\d.]){re.escape(gold)}(?![\d.])", output):
        flags.append("gold_appears_in_output")
    return flags


def _last_occurrence(output: str, answer: str) -> int | None:
    if not answer:
        return None
    matches = [m.start() for m in re.finditer(rf"(?<![\d.]){re.escape(answer)}(?![\d])", output)]
    return matches[-1] if matches else None


def audit_draw(records: Sequence[dict[str, Any]], n: int | None = None, seed: int = 0, *,
               sop: Sop | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Draw up to ``n`` incorrect records (seeded, independent of file order) for human review;
    ``n`` defaults to the SOP's ``parser_audit.sample_size`` (50)."""
    n = n or sop_or_default(sop).parser_audit.sample_size
    wrong = sorted((r for r in records if not r["correct"]), key=lambda r: r["problem_hash"])
    drawn = random.Random(seed).sample(wrong, min(n, len(wrong)))
    return [
        {"problem_hash": r["problem_hash"], "gold": r.get("gold"), "answer": r.get("answer"),
         "parse_method": r.get("parse_method"), "finish_reason": r.get("finish_reason"),
         "flags": suspicion_flags(r), "output": r.get("output"), "verdict": None, "note": "",
         # an episode record: the reviewer sees every turn, tool calls and feedback, not only the last
         **({"trajectory": r["trajectory"]} if r.get("trajectory") is not None else {})}
        for r in drawn
    ]


def audit_verdicts(items: Sequence[dict[str, Any]], max_rate: float, source: str | Path | None = None) -> Verdict:
    """Mis-parse rate from reviewed items (``verdict`` in ok | misparse | ambiguous)."""
    if not items:
        raise InputError(source, "verdict", "no reviewed items")
    counts = dict.fromkeys(AUDIT_VERDICTS, 0)
    for i, item in enumerate(items, start=1):
        v = item.get("verdict")
        if v not in AUDIT_VERDICTS:
            raise InputError(source, f"line {i}: verdict", f"must be one of {', '.join(AUDIT_VERDICTS)}, got {v!r}")
        counts[v] += 1
    rate = counts["misparse"] / len(items)
    flagged = [it for it in items if it.get("flags")]
    flagged_mis = sum(1 for it in flagged if it["verdict"] == "misparse")
    return Verdict(
        name="parser_audit",
        passed=rate <= max_rate,
        rule=f"mis-parse rate <= {max_rate:.0%} of reviewed incorrect cases (sop/README.md#parser-audit)",
        numbers={"reviewed": len(items), "misparse": counts["misparse"], "ambiguous": counts["ambiguous"],
                 "ok": counts["ok"], "mis_parse_rate": rate, "max_misparse_rate": max_rate,
                 "flagged": len(flagged), "flagged_misparse": flagged_mis},
        notes=("fix the parser/format first, re-evaluate, before blaming the model",) if rate > max_rate else (),
    )


@dataclass(frozen=True)
class AuditDraw:
    """The parser-audit cases drawn for a person to review (``guards/parser_audit_review.jsonl``)."""

    review_file: Path
    drawn: int
    flagged: int  # cases the heuristics call suspicious

    def to_dict(self) -> dict[str, Any]:
        return {"review_file": str(self.review_file), "drawn": self.drawn, "flagged": self.flagged}


def run_audit_draw(attempt: str | Path, *, checkpoint: str | None = None, set_role: str = "ood_primary",
                   n: int | None = None, seed: int = 0, sop: Sop | None = None) -> AuditDraw:
    """Write ``guards/parser_audit_review.jsonl`` from the best checkpoint's incorrect records."""
    from rlexp.experiment.records import read_records, record_path
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    attempt_dir = Path(att.attempt_dir)
    if checkpoint is None:
        from rlexp.experiment.results import read_selection

        selection = read_selection(attempt_dir)
        if selection is None:  # the CLI adds which command writes it
            raise InputError(AttemptDir(attempt_dir).evals.selection, None, "file not found")
        step = selection.best_by_monitor or selection.final
        if step is None:
            raise InputError(AttemptDir(attempt_dir).evals.selection, "final", "no checkpoint selected")
        checkpoint = checkpoint_name(step)
    items = audit_draw(read_records(record_path(attempt_dir, checkpoint, set_role)), n, seed, sop=sop)
    out = AttemptDir(attempt_dir).guards.audit_review
    text = "".join(json.dumps({"checkpoint": checkpoint, "set": set_role, **it}, ensure_ascii=False) + "\n"
                   for it in items)
    path = atomic_write_text(out, text)
    return AuditDraw(path, len(items), sum(1 for it in items if it["flags"]))


def run_audit_verdicts(attempt: str | Path, verdict_file: str | Path, *, sop: Sop | None = None) -> Verdict:
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    items = [record for _, record in iter_jsonl(verdict_file)]
    verdict = audit_verdicts(items, sop_or_default(sop).parser_audit.max_misparse_rate, verdict_file)
    verdict = replace(verdict, numbers={**verdict.numbers, "verdict_file": str(verdict_file)})
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict
