"""TRL's launch: the generated training script run by ``.venv-trl``'s Python, followed through
transformers' TensorBoard callback (TRL's metric names mapped)."""

from __future__ import annotations

from typing import Any

from rlexp.storage.layout import AttemptDir
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch, loss_recipe
from rlexp.trainers.trl import RULES


class TrlLaunch(TrainerLaunch):
    rules = RULES

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """GRPOConfig's sequence-level importance sampling with ``loss_type="grpo"`` (TRL's default
        ``dapo`` aggregates differently and is not GSPO) and its ``epsilon``/``epsilon_high``."""
        return {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": eps_low,
                "epsilon_high": eps_high}  # fmt: skip

    def plan_details(self, att: Any, steps: Any) -> dict[str, Any]:
        env = getattr(att, "environment", None)
        if env is not None and env.actions == "tool_calls":  # what TRL's tool loop cannot serve: exit 2 here
            from rlexp.trainers.trl.agent import environment_imports
            from rlexp.trainers.trl.agent_tools import check_tool_recipe, tool_tables

            check_tool_recipe(att, loss_recipe(att, att.recipe_stated or {}))
            tool_tables(att, environment_imports(att))
        elif env is not None:  # what the rollout adapter cannot serve: exit 2 here
            from rlexp.trainers.trl.agent import check_recipe

            check_recipe(att, loss_recipe(att, att.recipe_stated or {}))
        return {"trl": steps.as_dict()}  # TRL's step quantities (rlexp.trainers.trl.steps)

    def prepare(self, att: Any, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        from rlexp.trainers.trl.script import prepare_launch

        built = prepare_launch(att, ad, resume=resume, must_exist=must_exist)
        return LaunchPlan(built.argv, files={built.script: built.script_text}, adapters=dict(built.adapters))

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        from rlexp.adapters import ingest

        return ingest.MetricsFollower("tensorboard", ad.tensorboard, ad.metrics, trainer=self.rules.name)

    def provenance_extra(self, argv: list[str]) -> dict[str, Any]:
        # TRL runs in .venv-trl, whose versions the main venv cannot see
        from rlexp.trainers.trl.fields import TRANSFORMERS_VERSION, TRL_VERSION

        return {"trl_venv": {"python": argv[0], "trl": TRL_VERSION, "transformers": TRANSFORMERS_VERSION}}


LAUNCH = TrlLaunch()
