"""Guard verdicts on disk: ``guards/<name>.json``, one :class:`~rlexp.core.verdict.Verdict` each."""

from __future__ import annotations

from pathlib import Path

from rlexp.core.verdict import Verdict
from rlexp.storage.files import atomic_write_json
from rlexp.storage.layout import AttemptDir


def write_verdict(attempt_dir: str | Path, verdict: Verdict) -> Path:
    """Write (atomically) the verdict under its name in the attempt's ``guards/``."""
    return atomic_write_json(AttemptDir(attempt_dir).guard(verdict.name), verdict.to_dict())
