"""The demo's base model: a tiny Llama-style causal LM with a character tokenizer, built locally.

Two steps, each cached on disk:

- :func:`build_tiny_model` writes an *untrained* Hugging Face model directory (config, weights,
  ``tokenizer.json``, ``tokenizer_config.json`` with a Jinja chat template, generation config)
  that loads with ``AutoModelForCausalLM`` / ``AutoTokenizer``. No hub access.
- :func:`sft_tiny_model` supervises it briefly on the task's training distribution so that it
  answers ``\\boxed{N}`` — and stops early, around 45% greedy accuracy on held-out shifted
  problems, so GRPO has real headroom (docs/local-trainer.md gives the measured numbers).

The tokenizer is one token per character (printable ASCII) plus special tokens; arithmetic is
far easier to learn digit by digit than through BPE merges. The chat template puts the BOS token
in the text itself and the tokenizer has no post-processor, so ``render_prompt`` followed by
tokenisation gives the same ids whatever ``add_special_tokens`` says.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.files import (
    atomic_write_json,
    make_temp_dir,
    read_json,
    replace_dir,
    sha256_dir,
    sha256_text,
)

if TYPE_CHECKING:  # the task module is pure; imported for type names only
    from rlexp.evaluation.arithmetic_task import ArithmeticTask

BOS, EOS, PAD, UNK = "<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>"
USER, ASSISTANT, SYSTEM = "<|user|>", "<|assistant|>", "<|system|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, USER, ASSISTANT, SYSTEM)  # ids 0..6, in this order
CHARACTERS = tuple(string.printable[:95])  # printable ASCII: digits, letters, punctuation, space

# One user turn, one assistant turn; BOS is part of the text so every path tokenises alike.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}" + SYSTEM + "{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}" + USER + "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}" + ASSISTANT + "{{ message['content'] }}{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)

# The same chat with tool calls and tool results, for TRL's ``environment_factory`` (a tool-calling
# loop that needs a template rendering ``user -> assistant(tool_calls) -> tool`` and a
# ``response_template`` that parses the calls back out of the generated text). A call is plain text
# (the tokenizer has no tool tokens): ``@name key=value ...`` closed by EOS; a tool result renders
# as a user turn, as rlexp's text episodes render feedback. The tools' schemas are not rendered
# into the prompt: a 128-position model has no room for them (it learns its tools in supervision).
TOOL_CALL_OPEN = "@"
TOOLS_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}" + SYSTEM + "{{ message['content'] }}"
    "{% elif message['role'] == 'user' or message['role'] == 'tool' %}" + USER + "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}" + ASSISTANT + "{{ message['content'] or '' }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% set fn = call['function'] %}" + TOOL_CALL_OPEN + "{{ fn['name'] }}"
    "{% for key, value in (fn['arguments'] or {}).items() %} {{ key }}={{ value }}{% endfor %}"
    "{% endfor %}"
    "{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)
# transformers' response parser for that template (``tokenizer.response_template``, transformers >=
# 5.13; what TRL's parse_response reads): after the last ``<|assistant|>``, ``@name`` opens a call
# whose ``key=value`` pairs (separated by spaces) are its arguments, up to EOS; anything else is the
# content, up to EOS.
TOOLS_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": ASSISTANT,
    "fields": {
        "tool_calls": {
            "open_pattern": TOOL_CALL_OPEN + r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
            "close": EOS,
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"line_sep": " ", "kv_sep": "="},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close": EOS, "content": "text"},
    },
}


def with_tool_template(tokenizer: Any) -> Any:
    """``tokenizer`` given the tool-calling chat template and its response template (in place): what
    a checkpoint trained through TRL's ``environment_factory`` is saved with. The plain template's
    renderings of user/assistant turns without tool calls are unchanged."""
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    tokenizer.response_template = TOOLS_RESPONSE_TEMPLATE
    return tokenizer


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the tiny model. The defaults are the measured setting of docs/local-trainer.md (0.62 M
    parameters): small enough for the CPU demo, large enough to learn the task."""

    num_hidden_layers: int = 3
    hidden_size: int = 128
    intermediate_size: int = 352
    num_attention_heads: int = 4
    max_position_embeddings: int = 128


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, config: TinyModelConfig | None = None) -> Path:
    """Write an untrained tiny Llama-style model + char tokenizer to ``out_dir``; return the path.

    Deterministic for a given ``seed`` and ``config``: the same bytes every time (checked by
    the tests through :func:`rlexp.experiment.files.sha256_dir`).
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = config or TinyModelConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    vocab_size = len(tokenizer)
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}

    llama = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_attention_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
    )
    # Seeded init; a local generator state so building the model does not disturb the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(llama)
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD], do_sample=False
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # template inside tokenizer_config.json
    return out


def build_tokenizer():
    """A ``PreTrainedTokenizerFast``: one token per printable ASCII character, plus specials."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab[ch] = len(vocab)
    # BPE without merges over a character vocabulary = exactly one token per character.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()  # join characters back without spaces in between
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[USER, ASSISTANT, SYSTEM],
        padding_side="left",  # decoder-only generation pads on the left
        model_max_length=128,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


