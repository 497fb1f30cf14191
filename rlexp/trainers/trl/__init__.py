"""TRL's ``GRPOTrainer`` and ``RLOOTrainer`` (``trainer.name: trl``): their config classes' field
names, in a venv of its own. The recipe's ``advantage_estimator`` (``grpo``, the default, or
``rloo``) names the trainer, as ``trl grpo`` and ``trl rloo`` do (:mod:`.keys`); ``async_grpo``,
``trl.experimental.async_grpo``'s AsyncGRPOTrainer, is planned with a stated ``max_steps`` and not
launched.

Its pure rules live here and in the package's core modules (steps and LR: :mod:`.steps`; the
pinned release's fields: :mod:`.fields`, as recipe keys: :mod:`.keys`); the adapters: the generated
training script (:mod:`.script`, from :mod:`.template`), the launch (:mod:`.launch`) and the writer
of :mod:`.fields`, run in TRL's venv (:mod:`.write_fields`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.trainers.base import TrainerRules

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


class TrlRules(TrainerRules):
    name = "trl"
    backends = ("process",)
    backend_note = " (the generated script in .venv-trl); the Ray path is OpenRLHF's"
    metrics_sources = ("tensorboard",)  # transformers' TensorBoard callback
    metrics_source_note = "trainer trl is followed through its TensorBoard events"
    log_trainer = "trl"
    console_log_format = None
    checkpoint_dirs = (r"checkpoint-(\d+)",)  # transformers' output_dir: checkpoint-{N}
    launch_commands = ("trl",)  # `trl grpo ...`, `trl rloo ...`; `python -m trl...` and a training script too
    runs_scripts = True
    console_log_note = ("TRL's console lines carry no step number: give its trainer_state.json (in each "
                        "checkpoint), its TensorBoard directory, or --format")
    resume_state_folder = "trl"  # its output_dir: checkpoints/trl/checkpoint-{N} (transformers' Trainer)
    own_state_names = checkpoint_dirs[0]
    plays_tool_calls = True  # GRPOTrainer(environment_factory=...): rlexp.trainers.trl.agent_tools

    def build_key_table(self) -> Any:
        """GRPOConfig's, RLOOConfig's and ModelConfig's fields, whose resolved recipe is a TrlRecipe."""
        from dataclasses import replace

        from rlexp.trainers.trl.keys import trl_key_table
        from rlexp.trainers.trl.recipe import TrlRecipe

        return replace(trl_key_table(), recipe_type=TrlRecipe)

    def recipe_defaults(self, stated: Any) -> Any:
        """The defaults of the config class the recipe's ``advantage_estimator`` names (GRPOConfig's
        unless it names rloo: RLOOConfig's)."""
        from rlexp.trainers.trl.keys import recipe_defaults

        return recipe_defaults(stated)

    def steps(self, att: Attempt) -> Any:
        from rlexp.errors import InputError
        from rlexp.trainers.trl.keys import ESTIMATOR_KEY
        from rlexp.trainers.trl.steps import TrlRecipeError, trl_steps

        parent = att.parent
        if parent is not None and parent.recipe.estimator != att.recipe.estimator:
            # another TRL trainer: other fields and defaults, as a trainer switch is (the spec refuses that)
            raise InputError(att.display_path or att.spec_path, f"recipe.{ESTIMATOR_KEY}",
                             f"{att.recipe.estimator!r} differs from parent {parent.id}'s "
                             f"{parent.recipe.estimator!r} (another TRL trainer, its config class's fields and "
                             "defaults): start a new root attempt instead")
        try:
            return trl_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, att.trainer.gpus or 1)
        except TrlRecipeError as exc:
            raise InputError(att.display_path, f"recipe.{exc.field}", str(exc)) from None

    def metric_vocabulary(self) -> Any:
        from rlexp.trainers.trl.metrics import VOCABULARY

        return VOCABULARY

    @property
    def agent_api_since(self) -> str:  # type: ignore[override]
        from rlexp.trainers.trl.checks import AGENT_API_SINCE

        return AGENT_API_SINCE

    def agentic_checks(self, env: Any, recipe: dict[str, Any], version: str) -> list[Any]:
        from rlexp.trainers.trl.checks import agentic_checks

        return agentic_checks(env, recipe, version)

    def run_health_checks(self, recipe: dict[str, Any], version: str, env: Any = None) -> list[Any]:
        from rlexp.trainers.trl.checks import run_health_checks

        return run_health_checks(recipe, version)


RULES = TrlRules()
