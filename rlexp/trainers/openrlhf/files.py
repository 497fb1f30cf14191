"""OpenRLHF's own files in an attempt directory, by the names they have on disk.

The shared layout (:mod:`rlexp.experiment.layout`) names the folders every attempt has; what
OpenRLHF's launch writes inside ``launch/`` is named here, so that no shared module spells a file of
one trainer. A resume and the demo read these names back: they stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlexp.experiment.layout import AttemptDir


@dataclass(frozen=True)
class OpenRLHFFiles:
    """The suffixed copies of its datasets and the agent file of an environment task."""

    launch_dir: Path

    @classmethod
    def of(cls, ad: AttemptDir) -> OpenRLHFFiles:
        return cls(ad.launch.dir)

    def suffixed_dataset(self, source: Path) -> Path:
        """A copy of a dataset with the prompt suffix added (OpenRLHF cannot add one itself)."""
        return self.launch_dir / "data" / f"{Path(source).stem}.suffixed.jsonl"

    @property
    def agent_func(self) -> Path:
        """On an environment task: the generated agent file (rlexp.trainers.openrlhf.agent)."""
        return self.launch_dir / "agent_func.py"
