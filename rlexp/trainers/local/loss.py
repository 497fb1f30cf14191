"""The local trainer's loss, pure functions of tensors (core layer: no model, no file).

GRPO (:func:`group_advantages`, :func:`policy_loss`, :func:`k3_kl`, :func:`grpo_loss`) with
OpenRLHF's semantics, which the correctness gates in tests/test_grpo.py hit directly; on environment
trajectories, the advantages over the agent mask (:func:`trajectory_advantages`) and GSPO (Zheng et
al. 2025, "Group Sequence Policy Optimization": :func:`gspo_policy_loss`, :func:`gspo_loss`), which
tests/test_env_trainer.py checks; :func:`loss_for` picks the one an environment task trains with.

GSPO replaces the token-level ratio by a sequence-level one, ``s_i = exp(mean over agent tokens of
(log π − log π_old))``, clipped with its own, much smaller range, and aggregates by sequence (token
mean within a sequence, then mean over sequences). :func:`gspo_policy_loss` computes it in the
per-token form ``exp(sg[log s_i] + log π_t − sg[log π_t])``: the same value as ``s_i`` at every
token, and the same gradient as the sequence form when the advantage is the sequence's
(``s_i · A_i · mean_t ∇log π_t``) — and with per-token advantages it stays defined. With one agent
token per sequence it is PPO's token-level loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlexp.spec.recipe import GSPO_LOSS_AGG, LOSS_AGG_MODES

if TYPE_CHECKING:
    import torch

    from rlexp.trainers.local.config import EnvTrainingOptions


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the positions where ``mask`` is 1 (OpenRLHF's token-level loss, ``dim=None``)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


# The trainers' loss aggregations (verl's ``loss_agg_mode`` names; their formulas in rlexp.spec.recipe,
# where the recipe key is declared)
AGG_MODES = LOSS_AGG_MODES


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    step_mask: torch.Tensor | None = None,
    max_tokens: int | None = None,
) -> torch.Tensor:
    """``per_token`` (rows of one micro-batch, ``mask`` its agent tokens) aggregated by ``mode``
    with the denominators of the whole optimizer step, whose mask is ``step_mask`` (``mask`` itself
    when None). The micro-batches' results sum to the step's loss exactly, whatever the micro-batch
    size: the numerators are summed, the step is normalised once."""
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r} (one of {', '.join(AGG_MODES)})")
    whole = mask if step_mask is None else step_mask
    masked = per_token * mask
    if mode == "token-mean":
        return masked.sum() / whole.sum().clamp(min=1)
    sequences = (whole.sum(-1) > 0).sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / sequences
    if mode == "seq-mean-token-sum":
        return masked.sum() / sequences
    if max_tokens is None or max_tokens < 1:
        raise ValueError("seq-mean-token-sum-norm needs the token budget (max_tokens >= 1)")
    return masked.sum() / (sequences * max_tokens)


def group_advantages(rewards: torch.Tensor, estimator: str) -> torch.Tensor:
    """Advantages from rewards of shape ``[B, G]`` (B prompts × G samples each).

    ``group_norm`` (GRPO): ``(r − mean_g) / (std_g + 1e-9)`` with the unbiased std (torch's, as
    OpenRLHF); ``dr_grpo``: ``r − mean_g`` (Dr. GRPO drops the std). A group of one sample has no
    baseline to compare to: its advantage is 0 (not NaN).
    """
    import torch

    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    if estimator == "dr_grpo":
        return centred
    if estimator != "group_norm":
        raise ValueError(f"unknown advantage estimator {estimator!r}")
    if rewards.shape[-1] < 2:
        return torch.zeros_like(rewards)
    return centred / (rewards.std(dim=-1, keepdim=True) + 1e-9)


def policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, eps_clip: float,
    *, step_mask: torch.Tensor | None = None, agg: str = "token-mean", max_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, token level: ``−min(r·A, clip(r, 1−ε, 1+ε)·A)``, aggregated by ``agg``
    (token-mean unless stated) over the optimizer step whose mask is ``step_mask`` (:func:`aggregate`);
    returns ``(loss, clip_fraction)``. ``advantages`` are per token (a sequence's advantage broadcast)."""
    import torch

    ratio = torch.exp(logp - old_logp)
    surrogate = ratio * advantages
    clipped = ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip) * advantages
    loss = aggregate(-torch.min(surrogate, clipped), mask, agg, step_mask=step_mask, max_tokens=max_tokens)
    clip_fraction = masked_mean((clipped < surrogate).float(), mask)
    return loss, clip_fraction.detach()


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy ‖ reference) per token: ``e^x − 1 − x`` with
    ``x = log π_ref − log π``; non-negative, zero exactly when the two agree."""
    import torch

    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - 1.0 - log_ratio


@dataclass(frozen=True)
class LossParts:
    loss: torch.Tensor  # what backward() is called on
    policy_loss: torch.Tensor
    kl: torch.Tensor
    clip_fraction: torch.Tensor


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_clip: float,
    kl_coef: float,
    step_mask: torch.Tensor | None = None,
    agg: str | None = None,
    max_tokens: int | None = None,
) -> LossParts:
    """The actor loss: clipped policy loss + ``kl_coef`` × the k3 KL to the reference (OpenRLHF's
    ``use_kl_loss`` form), both aggregated by ``agg`` (verl aggregates its KL loss by the policy
    loss's mode; None: token-mean, OpenRLHF's); ``max_tokens``: Dr. GRPO's constant for
    ``seq-mean-token-sum-norm``. ``kl_coef == 0`` removes the KL term from the graph.
    ``step_mask``: the optimizer step's whole mask, when these rows are one micro-batch of it."""
    mode = agg or "token-mean"
    pg, clip_fraction = policy_loss(logp, old_logp, advantages, mask, eps_clip, step_mask=step_mask, agg=mode,
                                    max_tokens=max_tokens)  # fmt: skip
    kl = aggregate(k3_kl(logp, ref_logp), mask, mode, step_mask=step_mask, max_tokens=max_tokens)
    loss = pg + kl_coef * kl if kl_coef != 0 else pg
    return LossParts(loss=loss, policy_loss=pg.detach(), kl=kl.detach(), clip_fraction=clip_fraction)


