"""Batched decoding on a Hugging Face causal LM — the one generation path for rollouts and eval.

One request per problem once made every post-hoc eval slow. Here prompts are
tokenised together, padded on the *left* (so every row's next token sits in the last column),
and decoded with the KV cache by ``model.generate`` with an attention mask; rows are sorted by
length first so a batch carries little padding. Greedy batched output is token-identical to
one-at-a-time output (tests/test_generation.py checks it on the tiny model).

A prompt suffix on one side only once moved a baseline by 10pp (docs/plan.md#prompt-suffix-parity),
so :func:`render_prompt` is the only place a prompt is built — the user message is
``problem_prompt + suffix`` through the tokenizer's own chat template — and training, eval and the
G0 parity guard all call it.

Truncation is never guessed from text (a wrong answer and a cut one can read alike):
``finish_reason`` is ``"stop"`` when the model emitted an end-of-sequence token within
``max_new_tokens``, else ``"length"``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import sha256_text


@dataclass(frozen=True)
class Completion:
    """One sampled continuation. ``token_ids`` include the EOS token when ``finish_reason == "stop"``
    (the trainer learns to stop); ``text`` is decoded without special tokens."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int


def render_prompt(tokenizer: Any, problem_prompt: str, suffix: str) -> str:
    """The model input for one problem: its chat template applied to one user message
    (``problem_prompt + suffix``) with the generation prompt appended."""
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(getattr(tokenizer, "name_or_path", None), "chat_template", "the tokenizer has no chat template")
    messages = [{"role": "user", "content": problem_prompt + suffix}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def chat_template_sha256(tokenizer: Any) -> str:
    """Hash of the chat template text; recorded with every eval so a template change shows."""
    return sha256_text(getattr(tokenizer, "chat_template", None) or "")


def encode_prompt(tokenizer: Any, rendered: str) -> list[int]:
    """Token ids of a rendered prompt. The chat template already holds any BOS it wants, so no
    special tokens are added here (adding them again is a classic double-BOS parity bug)."""
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    num_samples: int = 1,
    seed: int | None = None,
    batch_size: int = 64,
) -> list[list[Completion]]:
    """Decode ``num_samples`` continuations of each rendered prompt; result ``[prompt][sample]``.

    ``temperature == 0`` is greedy (then every sample is the same: ``nondet_proxy`` only);
    ``temperature > 0`` samples from the plain softmax (no top-k/top-p). ``seed`` makes sampling
    repeatable for the same prompts and ``batch_size``. ``batch_size`` counts rows (prompt × sample).
    """
    encoded = [encode_prompt(tokenizer, p) for p in prompts]  # generate_ids checks the arguments
    return generate_ids(model, tokenizer, encoded, max_new_tokens=max_new_tokens, temperature=temperature,
                        num_samples=num_samples, seed=seed, batch_size=batch_size)


def generate_ids(
    model: Any,
    tokenizer: Any,
    encoded: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    num_samples: int = 1,
    seed: int | None = None,
    batch_size: int = 64,
) -> list[list[Completion]]:
    """:func:`generate` on token ids already encoded (token-in/token-out: an episode's later turns
    continue from the ids it holds, never from re-tokenised text). Same decoding, same result."""
    import torch

    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if num_samples < 1:
        raise ValueError("num_samples must be >= 1")
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if not encoded:
        return []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stop_ids = eos_token_ids(model, tokenizer)
    prompts = encoded
    rows = [(i, s) for i in range(len(prompts)) for s in range(num_samples)]
    # Longest first: similar lengths share a batch (less padding), and the first batch shows OOM early.
    rows.sort(key=lambda r: (-len(encoded[r[0]]), r[0], r[1]))
    results: list[list[Completion | None]] = [[None] * num_samples for _ in prompts]
    device = next(model.parameters()).device

    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]) if seed is not None else nullcontext(), torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            for start in range(0, len(rows), max(1, batch_size)):
                chunk = rows[start : start + batch_size]
                ids = [encoded[i] for i, _ in chunk]
                width = max(len(x) for x in ids)
                input_ids = torch.tensor([[pad_id] * (width - len(x)) + x for x in ids], device=device)
                attention = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], device=device)
                sampling = temperature > 0
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    max_new_tokens=max_new_tokens,
                    do_sample=sampling,
                    temperature=temperature if sampling else None,
                    top_k=0 if sampling else None,
                    top_p=1.0 if sampling else None,
                    pad_token_id=pad_id,
                    eos_token_id=sorted(stop_ids) or None,
                    use_cache=True,
                )
                new_tokens = out[:, width:].tolist()
                for (i, s), tokens, prompt_ids in zip(chunk, new_tokens, ids, strict=True):
                    results[i][s] = _completion(tokenizer, tokens, stop_ids, len(prompt_ids))
    finally:
        if was_training:
            model.train()
    return [[c for c in row if c is not None] for row in results]


def _completion(tokenizer: Any, tokens: list[int], stop_ids: set[int], prompt_tokens: int) -> Completion:
    kept: list[int] = []
    finish = "length"
    for token in tokens:
        kept.append(token)
        if token in stop_ids:
            finish = "stop"
            break
    text = tokenizer.decode(kept, skip_special_tokens=True)
    return Completion(
        text=text,
        token_ids=tuple(kept),
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        completion_tokens=len(kept),
    )


def pin_torch_threads() -> int:
    """Set torch's intra-op thread count from ``RLEXP_TORCH_THREADS`` (default 1) and return it: the local
    trainer and the local engine both call it before their first tensor. torch otherwise takes one thread
    per core and, on a machine that is doing anything else, they fight the other processes for the cores:
    an eval of 1,000 problems took 3.8x the wall time (4x the CPU) of one thread on a busy 2-core machine.
    benchmarks/bench_eval_threads.py measures 1 against 2 threads."""
    import os

    import torch

    raw = os.environ.get("RLEXP_TORCH_THREADS", "1")
    try:
        threads = max(1, int(raw))
    except ValueError:
        raise InputError("RLEXP_TORCH_THREADS", None, f"a whole number of threads, got {raw!r}") from None
    torch.set_num_threads(threads)
    return threads


def torch_device() -> str:
    """``RLEXP_DEVICE`` (default ``cpu``): where the local trainer and the local engine put the model.
    ``cuda`` is for scripts/gpu-check; results on the CPU are the reference."""
    import os

    return os.environ.get("RLEXP_DEVICE", "cpu")
