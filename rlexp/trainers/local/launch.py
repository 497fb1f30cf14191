"""The local trainer's launch: ``python -m rlexp.backends.local_trainer ATTEMPT`` (or the
environment trainer for an environment task); it appends ``metrics.jsonl`` itself."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rlexp.experiment.layout import AttemptDir
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch
from rlexp.trainers.local import RULES

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

# the modules a launch runs: their names are recorded in every launch's argv.json, so they stay
# (thin entries that call rlexp.trainers.local.train and env_train) for old attempts to resume
LOCAL_TRAINER_MODULE = "rlexp.backends.local_trainer"
# an attempt with an environment task (rlexp.spec.EnvironmentSettings): the same trainer,
# entered through the module that adds episodes, the agent mask and GSPO (docs/environments.md)
ENV_TRAINER_MODULE = "rlexp.backends.env_trainer"


class LocalLaunch(TrainerLaunch):
    rules = RULES

    def prepare(self, att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        # absolute: a Ray job runs in the head's working directory; sys.executable: the Python
        # that has rlexp and the trainer's stack (docs/launch.md, "The job's Python")
        module = LOCAL_TRAINER_MODULE if att.environment is None else ENV_TRAINER_MODULE
        return LaunchPlan([sys.executable, "-m", module, str(ad.root.resolve())] + (["--resume"] if resume else []))

    def loss_agg_recipe(self, att: Attempt, mode: str, recipe: Any) -> dict[str, Any]:
        """Every mode, exactly, whatever the micro-batch size (rlexp.trainers.local.loss.aggregate):
        the trainer reads ``loss_agg_mode`` itself."""
        return {"loss_agg_mode": mode}

    def loss_agg_default(self, att: Attempt, recipe: Any) -> tuple[str, str]:
        env = att.environment
        if env is not None and env.loss == "gspo":
            return "seq-mean-token-mean", "GSPO's own aggregation; the KL term token-mean (as OpenRLHF)"
        return "token-mean", "the token mean of the optimizer step (as OpenRLHF from 0.10.4), the KL term too"

    def loss_token_budget(self, att: Attempt) -> int | None:
        """The agent tokens one episode may hold (``environment.max_total_tokens``), else the
        completion budget ``generate_max_len``."""
        from rlexp.trainers.local.config import loss_token_budget

        return loss_token_budget(att.recipe.generate_max_len, att.environment)

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        from rlexp.training import followers

        # the local trainer writes metrics.jsonl itself; rows up to the resume point are known
        return followers.MetricsFileFollower(ad.metrics, after_step=resume_step)


LAUNCH = LocalLaunch()