# =============================================================================== environment trajectories


def trajectory_advantages(
    returns: torch.Tensor, action_mask: torch.Tensor, token_rewards: torch.Tensor, *, estimator: str, mode: str,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-position advantages ``[N, T-1]`` (zero off the agent mask). ``returns`` is ``[B, G]``,
    rows of ``action_mask`` are ordered prompt-major like it.

    ``valid`` (``[B, G]`` bools, default all): an episode marked False (it ended in an environment
    error) is out of its group's baseline and gets advantage 0; the caller also drops it from the
    loss's mask. ``return``: the group advantage of the episode return, on every agent token.
    ``token_rewards``: the return-to-go of each agent token (its own reward and every later one)
    minus the group's mean episode return, divided by the group's std for ``group_norm`` (the same
    baseline and scale as ``return``, so an episode rewarded only at its end gets the same
    advantage in both modes)."""
    import torch

    if valid is None:
        valid = torch.ones_like(returns, dtype=torch.bool)
    if mode == "return":
        seq = episode_advantages(returns, estimator, valid).reshape(-1, 1)
        return seq.expand_as(action_mask) * action_mask
    if mode == "token_rewards":
        agent_rewards = token_rewards * action_mask
        to_go = agent_rewards.flip(-1).cumsum(-1).flip(-1)
        mean, scale, usable = group_baseline(returns, estimator, valid)
        centred = (to_go - mean.reshape(-1, 1)) / scale.reshape(-1, 1)
        return centred * usable.reshape(-1, 1) * action_mask
    raise ValueError(f"unknown advantage mode {mode!r}")


def episode_advantages(returns: torch.Tensor, estimator: str, valid: torch.Tensor) -> torch.Tensor:
    """:func:`group_advantages` of each group's valid episodes alone; 0 for the others."""
    import torch

    if bool(valid.all()):
        return group_advantages(returns, estimator)
    out = torch.zeros_like(returns)
    for b in range(returns.shape[0]):
        keep = valid[b]
        if bool(keep.any()):
            out[b, keep] = group_advantages(returns[b, keep].unsqueeze(0), estimator).squeeze(0)
    return out


def group_baseline(returns: torch.Tensor, estimator: str, valid: torch.Tensor):
    """Per episode ``[B, G]``: its group's mean return and scale over the group's valid episodes
    (``group_norm``: unbiased std + 1e-9, as :func:`group_advantages`; ``dr_grpo``: 1), and whether
    it takes an advantage at all (valid, in a group with a baseline: two valid episodes for
    ``group_norm``, one for ``dr_grpo``)."""
    import torch

    if estimator not in ("group_norm", "dr_grpo"):
        raise ValueError(f"unknown advantage estimator {estimator!r}")
    mean, scale = torch.zeros_like(returns), torch.ones_like(returns)
    usable = torch.zeros_like(returns)
    for b in range(returns.shape[0]):
        kept = returns[b, valid[b]]
        if kept.numel() == 0 or (estimator == "group_norm" and kept.numel() < 2):
            continue
        mean[b] = kept.mean()
        if estimator == "group_norm":
            scale[b] = kept.std() + 1e-9
        usable[b] = valid[b].to(returns.dtype)
    return mean, scale, usable


# =============================================================================== GSPO


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N]``: the mean over each row's agent tokens of ``log π − log π_old`` (0 for a row with none)."""
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def gspo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    *,
    step_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO's clipped surrogate, aggregated token mean within a sequence then mean over the
    sequences that hold an agent token (``seq-mean-token-mean`` over the optimizer step whose mask is
    ``step_mask``); returns ``(loss, clip_fraction)`` (clip fraction over agent tokens)."""
    import torch

    seq = sequence_log_ratio(logp, old_logp, mask).detach().unsqueeze(-1)
    ratio = torch.exp(seq + logp - logp.detach())
    surrogate = ratio * advantages
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = aggregate(-torch.min(surrogate, clipped), mask, GSPO_LOSS_AGG, step_mask=step_mask)
    clip_fraction = ((clipped < surrogate).float() * mask).sum() / mask.sum().clamp(min=1)
    return loss, clip_fraction.detach()


def gspo_loss(
    logp, old_logp, ref_logp, advantages, mask, *, eps_low: float, eps_high: float, kl_coef: float,
    eps_clip: float | None = None, step_mask=None, agg: str | None = None, max_tokens: int | None = None,
):
    """GSPO's policy loss + ``kl_coef`` × the k3 KL over agent tokens; a :class:`LossParts`. The
    KL term is aggregated as the GRPO loss's: by ``agg`` when the recipe states it (GSPO's own,
    seq-mean-token-mean, the only one ``rlexp plan`` lets through with GSPO), else token-mean.
    ``eps_clip`` (the token-level range the training loop passes to every loss) is not used: GSPO
    clips with its own."""
    del eps_clip, max_tokens
    if agg not in (None, GSPO_LOSS_AGG):
        raise ValueError(f"GSPO aggregates {GSPO_LOSS_AGG}, not {agg}")
    pg, clip_fraction = gspo_policy_loss(logp, old_logp, advantages, mask, eps_low, eps_high, step_mask=step_mask)
    kl = aggregate(k3_kl(logp, ref_logp), mask, agg or "token-mean", step_mask=step_mask)
    loss = pg + kl_coef * kl if kl_coef != 0 else pg
    return LossParts(loss=loss, policy_loss=pg.detach(), kl=kl.detach(), clip_fraction=clip_fraction)


def loss_for(options: EnvTrainingOptions):
    """The loss function ``train_on_rollout`` calls for these options (GRPO's own for ``grpo``)."""
    from functools import partial

    if options.loss_type == "gspo":
        return partial(gspo_loss, eps_low=options.gspo_eps_low, eps_high=options.gspo_eps_high)
    return grpo_loss

