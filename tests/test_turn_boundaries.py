"""Turn boundaries are the chat template's own: a multi-turn episode's ids equal the tokenizer's
``apply_chat_template`` rendering of the same conversation, for real templates (SmolLM2's ChatML,
Llama 3.1's; ``tests/data/chat_templates``) and the tiny demo model's, on the trainer's rollout and
on the eval engines' path. The expected ids come from the template alone (``apply_chat_template``
of the conversation), never from rlexp's rendering."""

from __future__ import annotations

import pytest

from rlexp.environments.interface import Budgets, parse_rows
from tests.chat_templates import ACTIONS, check_episode, scripted_turns, tokenizer_for

NAMES = ["smollm2", "llama3.1", "tiny"]
ROWS = [{"env": "test_chat_turns", "config": {"turns": 3}, "task": {"name": "a"}}]


@pytest.mark.parametrize("name", NAMES)
def test_trainer_rollout_is_the_templates_rendering(name, monkeypatch):
    from rlexp.environments import episodes
    from rlexp.evaluation import generation

    tokenizer = tokenizer_for(name)
    turns, calls = scripted_turns(tokenizer, ACTIONS)

    def generate_ids(model, tok, batch, *, max_new_tokens, **_):
        return [(c,) for c in turns(batch, max_new_tokens, None)]

    monkeypatch.setattr(generation, "generate_ids", generate_ids)
    [[trajectory]] = episodes.run_episodes(None, tokenizer, parse_rows(ROWS), budgets=Budgets(3, 64, 400))
    check_episode(tokenizer, name, trajectory)
    # every turn's input is the template's rendering of the conversation so far + the generation prompt
    messages = [{"role": "user", "content": "Compute a."}]
    for k, ids in enumerate(calls):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ids == [tokenizer(text, add_special_tokens=False)["input_ids"]], k
        messages += [{"role": "assistant", "content": ACTIONS[k]}, {"role": "user", "content": f"tool said:\n{7 * (k + 1)}"}]


@pytest.mark.parametrize("name", NAMES)
def test_eval_engine_rollout_is_the_templates_rendering(name):
    from rlexp.environments.episodes import engine_turns, play_episodes

    tokenizer = tokenizer_for(name)
    turns, _ = scripted_turns(tokenizer, ACTIONS)

    class Engine:  # an eval engine's generate_tokens, answering from the script
        def generate_tokens(self, batch, decoding, adapter=None):
            return turns(batch, decoding.max_tokens, None)

    import dataclasses

    decoding = dataclasses.make_dataclass("Decoding", [("max_tokens", int), ("seed", int)])(64, 0)
    [[trajectory]] = play_episodes(engine_turns(Engine(), None, decoding), tokenizer, parse_rows(ROWS),
                                   budgets=Budgets(3, 64, 400))
    check_episode(tokenizer, name, trajectory)


def test_the_remaining_room_rollout_is_the_templates_rendering(monkeypatch):
    """OpenRLHF's budget (``max_length``): the rollout its agent file reproduces."""
    from rlexp.environments.episodes import play_episodes

    tokenizer = tokenizer_for("smollm2")
    turns, _ = scripted_turns(tokenizer, ACTIONS)
    [[trajectory]] = play_episodes(turns, tokenizer, parse_rows(ROWS), budgets=Budgets(3, 64, 400), max_length=400)
    check_episode(tokenizer, "smollm2", trajectory)


def test_a_template_that_closes_a_turn_without_a_special_token_is_refused():
    from rlexp.environments.episodes import render_user_turn

    tokenizer = tokenizer_for("smollm2")
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="end-of-turn token"):
        render_user_turn(tokenizer, "hi")