# --------------------------------------------------------------------------- supervised tuning


@dataclass(frozen=True)
class SftResult:
    """What :func:`sft_tiny_model` did, as written to ``out_dir/sft.json``.

    Only what the inputs determine: ``sft.json`` is hashed with the model (``model_sha256`` of
    every eval record), so the run's wall time and the directory it was written to stay out of it
    — two builds with the same settings give the same bytes and the same hash.
    """

    key: str
    sha256: str
    steps_run: int
    stopped_early: bool
    dev_acc: float
    history: tuple[tuple[int, float], ...]  # (step, greedy dev accuracy)


def sft_tiny_model(
    model_dir: str | Path,
    task: ArithmeticTask,
    out_dir: str | Path,
    *,
    steps: int = 2000,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 1e-3,
    target_acc: float = 0.45,
    eval_every: int = 25,
    dev_size: int = 200,
    exclude_hashes: frozenset[str] = frozenset(),
    progress: Any = None,
    snapshots: Mapping[float, str | Path] | None = None,
) -> Path:
    """Supervise ``model_dir`` on the task's training distribution; write the result to ``out_dir``.

    Trains on problems from ``task.sft_problems`` (never a hash in ``exclude_hashes`` — pass the
    evaluation sets' hashes), the loss on the answer tokens only. Every ``eval_every`` steps
    greedy accuracy is measured on a held-out dev sample of the OOD distribution; training stops
    as soon as it reaches ``target_acc`` (the base must leave GRPO headroom).

    Cached: ``out_dir/sft.json`` records a key of every setting plus the input model's SHA-256;
    a second call with the same settings returns at once. ``progress(step, steps, dev_acc, loss)``
    is called after each evaluation when given (``loss``: running mean of the training loss).

    ``snapshots`` maps lower target accuracies to directories: the model is also saved there the
    first time its dev accuracy reaches that target. One run so yields models of several
    strengths along one trajectory (restarting SFT from a supervised model with a fresh optimizer
    stalls instead).
    """
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, out = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.json").exists():
        raise InputError(model_dir, "config.json", "not a model directory")
    settings = sft_settings(model_dir, task, steps=steps, seed=seed, batch_size=batch_size, lr=lr,
                            target_acc=target_acc, eval_every=eval_every, dev_size=dev_size,
                            exclude_hashes=exclude_hashes, snapshots=snapshots)
    key = sft_key(settings)
    if _sft_cached(out, key, snapshots):
        return out

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        rng = random.Random(seed)  # the SFT's own stream: the dev sample, then the batches
        dev, train = _sft_split(task, rng, dev_size, exclude_hashes)

        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
        warmup = max(1, steps // 20)  # a short linear warm-up keeps the first Adam steps from diverging
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / warmup))
        running_loss = 0.0
        history: list[tuple[int, float]] = []
        dev_acc, step, stopped_early = 0.0, 0, False
        pending = sorted((float(t), Path(d)) for t, d in (snapshots or {}).items())
        model.train()
        for step in range(1, steps + 1):
            batch = [train[rng.randrange(len(train))] for _ in range(batch_size)]
            input_ids, labels, attention = _sft_batch(tokenizer, batch, task.prompt_suffix)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running_loss = loss.item() if step == 1 else 0.95 * running_loss + 0.05 * loss.item()
            if step % eval_every == 0 or step == steps:
                dev_acc = greedy_accuracy(model, tokenizer, dev, task.prompt_suffix)
                history.append((step, dev_acc))
                model.train()
                if progress is not None:
                    progress(step, steps, dev_acc, running_loss)
                while pending and dev_acc >= pending[0][0]:
                    _save_model(model, tokenizer, pending.pop(0)[1])
                if dev_acc >= target_acc:
                    stopped_early = step < steps
                    break
    model.eval()
    _write_sft_model(model, tokenizer, out, key=key, settings=settings, steps_run=step, stopped_early=stopped_early,
                     dev_acc=dev_acc, history=history)
    return out


def _sft_cached(out: Path, key: str, snapshots: Mapping[float, str | Path] | None) -> bool:
    """Whether ``out`` already holds the model these settings make (same key, files unchanged) and
    every snapshot directory exists."""
    meta_path = out / "sft.json"
    if not meta_path.exists():
        return False
    meta = read_json(meta_path)
    return (meta.get("key") == key and meta.get("sha256") == sha256_dir_excluding(out, "sft.json")
            and all((Path(d) / "config.json").exists() for d in (snapshots or {}).values()))


def _sft_split(task: ArithmeticTask, rng: Any, dev_size: int,
               exclude_hashes: frozenset[str]) -> tuple[list[Any], list[Any]]:
    """The held-out dev sample (drawn first from ``rng``) and the SFT problems, neither holding an
    evaluation set's problem nor each other's."""
    dev = dev_sample(task, rng, dev_size, exclude_hashes)
    dev_hashes = {p.problem_hash for p in dev}
    train = [p for p in task.sft_problems() if p.problem_hash not in exclude_hashes and p.problem_hash not in dev_hashes]
    if not train:
        raise InputError(None, "task", "no SFT problems left after excluding the evaluation sets")
    return dev, train


