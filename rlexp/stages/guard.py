"""The SOP's guardrails and its parser audit (sop/README.md), each a verdict in ``ATTEMPT/guards/<name>.json``.

- G0 prompt parity: the training path's ``input_ids`` equal the eval path's on 5 samples (a suffix
  moved a baseline by 10pp once, docs/plan.md#prompt-suffix-parity; a checkpoint that ships its
  own chat template is the other way to break it).
- G1 pipeline integrity: two eval paths on one checkpoint (adapter vs merged weights, or in-run vs
  post-hoc record files) agree exactly, or differ only by a *named* nondeterminism source with no
  change in correctness (an adapter applied on top of weights that already contained it once
  inflated numbers by 2–7pp).
- G2 parser ceiling: on 200 baseline problems boxed ≥ 98%, parse failures (none + unparsed) = 0%, truncation ≤ 5%.
- G4 pass@k headroom: k=8 samples at temperature 0.6 on the problems the baseline gets wrong;
  pass@8 ≥ 15% means GRPO has signal to learn from.
- Parser audit: 50 incorrect cases drawn for a human, suspicious ones flagged (fallback after a
  bold answer, a trailing number in prose); verdicts give the mis-parse rate; ``decide`` blocks
  when it exceeds the SOP's ``parser_audit.max_misparse_rate`` (5%).

On an environment task the records are episodes: G1 compares every turn (action and feedback),
G2 grades the final answer of Baseline-S0's greedy episodes, the audit's cases carry the whole
trajectory, and :func:`episode_integrity` is G0 and G1 per turn between two paths' token ids.

Every number (5 samples, 0 discordants, 98% / 0% / 5% on 200 problems, k=8 at T=0.6 and 15%,
50 audit cases, 5% mis-parsed) is data: the SOP file's ``guardrails`` and ``parser_audit``
sections, read through :func:`rlexp.spec.sop.load_sop`. Each function takes the values (or a ``sop``)
as optional arguments so a test or a caller can override them; left out, they come from the SOP
in force, read only when a default is needed.

This module runs one by name (:func:`guard`); each lives in a module of its own: G0 in
:mod:`rlexp.stages.guard_parity`, G1 in :mod:`rlexp.stages.guard_integrity`, G2 and G4 in
:mod:`rlexp.stages.guard_baseline`, the audit in :mod:`rlexp.stages.guard_audit`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.protocol.verdict import Verdict
from rlexp.stages.guard_audit import run_audit_verdicts
from rlexp.stages.guard_baseline import run_g2, run_g4
from rlexp.stages.guard_integrity import run_g1
from rlexp.stages.guard_parity import run_g0

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


GUARDS = ("g0", "g1", "g2", "g4", "audit")


def guard(name: str, attempt: str | Path, *, sop: Sop | None = None, **options: Any) -> Verdict:
    """Run one guardrail on an attempt and write its verdict to ``guards/<name>.json``.

    ``name``: g0 (prompt parity), g1 (pipeline integrity), g2 (parser ceiling), g4 (pass@k
    headroom) or audit (score a reviewed parser-audit file: ``verdict_file=``). ``options`` are the
    guard's own (``samples``, ``checkpoint``, ``set_role``, ``limit``, ``records``, ``problems``,
    ``k``); what is not given comes from the SOP. A failing guard is a verdict, not an exception.
    """
    runners = {"g0": run_g0, "g1": run_g1, "g2": run_g2, "g4": run_g4, "audit": run_audit_verdicts}
    if name not in runners:
        raise InputError(None, "guard", f"unknown guard {name!r}; expected one of {', '.join(GUARDS)}")
    return runners[name](attempt, sop=sop, **options)
