"""verl's own files in an attempt directory, by the names they have on disk.

The shared layout (:mod:`rlexp.experiment.layout`) names the folders every attempt has; what verl's
launch writes inside ``launch/`` is named here, so that no shared module spells a file of one
trainer. A resume and the demo read these names back: they stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlexp.experiment.layout import AttemptDir


@dataclass(frozen=True)
class VerlFiles:
    """The datasets rewritten into verl's rows, its file logger's output and the agent loop's folder."""

    launch_dir: Path

    @classmethod
    def of(cls, ad: AttemptDir) -> VerlFiles:
        return cls(ad.launch.dir)

    def dataset(self, source: Path) -> Path:
        """A dataset rewritten into verl's row format (chat prompt, reward_model.ground_truth)."""
        return self.launch_dir / "data" / f"{Path(source).stem}.verl.jsonl"

    @property
    def metrics(self) -> Path:
        """verl's ``file`` logger output (``$VERL_FILE_LOGGER_PATH``): one JSON line per step."""
        return self.launch_dir / "verl_metrics.jsonl"

    @property
    def agent_loop_dir(self) -> Path:
        """On an environment task: the generated agent loop module and its config YAML
        (rlexp.trainers.verl.agent names the files inside)."""
        return self.launch_dir / "agent_loop"
