"""The plan of one attempt as an object: what ``rlexp plan`` writes to ``plan.json`` and what is
read back from it (:func:`rlexp.experiment.results.read_plan`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.protocol.verdict import Verdict

PLAN_FORMAT = 1


@dataclass(frozen=True)
class PlanResult:
    """The plan of one attempt; ``data`` is what ``plan.json`` holds."""

    attempt: str
    path: Path
    data: dict[str, Any]
    # plan.json's text as written (``rlexp plan --json`` prints it rather than serialising the plan
    # twice); None when the plan was read back
    text: str | None = field(default=None, compare=False, repr=False)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The preflight checks of severity error."""
        return error_checks(self.data["checks"])

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def checks(self) -> tuple[Verdict, ...]:
        """The preflight checks as verdicts (each a failed check with its severity)."""
        return tuple(Verdict.from_dict(c, self.path, f"checks[{i}].") for i, c in enumerate(self.data["checks"]))

    @property
    def steps(self) -> Mapping[str, Any]:
        """The step counts as the trainer counts them (``global_steps_total``, ``pool_size`` ...)."""
        return self.data["steps"]

    @property
    def global_steps_total(self) -> int:
        return self.data["steps"]["global_steps_total"]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    @classmethod
    def from_dict(cls, data: Any, path: str | Path) -> PlanResult:
        """``plan.json`` as :func:`rlexp.stages.plan.plan` wrote it at ``path``: the fields later stages
        read are checked (the attempt, the step counts, each check a verdict); another shape is an
        InputError naming the file and the field."""
        if not isinstance(data, Mapping):
            raise InputError(path, None, f"must be an object (a plan), got {data!r:.60}")
        if data.get("format") != PLAN_FORMAT:
            raise InputError(path, "format", f"plan format {data.get('format')!r:.20}, this rlexp reads format "
                             f"{PLAN_FORMAT}: run `rlexp plan` again")
        if not isinstance(data.get("attempt"), str):
            raise InputError(path, "attempt", f"must be a string, got {data.get('attempt')!r:.60}")
        steps = data.get("steps")
        if not isinstance(steps, Mapping):
            raise InputError(path, "steps", f"must be an object, got {steps!r:.60}")
        total = steps.get("global_steps_total")
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise InputError(path, "steps.global_steps_total", f"must be a count of steps, got {total!r:.60}")
        if not isinstance(data.get("checks"), list):
            raise InputError(path, "checks", f"must be a list, got {data.get('checks')!r:.60}")
        for i, check in enumerate(data["checks"]):  # refused here, not where a check is shown
            Verdict.from_dict(check, path, f"checks[{i}].")
        return cls(data["attempt"], Path(path), dict(data))


def error_checks(checks: Any) -> list[dict[str, Any]]:
    """The checks of severity error among plan.json ``checks`` (verdict dicts, rlexp.protocol.verdict)."""
    return [c for c in checks or [] if isinstance(c, dict) and c.get("severity") == "error"
            and c.get("passed") is not True]
