"""The local trainer on environment tasks: multi-turn trajectories, the agent mask, and GSPO.

A trajectory interleaves model tokens and environment tokens (rlexp.environments.interface). Training
on the environment's tokens — teaching the policy to *produce* tool output it was given — is the
classic bug of agentic RL; here every loss term goes through the agent mask:

- :func:`pack_trajectories` right-pads trajectories into ``input_ids`` / ``attention_mask`` and
  shifts the agent mask onto the positions that *predict* a token (``action_mask[i, t]`` is 1 where
  position ``t`` predicts a model token ``t + 1``), the same convention as the single-turn trainer;
- old, reference and current log-probs are computed over the full trajectories;
- the policy loss and the KL are masked means over those positions, so an environment position's
  log-prob receives exactly zero gradient (tests/test_env_trainer.py checks it, and that without
  the mask the policy learns to reproduce environment tokens).

Advantages: ``return`` (default) = the group-normalised episode return (GRPO's estimator, the
function the single-turn trainer uses) broadcast to the agent tokens; ``token_rewards`` = each
agent token's return-to-go (its turn's reward and every later one) minus the group's mean return,
scaled as ``return`` is (dense rewards; local trainer only — for external trainers a trajectory's
rewards are summed into its one scalar reward). An episode that ended in an environment error is
left out of the loss (its agent tokens leave the mask) and out of its group's baseline, and
counted (``env_error_episodes_masked``; ``env_errors`` is their share).

GSPO (:func:`rlexp.trainers.local.loss.gspo_loss`) replaces the token-level ratio by a
sequence-level one, with its own clip range; the losses and advantages are pure functions in
:mod:`rlexp.trainers.local.loss`, the options in :class:`rlexp.trainers.local.config.EnvTrainingOptions`.

The single-turn trainer (rlexp.trainers.local.train) is untouched by this module: its rollouts,
loss and metrics are computed by its own code, operation for operation as before.
"""

from __future__ import annotations

import time
from typing import Any

from rlexp.environments.interface import EnvRow, Trajectory, episode_metrics
from rlexp.trainers.local.config import EnvTrainingOptions
from rlexp.trainers.local.loss import loss_for, trajectory_advantages

# =============================================================================== packing (tensors)


def pack_trajectories(trajectories: list[Trajectory], pad: int):
    """Trajectories → ``(input_ids, attention_mask, action_mask, token_rewards)``.

    Rows are right-padded (position ids count real tokens, so padding changes nothing scored).
    ``action_mask`` and ``token_rewards`` have shape ``[N, T-1]``: entry ``t`` belongs to the token at
    ``t + 1`` — 1 where that token is a model token, and that token's reward.
    """
    import torch

    width = max(len(t.token_ids) for t in trajectories)
    ids, attn, action, rewards = [], [], [], []
    for t in trajectories:
        right = width - len(t.token_ids)
        ids.append(list(t.token_ids) + [pad] * right)
        attn.append([1] * len(t.token_ids) + [0] * right)
        action.append(list(t.agent_mask[1:]) + [0] * right)
        rewards.append(list(t.token_rewards[1:]) + [0.0] * right)
    return (
        torch.tensor(ids),
        torch.tensor(attn),
        torch.tensor(action, dtype=torch.float32),
        torch.tensor(rewards, dtype=torch.float32),
    )


# =============================================================================== rollouts


