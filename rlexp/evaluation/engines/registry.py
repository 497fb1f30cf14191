"""The eval-engine registry: ``eval.engine`` -> the function that opens it (adapters layer).

Each opener returns ``(engine, tokenizer)``: the engine serving the base model and each target's
adapter, and a tokenizer for rendering prompts (the base model's own, so its chat template). What
the rules need to know of an engine is in :mod:`rlexp.evaluation.engine_table`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError

if TYPE_CHECKING:
    from rlexp.spec.model import EvalSpec


def _open_local(att: EvalSpec, base: Path | str, adapters: Mapping[str, Path]) -> tuple[Any, Any]:
    from rlexp.evaluation.engines.local import LocalEngine

    settings = att.eval
    if not isinstance(base, Path):
        raise InputError(att.spec_path, "recipe.pretrain", f"{base!r} is not a local model directory")
    engine = LocalEngine(base, dict(adapters), batch_size=int(settings.batch_size or 64))
    return engine, engine.tokenizer


def _open_vllm(att: EvalSpec, base: Path | str, adapters: Mapping[str, Path]) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from rlexp.evaluation.engines.vllm import VllmEngine

    settings = att.eval
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    llm_kwargs = {
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
    }
    if settings.max_model_len:
        llm_kwargs["max_model_len"] = settings.max_model_len
    if settings.dtype:
        llm_kwargs["dtype"] = settings.dtype
    if settings.enforce_eager:
        llm_kwargs["enforce_eager"] = True
    engine = VllmEngine(str(base), dict(adapters), max_lora_rank=int(settings.max_lora_rank), tokenizer=tokenizer,
                        seed=int(settings.seed), max_loras=settings.max_loras, llm_kwargs=llm_kwargs)
    return engine, tokenizer


def _open_openai(att: EvalSpec, base: Path | str, adapters: Mapping[str, Path]) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from rlexp.evaluation.engines.openai import OpenAIEngine

    settings = att.eval
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    if not settings.base_url:
        raise InputError(att.spec_path, "eval.base_url", "the openai engine needs the server's base URL")
    if settings.api_key_env and not os.environ.get(settings.api_key_env):
        raise InputError(att.spec_path, "eval.api_key_env",
                         f"names the environment variable {settings.api_key_env}, which is not set")
    engine = OpenAIEngine(settings.base_url, settings.model or str(base), {name: name for name in adapters},
                          api_key_env=settings.api_key_env, timeout_s=settings.timeout_s,
                          connect_timeout_s=settings.connect_timeout_s, read_timeout_s=settings.read_timeout_s,
                          retries=settings.retries, max_response_bytes=settings.max_response_bytes)
    return engine, tokenizer


# eval.engine -> its opener; tests/test_architecture.py reads this table (rlexp.evaluation.engine_table: the same names)
OPENERS: dict[str, Callable[[Any, Path | str, Mapping[str, Path]], tuple[Any, Any]]] = {
    "local": _open_local,
    "vllm": _open_vllm,
    "openai": _open_openai,
}


def open_engine(att: EvalSpec, base: Path | str, adapters: Mapping[str, Path]) -> tuple[Any, Any]:
    """The engine ``att.eval.engine`` names (``att``: an attempt or a sweep), serving ``base`` and ``adapters`` (name -> path); a
    ``.gguf`` base is served from its converted directory (:func:`rlexp.models.base_models.loadable`)."""
    from rlexp.models.base_models import loadable

    opener = OPENERS.get(att.eval.engine)
    if opener is None:
        raise InputError(att.spec_path, "eval.engine",
                         f"unknown engine {att.eval.engine!r} ({' | '.join(OPENERS)})")
    # a GGUF base is served from its converted directory (the same weights and tokenizer for every engine)
    return opener(att, loadable(base, att.spec_path), adapters)
