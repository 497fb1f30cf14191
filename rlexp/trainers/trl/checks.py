"""TRL's plan rules for an environment task (rlexp.protocol.agentic_checks) — pure.

``rollout_func`` returns the completions whose length ``max_completion_length`` bounds: the turns
and the feedback between them, not the prompt. With ``environment.actions: tool_calls`` TRL's own
tool loop bounds the whole completion (no per-turn budget): only the GSPO clip rule applies. (No
release rule for it: TRL added ``environment_factory`` in huggingface/trl#5093 and the dict of
environments the adapter passes later, #6001; the spec accepts only the pinned release, 1.16.0,
which the adapter was run with.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.protocol.agentic_checks import check_gspo_clip, check_turn_budget
from rlexp.protocol.verdict import Verdict

if TYPE_CHECKING:
    from rlexp.trainers.trl.recipe import TrlRecipe

AGENT_API_SINCE = "0.28.0"  # rollout_func returning env_mask


def agentic_checks(env: Any, recipe: TrlRecipe, version: str) -> list[Verdict]:
    if getattr(env, "actions", "text") == "tool_calls":
        # TRL's tool loop has no per-turn budget: it clips the whole completion at max_completion_length
        # (which the adapter requires equal to max_total_tokens and max_tokens_per_turn)
        return _gspo_clip(env, recipe)
    limit = recipe.max_completion_length  # None: TRL caps no completion, so no budget can be exceeded
    found = [] if limit is None else check_turn_budget(
        "trl", prompt_tokens=0, max_turns=env.max_turns, max_tokens_per_turn=env.max_tokens_per_turn,
        limit=int(limit), limit_name="max_completion_length", prompt_included=False)
    return found + _gspo_clip(env, recipe)


def _gspo_clip(env: Any, recipe: TrlRecipe) -> list[Verdict]:
    if env.loss == "gspo":  # rlexp writes the environment's range as epsilon/epsilon_high (launch.loss_recipe)
        return check_gspo_clip("gspo", env.gspo_eps_low, "environment.gspo_eps_low")
    loss = "gspo" if recipe.importance_sampling_level == "sequence" else env.loss
    return check_gspo_clip(loss, recipe.epsilon, "recipe.epsilon")


def run_health_checks(recipe: TrlRecipe, version: str) -> list[Verdict]:
    """TRL's vLLM importance-sampling correction (vllm_importance_sampling_correction, on by default with
    use_vllm) divides the trainer's log-probs by vLLM's: top_p below 1 or top_k above 0 makes vLLM sample from
    a truncated, renormalised distribution the trainer does not score (GRPOTrainer applies temperature to
    both, not the truncation), so the weights are biased (a warning)."""
    from rlexp.protocol.verdict import WARNING, check

    if recipe.estimator != "grpo":
        return []  # RLOOConfig and AsyncGRPOConfig have no vllm_importance_sampling_correction
    if not recipe.use_vllm or recipe.vllm_importance_sampling_correction is False:
        return []
    found = []
    top_p, top_k = recipe.top_p, recipe.top_k
    truncated = [f"{name} {value}" for name, value, bad in (
        ("top_p", top_p, isinstance(top_p, int | float) and top_p < 1.0),
        ("top_k", top_k, isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0)) if bad]
    if truncated:
        found.append(check(
            "health.is_correction_top_p", WARNING,
            f"{' and '.join(truncated)} with TRL {version}'s vLLM importance-sampling correction: vLLM samples from "
            "a truncated, renormalised distribution the trainer does not score, so every IS weight is biased",
            "docs/run-health.md#plan"))
    return found