def collect_env_rollout(
    model, tokenizer, rows: list[EnvRow], cfg: Any, options: EnvTrainingOptions, *, seed: int,
    cache=None, reference=None, reward_of=None,
):
    """Play B × G episodes (``cfg.n_samples_per_prompt`` per row, ``cfg.temperature``), pack them,
    and precompute advantages and the old-policy and reference log-probs over the full
    trajectories; a :class:`~rlexp.trainers.local.train.Rollout` whose ``action_mask`` is the agent
    mask. ``stats`` holds the episode metrics. ``reward_of(row, trajectory)`` (a
    :class:`rlexp.environments.rewards.Combined`) is the episode's reward when ``environment.reward`` weighs
    its parts (:meth:`EnvTask.episode_reward`); None: the environment's return."""
    import torch

    from rlexp.environments.episodes import run_episodes
    from rlexp.trainers.local.loss import masked_mean
    from rlexp.trainers.local.train import Rollout, _logprobs_in_chunks, reference_logprobs

    G = cfg.n_samples_per_prompt
    started = time.perf_counter()
    played = run_episodes(
        model, tokenizer, rows, budgets=options.budgets, cache=cache, num_samples=G,
        temperature=cfg.temperature, seed=seed,
    )
    rollout_s = time.perf_counter() - started
    flat = [t for group in played for t in group]
    device = next(model.parameters()).device
    input_ids, attention_mask, action_mask, token_rewards = (
        x.to(device) for x in pack_trajectories(flat, tokenizer.pad_token_id)
    )
    # the reward the eval gives the same episode (rlexp.environments.rewards.episode_reward), or the return
    composed = [[reward_of(row, t) if reward_of is not None else None for t in group]
                for row, group in zip(rows, played, strict=True)]
    pairs = [list(zip(group, rs, strict=True)) for group, rs in zip(played, composed, strict=True)]
    returns = torch.tensor([[t.episode_return if r is None else (r.value or 0.0) for t, r in group] for group in pairs],
                           dtype=torch.float32, device=device)
    # an episode that ended in an environment error, or whose reward could not be composed (a
    # judge_error, no weighted part applying to its row), says nothing about the policy: out of its
    # group's baseline and out of the loss (its agent tokens leave the mask), counted in the stats
    failed = sum(1 for group in pairs for _, r in group if r is not None and r.error is not None)
    valid = torch.tensor([[t.finish_reason != "env_error" and (r is None or r.error is None) for t, r in group]
                          for group in pairs], device=device)
    played_mask, action_mask = action_mask, action_mask * valid.reshape(-1, 1).to(action_mask.dtype)
    advantages = trajectory_advantages(
        returns, action_mask, token_rewards, estimator=cfg.advantage_estimator, mode=options.advantage_mode,
        valid=valid,
    )
    with torch.no_grad():
        old_logp, entropy = _logprobs_in_chunks(model, input_ids, attention_mask, cfg.micro_train_batch_size)
        ref_logp = reference_logprobs(model, input_ids, attention_mask, cfg.micro_train_batch_size, reference)
    stats = {
        "reward": returns.mean().item(),
        "group_reward_std": returns.std(dim=-1).nan_to_num(0.0).mean().item() if G > 1 else 0.0,
        "response_length": float(played_mask.sum(-1).mean().item()),
        "entropy": masked_mean(entropy, action_mask).item(),
        "rollout_s": rollout_s,
        **episode_metrics(flat),
        "env_error_episodes_masked": float(sum(t.finish_reason == "env_error" for t in flat)),
        **({"reward_error_episodes_masked": float(failed)} if reward_of is not None else {}),
    }
    rollout = Rollout(input_ids, attention_mask, action_mask, returns, advantages, old_logp, ref_logp, stats)
    return rollout, played


# =============================================================================== the local trainer's hook


