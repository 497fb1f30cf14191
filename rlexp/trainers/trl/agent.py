"""TRL on environment tasks: the ``rollout_func`` adapter that ``rlexp launch`` generates for an
attempt with ``trainer.name: trl`` and an ``environment:`` section.

TRL 1.16's ``GRPOTrainer(rollout_func=...)`` contract, as its code reads (``trainer/grpo_trainer.py``,
``_generate`` and ``_generate_and_score_completions``):

- ``rollout_func(prompts, trainer)`` receives this process's generation batch of the ``prompt``
  column, *as the RepeatSampler laid it out*: every prompt ``num_generations`` times in a row. It
  returns one completion per entry of ``prompts`` (so ``num_generations`` per distinct prompt, each
  group in a row, as the group-normalised advantage ``rewards.view(-1, num_generations)`` reads them);
- it returns ``prompt_ids``, ``completion_ids`` and ``logprobs`` (lists per entry; ``logprobs`` may
  hold ``None`` for a token nobody sampled, read as NaN and left out of TRL's sampling corrections);
  every other key is an extra field: ``env_mask`` is taken as the ``tool_mask`` (1 = model token,
  0 = environment token) *only when no ``tools`` are set*, and multiplies the completion mask in
  the loss, the KL, the entropy and the logged completion lengths; the rest reach every reward
  function as keyword columns (a non-list value is given to every row);
- the reward still comes from ``reward_funcs``: here :func:`episode_rewards` hands back the
  environment's episode return, which the rollout passes through as the ``episode_return`` column;
- a completion whose last token is not an end-of-sequence or pad token counts as truncated
  (``completions/clipped_ratio``, ``mask_truncated_completions``), so an episode never ends with
  environment tokens here (the runner appends feedback only when the episode goes on).

The episodes are played by rlexp's own runner (:func:`rlexp.environments.episodes.run_episodes`, the
one the local trainer uses) with the policy TRL is training, sampled at TRL's ``temperature``; the
environment classes are imported by the generated module from their own modules, never copied.
The episode metrics are the local trainer's (:func:`rlexp.environments.interface.episode_metrics`),
logged through TRL's ``log_metric``, so ``metrics.jsonl`` and MLflow carry the same names
(``turns_per_episode``, ``tool_calls_per_episode``, ``env_errors``, ``agent_token_fraction``,
``env_latency_s``, ``episode_return``, ``finish_*``) whichever trainer ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.trainers.trl.files import TrlFiles

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

# the training script's option naming the rollout module (tests and the template read it from here)
ROLLOUT_MODULE_OPTION = "--rollout-module"

# GRPOConfig sampling fields rlexp's episode runner does not apply (it samples the plain softmax at
# ``temperature``): an attempt stating another value is refused rather than silently ignored
UNSERVED_SAMPLING = {"top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0,
                     "generation_kwargs": None, "use_vllm": False}  # fmt: skip


@dataclass(frozen=True)
class RolloutAdapter:
    """The generated rollout module: where it goes, its text, and the argv that names it."""

    path: Path
    text: str
    argv_tail: tuple[str, ...]


def check_episode_rules(att: Attempt, grpo_kwargs: Mapping[str, Any]) -> None:
    """What neither TRL path (``rollout_func``, ``environment_factory``) can serve, refused with one
    line naming the field: a temperature of 0, per-token rewards, GSPO without sequence-level ratios."""
    spec = att.display_path or att.spec_path
    settings = att.environment
    if float(grpo_kwargs.get("temperature", 1.0)) <= 0:
        raise InputError(spec, "recipe.temperature", "must be > 0 (TRL divides the logits by it)")
    if settings.advantage_mode != "return":
        raise InputError(spec, "environment.advantage_mode", f"{settings.advantage_mode!r}: TRL takes one scalar "
                                                             "reward per completion (use 'return')")
    if settings.loss == "gspo" and grpo_kwargs.get("importance_sampling_level") != "sequence":
        raise InputError(spec, "environment.loss", "gspo on TRL is recipe importance_sampling_level: sequence with "
                                                   "loss_type: grpo (and epsilon/epsilon_high as its clip range)")


def check_recipe(att: Attempt, grpo_kwargs: Mapping[str, Any]) -> None:
    """What the rollout adapter cannot serve, refused with one line naming the field."""
    spec = att.display_path or att.spec_path
    settings = att.environment
    for key, default in UNSERVED_SAMPLING.items():
        if key in grpo_kwargs and grpo_kwargs[key] != default:
            raise InputError(spec, f"recipe.{key}", f"{grpo_kwargs[key]!r}: the environment rollout samples the plain "
                                                    f"softmax at temperature (leave {key} at {default!r})")
    check_episode_rules(att, grpo_kwargs)
    # as stated, else TRL's default (TrlRecipe); None: TRL caps no completion, so no budget is exceeded
    limit = grpo_kwargs.get("max_completion_length", att.recipe.max_completion_length)
    if limit is not None and settings.max_total_tokens > int(limit):
        raise InputError(spec, "environment.max_total_tokens", f"{settings.max_total_tokens} exceeds the recipe's "
                                                               f"max_completion_length {limit}")


def environment_imports(att: Attempt) -> dict[str, tuple[str, str]]:
    """``{environment name: (module, class name)}`` of the spec's environment and of every ``env``
    the pool's rows name (resolved here, so a bad name stops the launch before anything runs)."""
    from rlexp.environments.interface import resolve

    spec = att.display_path or att.spec_path
    names = {att.environment.name}
    pool = att.datasets.get("pool")
    if pool is not None and pool.path is not None and pool.path.exists():
        from rlexp.experiment.files import read_jsonl

        names |= {str(r["env"]) for r in read_jsonl(pool.path) if isinstance(r, Mapping) and r.get("env")}
    out = {}
    for name in sorted(names):
        try:
            cls = resolve(name, str(spec))
        except InputError as exc:
            raise InputError(spec, "environment.name", exc.message) from None
        out[name] = (cls.__module__, cls.__qualname__)
    return out


