"""OpenRLHF's launch: ``train_ppo_ray``'s argv for the release, the reward file, prompt copies
with their suffix, and its metrics through its stdout or its TensorBoard scalars."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import AttemptDir
from rlexp.models.base_models import loadable
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch, loss_recipe
from rlexp.trainers.openrlhf import RULES
from rlexp.trainers.openrlhf.files import OpenRLHFFiles

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


def training_data(att: Attempt, ad: AttemptDir, must_exist: bool = True) -> tuple[str, dict[str, tuple[Path, Path, str]]]:
    """The pool path for ``--prompt_data``. Prompts are stored without their suffix (the spec
    holds it), and OpenRLHF ignores ``--input_template`` under ``--apply_chat_template``, so a
    suffixed copy is written under ``launch/data/`` when a suffix is set — the hand-made
    ``*_boxed.jsonl`` copies of a real campaign, made reproducible."""
    pool = att.datasets.get("pool")
    if pool is None or pool.path is None:
        raise InputError(att.spec_path, "datasets.pool.path", "required to launch training")
    if must_exist and not pool.path.exists():
        raise InputError(pool.path, None, "training pool file not found")
    suffixed = {}
    for role in ("pool", "ood_monitor"):
        ref = att.datasets.get(role)
        if ref is not None and ref.path is not None and ref.prompt_suffix:
            suffixed[role] = (ref.path, OpenRLHFFiles.of(ad).suffixed_dataset(ref.path), ref.prompt_suffix)
    prompt_data = str(suffixed["pool"][1]) if "pool" in suffixed else str(pool.path)
    return prompt_data, suffixed


# The loss aggregation. OpenRLHF 0.11.2 has the flag (token-mean | seq-mean-token-mean, the KL loss
# token-mean either way); earlier releases apply token-mean, or seq-mean-token-mean for GSPO
# (PolicyLoss), normalised over the optimizer step from 0.10.4 on (utils/loss_utils.py's
# iter_grad_accum_global_norm) and within each micro-batch before it.
AGG_FLAG = "actor.loss_agg_mode"
STEP_NORMALISED_SINCE = (0, 10, 4)


def fixed_loss_agg(recipe: Any) -> str:
    """The aggregation of a release without the flag: GSPO's for a GSPO policy loss, else token-mean."""
    gspo = "gspo" in (recipe.get("policy_loss_type"), recipe.get("actor.policy_loss_type"))
    return "seq-mean-token-mean" if gspo else "token-mean"


