"""Plan rules for agentic recipes (an attempt with an ``environment:`` on a cluster trainer) — pure.

Each rule is a function of plain values returning :class:`~rlexp.core.verdict.Verdict` s (empty
when it holds); :func:`check_agentic` applies them all to an attempt.

| id | rule |
|---|---|
| agent.release | a release older than its trainer's agent API (OpenRLHF 0.8.7, verl 0.6.0, TRL 0.28.0) cannot run an environment |
| agent.turn_budget | prompt + max_turns × max_tokens_per_turn must fit the trainer's length limit (OpenRLHF max_len, or prompt_max_len + generate_max_len before 0.9.8; verl response_length for the turns; TRL max_completion_length) |
| agent.openrlhf_turn_cap | OpenRLHF's MultiTurnAgentExecutor gives every turn the room left in max_len: a per-turn cap is not enforced |
| agent.openrlhf_max_new_tokens | OpenRLHF 0.9.8–0.10.1.post2: max_new_tokens unset (None) makes the executor fail (``max_length - None``) |
| agent.gspo_clip | GSPO with the token-level clip range 0.2 barely clips a sequence ratio (GSPO's range is ~3e-4/4e-4) |
| agent.group_one_sample | a group baseline (group_norm, dr_grpo, rloo, reinforce_baseline) with one sample per prompt |
"""

from __future__ import annotations

import re
from typing import Any

from rlexp.core.verdict import Verdict, check

ERROR = "error"
WARNING = "warning"
REF = "docs/environments.md#trainers"

# The first release of each trainer with the agent interface rlexp's adapters generate for:
# OpenRLHF's token-in/token-out MultiTurnAgentExecutor, verl's AgentLoopBase, TRL's rollout_func
# returning env_mask.
AGENT_API_SINCE = {"openrlhf": "0.8.7", "verl": "0.6.0", "trl": "0.28.0"}
GROUP_BASELINES = ("group_norm", "dr_grpo", "rloo", "reinforce_baseline", "grpo")
TOKEN_CLIP_DEFAULT = 0.2


