"""What the stages write as objects, read back as those objects.

``eval/selection.json`` (:class:`~rlexp.protocol.gates.RegisteredSelection`), ``decision.json``
(:class:`~rlexp.protocol.decision.Decision`) and ``plan.json`` (:class:`~rlexp.protocol.plan.PlanResult`);
the guard verdicts are read by :func:`rlexp.experiment.verdicts.read_verdict`. Each reader returns None
when the file does not exist, and refuses a file of another shape with an InputError naming it and
the field, so no later stage re-checks a raw dict by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlexp.experiment.layout import AttemptDir
from rlexp.experiment.verdicts import read_verdict as read_verdict  # re-exported: every typed reader here

if TYPE_CHECKING:
    from rlexp.protocol.decision import Decision
    from rlexp.protocol.gates import RegisteredSelection
    from rlexp.protocol.plan import PlanResult


def read_selection(attempt_dir: str | Path) -> RegisteredSelection | None:
    """``eval/selection.json``: the K=3 checkpoints ``rlexp eval`` pre-registered."""
    from rlexp.protocol.gates import RegisteredSelection

    ad = AttemptDir(attempt_dir)
    data = ad.evals.read_selection()
    return None if data is None else RegisteredSelection.from_dict(data, ad.evals.selection)


def read_decision(attempt_dir: str | Path) -> Decision | None:
    """``decision.json``: the decision ``rlexp decide`` recorded."""
    from rlexp.protocol.decision import Decision

    ad = AttemptDir(attempt_dir)
    data = ad.read_decision()
    return None if data is None else Decision.from_dict(data, ad.decision, attempt=ad.id)


def read_plan(attempt_dir: str | Path) -> PlanResult | None:
    """``plan.json``: the plan ``rlexp plan`` wrote."""
    from rlexp.protocol.plan import PlanResult

    ad = AttemptDir(attempt_dir)
    data = ad.read_plan()
    return None if data is None else PlanResult.from_dict(data, ad.plan)
