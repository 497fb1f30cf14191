"""Plan rules for agentic recipes (an attempt with an ``environment:`` on a cluster trainer) — pure.

Each rule is a function of plain values returning :class:`~rlexp.protocol.verdict.Verdict` s (empty
when it holds); :func:`check_agentic` applies them to an attempt through its trainer's rules
(``agent_api_since``, ``agentic_checks``: each trainer's own rules live in its package's ``checks``
module and use the shared ones here).

| id | rule |
|---|---|
| agent.release | a release older than its trainer's agent API (OpenRLHF 0.8.7, verl 0.6.0, TRL 0.28.0) cannot run an environment |
| agent.turn_budget | prompt + max_turns × max_tokens_per_turn must fit the trainer's length limit (OpenRLHF max_len, or prompt_max_len + generate_max_len before 0.9.8; verl response_length for the turns; TRL max_completion_length) |
| agent.openrlhf_turn_cap | OpenRLHF's MultiTurnAgentExecutor gives every turn the room left in max_len: a per-turn cap is not enforced |
| agent.openrlhf_max_new_tokens | OpenRLHF 0.9.8–0.10.1.post2: max_new_tokens unset (None) makes the executor fail (``max_length - None``) |
| agent.env_error_baseline | OpenRLHF, and verl on an estimator other than grpo (on grpo rlexp's rlexp_grpo leaves it out): an environment-error episode is out of the loss (OpenRLHF from 0.11.0) but its reward stays in its group's baseline (warning) |
| agent.env_error_kl_target | OpenRLHF 0.11.0+: kl_target without use_kl_loss on an environment task (an error episode's KL mean is 0/0, NaN for the adaptive controller) |
| agent.gspo_clip | GSPO with the token-level clip range 0.2 barely clips a sequence ratio (GSPO's range is ~3e-4/4e-4) |
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rlexp.protocol.verdict import Verdict, check
from rlexp.spec.recipe import EPS_CLIP_DEFAULT

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

ERROR = "error"
WARNING = "warning"
REF = "docs/environments.md#trainers"


def release_key(version: str) -> tuple[int, ...]:
    """``0.10.1 < 0.10.1.post1 < 0.10.2``; pre-release suffixes sort before the release."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?.*", str(version).strip())
    if not match:
        raise ValueError(f"not a release number: {version!r}")
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch or 0), -1 if post is None else int(post))


def check_release(trainer: str, version: str, since: str) -> list[Verdict]:
    """A release older than ``since``, the first with the agent interface rlexp's adapter generates for."""
    if release_key(version) >= release_key(since):
        return []
    return [check("agent.release", ERROR, f"{trainer} {version} predates its agent API (from {since}): "
                  "an environment task cannot run on it", REF)]


def check_turn_budget(trainer: str, *, prompt_tokens: int, max_turns: int, max_tokens_per_turn: int,
                      limit: int, limit_name: str, prompt_included: bool) -> list[Verdict]:
    """The turns' budget against the trainer's length limit: ``prompt_included`` when the limit
    holds the prompt too (OpenRLHF's); else it holds the turns (and the feedback between them) only."""
    turns = max_turns * max_tokens_per_turn
    need = turns + (prompt_tokens if prompt_included else 0)
    if need <= limit:
        return []
    what = (f"prompt {prompt_tokens} + {max_turns} turns × {max_tokens_per_turn} tokens = {need}"
            if prompt_included else f"{max_turns} turns × {max_tokens_per_turn} tokens = {need}")
    return [check("agent.turn_budget", ERROR,
                  f"turn budget {what} exceeds {trainer} {limit_name} {limit} (before any feedback tokens)", REF)]


def check_gspo_clip(loss: str, clip: float | None, clip_name: str) -> list[Verdict]:
    if loss != "gspo" or clip is None or abs(float(clip) - EPS_CLIP_DEFAULT) > 1e-12:
        return []
    return [check("agent.gspo_clip", WARNING,
                  f"GSPO with {clip_name} {clip}: a sequence-level ratio is clipped with a range near 3e-4/4e-4; "
                  f"{EPS_CLIP_DEFAULT} (the token-level default) barely clips", REF)]


def check_agentic(att: Attempt) -> list[Verdict]:
    """All rules for an attempt with an environment task on a trainer with an agent interface (its
    rules' ``agent_api_since``; none for the local trainer, whose episode budgets are rlexp's own):
    the release, then the trainer's own (its rules' ``agentic_checks``)."""
    from rlexp.trainers import rules as trainer_rules

    env = att.environment
    rules = trainer_rules(att.trainer.name)
    if env is None or rules.agent_api_since is None:
        return []
    version = str(att.trainer.version)
    found = check_release(rules.name, version, rules.agent_api_since)
    if not found:
        found = rules.agentic_checks(env, att.recipe, version)
    return sorted(found, key=lambda c: c.severity != ERROR)