def release_key(version: str) -> tuple[int, ...]:
    """``0.10.1 < 0.10.1.post1 < 0.10.2``; pre-release suffixes sort before the release."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?.*", str(version).strip())
    if not match:
        raise ValueError(f"not a release number: {version!r}")
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch or 0), -1 if post is None else int(post))


def openrlhf_max_length(version: str, recipe: dict[str, Any]) -> tuple[int, str]:
    """OpenRLHF's ``max_length`` handed to the agent executor, and how it is named: ``max_len``
    (default 2048) from 0.9.8, ``prompt_max_len + generate_max_len`` (1024 each) before."""
    if release_key(version) >= release_key("0.9.8"):
        return int(recipe.get("max_len") or 2048), "max_len"
    prompt = int(recipe.get("prompt_max_len") or 1024)
    generate = int(recipe.get("generate_max_len") or recipe.get("max_new_tokens") or 1024)
    return prompt + generate, f"prompt_max_len {prompt} + generate_max_len {generate}"


def openrlhf_needs_max_new_tokens(version: str) -> bool:
    """0.9.8 made ``max_new_tokens`` optional; the multi-turn executor computes ``max_length -
    max_tokens`` on the initial value and fails on None until 0.10.2 (``... or 1``)."""
    return release_key("0.9.8") <= release_key(version) < release_key("0.10.2")


def check_release(trainer: str, version: str) -> list[Verdict]:
    since = AGENT_API_SINCE.get(trainer)
    if since is None or release_key(version) >= release_key(since):
        return []
    return [check("agent.release", ERROR, f"{trainer} {version} predates its agent API (from {since}): "
                  "an environment task cannot run on it", REF)]


def check_turn_budget(trainer: str, *, prompt_tokens: int, max_turns: int, max_tokens_per_turn: int,
                      limit: int, limit_name: str) -> list[Verdict]:
    """The turns' budget against the trainer's length limit: for OpenRLHF the limit holds the
    prompt too; verl's ``response_length`` and TRL's ``max_completion_length`` hold the turns (and
    the feedback between them) only."""
    turns = max_turns * max_tokens_per_turn
    need = turns + (prompt_tokens if trainer == "openrlhf" else 0)
    if need <= limit:
        return []
    what = (f"prompt {prompt_tokens} + {max_turns} turns × {max_tokens_per_turn} tokens = {need}"
            if trainer == "openrlhf" else f"{max_turns} turns × {max_tokens_per_turn} tokens = {need}")
    return [check("agent.turn_budget", ERROR,
                  f"turn budget {what} exceeds {trainer} {limit_name} {limit} (before any feedback tokens)", REF)]


def check_openrlhf_turn_cap(max_tokens_per_turn: int, max_length: int, limit_name: str) -> list[Verdict]:
    return [check("agent.openrlhf_turn_cap", WARNING,
                  f"environment.max_tokens_per_turn {max_tokens_per_turn} is not enforced on OpenRLHF: its "
                  f"MultiTurnAgentExecutor gives every turn the room left in {limit_name} ({max_length} tokens, "
                  "prompt included) and appends the last feedback without a length check", REF)]


def check_openrlhf_max_new_tokens(version: str, recipe: dict[str, Any]) -> list[Verdict]:
    if not openrlhf_needs_max_new_tokens(version):
        return []
    if recipe.get("generate_max_len") or recipe.get("max_new_tokens"):
        return []
    return [check("agent.openrlhf_max_new_tokens", ERROR,
                  f"OpenRLHF {version}: set recipe.generate_max_len (--max_new_tokens): its MultiTurnAgentExecutor "
                  "computes max_length - max_new_tokens and fails on the default None (fixed in 0.10.2)", REF)]


def check_gspo_clip(loss: str, clip: float | None, clip_name: str) -> list[Verdict]:
    if loss != "gspo" or clip is None or abs(float(clip) - TOKEN_CLIP_DEFAULT) > 1e-12:
        return []
    return [check("agent.gspo_clip", WARNING,
                  f"GSPO with {clip_name} {clip}: a sequence-level ratio is clipped with a range near 3e-4/4e-4; "
                  "0.2 (the token-level default) barely clips", REF)]


def check_group_samples(estimator: str | None, n_samples: int | None) -> list[Verdict]:
    if estimator not in GROUP_BASELINES or n_samples is None or int(n_samples) > 1:
        return []
    return [check("agent.group_one_sample", ERROR,
                  f"{estimator} normalises within a prompt's group: n_samples_per_prompt {n_samples} leaves every "
                  "advantage 0", REF)]


def check_agentic(att: Any) -> list[Verdict]:
    """All rules for an attempt with an environment task on OpenRLHF, verl or TRL (none for the
    local trainer, whose episode budgets are rlexp's own)."""
    env = getattr(att, "environment", None)
    trainer, version = att.trainer.name, str(att.trainer.version)
    if env is None or trainer not in AGENT_API_SINCE:
        return []
    recipe = dict(att.recipe)
    found = check_release(trainer, version)
    if found:
        return found
    if trainer == "openrlhf":
        max_length, name = openrlhf_max_length(version, recipe)
        found += check_turn_budget(trainer, prompt_tokens=int(recipe.get("prompt_max_len") or 0),
                                   max_turns=env.max_turns, max_tokens_per_turn=env.max_tokens_per_turn,
                                   limit=max_length, limit_name=name)
        found += check_openrlhf_max_new_tokens(version, recipe)
        found += check_openrlhf_turn_cap(env.max_tokens_per_turn, max_length, name)
        loss = "gspo" if "gspo" in (env.loss, recipe.get("policy_loss_type"), recipe.get("actor.policy_loss_type")) else env.loss
        found += check_gspo_clip(loss, recipe.get("eps_clip", TOKEN_CLIP_DEFAULT), "recipe.eps_clip")
        found += check_group_samples(recipe.get("advantage_estimator"), recipe.get("n_samples_per_prompt"))
    elif trainer == "verl":
        limit = recipe.get("data.max_response_length")
        if limit is not None:
            found += check_turn_budget(trainer, prompt_tokens=0, max_turns=env.max_turns,
                                       max_tokens_per_turn=env.max_tokens_per_turn, limit=int(limit),
                                       limit_name="data.max_response_length (rollout.response_length)")
        # verl's GSPO loss clips with clip_ratio_low/high (clip_ratio when they are null)
        loss = "gspo" if recipe.get("actor_rollout_ref.actor.policy_loss.loss_mode") == "gspo" else env.loss
        for side in ("low", "high"):
            key = f"actor_rollout_ref.actor.clip_ratio_{side}"
            clip = recipe.get(key, TOKEN_CLIP_DEFAULT)
            if clip is None:
                key, clip = "actor_rollout_ref.actor.clip_ratio", recipe.get("actor_rollout_ref.actor.clip_ratio", 0.2)
            found += check_gspo_clip(loss, clip, key)
        found += check_group_samples(recipe.get("algorithm.adv_estimator"), recipe.get("actor_rollout_ref.rollout.n"))
    else:
        found += check_turn_budget(trainer, prompt_tokens=0, max_turns=env.max_turns,
                                   max_tokens_per_turn=env.max_tokens_per_turn,
                                   limit=int(recipe.get("max_completion_length") or 512),
                                   limit_name="max_completion_length")
        loss = "gspo" if recipe.get("importance_sampling_level") == "sequence" else env.loss
        found += check_gspo_clip(loss, recipe.get("epsilon", TOKEN_CLIP_DEFAULT), "recipe.epsilon")
    return sorted(found, key=lambda c: c.severity != ERROR)


def with_agentic_checks(checks: list[Verdict], att: Any) -> list[Verdict]:
    """``checks`` plus :func:`check_agentic` of the attempt, errors first (the plan's hook)."""
    return sorted([*checks, *check_agentic(att)], key=lambda c: c.severity != ERROR)
