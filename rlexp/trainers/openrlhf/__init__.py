"""OpenRLHF (``trainer.name: openrlhf``): ``train_ppo_ray`` in any listed release's flag dialect.

Its pure rules live here; the argv builder and the flag tables are :mod:`rlexp.trainers.openrlhf.argv`,
the launch :mod:`rlexp.trainers.openrlhf.launch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.trainers.base import TrainerRules

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.spec.recipe import Recipe


class OpenRLHFStepMath:
    """OpenRLHF's step math, key table, batch and LR checks: its rules', and the local trainer's (which
    trains with OpenRLHF's key names and step semantics in one process)."""

    def steps(self, att: Attempt) -> Any:
        """OpenRLHF's step math (rlexp.training.schedule.compute_steps, its trainer/ppo_trainer.py)."""
        from rlexp.training.schedule import compute_steps

        return compute_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, trainer=self.name)

    def build_key_table(self) -> Any:
        from rlexp.spec.recipe import openrlhf_key_table

        return openrlhf_key_table(self.name)

    def batch_checks(self, att: Attempt, steps: Any) -> list[Any]:
        from rlexp.trainers.openrlhf.checks import batch_checks

        return batch_checks(att, steps)

    def lr_checks(self, att: Attempt, steps: Any) -> list[Any]:
        from rlexp.trainers.openrlhf.checks import lr_checks

        return lr_checks(att, steps)

    def partial_batch_note(self, steps: Any) -> str | None:
        from rlexp.trainers.openrlhf.checks import partial_batch_note

        return partial_batch_note(steps)


class OpenRLHFRules(OpenRLHFStepMath, TrainerRules):
    name = "openrlhf"
    backends = ("process", "ray")
    metrics_sources = ("stdout", "tensorboard")  # its `Global step N` lines, or its TensorBoard scalars
    metrics_source_note = "OpenRLHF is followed through its stdout or its TensorBoard scalars"
    log_trainer = "openrlhf"
    version_example = '"0.9.3" or "0.11.0"'  # every listed release's flags are read; none is assumed
    deepspeed_checkpoints = True
    launch_modules = ("openrlhf.cli.train_ppo_ray",)
    console_log_format = "openrlhf-console"
    resume_state_folder = "_actor"  # --load_checkpoint: its DeepSpeed checkpoint checkpoints/_actor/global_step{N}

    def log_readers(self) -> dict[str, Any]:
        from rlexp.trainers.openrlhf.metrics import LOG_READERS

        return LOG_READERS

    def metric_vocabulary(self) -> Any:
        from rlexp.trainers.openrlhf.metrics import VOCABULARY

        return VOCABULARY

    @property
    def agent_api_since(self) -> str:  # type: ignore[override]
        from rlexp.trainers.openrlhf.checks import AGENT_API_SINCE

        return AGENT_API_SINCE

    def agentic_checks(self, env: Any, recipe: Recipe, version: str) -> list[Any]:  # type: ignore[override]
        from rlexp.trainers.openrlhf.checks import agentic_checks

        return agentic_checks(env, recipe, version)

    def group_of_one(self, recipe: Recipe, version: str) -> Any:  # type: ignore[override]
        from rlexp.trainers.openrlhf.checks import group_of_one

        return group_of_one(recipe, version)

    def run_health_checks(self, recipe: Recipe, version: str, env: Any = None) -> list[Any]:  # type: ignore[override]
        from rlexp.trainers.openrlhf.checks import run_health_checks

        return run_health_checks(recipe, version, env)

    def gpu_layout(self, recipe: Recipe) -> Any:  # type: ignore[override]
        from rlexp.trainers.openrlhf.checks import gpu_layout

        return gpu_layout(recipe)

    def gpu_layout_checks(self, att: Attempt) -> list[Any]:
        from rlexp.trainers.openrlhf.checks import gpu_layout_checks

        return gpu_layout_checks(att)

    def async_lag(self, recipe: Recipe) -> dict[str, Any]:  # type: ignore[override]
        # --async_train (--train.async_enable from 0.10.2; a recipe states it under its v0.9 name): the
        # sampler runs ahead of the trainer by up to --async_queue_size batches (cli/train_ppo_ray.py)
        return {"async": recipe.async_train, "queue": recipe.async_queue_size, "mode": "async sampler (queue)"}


RULES = OpenRLHFRules()
