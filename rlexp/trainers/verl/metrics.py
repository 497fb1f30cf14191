"""verl's metric names -> rlexp's canonical names (rlexp.core.trainers.metric_names)."""

from __future__ import annotations

from rlexp.core.trainers.metric_names import COMMON, Vocabulary

# verl 0.9.1 (metric_utils.py, core_algos.py, workers) and older verl as users paste it
# (actor/lr(1e-4) scaled by 1e4, actor/entropy_loss, timing/*). kl: the KL loss to the reference
# when use_kl_loss, else the in-reward KL penalty.
NAMES: dict[str, tuple[str, ...]] = {
    **COMMON,
    "reward": ("critic/score/mean",),
    "actor_lr": ("actor/lr",),  # actor/lr(1e-4) arrives here unscaled, see SCALED_NAME
    "grad_norm": ("actor/grad_norm",),
    "policy_loss": ("actor/pg_loss",),
    "ppo_clip_ratio": ("actor/pg_clipfrac",),
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "ppo_kl": ("actor/ppo_kl",),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "response_length": ("response_length/mean",),
    "truncated": ("response_length/clip_ratio",),
    "step_time_s": ("timing_s/step", "timing/step"),
    "monitor_acc": ("val-core/rlexp_ood_monitor/acc/mean@1",),
}
# the monitor's metric is also kept under its own name; without timing/step, the phase timings
# add up to step_time_s
VOCABULARY = Vocabulary(NAMES, keep_source=("val-core/rlexp_ood_monitor/acc/mean@1",),
                        step_time_parts=("timing_s/", "timing/"))
