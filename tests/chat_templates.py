"""Small local tokenizers that render with real models' chat templates (``tests/data/chat_templates``),
and a scripted multi-turn episode to check turn boundaries against them.

One token per printable character (newline included) plus the model's own special tokens, so a
rendering tokenises without any vocabulary download, and the special tokens are single ids exactly
as in the released tokenizers. ``name`` -> (template file, bos, eos, other special tokens).
"""

from __future__ import annotations

import string
from pathlib import Path

from rlexp.environments.interface import BaseEnvironment, StepResult, register

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"

MODELS = {
    # SmolLM2's GGUF: bos id 1 = <|im_start|>, eos id 2 = <|im_end|>, id 0 = <|endoftext|>
    "smollm2": ("smollm2-135m-instruct.jinja", "<|im_start|>", "<|im_end|>", ("<|endoftext|>",)),
    "llama3.1": ("llama-3.1-8b-instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
                 ("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>")),
}


def build(name: str):
    """A ``PreTrainedTokenizerFast`` with model ``name``'s chat template and special tokens."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    file, bos, eos, others = MODELS[name]
    specials = [bos, eos, *others, "<unk>", "<pad>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in string.printable:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token=eos, unk_token="<unk>",
                                        pad_token="<pad>", additional_special_tokens=list(others),
                                        padding_side="left")
    tokenizer.chat_template = (TEMPLATES / file).read_text(encoding="utf-8")
    return tokenizer


# ----------------------------------------------------------------- a scripted multi-turn episode


@register("test_chat_turns")
class ChatTurnsEnv(BaseEnvironment):
    """Ends after ``config.turns`` steps; the feedback carries a newline and the step number."""

    def reset(self, task):
        self.steps = 0
        return f"Compute {task.get('name', task.get('prompt'))}."

    def step(self, action_text):
        self.steps += 1
        done = self.steps >= int(self.config.get("turns", 3))
        return StepResult(feedback=f"tool said:\n{self.steps * 7}", reward=float(done), done=done)


ACTIONS = ["call add 3 4", "call mul 7 1", "The answer is 7."]

# what each template writes after the end-of-turn token that closes the last assistant message,
# read off the templates: ChatML's '<|im_end|>' + '\n'; Llama 3.1's '<|eot_id|>' with nothing after;
# the tiny model's eos with nothing after
TRAILING = {"smollm2": "\n", "llama3.1": "", "tiny": ""}


def tokenizer_for(name):
    if name == "tiny":
        from rlexp.models.tiny import build_tokenizer

        return build_tokenizer()
    return build(name)


def scripted_turns(tokenizer, actions):
    """A turn generator answering turn k with ``actions[k]`` + EOS, for every episode."""
    from rlexp.evaluation.generation import Completion

    calls = []

    def turns(batch, width, seed):
        text = actions[len(calls)]
        calls.append([list(ids) for ids in batch])
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        assert len(ids) <= width
        return [Completion(text, tuple(ids), "stop", len(p), len(ids)) for p in batch]

    return turns, calls


def template_ids(tokenizer, observation, actions, feedbacks):
    messages = [{"role": "user", "content": observation}]
    for k, action in enumerate(actions):
        messages.append({"role": "assistant", "content": action})
        if k < len(feedbacks):
            messages.append({"role": "user", "content": feedbacks[k]})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


FEEDBACKS = ["tool said:\n7", "tool said:\n14"]  # what ChatTurnsEnv answers to the first two actions


def check_ids(tokenizer, name, ids):
    """``ids`` (a whole episode of ChatTurnsEnv on task ``a`` answered with ACTIONS) are the
    template's rendering of that conversation, up to what the template writes after the last
    end-of-turn token."""
    expected = template_ids(tokenizer, "Compute a.", ACTIONS, FEEDBACKS)
    trailing = tokenizer(TRAILING[name], add_special_tokens=False)["input_ids"]
    assert list(ids) + trailing == expected


def check_episode(tokenizer, name, trajectory):
    assert trajectory.finish_reason == "stop" and len(trajectory.turns) == 3
    assert [turn.feedback for turn in trajectory.turns[:-1]] == FEEDBACKS
    check_ids(tokenizer, name, trajectory.token_ids)
    # and the agent's tokens are exactly the actions with their end-of-turn token, in order
    agent = [i for i, m in zip(trajectory.token_ids, trajectory.agent_mask, strict=True) if m]
    want = []
    for action in ACTIONS:
        want += tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert agent == want
