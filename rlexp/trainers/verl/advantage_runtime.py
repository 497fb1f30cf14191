"""What rlexp's verl advantage estimator runs: verl's GRPO with each group's mean and std over the
samples that have a response (:mod:`rlexp.trainers.verl.advantage` explains why and where verl
imports the generated module that registers it).

The generated module registers a function of verl's estimator signature under rlexp's name and
hands its arguments to :func:`grpo_advantage_over_responses`. torch is imported when it runs (the
driver process of a verl run has it), never at import.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def grpo_advantage_over_responses(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6,
                                  norm_adv_by_std_in_grpo: bool | None = None, config: Any = None) -> tuple[Any, Any]:
    """verl's ``compute_grpo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``, 0.9.1: the same
    loops and tensor operations), the samples without a response out of the groups: each group's
    mean and std over the others (one left: mean 0, std 1), advantage 0 for them. verl's
    ``compute_advantage`` passes the normalisation only inside ``config`` (``config.algorithm``)."""
    import torch

    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    scores = token_level_rewards.sum(dim=-1)
    has_response = (response_mask.sum(dim=-1) > 0).tolist()

    id2score: dict[Any, list[Any]] = defaultdict(list)
    id2mean: dict[Any, Any] = {}
    id2std: dict[Any, Any] = {}

    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            if has_response[i]:
                id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            else:
                scores_tensor = torch.stack(id2score[idx])
                id2mean[idx] = torch.mean(scores_tensor)
                id2std[idx] = torch.std(scores_tensor)
        for i in range(bsz):
            if not has_response[i]:
                scores[i] = 0.0  # a NaN reward too: NaN times a 0 mask would stay NaN
            elif norm_adv_by_std_in_grpo:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
            else:
                scores[i] = scores[i] - id2mean[index[i]]
        scores = scores.unsqueeze(-1) * response_mask

    return scores, scores