class EnvTask:
    """What ``train()`` of the local trainer uses on an environment task (``cfg.environment``, a
    rlexp.spec.EnvironmentSettings): the rows of each step's problems, one slot cache for the
    whole run (each environment built once, reset between episodes), the rollout, the loss, the
    monitor's greedy success."""

    def __init__(self, cfg: Any, options: EnvTrainingOptions, where: str | None = None,
                 attempt_dir: Any = None) -> None:
        from rlexp.environments.episode_rewards import judge_of, reward_weights
        from rlexp.environments.episodes import SlotCache

        self.cfg, self.options, self.where = cfg, options, where
        self.cache = SlotCache(str(cfg.pool_path))
        self.loss = loss_for(options)
        # environment.reward: the eval's mix, applied to every training episode (episode_reward)
        self.weights = reward_weights(cfg.environment) if cfg.environment is not None else {}
        self.judge = None
        if "judge" in self.weights:
            from rlexp.experiment.layout import AttemptDir

            if attempt_dir is None:
                raise ValueError("a judge-weighted reward needs the attempt directory (its judge cache)")
            ad = AttemptDir(attempt_dir)
            self.judge = judge_of(cfg.environment, ad.launch.training_judge_cache, ad.launch.training_judge_log)

    def episode_reward(self, row: EnvRow, trajectory: Trajectory) -> Any:
        """The episode's reward under ``environment.reward`` — the eval's rule (the parts that apply to
        the row, combined), with the judge asked about the final model turn as the eval asks; None
        when no weights are stated (the environment's return)."""
        from functools import partial

        from rlexp.environments.rewards import episode_reward

        if not self.weights:
            return None
        output = trajectory.turns[-1].action if trajectory.turns else ""  # the eval record's output
        judge = None if self.judge is None else partial(
            self.judge.score, str(row.task.get("prompt", "")), output, reference=str(row.task.get("answer")))
        retrieved = [str(d) for turn in trajectory.turns for d in turn.info.get("retrieved") or ()]
        return episode_reward(self.weights, row.task, episode_return=trajectory.episode_return, retrieved=retrieved,
                              judge=judge)

    @classmethod
    def from_config(cls, cfg: Any, where: Any = None, attempt_dir: Any = None) -> EnvTask:
        from rlexp.environments.interface import budgets_of, resolve
        from rlexp.errors import InputError

        settings = cfg.environment
        try:
            resolve(settings.name)
        except InputError as exc:
            raise InputError(where, "environment.name", exc.message) from None
        options = EnvTrainingOptions(budgets=budgets_of(settings), loss_type=settings.loss,
                                     advantage_mode=settings.advantage_mode, gspo_eps_low=settings.gspo_eps_low,
                                     gspo_eps_high=settings.gspo_eps_high)  # fmt: skip
        return cls(cfg, options, None if where is None else str(where), attempt_dir)

    def rows(self, problems: list[dict], suffix: str, path: Any) -> list[EnvRow]:
        from rlexp.environments.interface import rows_for_task

        return rows_for_task(problems, self.cfg.environment, prompt_suffix=suffix, where=str(path))

    def rollout(self, model, tokenizer, problems: list[dict], *, seed: int, reference=None):
        rows = self.rows(problems, self.cfg.prompt_suffix, self.cfg.pool_path)
        rollout, _ = collect_env_rollout(model, tokenizer, rows, self.cfg, self.options, seed=seed,
                                         cache=self.cache, reference=reference,
                                         reward_of=self.episode_reward if self.weights else None)  # fmt: skip
        return rollout

    def monitor_success(self, model, tokenizer, problems: list[dict]) -> float:
        """Greedy episodes on the in-run monitor set: the share that succeed (reward >= threshold, the
        reward as the eval composes it; a reward that failed is no success, as in the eval)."""
        from rlexp.environments.episodes import run_episodes

        rows = self.rows(problems, self.cfg.monitor_suffix, self.cfg.monitor_path)
        played = run_episodes(model, tokenizer, rows, budgets=self.options.budgets, cache=self.cache,
                              temperature=0.0)  # fmt: skip
        threshold = self.cfg.environment.success_threshold

        def success(row: EnvRow, t: Trajectory) -> bool:
            combined = self.episode_reward(row, t)
            value = t.episode_return if combined is None else combined.value
            return value is not None and value >= threshold

        hits = sum(1 for row, (t,) in zip(rows, played, strict=True) if success(row, t))
        return hits / len(rows) if rows else 0.0


# =============================================================================== entry point


def main(argv: list[str] | None = None) -> int:
    """``python -m rlexp.backends.env_trainer ATTEMPT_DIR [--resume]``: the local trainer on the
    attempt's environment task (what ``rlexp launch --backend local`` runs for one)."""
    from rlexp.trainers.local.launch import ENV_TRAINER_MODULE
    from rlexp.trainers.local.train import run_trainer

    def task_of(att, cfg):
        from rlexp.errors import InputError

        if att.environment is None:
            raise InputError(att.spec_path, "environment", "missing: this attempt has no environment task")
        return EnvTask.from_config(cfg, att.spec_path, att.attempt_dir)

    return run_trainer(f"python -m {ENV_TRAINER_MODULE}", main.__doc__, argv, task_of)


