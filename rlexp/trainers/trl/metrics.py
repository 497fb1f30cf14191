"""TRL's metric names -> rlexp's canonical names (rlexp.training.metric_names)."""

from __future__ import annotations

from rlexp.training.metric_names import COMMON, Vocabulary

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
    # training-inference mismatch (rlexp.protocol.run_health), logged when vllm_importance_sampling_correction
    # is on (grpo_trainer.py: |old_per_token_logps - sampling_per_token_logps| over the completion mask,
    # and the IS ratio's min/mean/max)
    "rollout_logp_diff_mean": ("sampling/sampling_logp_difference/mean",),
    "rollout_logp_diff_max": ("sampling/sampling_logp_difference/max",),
    "rollout_is_mean": ("sampling/importance_sampling_ratio/mean",),
    "rollout_is_min": ("sampling/importance_sampling_ratio/min",),
    "rollout_is_max": ("sampling/importance_sampling_ratio/max",),
}

VOCABULARY = Vocabulary(NAMES)
