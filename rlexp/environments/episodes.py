"""Play environment episodes token-in/token-out, on a local Hugging Face model or on any eval engine.

All episodes of a batch advance together, one model turn at a time, through one *turn generator*
(:func:`play_episodes`): ids in, ids out. The trainer's is the local decoding path
(:func:`rlexp.evaluation.generation.generate_ids`, :func:`run_episodes`); eval's is an engine's
``generate_tokens`` (local, vLLM, OpenAI-compatible: :func:`engine_turns`). Each active
episode's ids so far are the input, the generated ids are appended as they come (agent tokens),
the environment's feedback is rendered through the model's own chat template as the next user
turn and tokenised *once* (environment tokens). Nothing is ever decoded and re-encoded across
turns, so the ids the trainer scores are exactly the ids the model saw and produced, and every
engine is given the same ids turn by turn.

With ``max_length`` (OpenRLHF's budget semantics, the ``MultiTurnAgentExecutor`` of
``openrlhf/utils/agent.py``): every turn may generate up to the room left, ``max_length`` minus
all ids so far, the prompt included, with no per-turn cap (``max_tokens_per_turn`` and
``max_total_tokens`` are not used); a cut turn's action still steps the environment; the
feedback is appended without a length check, and the episode ends (``length``) once no room is
left. This is the rollout rlexp's OpenRLHF agent file reproduces, token for token.

An episode ends with a finish reason:

- ``stop``: the environment said ``done``;
- ``length``: a model turn hit ``max_tokens_per_turn`` without an end-of-sequence token (the cut
  action is still sent to the environment and its reward counts, as the single-turn trainer grades
  a cut completion; then the episode ends), or the episode ran out of ``max_total_tokens``;
- ``max_turns``: ``max_turns`` model turns were played and the environment never said ``done``;
- ``env_error``: the environment raised; the message is kept on the trajectory.

Environments come from an :class:`~rlexp.environments.interface.EnvironmentCache`. Episodes that run at
the same time need their own instance (an environment holds one episode's state), so the cache is
keyed by ``(environment, config, slot)``, slot = the episode's position within its group in the
batch: an instance is built the first time a slot is needed and reused, after ``reset``, by every
later episode in that slot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlexp.environments.episode_loop import reset_environment, step_environment, turn_finish
from rlexp.environments.interface import Budgets, EnvRow, Trajectory, TrajectoryBuilder, Turn, resolve


class SlotCache:
    """Environment instances by ``(env, config, slot)``, built once and reused across episodes."""

    def __init__(self, where: str | None = None) -> None:
        self.where = where
        self._instances: dict[tuple[str, str, int], Any] = {}
        self.builds = 0

    def get(self, row: EnvRow, slot: int) -> Any:
        key = (*row.group_key, slot)
        if key not in self._instances:
            self._instances[key] = resolve(row.env, self.where)(dict(row.config))
            self.builds += 1
        return self._instances[key]


# an assistant message the templates below keep as it is (no whitespace to trim, no markup)
_ASSISTANT_MARK = "rlexpAssistantTurnMark"


def render_user_turn(tokenizer: Any, content: str) -> str:
    """The text that goes between a model turn the model ended itself and its next turn, rendered by
    the tokenizer's own chat template: what the template writes after the assistant's end-of-turn
    token (ChatML's newline after ``<|im_end|>``; nothing on Llama 3, whose turn ends at
    ``<|eot_id|>``), then the next user message ``content`` and the generation prompt.

    It is the verified difference of two renderings, ``[user, assistant, user]`` with the
    generation prompt minus ``[user, assistant]``, plus the rest of the template's assistant-turn
    closing after its first token, the end-of-turn token the model generates (and the episode
    already holds). So an episode's ids, prompt + turn + this + turn + ..., are the template's own
    rendering of the same conversation. Raises ValueError when the template does not extend that
    way, or closes an assistant turn with something other than a special token."""
    head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _ASSISTANT_MARK}]
    base = tokenizer.apply_chat_template(head, tokenize=False, add_generation_prompt=False)
    full = tokenizer.apply_chat_template(
        [*head, {"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    if not full.startswith(base) or _ASSISTANT_MARK not in base:
        raise ValueError("the chat template does not render a further user turn as a suffix")
    return _after_end_of_turn(tokenizer, base[base.rindex(_ASSISTANT_MARK) + len(_ASSISTANT_MARK):]) + full[len(base):]


def _after_end_of_turn(tokenizer: Any, closing: str) -> str:
    """``closing`` (the template's text after an assistant message) less its first token, the
    end-of-turn token the model stops on; ``""`` when the template closes with nothing."""
    if not closing:
        return ""
    ids = tokenizer(closing, add_special_tokens=False)["input_ids"]
    first = ids[0] if ids else None
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = first in set(tokenizer.all_special_ids) or bool(getattr(decoder.get(first), "special", False))
    text = tokenizer.convert_ids_to_tokens(first) if first is not None else None
    if not special or not isinstance(text, str) or not closing.startswith(text):
        raise ValueError(f"the chat template closes an assistant turn with {closing!r}, "
                         "which does not begin with a special end-of-turn token")
    return closing[len(text):]


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The sampling seed of a turn: the episode batch's own seed for the first turn (so a one-step
    environment samples exactly what the single-turn trainer samples with that seed), a derived one
    after."""
    if seed is None:
        return None
    return seed if turn == 0 else seed * 7_919 + turn


# (the ids of every active episode, the most new tokens any of them may take, the turn's seed) ->
# one continuation per episode, in order, each with ``token_ids`` (EOS included on a stop) and
# ``finish_reason`` ("stop" | "length")
TurnGenerator = Callable[[list[list[int]], int, int | None], Sequence[Any]]


def run_episodes(
    model: Any,
    tokenizer: Any,
    rows: list[EnvRow],
    *,
    budgets: Budgets,
    cache: SlotCache | None = None,
    num_samples: int = 1,
    temperature: float = 0.0,
    seed: int | None = None,
    max_length: int | None = None,
) -> list[list[Trajectory]]:
    """Play ``num_samples`` episodes of every row on ``model`` (the trainer's path); result
    ``[row][sample]``. ``max_length``: the remaining-room budget of OpenRLHF (module docstring)
    instead of ``budgets``' token limits."""
    from rlexp.evaluation import generation

    def turns(batch: list[list[int]], width: int, turn_seed_: int | None) -> list[Any]:
        outputs = generation.generate_ids(model, tokenizer, batch, max_new_tokens=width, temperature=temperature,
                                          seed=turn_seed_, batch_size=len(batch))
        return [completion for (completion,) in outputs]

    return play_episodes(turns, tokenizer, rows, budgets=budgets, cache=cache, num_samples=num_samples, seed=seed,
                         max_length=max_length)


def engine_turns(engine: Any, adapter: str | None, decoding: Any) -> TurnGenerator:
    """The turn generator of an eval engine serving ``adapter`` (None = the base model): its
    ``generate_tokens`` with ``decoding`` (greedy for eval), the turn's width as ``max_tokens``."""
    import dataclasses

    def turns(batch: list[list[int]], width: int, turn_seed_: int | None) -> Sequence[Any]:
        turn_decoding = dataclasses.replace(decoding, max_tokens=width,
                                            seed=decoding.seed if turn_seed_ is None else turn_seed_)
        return engine.generate_tokens(batch, turn_decoding, adapter=adapter)

    return turns


def play_episodes(
    turns: TurnGenerator,
    tokenizer: Any,
    rows: list[EnvRow],
    *,
    budgets: Budgets,
    cache: SlotCache | None = None,
    num_samples: int = 1,
    seed: int | None = None,
    max_length: int | None = None,
) -> list[list[Trajectory]]:
    """Play ``num_samples`` episodes of every row, each model turn through ``turns``; result
    ``[row][sample]``. ``tokenizer`` renders the prompt and the feedback (once each) and decodes
    each turn's ids into the action text the environment reads. ``max_length``: OpenRLHF's
    remaining-room budget (module docstring) instead of ``budgets``' token limits."""
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    cache = cache or SlotCache()
    episodes: list[dict[str, Any]] = []
    slots: dict[tuple[str, str], int] = {}
    for r, row in enumerate(rows):
        for s in range(num_samples):
            slot = slots.get(row.group_key, 0)
            slots[row.group_key] = slot + 1
            env = cache.get(row, slot)
            if seed is not None and hasattr(env, "seed"):
                env.seed(seed * 1_000_003 + r * 1_009 + s)
            episode: dict[str, Any] = {"row": r, "sample": s, "env": env, "done": None}
            start = reset_environment(env, row.task)
            # a failed reset: the empty observation's prompt, no turn, env_error
            episode["builder"] = TrajectoryBuilder(encode_prompt(tokenizer, render_prompt(tokenizer, start.observation, "")))
            if start.failed:
                episode["done"] = episode["builder"].finish("env_error", start.error_text())
            episodes.append(episode)

    for turn in range(budgets.max_turns):
        active = [e for e in episodes if e["done"] is None]
        if not active:
            break
        limits = []
        for e in active:
            if max_length is not None:  # OpenRLHF: the room left, prompt included, no per-turn cap
                limits.append(max_length - len(e["builder"].ids))
                continue
            left = budgets.max_total_tokens - e["builder"].generated
            limits.append(min(budgets.max_tokens_per_turn, left))
        playing = [(e, lim) for e, lim in zip(active, limits, strict=True) if lim >= 1]
        for e, lim in zip(active, limits, strict=True):
            if lim < 1:
                e["done"] = e["builder"].finish("length")
        if not playing:
            break
        width = max(lim for _, lim in playing)
        outputs = turns([list(e["builder"].ids) for e, _ in playing], width, turn_seed(seed, turn))
        if len(outputs) != len(playing):
            raise RuntimeError(f"the turn generator answered {len(outputs)} of {len(playing)} episodes")
        for (e, lim), completion in zip(playing, outputs, strict=True):
            _advance(e, completion, lim, tokenizer, budgets, last_turn=turn == budgets.max_turns - 1,
                     remaining_room=max_length is not None)
    for e in episodes:
        if e["done"] is None:  # only reachable when the loop broke early
            e["done"] = e["builder"].finish("max_turns")
    out: list[list[Trajectory]] = [[None] * num_samples for _ in rows]  # type: ignore[list-item]
    for e in episodes:
        out[e["row"]][e["sample"]] = e["done"]
    return out


def _advance(e: dict[str, Any], completion: Any, limit: int, tokenizer: Any, budgets: Budgets, *, last_turn: bool,
             remaining_room: bool = False) -> None:
    """Append one model turn (cut to this episode's own ``limit``), step the environment, append
    its feedback; set ``e["done"]`` when the episode ends. ``remaining_room``: OpenRLHF's order
    (module docstring)."""
    from rlexp.evaluation.generation import encode_prompt

    builder: TrajectoryBuilder = e["builder"]
    ids = list(completion.token_ids)[:limit]
    # a turn decoded wider than this episode's limit counts as stopped only if it stopped within it
    stopped = completion.finish_reason == "stop" and len(completion.token_ids) <= limit
    builder.add_agent(ids)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    answer = step_environment(e["env"], text)
    latency = answer.latency_s
    if answer.failed:  # recorded as env_error
        builder.turns.append(Turn(text, len(ids), "", 0, 0.0, {"error": str(answer.error)}, latency))
        e["done"] = builder.finish("env_error", f"step: {answer.error_text()}")
        return
    result, info = answer.result, answer.info
    builder.set_turn_reward(result.reward)
    if remaining_room:
        _advance_remaining_room(e, builder, text, ids, result, info, latency, tokenizer, stopped=stopped,
                                last_turn=last_turn)
        return
    finish = turn_finish(stopped=stopped, done=answer.done, last_turn=last_turn)
    if finish == "length":  # cut: graded as it stands, then ended (its feedback is not kept)
        builder.turns.append(Turn(text, len(ids), "", 0, float(result.reward), info, latency))
        e["done"] = builder.finish(finish)
        return
    if finish is not None:
        builder.turns.append(Turn(text, len(ids), result.feedback, 0, float(result.reward), info, latency))
        e["done"] = builder.finish(finish)
        return
    feedback_ids = encode_prompt(tokenizer, render_user_turn(tokenizer, result.feedback))
    if builder.generated + len(feedback_ids) >= budgets.max_total_tokens:
        builder.turns.append(Turn(text, len(ids), result.feedback, 0, float(result.reward), info, latency))
        e["done"] = builder.finish("length")
        return
    builder.add_env(feedback_ids)
    builder.turns.append(Turn(text, len(ids), result.feedback, len(feedback_ids), float(result.reward), info, latency))


def _advance_remaining_room(e: dict[str, Any], builder: TrajectoryBuilder, text: str, ids: list[int], result: Any,
                            info: Mapping[str, Any], latency: float, tokenizer: Any, *, stopped: bool,
                            last_turn: bool) -> None:
    """The rest of a turn under OpenRLHF's budget: ``done`` or the last turn end the episode with
    no feedback (what rlexp's agent file answers there); otherwise the feedback is appended with
    no length check, and a cut turn (it used all the room left) ends the episode after it."""
    from rlexp.evaluation.generation import encode_prompt

    reward = float(result.reward)
    if result.done or last_turn:
        builder.turns.append(Turn(text, len(ids), result.feedback, 0, reward, info, latency))
        e["done"] = builder.finish(turn_finish(stopped=stopped, done=bool(result.done), last_turn=last_turn) or "")
        return
    feedback_ids = encode_prompt(tokenizer, render_user_turn(tokenizer, result.feedback))
    builder.add_env(feedback_ids)
    builder.turns.append(Turn(text, len(ids), result.feedback, len(feedback_ids), reward, info, latency))
    if not stopped:
        e["done"] = builder.finish("length")
