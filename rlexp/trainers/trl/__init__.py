"""TRL's ``GRPOTrainer`` (``trainer.name: trl``): GRPOConfig field names, in a venv of its own.

Its pure rules live here (steps and LR: :mod:`rlexp.core.trainers.trl`); the generated training
script is :mod:`rlexp.backends.trl`, the launch :mod:`rlexp.trainers.trl.launch`.
"""

from __future__ import annotations

from typing import Any

from rlexp.trainers.base import TrainerRules


class TrlRules(TrainerRules):
    name = "trl"
    backends = ("process",)
    backend_note = " (the generated script in .venv-trl); the Ray path is OpenRLHF's"
    metrics_sources = ("tensorboard",)  # transformers' TensorBoard callback
    metrics_source_note = "trainer trl is followed through its TensorBoard events"
    log_trainer = "trl"
    openrlhf_batches = False  # TRL's own rules: rlexp.core.trainers.trl

    def steps(self, att: Any) -> Any:
        from rlexp.core.trainers.trl import TrlRecipeError, trl_steps
        from rlexp.errors import InputError

        try:
            return trl_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, att.trainer.gpus or 1)
        except TrlRecipeError as exc:
            raise InputError(att.display_path, f"recipe.{exc.field}", str(exc)) from None


RULES = TrlRules()
