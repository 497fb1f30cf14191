"""An LLM judge through an OpenAI-compatible chat endpoint, with a cache and a per-call log.

Every call is keyed by ``(judge model, prompt, answer)`` (:func:`rlexp.environments.rewards.judge_cache_key`)
and a usable score is appended to a JSONL cache file, so a rerun over the same answers makes no
call at all. Each call that does reach the server is logged (``calls``: key, latency in seconds, ok
or the error) and, when ``log_path`` is given, appended there too. A call that fails — the server
keeps failing after the bounded retries, or its reply holds no usable score — returns a
:class:`~rlexp.environments.rewards.RewardError` of kind ``judge_error``: never a silent 0. Failures are not
cached, so a later run asks again.

HTTP goes through the OpenAI engine's request code (:mod:`rlexp.evaluation.engines.http`: connect, read and
whole-call deadlines — ``timeout_s`` bounds every try of one call together —, a bounded body, bounded
retries with backoff; the API key read from the environment variable *named* by ``api_key_env`` and
never stored). A transport failure of any kind (a hang, a trickle, a cut, a reset, a body too big,
not UTF-8, not JSON, not HTTP, 429/5xx past the retries) is the same counted ``judge_error``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.environments.rewards import (
    JUDGE_ERROR,
    RewardError,
    judge_cache_key,
    judge_messages,
    parse_judge_reply,
)
from rlexp.errors import ServiceError
from rlexp.experiment.files import append_jsonl, iter_jsonl, repair_torn_tail


@dataclass(frozen=True)
class JudgeCall:
    key: str
    latency_s: float
    ok: bool
    error: str | None


class Judge:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        cache_path: str | Path | None = None,
        log_path: str | Path | None = None,
        retries: int = 2,
        backoff_s: float = 0.2,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 30.0,
        max_response_bytes: int = 1 << 20,
        max_tokens: int = 8,
        api_key_env: str | None = None,
    ) -> None:
        from rlexp.evaluation.engines.openai import OpenAIEngine

        self.model = model
        self._http = OpenAIEngine(base_url, model, retries=retries, backoff_s=backoff_s, timeout_s=timeout_s,
                                  connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s,
                                  max_response_bytes=max_response_bytes, api_key_env=api_key_env,
                                  extra_body={})  # fmt: skip
        self.max_tokens = max_tokens
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.log_path = Path(log_path) if log_path is not None else None
        self.cache: dict[str, float] = {}
        for own_file in (self.cache_path, self.log_path):  # files only this class appends to: a line
            if own_file is not None:                         # torn by a kill is dropped, not refused
                repair_torn_tail(own_file)
        if self.cache_path is not None and self.cache_path.exists():
            for _, row in iter_jsonl(self.cache_path):
                self.cache[str(row["key"])] = float(row["score"])
        self.calls: list[JudgeCall] = []
        self.cache_hits = 0

    @property
    def errors(self) -> int:
        return sum(1 for c in self.calls if not c.ok)

    def score(self, prompt: str, answer: str, reference: str | None = None) -> float | RewardError:
        """The judge's score in [0, 1] for ``answer`` to ``prompt``, or a ``judge_error``."""
        key = judge_cache_key(self.model, prompt if reference is None else f"{prompt}\n\x00{reference}", answer)
        if key in self.cache:
            self.cache_hits += 1
            return self.cache[key]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": judge_messages(prompt, answer, reference),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        started = time.perf_counter()
        try:
            reply = self._http._post("/chat/completions", body)
            text = reply["choices"][0]["message"]["content"]
            result = (parse_judge_reply(text) if isinstance(text, str)
                      else RewardError(JUDGE_ERROR, f"unusable response: content is {type(text).__name__}"))
        except ServiceError as exc:
            result = RewardError(JUDGE_ERROR, str(exc))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            result = RewardError(JUDGE_ERROR, f"unusable response: {exc!r}"[:200])
        latency = time.perf_counter() - started
        call = JudgeCall(key, round(latency, 6), not isinstance(result, RewardError),
                         result.reason if isinstance(result, RewardError) else None)  # fmt: skip
        self.calls.append(call)
        if self.log_path is not None:
            append_jsonl(self.log_path, {"key": key, "model": self.model, "latency_s": call.latency_s,
                                         "ok": call.ok, "error": call.error})  # fmt: skip
        if not isinstance(result, RewardError):
            self.cache[key] = result
            if self.cache_path is not None:
                append_jsonl(self.cache_path, {"key": key, "model": self.model, "score": result})
        return result
