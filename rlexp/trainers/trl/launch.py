"""TRL's launch: the generated training script run by ``.venv-trl``'s Python, followed through
transformers' TensorBoard callback (TRL's metric names mapped). The script runs the trainer the
recipe's ``advantage_estimator`` names: GRPOTrainer, or RLOOTrainer (whose loss has no ``loss_type``
and which takes no ``rollout_func``: those settings are refused for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.experiment.layout import AttemptDir
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch, loss_recipe
from rlexp.trainers.trl import RULES
from rlexp.trainers.trl.keys import ASYNC_GRPO, estimator_of

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

# the modes GRPOTrainer's loss types aggregate by exactly (TRL 1.16's _compute_loss; tests/test_loss_aggregation.py
# runs it); with GSPO's sequence-level ratio TRL takes grpo only (GRPOConfig refuses bnpo, dr_grpo, dapo)
# RLOOTrainer._compute_loss (TRL 1.16): one term per sequence, not per token
RLOO_LOSS = ("its loss is the micro-batch's mean over sequences of the clipped sequence-level ratio (the sum of the "
             "tokens' log-ratios) times the advantage")
# AsyncGRPOTrainer.compute_loss (TRL 1.16): a micro-batch's clipped token terms summed over the trained tokens of
# that micro-batch on all processes, over gradient_accumulation_steps
ASYNC_GRPO_LOSS = ("its loss is each micro-batch's token mean (its tokens' clipped terms over the micro-batch's trained "
                   "tokens on all processes), averaged over the optimizer step's micro-batches")
TRL_LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}


class TrlLaunch(TrainerLaunch):
    rules = RULES

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """GRPOConfig's sequence-level importance sampling with ``loss_type="grpo"`` (TRL's default
        ``dapo`` aggregates differently and is not GSPO) and its ``epsilon``/``epsilon_high``."""
        return {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": eps_low,
                "epsilon_high": eps_high}  # fmt: skip

    def loss_agg_recipe(self, att: Attempt, mode: str, recipe: Any) -> dict[str, Any]:
        """GRPOTrainer's ``loss_type`` whose aggregation (``_compute_loss``) is exactly the mode:
        ``dapo`` divides by the generation batch's tokens, the step's when ``steps_per_generation``
        equals ``gradient_accumulation_steps``; ``grpo`` and ``dr_grpo`` divide by the completions
        of each micro-batch, every one of them, so a completion whose tokens are all masked
        (``mask_truncated_completions``) would count where the modes count only sequences that
        hold a token. ``bnpo`` (each micro-batch's token mean) and ``seq-mean-token-sum`` have none."""
        version = att.trainer.version
        if att.recipe.estimator == "rloo":
            raise ValueError(f"TRL {version}'s RLOOTrainer has no loss_type: {RLOO_LOSS}, which none of the modes is")
        if att.recipe.estimator == ASYNC_GRPO:
            raise ValueError(f"TRL {version}'s AsyncGRPOTrainer has no loss_type: {ASYNC_GRPO_LOSS}, which none of the "
                             "modes is exactly")
        loss_type = TRL_LOSS_TYPES.get(mode)
        if loss_type is None:
            spelled = ", ".join(f"{t} = {m}" for m, t in TRL_LOSS_TYPES.items())
            raise ValueError(f"TRL {version}'s loss_type has no such aggregation ({spelled})")
        resolved = {**att.recipe, **recipe}
        if mode == "token-mean":
            steps = self.rules.steps(att)
            if steps.steps_per_generation != steps.gradient_accumulation_steps:
                raise ValueError(f"TRL {version}'s dapo divides by the tokens of a generation batch × "
                                 "gradient_accumulation_steps / steps_per_generation, the optimizer step's own only "
                                 f"when steps_per_generation ({steps.steps_per_generation}) equals "
                                 f"gradient_accumulation_steps ({steps.gradient_accumulation_steps})")
        elif resolved.get("mask_truncated_completions"):
            raise ValueError(f"TRL {version}'s {loss_type} counts a completion that mask_truncated_completions "
                             "masks whole among the sequences, which the mode does not")
        return {"loss_type": loss_type}

    def loss_agg_default(self, att: Attempt, recipe: Any) -> tuple[str, str]:
        if estimator_of(recipe) == "rloo":
            return "TRL RLOO sequence mean", f"TRL's RLOOTrainer: {RLOO_LOSS}, which none of the modes is"
        if estimator_of(recipe) == ASYNC_GRPO:
            return ("TRL AsyncGRPO micro-batch token mean",
                    f"TRL's AsyncGRPOTrainer: {ASYNC_GRPO_LOSS}, which none of the modes is exactly")
        loss_type = str(recipe["loss_type"])  # the resolved recipe with the loss rewrite over it (a dict)
        mode = {t: m for m, t in TRL_LOSS_TYPES.items()}.get(loss_type)
        if mode is None:
            return f"TRL loss_type {loss_type}", f"TRL's {loss_type}, which none of the modes is exactly"
        return mode, f"TRL's loss_type {loss_type} (the KL term too)"

    def loss_token_budget(self, att: Attempt) -> int | None:
        """``max_completion_length``: the constant TRL's ``dr_grpo`` divides by."""
        value = att.recipe.max_completion_length
        return int(value) if value is not None else None

    def plan_details(self, att: Attempt, steps: Any) -> dict[str, Any]:
        env = att.environment
        if env is not None and att.recipe.estimator == ASYNC_GRPO:
            from rlexp.errors import InputError

            raise InputError(att.display_path or att.spec_path, "environment",
                             f"rlexp plans TRL {att.trainer.version}'s AsyncGRPOTrainer from a script of one's own "
                             "and does not launch it: an environment task runs on advantage_estimator grpo")
        if env is not None and att.recipe.estimator == "rloo":
            from rlexp.errors import InputError

            raise InputError(att.display_path or att.spec_path, "environment",
                             f"TRL {att.trainer.version}'s RLOOTrainer takes no rollout_func nor environment_factory "
                             "(GRPOTrainer does): an environment task runs on advantage_estimator grpo")
        if env is not None and env.actions == "tool_calls":  # what TRL's tool loop cannot serve: exit 2 here
            from rlexp.trainers.trl.agent import environment_imports
            from rlexp.trainers.trl.agent_tools import check_tool_recipe, tool_tables

            check_tool_recipe(att, loss_recipe(att, att.recipe_stated))
            tool_tables(att, environment_imports(att))
        elif env is not None:  # what the rollout adapter cannot serve: exit 2 here
            from rlexp.trainers.trl.agent import check_recipe

            check_recipe(att, loss_recipe(att, att.recipe_stated))
        return {"trl": steps.as_dict()}  # TRL's step quantities (rlexp.trainers.trl.steps)

    def prepare(self, att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        from rlexp.trainers.trl.script import prepare_launch

        built = prepare_launch(att, ad, resume=resume, must_exist=must_exist)
        return LaunchPlan(built.argv, files={built.script: built.script_text}, adapters=dict(built.adapters))

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        from rlexp.training import followers

        return followers.MetricsFollower("tensorboard", ad.tensorboard, ad.metrics, trainer=self.rules.name)

    def provenance_extra(self, argv: list[str]) -> dict[str, Any]:
        # TRL runs in .venv-trl, whose versions the main venv cannot see
        from rlexp.trainers.trl.fields import TRANSFORMERS_VERSION, TRL_VERSION

        return {"trl_venv": {"python": argv[0], "trl": TRL_VERSION, "transformers": TRANSFORMERS_VERSION}}


LAUNCH = TrlLaunch()
