"""Small local tokenizers that render with real models' chat templates (``tests/data/chat_templates``).

One token per printable character (newline included) plus the model's own special tokens, so a
rendering tokenises without any vocabulary download, and the special tokens are single ids exactly
as in the released tokenizers. ``name`` -> (template file, bos, eos, other special tokens).
"""

from __future__ import annotations

import string
from pathlib import Path

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
