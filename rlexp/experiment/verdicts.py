"""Guard verdicts on disk: ``guards/<name>.json``, one :class:`~rlexp.protocol.verdict.Verdict` each,
written by :func:`write_verdict` and read back as that object by :func:`read_verdict`."""

from __future__ import annotations

from pathlib import Path

from rlexp.experiment.files import atomic_write_json
from rlexp.experiment.layout import AttemptDir
from rlexp.protocol.verdict import Verdict


def write_verdict(attempt_dir: str | Path, verdict: Verdict) -> Path:
    """Write (atomically) the verdict under its name in the attempt's ``guards/``."""
    return atomic_write_json(AttemptDir(attempt_dir).guards.verdict(verdict.name), verdict.to_dict())


def read_verdict(attempt_dir: str | Path, name: str) -> Verdict | None:
    """The verdict of guard ``name`` (None when the guard was not run); a file that is not a verdict
    is an InputError naming it and the field."""
    ad = AttemptDir(attempt_dir)
    data = ad.guards.read(name)
    return None if data is None else Verdict.from_dict(data, ad.guards.verdict(name))
