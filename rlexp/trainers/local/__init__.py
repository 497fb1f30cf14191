"""The local CPU trainer (``trainer.name: local``): GRPO in one readable file, OpenRLHF's key names.

Its pure rules live here, with its configuration (:mod:`~rlexp.trainers.local.config`) and its loss
(:mod:`~rlexp.trainers.local.loss`); the trainer is :mod:`~rlexp.trainers.local.train` (and
:mod:`~rlexp.trainers.local.env_train` for environment tasks), run through the entries
``python -m rlexp.backends.local_trainer`` / ``env_trainer`` (the module names every launch
records); its launch is :mod:`rlexp.trainers.local.launch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.trainers.base import TrainerRules
from rlexp.trainers.openrlhf import OpenRLHFStepMath
from rlexp.training.schedule import LOCAL_TRAINER_VERSION  # OpenRLHF 0.11's step semantics, one process

if TYPE_CHECKING:
    from rlexp.spec.recipe import Recipe


class LocalRules(OpenRLHFStepMath, TrainerRules):  # OpenRLHF 0.11's step math, one process (step_version)
    name = "local"
    backends = ("local", "ray")
    metrics_sources = ("stdout",)  # it appends metrics.jsonl itself; the source is recorded as stdout
    metrics_source_note = ("the local trainer writes metrics.jsonl itself; --metrics-source is for the "
                           "OpenRLHF backends (process, ray)")
    default_version = LOCAL_TRAINER_VERSION
    graded_by_recipe_keys = False  # the demo's rows: prompt and answer
    always_chat_template = True
    log_trainer = "local"
    console_log_format = "jsonl"  # its console lines are metrics.jsonl's
    runs_rlexp_python = True
    single_process = True
    loads_local_model = True
    trains_reward_mix = True  # rlexp.trainers.local.env_train: EnvTask.episode_reward
    resume_state_folder = "state"  # rlexp.trainers.local.train: checkpoints/state/global_step{N}

    def step_version(self, trainer_version: str) -> str:
        return LOCAL_TRAINER_VERSION

    def group_of_one(self, recipe: Recipe, version: str) -> Any:  # type: ignore[override]
        from rlexp.trainers.local.checks import group_of_one

        return group_of_one(recipe, version)


RULES = LocalRules()