class OpenRLHFLaunch(TrainerLaunch):
    rules = RULES

    def plan_details(self, att: Attempt, steps: Any) -> dict[str, Any]:
        from rlexp.trainers.openrlhf.argv import plan_train_command

        return {"openrlhf_command": plan_train_command(att)}

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """The release's flags, read from its flag table: ``--policy_loss_type gspo`` before 0.10.2,
        ``--actor.policy_loss_type gspo`` after, the clip range through ``eps_clip_low_high``, and
        ``loss_agg_mode seq-mean-token-mean`` where the release has the flag (GSPO forces that
        aggregation anyway)."""
        from rlexp.trainers.openrlhf.argv import load_flag_table

        if version is None:
            raise ValueError("openrlhf needs its release version")
        table = load_flag_table(version)

        def flag(name: str) -> str | None:
            for candidate in (f"--actor.{name}", f"--{name}"):
                if candidate in table:
                    return candidate
            return None

        loss_flag, clip_flag = flag("policy_loss_type"), flag("eps_clip_low_high")
        if loss_flag is None or "gspo" not in table.flags[loss_flag].choices or clip_flag is None:
            raise ValueError(f"OpenRLHF {version} has no GSPO policy loss")
        out: dict[str, Any] = {loss_flag: "gspo", clip_flag: [eps_low, eps_high]}
        agg = flag("loss_agg_mode")
        if agg is not None:
            out[agg] = "seq-mean-token-mean"
        return out

    def gspo_recipe(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """The flags of :meth:`gspo_settings` as recipe keys: the v0.9.x underscore name where the
        recipe table has one (``policy_loss_type`` for ``--actor.policy_loss_type``), else the dotted
        flag name (``actor.loss_agg_mode``)."""
        from rlexp.trainers.openrlhf.argv import DOTTED_NAMES

        underscore = {dotted: name for name, dotted in DOTTED_NAMES.items()}
        out = {}
        for flag, value in self.gspo_settings(version, eps_low, eps_high).items():
            name = flag.removeprefix("--")
            out[underscore.get(name, name)] = value
        return out

    def loss_agg_recipe(self, att: Attempt, mode: str, recipe: Any) -> dict[str, Any]:
        """``actor.loss_agg_mode`` where the release's parser has the flag (0.11.2: token-mean and
        seq-mean-token-mean), with the modes its choices list. A release without it applies one
        aggregation (:func:`fixed_loss_agg`): that mode is accepted and nothing written; before 0.10.4
        the token mean is each micro-batch's own, which no mode is, so any stated mode is refused."""
        from rlexp.trainers.openrlhf.argv import load_flag_table
        from rlexp.training.schedule import parse_version

        version = att.trainer.version
        flag = load_flag_table(version).flags.get(f"--{AGG_FLAG}")
        if flag is not None:
            if flag.choices and mode not in flag.choices:
                raise ValueError(f"OpenRLHF {version}'s --{AGG_FLAG} takes {', '.join(flag.choices)} only")
            return {AGG_FLAG: mode}
        if parse_version(version) < STEP_NORMALISED_SINCE:
            raise ValueError(f"OpenRLHF {version} divides each micro-batch's loss by that micro-batch's own count "
                             "(the optimizer step's from 0.10.4 on), which no mode is: leave loss_agg_mode unset")
        fixed = fixed_loss_agg(recipe)
        if mode != fixed:
            raise ValueError(f"OpenRLHF {version} has no --{AGG_FLAG} (0.11.2 has): it aggregates {fixed}")
        return {}

    def loss_agg_default(self, att: Attempt, recipe: Any) -> tuple[str, str]:
        from rlexp.training.schedule import parse_version

        kl = "the KL loss token-mean whatever the mode"
        if recipe.get(AGG_FLAG) is not None:
            return str(recipe[AGG_FLAG]), f"the recipe's {AGG_FLAG}; {kl}"
        fixed = fixed_loss_agg(recipe)
        if parse_version(att.trainer.version) < STEP_NORMALISED_SINCE:
            return (f"{fixed} per micro-batch", "OpenRLHF before 0.10.4 normalises each micro-batch by its own "
                                                f"count and divides by the accumulation steps; {kl}")
        return fixed, f"OpenRLHF's {'GSPO' if fixed != 'token-mean' else 'default'}, over the optimizer step; {kl}"

    def prepare(self, att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        from rlexp.trainers.openrlhf import argv as openrlhf

        reward_file = ad.launch.reward_func
        prompt_data, suffixed = training_data(att, ad, must_exist=must_exist)
        monitor = att.datasets.get("ood_monitor")
        eval_dataset = None
        if monitor is not None and monitor.path is not None:
            eval_dataset = str(suffixed["ood_monitor"][1]) if "ood_monitor" in suffixed else str(monitor.path)
        paths = openrlhf.AttemptPaths(
            pretrain=str(loadable(att.base_model(), att.spec_path)),  # a .gguf: its converted directory
            prompt_data=prompt_data,
            eval_dataset=eval_dataset,
            save_path=ad.final_model,
            ckpt_path=ad.checkpoint_files.dir,
            reward_file=reward_file,
            tensorboard_dir=ad.tensorboard,
        )
        # the keys some spec in the chain states (OpenRLHF's own defaults cover the rest), with
        # environment.loss gspo's and recipe.loss_agg_mode's flags (loss_recipe); what a release lacks
        # is build_train_argv's business (a planning-only key left out with a note, else an error)
        recipe = openrlhf.attempt_recipe(loss_recipe(att, att.recipe_stated or att.recipe), paths, resume=resume)
        adapters: dict = {}
        if att.environment is not None:  # an environment task: the agent file replaces the reward file
            from rlexp.trainers.openrlhf import agent

            recipe, adapters = agent.launch_files(att, recipe, OpenRLHFFiles.of(ad).agent_func)
            reward_file = None
        built = openrlhf.build_train_argv(recipe, att.trainer.version, spec_file=att.display_path or att.spec_path)
        return LaunchPlan(built.argv, reward_file=reward_file, suffixed=suffixed, dropped=built.dropped,
                          adapters=adapters)

    def write_files(self, plan: LaunchPlan) -> None:
        if plan.reward_file is not None:  # --remote_rm_url (an environment task's agent file grades itself)
            from rlexp.trainers.openrlhf.reward import write_reward_file

            write_reward_file(plan.reward_file)

    def resume_step(self, att: Attempt, ad: AttemptDir) -> int:
        latest = ad.checkpoint_files.latest_resume_state(self.rules)
        if latest is None and att.recipe.disable_ds_ckpt:
            # OpenRLHF keeps no resumable state at all: --resume would always start over
            raise InputError(ad.checkpoint_files.resume_state_dir(self.rules), None,
                             "no checkpoint to resume from (recipe.disable_ds_ckpt is set: OpenRLHF keeps no "
                             "resumable state)")
        return latest.step if latest is not None else 0  # none: killed before its first checkpoint

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        from rlexp.trainers.openrlhf.console import CONSOLE
        from rlexp.training import followers

        # the argv logs scalars under ATTEMPT/tensorboard (attempt_recipe: use_tensorboard)
        where = {"stdout": ad.launch.stdout_log, "tensorboard": ad.tensorboard}[source]
        return followers.MetricsFollower(source, where, ad.metrics, trainer=self.rules.name, console=CONSOLE)


LAUNCH = OpenRLHFLaunch()
