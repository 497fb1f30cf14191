"""What a trainer is to ``rlexp launch`` and ``rlexp plan`` beyond its pure rules: the work with
processes and files (adapters layer). Each trainer's ``launch`` module exposes ``LAUNCH``, an
instance of a subclass of :class:`TrainerLaunch`; :func:`launcher` finds it through the registry
(:data:`rlexp.trainers.TRAINERS`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.storage.layout import AttemptDir
from rlexp.trainers import names, package, rules
from rlexp.trainers.base import TrainerRules


@dataclass
class LaunchPlan:
    """A trainer's launch, decided and not yet written: the argv and what it needs on disk."""

    argv: list[str]
    reward_file: Path | None = None
    suffixed: dict[str, tuple[Path, Path, str]] = field(default_factory=dict)  # role -> (source, copy, suffix)
    dropped: tuple[str, ...] = ()
    files: dict[Path, str] = field(default_factory=dict)  # generated files to write (TRL's training script)
    # an environment task's generated adapters (agent file, agent loop, rollout module): written
    # with the files, and by a dry run too, so a reader can open what the argv names
    adapters: dict[Path, str] = field(default_factory=dict)
    env: dict[str, str] | None = None  # what the trainer's process must see (e.g. where its logger writes)
    own: Any = None  # the trainer's own launch object (what its write_files needs)


class TrainerLaunch:
    """One trainer's launch side: the plan's command, the launch's argv and files, resume state,
    the metrics follower and the provenance it adds. Subclasses override what does not fit."""

    rules: TrainerRules

    def own_plan(self, att: Any, plan_format: int) -> dict[str, Any] | None:
        """The whole plan.json when the trainer counts its own way; None: the common plan."""
        return None

    def plan_details(self, att: Any, steps: Any) -> dict[str, Any]:
        """What only this trainer's plan holds (merged into the plan's ``trainer`` details)."""
        return {}

    def prepare(self, att: Any, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        raise NotImplementedError

    def write_files(self, plan: LaunchPlan) -> None:
        """The files of the launch beyond the argv (its reward function)."""
        if plan.reward_file is not None:
            from rlexp.backends.reward_template import write_reward_file

            write_reward_file(plan.reward_file)

    def resume_step(self, att: Any, ad: AttemptDir) -> int:
        """The step a ``--resume`` continues from (0: none saved yet, it starts over)."""
        latest = ad.latest_resume_state(self.rules.name)
        return latest.step if latest is not None else 0

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        """The reader of the run's metrics into ``metrics.jsonl`` (rlexp.adapters.ingest)."""
        raise NotImplementedError

    def script_args(self) -> Any:
        """The reader of its launch scripts' arguments for ``rlexp import`` (the package's
        ``script_args`` module: ``read_args``, ``CHECKS_VERSION``, ``LAUNCH_DEFAULTS``)."""
        return importlib.import_module(package(self.rules.name) + ".script_args")

    def provenance_extra(self, argv: list[str]) -> dict[str, Any]:
        """What the trainer adds to ``launch/provenance.json``."""
        return {}

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """The settings that select GSPO (sequence-level ratios, their aggregation, the clip range
        ``eps_low``/``eps_high``) in this trainer's own spelling; ValueError where it has none. The KL
        coefficient stays its own recipe choice (GSPO's paper trains without one)."""
        raise ValueError(f"{self.rules.name} has no GSPO setting of its own")


def gspo_trainer_settings(trainer: str, version: str | None = None, *, eps_low: float = 3e-4,
                          eps_high: float = 4e-4) -> dict[str, Any]:  # fmt: skip
    """The settings that select GSPO on trainer ``trainer`` (:meth:`TrainerLaunch.gspo_settings`);
    ValueError for an unknown trainer or one without them."""
    if trainer not in names():
        raise ValueError(f"unknown trainer {trainer!r}")
    return launcher(trainer).gspo_settings(version, eps_low, eps_high)


def launcher(name: str) -> TrainerLaunch:
    """The launch side of trainer ``name`` (its package's ``launch.LAUNCH``)."""
    module = importlib.import_module(package(name) + ".launch")
    launch = module.LAUNCH
    assert launch.rules is rules(name)
    return launch
