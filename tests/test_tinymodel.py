"""The tiny base model: loads with Auto*, a char tokenizer, a chat template, deterministic, SFT cached."""

from __future__ import annotations

import json
import string

import pytest

pytest.importorskip("torch")

from rlexp.errors import InputError  # noqa: E402
from rlexp.experiment.files import sha256_dir  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlexp.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "base", seed=0)


def test_loads_with_auto_classes_and_has_the_ids_set(tiny):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    config = AutoConfig.from_pretrained(tiny)
    generation = GenerationConfig.from_pretrained(tiny)
    assert config.model_type == "llama" and config.num_hidden_layers == 3 and config.hidden_size == 128
    assert 0.4e6 < sum(p.numel() for p in model.parameters()) < 1.0e6  # docs/local-trainer.md: 0.62 M
    assert config.vocab_size == len(tokenizer) == 95 + 7
    for source in (config, generation):
        assert source.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|eos|>")
        assert source.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"


def test_tokenizer_is_one_token_per_character(tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    text = string.printable[:95] + "What is 47 + 12? \\boxed{59}"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == list(text)  # reference: Python's own split
    assert tokenizer.decode(ids) == text
    assert (
        tokenizer("12", add_special_tokens=True)["input_ids"]
        == tokenizer("12", add_special_tokens=False)["input_ids"]
    )


def test_chat_template_lives_in_tokenizer_config_and_renders(tiny):
    from transformers import AutoTokenizer

    assert "chat_template" in json.loads((tiny / "tokenizer_config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    user = [{"role": "user", "content": "What is 1 + 2?"}]
    assert (
        tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        == "<|bos|><|user|>What is 1 + 2?<|assistant|>"
    )
    assert tokenizer.apply_chat_template(user, tokenize=False) == "<|bos|><|user|>What is 1 + 2?"
    convo = [*user, {"role": "assistant", "content": "\\boxed{3}"}]
    assert tokenizer.apply_chat_template(convo, tokenize=False).endswith("<|assistant|>\\boxed{3}<|eos|>")
    ids = tokenizer.apply_chat_template(user, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    special = tokenizer.convert_tokens_to_ids(["<|bos|>", "<|user|>"])
    assert list(ids[:2]) == special and ids[2:16] == tokenizer("What is 1 + 2?")["input_ids"]


def test_build_is_deterministic_per_seed(tmp_path):
    from rlexp.models.tiny import build_tiny_model

    a = sha256_dir(build_tiny_model(tmp_path / "a", seed=3))
    b = sha256_dir(build_tiny_model(tmp_path / "b", seed=3))
    c = sha256_dir(build_tiny_model(tmp_path / "c", seed=4))
    assert a == b != c


def test_sft_batch_supervises_only_the_answer(tiny):
    from transformers import AutoTokenizer

    from rlexp.evaluation.arithmetic_task import Problem
    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.models.tiny import _sft_batch

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    problems = [Problem("What is 1 + 2?", "3", "add"), Problem("What is 10 - 9?", "1", "sub")]
    ids, labels, attention = _sft_batch(tokenizer, problems, "")
    for row in range(2):
        supervised = [int(t) for t in labels[row] if t != -100]
        assert tokenizer.decode(supervised[:-1]) == problems[row].target_text()
        assert supervised[-1] == tokenizer.eos_token_id
        rendered = render_prompt(tokenizer, problems[row].prompt, "")
        assert int(attention[row].sum()) == len(encode_prompt(tokenizer, rendered)) + len(supervised)


@pytest.mark.slow
def test_sft_learns_the_format_and_is_cached(tiny, tmp_path):
    from rlexp.evaluation.arithmetic_task import ArithmeticTask
    from rlexp.models.tiny import read_sft_result, sft_tiny_model, sha256_dir_excluding

    task = ArithmeticTask(max_operand=9)  # a small universe: 100 additions + 55 subtractions
    out = sft_tiny_model(tiny, task, tmp_path / "sft", steps=60, seed=0, batch_size=32, eval_every=30,
                         target_acc=1.1, dev_size=20)  # fmt: skip
    meta = read_sft_result(out)
    assert meta["steps_run"] == 60 and not meta["stopped_early"]
    assert [s for s, _ in meta["history"]] == [30, 60]
    assert meta["sha256"] == sha256_dir_excluding(out, "sft.json")
    before = (out / "model.safetensors").stat().st_mtime_ns
    again = sft_tiny_model(tiny, task, tmp_path / "sft", steps=60, seed=0, batch_size=32, eval_every=30,
                           target_acc=1.1, dev_size=20)  # fmt: skip
    assert again == out and (out / "model.safetensors").stat().st_mtime_ns == before  # cached
    # The supervised model now writes the boxed format (the untrained one never does).
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.generation import generate, render_prompt

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    prompts = [render_prompt(tokenizer, f"What is {a} + 1?", "") for a in range(5)]
    texts = [row[0].text for row in generate(model, tokenizer, prompts, max_new_tokens=12)]
    assert all(t.startswith("\\boxed{") for t in texts), texts


def test_sft_refuses_a_directory_that_is_not_a_model(tmp_path):
    from rlexp.evaluation.arithmetic_task import ArithmeticTask
    from rlexp.models.tiny import sft_tiny_model

    with pytest.raises(InputError, match="config.json"):
        sft_tiny_model(tmp_path, ArithmeticTask(), tmp_path / "out", steps=1)
