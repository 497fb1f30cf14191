"""The ``openai`` engine: any OpenAI-compatible completions server (``vllm serve --enable-lora
--lora-modules global_step100=/path ...``), adapters addressed by model name.

The prompt is the already-rendered chat template sent to ``/v1/completions`` (not the chat
endpoint), so the server cannot apply a different template (G0); ``add_special_tokens: false`` (a
vLLM extra parameter) keeps it from adding a second BOS. Requests run with bounded concurrency and
are retried with exponential backoff on connection and protocol errors, 429 and 5xx, each request
within a connect, a read and a whole-call deadline and with a bounded body (:mod:`rlexp.evaluation.engines.http`). ``n > 1`` is sent as n
requests with ``n=1`` and seeds ``seed + j`` so each sample's token count is exact and greedy
repeats (nondet proxy) are allowed. The API key is read at request time from the environment
variable NAMED by ``api_key_env`` (the spec's ``eval.api_key_env``) and never written anywhere. No
variable named, no ``Authorization`` header: an ambient ``OPENAI_API_KEY`` is never sent to whatever
``base_url`` a spec points at unless the spec asks for it by name.

Episode turns (:meth:`OpenAIEngine.generate_tokens`) are token-in/token-out on the same endpoint:
the prompt is sent as a list of token ids (the completions API takes a token array as ``prompt``)
with ``return_token_ids: true`` (a vLLM extra parameter, vLLM >= 0.10.2), and the generated ids
are read from ``choices[0].token_ids``. A server that answers without token ids is refused with
:class:`ServerError`: the engine never re-tokenises the returned text, since text → ids is not
the inverse of ids → text and the next turn would continue from ids the model never produced.

Each request opens and closes its own connection (``http.client``), so there is no connection pool to
leak; ``close()`` marks the engine closed (later ``generate`` calls raise :class:`EngineClosed`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from rlexp.errors import InputError, ServiceError
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
    normalise_finish_reason,
)
from rlexp.evaluation.engines.http import HttpFailure, HttpLimits, check_url, post_json


class ServerError(ServiceError):
    """The server kept failing after every retry, or answered something unusable."""


class OpenAIEngine(ClosingMixin):
    name = "openai"
    preferred_chunk = 256

    def __init__(
        self,
        base_url: str,
        model: str,
        adapters: dict[str, str] | None = None,
        *,
        concurrency: int = 16,
        retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        max_response_bytes: int = 32 << 20,
        api_key_env: str | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = model
        self.adapters = dict(adapters or {})  # adapter name -> served model name
        self.concurrency = max(1, concurrency)
        try:
            check_url(self.base_url)
        except HttpFailure as exc:
            raise InputError(None, "base_url", str(exc)) from None
        # every request: connect, silence and whole-call (all tries) deadlines, a bounded body
        self.limits = HttpLimits(connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
                                 timeout_s=timeout_s, max_response_bytes=max_response_bytes,
                                 retries=retries, backoff_s=backoff_s)
        self.api_key_env = api_key_env
        self.extra_body = {"add_special_tokens": False} if extra_body is None else dict(extra_body)
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "base_url": self.base_url, "model": self.model,
                "adapters": dict(self.adapters), "extra_body": self.extra_body,
                "api_key_env": self.api_key_env}  # the variable's name only, never its value

    def generate(
        self, requests: Sequence[Request], decoding: Decoding, progress: Progress | None = None
    ) -> list[Result]:
        if self.closed:
            raise EngineClosed(f"the openai engine for {self.base_url} was closed; build a new one")
        for r in requests:
            if r.adapter is not None and r.adapter not in self.adapters:
                raise InputError(None, "adapter", f"unknown adapter {r.adapter!r}")
        jobs = [(i, j) for i in range(len(requests)) for j in range(decoding.n)]
        samples: dict[tuple[int, int], Sample] = {}

        def run(job: tuple[int, int]) -> tuple[tuple[int, int], Sample]:
            i, j = job
            return job, self._complete(requests[i], decoding, decoding.seed + j)

        finished_per_request = [0] * len(requests)
        with _pool(self.concurrency) as fail_fast_map:
            for job, sample in fail_fast_map(run, jobs):
                samples[job] = sample
                finished_per_request[job[0]] += 1
                if progress is not None and finished_per_request[job[0]] == decoding.n:
                    progress(1)
        return [Result(r, tuple(samples[(i, j)] for j in range(decoding.n))) for i, r in enumerate(requests)]

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], decoding: Decoding, adapter: str | None = None
    ) -> list[TokenSample]:
        """Token-in/token-out on ``/v1/completions``: token ids as the prompt, the generated ids
        from the answer (``return_token_ids``); bounded concurrency and retries as ``generate``."""
        if self.closed:
            raise EngineClosed(f"the openai engine for {self.base_url} was closed; build a new one")
        if adapter is not None and adapter not in self.adapters:
            raise InputError(None, "adapter", f"unknown adapter {adapter!r}")
        check_token_request(prompts, decoding)
        model = self.model if adapter is None else self.adapters[adapter]

        def run(ids: Sequence[int]) -> TokenSample:
            body = {"model": model, "prompt": [int(t) for t in ids], "max_tokens": decoding.max_tokens,
                    "temperature": decoding.temperature, "top_p": 1.0, "n": 1, "seed": decoding.seed,
                    **self.extra_body, "return_token_ids": True}
            data = self._post("/completions", body)
            try:
                choice = data["choices"][0]
                token_ids = choice.get("token_ids")
                if token_ids is None:
                    raise ServerError(f"{self.base_url}/completions answered without token_ids: episodes need "
                                      "a server that returns them (vLLM >= 0.10.2 with return_token_ids)")
                out = tuple(int(t) for t in token_ids)
                return TokenSample(str(choice.get("text") or ""), out,
                                   normalise_finish_reason(choice.get("finish_reason")), len(ids), len(out))
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                raise ServerError(f"unusable completion response from {self.base_url}: {exc!r}") from None

        with _pool(self.concurrency) as fail_fast_map:
            return list(fail_fast_map(run, prompts))

    def _complete(self, request: Request, decoding: Decoding, seed: int) -> Sample:
        body = {
            "model": self.model if request.adapter is None else self.adapters[request.adapter],
            "prompt": request.prompt,
            "max_tokens": decoding.max_tokens,
            "temperature": decoding.temperature,
            "top_p": 1.0,
            "n": 1,
            "seed": seed,
            **self.extra_body,
        }
        data = self._post("/completions", body)
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            return Sample(
                text=str(choice["text"]),
                finish_reason=normalise_finish_reason(choice.get("finish_reason")),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ServerError(f"unusable completion response from {self.base_url}: {exc!r}") from None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            data = post_json(self.base_url + path, body, self.limits, headers)
        except HttpFailure as exc:
            raise ServerError(str(exc)) from None
        if not isinstance(data, dict):
            raise ServerError(f"{self.base_url}{path}: answered JSON that is not an object")
        return data


@contextmanager
def _pool(workers: int) -> Iterator[Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]]:
    """``map`` on a thread pool that fails fast: once a request fails, the requests not yet sent are
    not sent (each ends at once) and the failure is raised as soon as the requests already running
    end, each within its own deadline — not after every queued request has tried the failing server.
    Requests start in order, so the error raised (the first in order) is a real failure."""
    failed = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers)

    def fail_fast(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def call(item: Any) -> Any:
            if failed.is_set():
                raise ServerError("not sent: an earlier request failed")
            try:
                return fn(item)
            except BaseException:
                failed.set()
                raise

        return call

    try:
        yield lambda fn, items: pool.map(fail_fast(fn), items)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
