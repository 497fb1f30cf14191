"""The eval reward of an episode as the spec composes it (``environment.reward``): the weighted
mean of the episode's return (``env``), the LLM judge's score of its final answer (``judge``) and
the NDCG of the documents it retrieved against the task's ``gold_docs`` (``ndcg``), over the parts
that apply to the row (:func:`rlexp.environments.rewards.applicable_weights`: no NDCG for a row without
gold documents, no judge for a row without a reference answer).

The judge goes through :class:`rlexp.environments.judge.Judge` with the attempt's cache
(``eval/judge_cache.jsonl``: a rerun makes no call for an answer already judged) and its call log
(``eval/judge_calls.jsonl``). A judge call that fails leaves the record's ``reward`` null and names
the failure in ``reward_error`` (``{"kind": "judge_error", "reason": ...}``): counted, never a
silent 0. ``rlexp decide`` refuses such records and a resumed ``rlexp eval`` plays those episodes
again (failures are not cached, so the judge is asked again).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from rlexp.environments.rewards import RewardError, episode_reward


def retrieved_documents(record: Mapping[str, Any]) -> list[str]:
    """The document ids an episode retrieved, in order (every turn's ``retrieved``)."""
    return [str(d) for turn in record["trajectory"]["turns"] for d in turn.get("retrieved") or ()]


def reward_weights(settings: Any) -> dict[str, float]:
    """The positive weights of ``environment.reward`` (empty: the reward is the episode's return)."""
    return {k: float(v) for k, v in (settings.reward or {}).items() if float(v) > 0}


def judge_of(settings: Any, cache_path: str | Path, log_path: str | Path) -> Any:
    """The LLM judge of ``environment.judge`` (:class:`rlexp.environments.judge.Judge`) with its cache
    and call log."""
    from rlexp.environments.judge import Judge

    j = settings.judge
    return Judge(j["base_url"], j["model"], cache_path=cache_path, log_path=log_path, retries=int(j["retries"]),
                 timeout_s=float(j["timeout_s"]), max_tokens=int(j["max_tokens"]), api_key_env=j.get("api_key_env"),
                 **{k: j[k] for k in ("connect_timeout_s", "read_timeout_s", "max_response_bytes") if k in j})


class EpisodeRewarder:
    """Composes the eval reward of episode records for one attempt (``settings``: its
    EnvironmentSettings); ``active`` is False when the spec states no ``reward`` weights (the
    record's reward stays the episode's return)."""

    def __init__(self, settings: Any, attempt_dir: str | Path) -> None:
        from rlexp.experiment.layout import AttemptDir

        self.settings = settings
        self.weights = reward_weights(settings)
        ad = AttemptDir(attempt_dir)
        self.judge = judge_of(settings, ad.evals.judge_cache, ad.evals.judge_log) if "judge" in self.weights else None

    @property
    def active(self) -> bool:
        return bool(self.weights)

    def apply(self, record: dict[str, Any], task: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` with ``reward`` the composite, ``correct`` = reward >= the success threshold,
        ``reward_parts`` each part's value (or its error), and ``reward_error`` when a part failed."""
        if not self.active:
            return record
        judge = None if self.judge is None else partial(
            self.judge.score, str(task.get("prompt", "")), str(record["output"]), reference=str(task["answer"]))
        combined = episode_reward(self.weights, task, episode_return=float(record["trajectory"]["return"]),
                                  retrieved=retrieved_documents(record), judge=judge)
        parts = combined.parts
        out = dict(record)
        out["reward_parts"] = {k: ({"error": v.kind, "reason": v.reason} if isinstance(v, RewardError) else v)
                               for k, v in parts.items()}  # fmt: skip
        if combined.error is not None:
            out["reward"] = None
            out["correct"] = 0  # the records format needs 0/1; decide refuses records with a reward_error
            out["reward_error"] = {"kind": combined.error.kind, "reason": combined.error.reason}
        else:
            out["reward"] = combined.value
            out["correct"] = int(combined.value >= self.settings.success_threshold)
        return out

    def summary(self) -> dict[str, int]:
        """Judge calls made, cache hits and failed calls of this eval."""
        if self.judge is None:
            return {}
        return {"judge_calls": len(self.judge.calls), "judge_cache_hits": self.judge.cache_hits,
                "judge_errors": self.judge.errors}
