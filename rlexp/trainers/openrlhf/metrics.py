"""OpenRLHF's metric names -> rlexp's canonical names (rlexp.core.trainers.metric_names)."""

from __future__ import annotations

from rlexp.core.trainers.metric_logs import read_openrlhf_console
from rlexp.core.trainers.metric_names import COMMON, Ratio, Vocabulary

# OpenRLHF 0.9.3-0.11.2: the "Global step" dict (experience info + actor status), 0.11's
# rollout/* stats (ppo_trainer.py), timing/step_total (0.10+), and the tqdm postfix of the actor's
# "Train epoch" bar (ray/ppo_actor.py short_status: act_loss, gen_len, act_lr, ent_loss, ...)
NAMES: dict[str, tuple[str, ...]] = {
    **COMMON,
    "policy_loss": ("policy_loss", "act_loss"),
    "actor_lr": ("actor_lr", "act_lr"),
    "reward": ("reward", "rollout/reward_mean"),
    "response_length": ("response_length", "rollout/response_length_mean", "gen_len"),
    "truncated": ("truncated", "rollout/truncated_rate"),
    "kl": ("kl",),
    "ppo_kl": ("ppo_kl",),
    "entropy": ("entropy", "entropy_loss", "ent_loss"),
    "step_time_s": ("step_time_s", "timing/step_total", "step_time", "time/step"),
    # training-inference mismatch (rlexp.core.run_health), logged when the vLLM importance-sampling
    # correction is on: models/loss.py returns vllm_kl = masked_mean(rollout_log_probs - old_log_probs)
    # (every release 0.9.3-0.11.2) and, from 0.11, the filtered share (is_filter_ratio); ppo_actor.py
    # puts both into experience.info, averaged into the "Global step" dict
    "rollout_kl": ("vllm_kl",),
    "rollout_is_filtered": ("is_filter_ratio",),
}

# Agentic runs: rlexp's agent file (rlexp.trainers.openrlhf.agent) returns the local trainer's
# per-episode values as extra_logs; OpenRLHF averages each over the batch's samples into the
# "Global step" dict under its own key (samples_generator/experience_maker
# _process_response_into_experience -> experience.info; ray/ppo_actor.py ppo_train), so
# turns_per_episode, tool_calls_per_episode, env_errors, episode_return and finish_* arrive under
# the local trainer's names. Its two ratios of sums arrive as the means of their parts.
RATIOS = {
    "agent_token_fraction": Ratio("agent_tokens_per_episode", "generated_tokens_per_episode"),
    "env_latency_s": Ratio("env_latency_s_per_episode", "turns_per_episode"),
}

VOCABULARY = Vocabulary(NAMES, ratios=RATIOS)

# ``rlexp ingest``'s formats of its own (its rules' log_readers): its console log, ``Global step N: {...}``
LOG_READERS = {"openrlhf-console": read_openrlhf_console}