def rollout_adapter(att: Attempt, ad: Any, grpo_kwargs: Mapping[str, Any], rlexp_root: str) -> RolloutAdapter:
    """The rollout module of an environment attempt (nothing is written here)."""
    from rlexp.trainers.trl.rollout_template import render_rollout_module

    check_recipe(att, grpo_kwargs)
    settings = att.environment
    config = {
        "rlexp_root": rlexp_root,
        "environment": {"name": settings.name, "config": dict(settings.config or {}), "max_turns": settings.max_turns,
                        "max_tokens_per_turn": settings.max_tokens_per_turn,
                        "max_total_tokens": settings.max_total_tokens,
                        "success_threshold": settings.success_threshold},
        "episodes_path": str(TrlFiles.of(ad).episodes),
    }
    text = render_rollout_module(att.id, environment_imports(att), config)
    module = TrlFiles.of(ad).rollout_module
    return RolloutAdapter(module, text, (ROLLOUT_MODULE_OPTION, str(module)))


# ----------------------------------------------------------------------------- run by the generated module


def encode_row(row: Any) -> str:
    """A dataset row as the text TRL carries in its ``prompt`` column (and hands back to the rollout)."""
    return json.dumps({"env": row.env, "config": dict(row.config), "task": dict(row.task)}, sort_keys=True,
                      ensure_ascii=False)


def decode_rows(prompts: list[str], where: str) -> list[Any]:
    from rlexp.environments.interface import parse_rows

    return parse_rows([json.loads(p) for p in prompts], where)


def rollout_output(trajectories: list[Any], *, pad_id: int, logprobs: list[list[float | None]] | None = None
                   ) -> dict[str, Any]:  # fmt: skip
    """TRL's rollout dict of played episodes, one completion per trajectory: ``prompt_ids``, then
    everything after the prompt (model and environment tokens) as ``completion_ids``, its agent mask
    as ``env_mask``, the sampler's ``logprobs`` (None where none are given), and the columns the
    reward function reads (``episode_return``; ``episode_metrics``, the local trainer's metrics of
    this batch). An episode with no token after its prompt (its environment failed at reset) gets
    one pad token, masked: TRL reads the last completion token of every row. An episode that ended
    in an environment error is masked whole and its ``episode_return`` is None: the reward function
    returns None for it, which TRL (1.16) reads as unscorable, out of its group's baseline with
    advantage 0 — left out of training, as the local trainer leaves it out."""
    from rlexp.environments.interface import episode_metrics

    prompt_ids, completion_ids, env_mask, out_logprobs = [], [], [], []
    for i, t in enumerate(trajectories):
        completion = list(t.token_ids[t.prompt_len:])
        mask = list(t.agent_mask[t.prompt_len:])
        lp = list(logprobs[i]) if logprobs is not None else [None] * len(completion)
        if not completion:
            completion, mask, lp = [pad_id], [0], [None]
        if t.finish_reason == "env_error":
            mask = [0] * len(mask)
        prompt_ids.append(list(t.token_ids[:t.prompt_len]))
        completion_ids.append(completion)
        env_mask.append(mask)
        out_logprobs.append(lp)
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": out_logprobs,
        "env_mask": env_mask,
        "episode_return": [None if t.finish_reason == "env_error" else t.episode_return for t in trajectories],
        "episode_metrics": episode_metrics(trajectories),
    }


def sampling_logprobs(model: Any, trajectories: list[Any], temperature: float, pad_id: int
                      ) -> list[list[float | None]]:  # fmt: skip
    """The log-probability each model token was sampled with (softmax of logits / ``temperature``,
    scored over the whole trajectory as it was played); None at environment tokens."""
    import torch

    from rlexp.trainers.local.env_train import pack_trajectories

    if not trajectories:
        return []
    device = next(model.parameters()).device
    ids, attn, _, _ = (x.to(device) for x in pack_trajectories(trajectories, pad_id))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids).logits[:, :-1, :].float()
            logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    finally:
        if was_training:
            model.train()
    out = []
    for row, t in zip(logp.tolist(), trajectories, strict=True):
        # position p - 1 scores token p; the completion starts at token prompt_len
        out.append([row[p - 1] if t.agent_mask[p] else None for p in range(t.prompt_len, len(t.token_ids))])
    return out


def episode_record(trajectory: Any, output: Mapping[str, Any], i: int, global_step: int) -> dict[str, Any]:
    """One played episode as ``launch/trl_episodes.jsonl`` keeps it: what TRL was handed (ids and
    mask) beside the trajectory's own account (turns with their token counts and feedback)."""
    record = trajectory.to_record()
    for turn_record, turn in zip(record["turns"], trajectory.turns, strict=True):
        turn_record.update(action_tokens=turn.action_tokens, feedback_tokens=turn.feedback_tokens)
    return {"global_step": global_step, "prompt_ids": output["prompt_ids"][i],
            "completion_ids": output["completion_ids"][i], "env_mask": output["env_mask"][i], **record}
