"""The ``local`` engine: transformers (+ peft for LoRA adapters) on CPU, batched decoding.

The base model is loaded once; LoRA adapters (peft ``global_step{N}_hf`` directories) are attached
to it by name and switched per batch, and the base is served with the adapters disabled — one
model in memory, as vLLM does it. A checkpoint directory that holds full weights instead of an
adapter (``config.json`` but no ``adapter_config.json``) is loaded as its own model.

``merge=True`` folds each adapter into a private copy of the base weights
(``merge_and_unload``): the second path that guard G1 compares against the adapter path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import (
    ClosingMixin,
    Decoding,
    EngineClosed,
    Progress,
    Request,
    Result,
    Sample,
    TokenSample,
    check_token_request,
)


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").exists()


class LocalEngine(ClosingMixin):
    name = "local"

    def __init__(
        self,
        base_model: str | Path,
        adapters: dict[str, str | Path] | None = None,
        *,
        batch_size: int = 64,
        merge: bool = False,
        tokenizer_path: str | Path | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from rlexp.models.base_models import loadable

        self.base_model = Path(loadable(Path(base_model), base_model, "base model"))  # a .gguf: its converted directory
        if not (self.base_model / "config.json").exists():
            raise InputError(self.base_model, "config.json", "not a Hugging Face model directory")
        self.adapters = {name: Path(p) for name, p in (adapters or {}).items()}
        for name, path in self.adapters.items():
            if not (is_adapter_dir(path) or (path / "config.json").exists()):
                raise InputError(path, name, "neither a peft adapter (adapter_config.json) nor a model directory")
        self.batch_size = batch_size
        # rlexp.stages.evaluate hands over this many requests per call and records them before the next:
        # one batch is the most a kill can cost.
        self.preferred_chunk = batch_size
        self.merge = merge
        self.closed = False
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or self.base_model)
        self.tokenizer.padding_side = "left"
        self._torch = torch
        from rlexp.evaluation.generation import pin_torch_threads, torch_device

        pin_torch_threads()

        device = torch_device()  # cuda: scripts/gpu-check
        self._load = lambda path: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
        self.base = self._load(self.base_model)
        self._peft = None  # the base wrapped with every unmerged adapter
        self._separate: dict[str, Any] = {}  # adapters served by their own model (full weights, merged)
        peft_names = [n for n, p in self.adapters.items() if is_adapter_dir(p)]
        for name, path in self.adapters.items():
            if not is_adapter_dir(path):
                self._separate[name] = self._load(path)
            elif merge:
                self._separate[name] = merge_adapter(self._load(self.base_model), path)
        if peft_names and not merge:
            from peft import PeftModel

            first = peft_names[0]
            self._peft = PeftModel.from_pretrained(self.base, self.adapters[first], adapter_name=first)
            for name in peft_names[1:]:
                self._peft.load_adapter(self.adapters[name], adapter_name=name)
            self._peft.eval()

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        return {
            "name": self.name,
            "merge": self.merge,
            "batch_size": self.batch_size,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "dtype": "float32",
        }

    def generate(
        self, requests: Sequence[Request], decoding: Decoding, progress: Progress | None = None
    ) -> list[Result]:
        from rlexp.evaluation.generation import generate

        if self.closed:
            raise EngineClosed("the local engine was closed (its models are released); build a new one")
        results: list[Result | None] = [None] * len(requests)
        groups: dict[str | None, list[int]] = {}
        for index, request in enumerate(requests):
            if request.adapter is not None and request.adapter not in self.adapters:
                raise InputError(None, "adapter", f"unknown adapter {request.adapter!r}")
            groups.setdefault(request.adapter, []).append(index)
        for adapter, indexes in groups.items():
            with self._serving(adapter) as model:
                for start in range(0, len(indexes), self.batch_size):
                    chunk = indexes[start : start + self.batch_size]
                    outputs = generate(
                        model,
                        self.tokenizer,
                        [requests[i].prompt for i in chunk],
                        max_new_tokens=decoding.max_tokens,
                        temperature=decoding.temperature,
                        num_samples=decoding.n,
                        seed=decoding.seed + start,
                        batch_size=self.batch_size * decoding.n,
                    )
                    for i, completions in zip(chunk, outputs, strict=True):
                        samples = tuple(
                            Sample(c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens)
                            for c in completions
                        )
                        results[i] = Result(requests[i], samples)
                    if progress is not None:
                        progress(len(chunk))
        return [r for r in results if r is not None]

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], decoding: Decoding, adapter: str | None = None
    ) -> list[TokenSample]:
        """Token-in/token-out through :func:`rlexp.evaluation.generation.generate_ids`, all prompts in
        one batch (an episode turn's prompts are short; one batch is how the episode runner has
        always decoded a turn, so records stay what they were)."""
        from rlexp.evaluation.generation import generate_ids

        if self.closed:
            raise EngineClosed("the local engine was closed (its models are released); build a new one")
        if adapter is not None and adapter not in self.adapters:
            raise InputError(None, "adapter", f"unknown adapter {adapter!r}")
        check_token_request(prompts, decoding)
        if not prompts:
            return []
        with self._serving(adapter) as model:
            outputs = generate_ids(model, self.tokenizer, [list(p) for p in prompts], max_new_tokens=decoding.max_tokens,
                                   temperature=decoding.temperature, seed=decoding.seed, batch_size=len(prompts))
        return [TokenSample(c.text, c.token_ids, c.finish_reason, c.prompt_tokens, c.completion_tokens)
                for (c,) in outputs]

    def close(self) -> None:
        """Drop every model reference (base, peft wrapper, separate/merged models) and collect, so
        the weights are freed now rather than whenever the engine object dies. The tokenizer stays
        (it is small, and callers still render prompts with it)."""
        if self.closed:
            return
        import gc

        self.closed = True
        self._peft = None
        self._separate = {}
        self.base = None
        self._load = None
        gc.collect()

    @contextlib.contextmanager
    def _serving(self, adapter: str | None) -> Iterator[Any]:
        """The module that serves ``adapter`` (None = the base model, adapters disabled)."""
        if adapter is None:
            if self._peft is None:
                yield self.base
            else:
                with self._peft.disable_adapter():
                    yield self._peft
        elif adapter in self._separate:
            yield self._separate[adapter]
        else:
            self._peft.set_adapter(adapter)
            yield self._peft

def merge_adapter(base_model: Any, adapter_dir: str | Path) -> Any:
    """``base + adapter`` with the LoRA delta folded into the weights (a plain transformers model)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, adapter_dir).merge_and_unload().eval()
