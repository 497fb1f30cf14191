"""verl's plan and launch: its own plan.json (rlexp.trainers.verl.plan), the Hydra argv,
its data rows and reward file, its file logger's path in the environment, and ``--resume`` from
its latest save (``resume_mode: auto``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.experiment.layout import AttemptDir
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch
from rlexp.trainers.verl import RULES
from rlexp.trainers.verl.files import VerlFiles
from rlexp.trainers.verl.recipe import as_verl_recipe

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

AGG_KEY = "actor_rollout_ref.actor.loss_agg_mode"
SCALE_KEY = "actor_rollout_ref.actor.loss_scale_factor"


class VerlLaunch(TrainerLaunch):
    rules = RULES

    def own_plan(self, att: Attempt, plan_format: int) -> dict[str, Any] | None:
        from rlexp.trainers.verl.plan import build_verl_plan

        return build_verl_plan(att, plan_format)

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """verl's policy loss mode ``gspo`` with the sequence-mean aggregation and its clip ratios."""
        return {
            "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
            AGG_KEY: "seq-mean-token-mean",
            "actor_rollout_ref.actor.clip_ratio_low": eps_low,
            "actor_rollout_ref.actor.clip_ratio_high": eps_high,
        }

    def loss_agg_recipe(self, att: Attempt, mode: str, recipe: Any) -> dict[str, Any]:
        """verl's ``actor.loss_agg_mode`` has every mode (its KL loss follows it); Dr. GRPO's constant
        is ``loss_scale_factor`` (unset, verl divides by each micro-batch's padded response length)."""
        out: dict[str, Any] = {AGG_KEY: mode}
        if mode == "seq-mean-token-sum-norm":
            out[SCALE_KEY] = self.loss_token_budget(att)
        return out

    def loss_agg_default(self, att: Attempt, recipe: Any) -> tuple[str, str]:
        actor = as_verl_recipe(recipe).actor_rollout_ref.actor
        mode = str(actor.loss_agg_mode)
        note = f"verl's {AGG_KEY} (the KL loss too)"
        if mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor is None:
            note += "; L: each micro-batch's padded response length (loss_scale_factor unset)"
        return mode, note

    def loss_token_budget(self, att: Attempt) -> int | None:
        """``data.max_response_length``: the response length verl pads and truncates to."""
        return int(as_verl_recipe(att.recipe).data.max_response_length)

    def prepare(self, att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        from rlexp.trainers.verl import hydra as verl

        built = verl.prepare_launch(att, resume=resume, must_exist=must_exist)
        adapters: dict = {}
        if att.environment is not None:  # an environment task: the generated agent loop
            from rlexp.trainers.verl import agent

            built, adapters = agent.launch_files(att, built, VerlFiles.of(ad).agent_loop_dir)
        return LaunchPlan(built.argv, reward_file=built.reward_file, env=built.env, own=built, adapters=adapters)

    def write_files(self, plan: LaunchPlan) -> None:
        # verl reads its own row format and calls compute_score
        from rlexp.trainers.verl.hydra import write_verl_dataset
        from rlexp.trainers.verl.reward import write_verl_reward_file

        for source, target, suffix, data_source in plan.own.datasets:
            write_verl_dataset(source, target, suffix, data_source)
        write_verl_reward_file(plan.reward_file)

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        from rlexp.trainers.verl.file_logger import follower

        return follower(VerlFiles.of(ad).metrics, ad.metrics)  # its file logger: one JSON line per step


LAUNCH = VerlLaunch()
