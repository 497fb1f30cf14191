"""verl (``trainer.name: verl``): dotted Hydra keys of the pinned release, its own step count.

Its pure rules live here (steps, LR and schedule: :mod:`rlexp.trainers.verl.steps`; checks:
:mod:`rlexp.trainers.verl.checks`); the release's config and the Hydra argv are
:mod:`rlexp.trainers.verl.hydra`, the plan and the launch :mod:`rlexp.trainers.verl.launch`.
"""

from __future__ import annotations

from rlexp.trainers.base import TrainerRules


class VerlRules(TrainerRules):
    name = "verl"
    backends = ("process", "ray")
    metrics_sources = ("verl",)  # its file logger's JSONL (VERL_FILE_LOGGER_PATH)
    metrics_source_note = "verl's metrics come from its file logger (--metrics-source verl), and only verl's"
    log_trainer = "verl"
    openrlhf_batches = False


RULES = VerlRules()
