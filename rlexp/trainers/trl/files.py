"""TRL's own files in an attempt directory, by the names they have on disk.

The shared layout (:mod:`rlexp.experiment.layout`) names the folders every attempt has; what TRL's
launch writes inside them is named here, so that no shared module spells a file of one trainer.
A resume and the demo read these names back: they stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlexp.experiment.layout import AttemptDir


@dataclass(frozen=True)
class TrlFiles:
    """``launch/train_trl.py`` and the environment task's generated modules and episode log, and the
    in-run monitor's TensorBoard events under the attempt's ``tensorboard/``."""

    launch_dir: Path
    tensorboard: Path

    @classmethod
    def of(cls, ad: AttemptDir) -> TrlFiles:
        return cls(ad.launch.dir, ad.tensorboard)

    @property
    def script(self) -> Path:
        """The generated training script (rlexp.trainers.trl.template)."""
        return self.launch_dir / "train_trl.py"

    @property
    def rollout_module(self) -> Path:
        """On an environment task: the generated rollout_func module (rlexp.trainers.trl.rollout_template)."""
        return self.launch_dir / "trl_rollout.py"

    @property
    def tools_module(self) -> Path:
        """On an environment task played through tool calls: the generated environment_factory module
        (rlexp.trainers.trl.tools_template)."""
        return self.launch_dir / "trl_tools.py"

    @property
    def episodes(self) -> Path:
        """On an environment task: every training episode as the rollout handed it to TRL (ids, env_mask, turns)."""
        return self.launch_dir / "trl_episodes.jsonl"

    @property
    def monitor_tensorboard(self) -> Path:
        """The event directory of the in-run monitor's ``train/monitor_acc``."""
        return self.tensorboard / "rlexp_monitor"