def _write_sft_model(model: Any, tokenizer: Any, out: Path, *, key: str, settings: Mapping[str, Any],
                     steps_run: int, stopped_early: bool, dev_acc: float, history: list[tuple[int, float]]) -> None:
    """Save the model with its ``sft.json`` into a fresh directory, then swap it in: a killed build
    never leaves a half model cached."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(out)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp, save_jinja_files=False)
    result = SftResult(key=key, sha256=sha256_dir(tmp), steps_run=steps_run, stopped_early=stopped_early,
                       dev_acc=dev_acc, history=tuple(history))
    atomic_write_json(tmp / "sft.json", {**asdict(result), "settings": settings})
    replace_dir(tmp, out)


def sft_settings(model_dir: str | Path, task: ArithmeticTask, *, steps: int = 2000, seed: int = 0,
                 batch_size: int = 64, lr: float = 1e-3, target_acc: float = 0.45, eval_every: int = 25,
                 dev_size: int = 200, exclude_hashes: frozenset[str] = frozenset(),
                 snapshots: Mapping[float, str | Path] | None = None) -> dict[str, Any]:
    """Every input of :func:`sft_tiny_model` that decides its result (the input model by SHA-256)."""
    settings: dict[str, Any] = {
        "base_sha256": sha256_dir(model_dir),
        "task": task.settings(),
        "steps": steps,
        "seed": seed,
        "batch_size": batch_size,
        "lr": lr,
        "target_acc": target_acc,
        "eval_every": eval_every,
        "dev_size": dev_size,
        "exclude": sha256_text("\n".join(sorted(exclude_hashes))),
    }
    if snapshots:  # only then, so that the keys of earlier caches stay valid
        settings["snapshots"] = sorted(float(t) for t in snapshots)
    return settings


def sft_key(settings: Mapping[str, Any]) -> str:
    """The SFT cache key: ``sft.json`` records it, and a model built with other settings has another."""
    return sha256_text(repr(sorted(settings.items())))[:16]


def dev_sample(task: ArithmeticTask, rng: Any, dev_size: int, exclude_hashes: frozenset[str] = frozenset()) -> list:
    """The held-out dev problems the SFT measures its greedy accuracy on (the first draws of ``rng``,
    a ``random.Random(seed)``): OOD problems outside ``exclude_hashes``."""
    dev_pool = [p for p in task.ood_problems() if p.problem_hash not in exclude_hashes]
    return rng.sample(dev_pool, min(dev_size, len(dev_pool)))


def _save_model(model, tokenizer, out: Path) -> None:
    """Save into a fresh directory then swap: a killed run never leaves a half model."""

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(out)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp, save_jinja_files=False)
    replace_dir(tmp, out)
    model.train()


def sha256_dir_excluding(path: Path, name: str) -> str:
    """SHA-256 of a model directory without its own metadata file (which records that hash)."""
    return sha256_dir(path, exclude=(name,))


def read_sft_result(out_dir: str | Path) -> dict[str, Any]:
    """The ``sft.json`` of an SFT'd model directory (key, SHA-256, steps, dev accuracy, history)."""
    return read_json(Path(out_dir) / "sft.json")


def _render(tokenizer, prompt: str, suffix: str) -> str:
    """The prompt exactly as training and evaluation render it (rlexp.evaluation.generation.render_prompt)."""
    from rlexp.evaluation.generation import render_prompt

    return render_prompt(tokenizer, prompt, suffix)


def _sft_batch(tokenizer, problems, suffix: str):
    """Right-padded input ids with labels on the answer tokens (and EOS) only."""
    import torch

    from rlexp.evaluation.generation import encode_prompt

    rows, label_rows = [], []
    for problem in problems:
        prompt_ids = encode_prompt(tokenizer, _render(tokenizer, problem.prompt, suffix))
        answer_ids = tokenizer(problem.target_text(), add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
        rows.append(prompt_ids + answer_ids)
        label_rows.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in label_rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return input_ids, labels, attention


def greedy_accuracy(model, tokenizer, problems, suffix: str, *, max_new_tokens: int = 16) -> float:
    """Fraction of ``problems`` answered exactly (greedy, through the shared answer extractor)."""
    import torch

    from rlexp.evaluation.answers import extract_answer, is_correct
    from rlexp.evaluation.generation import generate

    if not problems:
        return 0.0
    model.eval()
    prompts = [_render(tokenizer, p.prompt, suffix) for p in problems]
    with torch.no_grad():
        outputs = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=0.0)
    correct = 0
    for problem, samples in zip(problems, outputs, strict=True):
        answer, _ = extract_answer(samples[0].text)
        correct += bool(answer is not None and is_correct(answer, problem.answer))
    return correct / len(problems)
