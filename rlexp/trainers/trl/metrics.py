"""TRL's metric names -> rlexp's canonical names (rlexp.core.trainers.metric_names)."""

from __future__ import annotations

from rlexp.core.trainers.metric_names import COMMON, Vocabulary

# TRL 1.16 GRPOTrainer (self._metrics + transformers' loss/grad_norm/learning_rate) and older
# TRL's completion_length; "loss" is the policy loss only where no policy_loss is logged
NAMES: dict[str, tuple[str, ...]] = {
    **COMMON,
    "actor_lr": ("learning_rate",),
    "response_length": ("completions/mean_length", "completion_length"),
    "truncated": ("completions/clipped_ratio",),
    "group_reward_std": ("reward_std",),
    "ppo_clip_ratio": ("clip_ratio/region_mean", "clip_ratio"),
    "policy_loss": ("policy_loss", "loss"),
}

VOCABULARY = Vocabulary(NAMES)
