"""G0 prompt parity (sop/README.md#guardrails): the training path's ``input_ids`` equal the eval path's
on the SOP's samples (a suffix moved a baseline by 10pp once, docs/plan.md#prompt-suffix-parity; a
checkpoint that ships its own chat template is the other way to break it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment import verdicts
from rlexp.experiment.layout import AttemptDir
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import guard_settings

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


def prompt_parity(
    train_ids: Sequence[Sequence[int]], eval_ids: Sequence[Sequence[int]], hashes: Sequence[str]
) -> Verdict:
    """G0 from two lists of token-id lists (training path, eval path), one per sample problem."""
    details = []
    for h, a, b in zip(hashes, train_ids, eval_ids, strict=True):
        if list(a) != list(b):
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            details.append({"problem_hash": h, "train_len": len(a), "eval_len": len(b), "first_difference": first})
    n = len(hashes)
    return Verdict(
        name="g0",
        passed=n > 0 and not details,
        rule=f"input_ids identical on all {n} samples (training path vs eval path)",
        numbers={"samples": n, "mismatches": len(details)},
        notes=() if n else ("no samples to compare",),
        details=tuple(details),
    )


def training_path_ids(tokenizer: Any, prompt: str, suffix: str, *, chat_template: bool = True) -> list[int]:
    """How the trainer tokenises a pool prompt. OpenRLHF without ``apply_chat_template`` feeds the
    raw text — exactly the parity break G0 is there to catch."""
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    if not chat_template:
        return list(tokenizer(prompt + suffix, add_special_tokens=True)["input_ids"])
    return encode_prompt(tokenizer, render_prompt(tokenizer, prompt, suffix))


def eval_path_ids(tokenizer: Any, prompt: str, suffix: str) -> list[int]:
    """What every eval engine is given (vLLM as token ids, local as the same ids)."""
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    return encode_prompt(tokenizer, render_prompt(tokenizer, prompt, suffix))


def run_g0(attempt: str | Path, samples: int | None = None, *, sop: Sop | None = None) -> Verdict:
    """G0 on an attempt: pool prompts through the training path (base tokenizer, pool suffix,
    the trainer's chat-template setting) vs the eval path (the tokenizer eval would load — a
    checkpoint's own tokenizer when it ships one — and the eval suffix)."""
    from transformers import AutoTokenizer

    from rlexp.experiment.datasets import read_dataset
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    samples = samples or guard_settings(sop).g0.samples
    base = att.base_model()
    pool = att.datasets.get("pool")
    source = pool if pool is not None and pool.path is not None else att.datasets.get("ood_primary")
    if source is None or source.path is None:
        raise InputError(att.spec_path, "datasets.pool", "no dataset to draw G0 samples from")
    problems = read_dataset(source.path)[:samples]
    from rlexp.models.base_models import loadable

    base = loadable(base, att.spec_path)  # a GGUF file: its converted directory, the tokenizer the runs load
    train_tok = AutoTokenizer.from_pretrained(str(base))
    eval_source = str(base)
    saved = AttemptDir(att.attempt_dir).checkpoint_files.adapters()
    if saved:
        last = saved[max(saved)]
        if (last / "tokenizer_config.json").exists():
            eval_source = str(last)
    eval_tok = AutoTokenizer.from_pretrained(eval_source)
    from rlexp.trainers import rules as trainer_rules

    uses_template = trainer_rules(att.trainer.name).uses_chat_template(att.recipe)
    train_suffix = getattr(source, "prompt_suffix", "") or ""
    primary = att.datasets.get("ood_primary")
    eval_suffix = (primary.prompt_suffix if primary is not None else att.eval.prompt_suffix) or ""
    verdict = prompt_parity(
        [training_path_ids(train_tok, p["prompt"], train_suffix, chat_template=uses_template) for p in problems],
        [eval_path_ids(eval_tok, p["prompt"], eval_suffix) for p in problems],
        [p["problem_hash"] for p in problems],
    )
    notes = list(verdict.notes)
    if train_suffix != eval_suffix:
        notes.append(f"prompt suffix differs: training {train_suffix!r} vs eval {eval_suffix!r}")
    if (train_tok.chat_template or "") != (eval_tok.chat_template or ""):
        notes.append(f"chat template differs: training uses {base}, eval loads {eval_source}")
    if not uses_template:
        notes.append("the trainer does not apply the chat template (recipe.apply_chat_template is off)")
    verdict = Verdict(verdict.name, verdict.passed, verdict.rule,
                           {**verdict.numbers, "train_tokenizer": str(base), "eval_tokenizer": eval_source},
                           tuple(notes), verdict.details)
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict
