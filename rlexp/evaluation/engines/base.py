"""The one interface every eval engine implements: rendered prompts in; text, finish reason and
token counts out.

Prompts arrive already rendered by :func:`rlexp.evaluation.generation.render_prompt` (the model tokenizer's
chat template), so every engine sees byte-identical model inputs (guard G0: a prompt suffix that
differs between training and eval once made a comparison worthless).
An engine serves the base model (``adapter=None``) and any number of named LoRA adapters.

Decoding modes carry honest names (repeats of greedy decoding were once reported as pass@k): ``greedy_pass@1`` (temperature 0, n=1),
``sampling_pass@k`` (temperature 0.6, n=k, unbiased pass@k), ``nondet_proxy_pass@k``
(temperature 0, n=k: repeats of greedy decoding — a diagnostic of nondeterminism, never a
capability number).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Self, runtime_checkable

GREEDY = "greedy_pass@1"
SAMPLING = "sampling_pass@k"
NONDET_PROXY = "nondet_proxy_pass@k"
MODES = (GREEDY, SAMPLING, NONDET_PROXY)
SAMPLING_TEMPERATURE = 0.6  # the G4 guardrail and the SOP's pass@k diagnostics


@dataclass(frozen=True)
class Decoding:
    """Decoding settings; recorded in every eval's metadata so settings never silently mix."""

    mode: str
    temperature: float
    n: int
    max_tokens: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown decoding mode {self.mode!r}; one of {MODES}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1 (vLLM's default of 16 silently truncates)")
        if self.mode == GREEDY and (self.temperature != 0 or self.n != 1):
            raise ValueError("greedy_pass@1 is temperature 0, n=1")
        if self.mode == NONDET_PROXY and self.temperature != 0:
            raise ValueError("nondet_proxy_pass@k is temperature 0")
        if self.mode == SAMPLING and self.temperature <= 0:
            raise ValueError("sampling_pass@k needs temperature > 0")

    @classmethod
    def greedy(cls, max_tokens: int, seed: int = 0) -> Decoding:
        return cls(GREEDY, 0.0, 1, max_tokens, seed)

    @classmethod
    def sampling(cls, k: int, max_tokens: int, temperature: float = SAMPLING_TEMPERATURE, seed: int = 0) -> Decoding:
        return cls(SAMPLING, temperature, k, max_tokens, seed)

    @classmethod
    def nondet_proxy(cls, k: int, max_tokens: int, seed: int = 0) -> Decoding:
        return cls(NONDET_PROXY, 0.0, k, max_tokens, seed)

    @classmethod
    def for_eval(cls, settings: Any, *, samples: int | None = None, temperature: float = SAMPLING_TEMPERATURE,
                 max_tokens: int | None = None) -> Decoding:
        """The decoding of an attempt's evaluations, from its ``eval`` settings: greedy, or ``samples``
        samples at ``temperature`` (G4); ``max_tokens`` and ``seed`` from the settings unless given.

        Every record file of an attempt (eval, G1, G2, G4) takes its decoding from here: the decoding is
        an identity key of a record file, so one built by hand with a setting left out (the seed, once)
        made ``rlexp eval`` refuse the records G2 had written for it to resume from."""
        tokens = int(settings.max_tokens if max_tokens is None else max_tokens)
        seed = int(settings.seed)
        if samples is None:
            return cls.greedy(tokens, seed=seed)
        return cls.sampling(int(samples), tokens, float(temperature), seed=seed)

    @property
    def metric_name(self) -> str:
        """MLflow-safe name: no ``@`` (``greedy_pass_at_1``, ``sampling_pass_at_8``)."""
        k = 1 if self.mode == GREEDY else self.n
        return self.mode.replace("@k", f"@{k}").replace("@", "_at_")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Request:
    """One prompt for one model: ``adapter`` is a name the engine was given, or None for the base."""

    prompt: str
    adapter: str | None = None


@dataclass(frozen=True)
class Sample:
    text: str
    finish_reason: str  # "stop" | "length" — the engine's own report, never a text heuristic
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Result:
    request: Request
    samples: tuple[Sample, ...]  # decoding.n of them


@dataclass(frozen=True)
class TokenSample:
    """One continuation of a prompt given as token ids (the token-in/token-out contract episodes
    use): ``token_ids`` are the generated ids as the engine produced them, the end-of-sequence id
    included when ``finish_reason == "stop"`` (the trainer learns to stop, and the next turn
    continues after it); ``text`` is the engine's own decoding, for display only."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int


Progress = Callable[[int], None]  # called with the number of requests just finished


@runtime_checkable
class Engine(Protocol):
    """What :mod:`rlexp.stages.evaluate` and the guards need from an engine."""

    name: str

    def generate(
        self, requests: Sequence[Request], decoding: Decoding, progress: Progress | None = None
    ) -> list[Result]:
        """Results in request order; each with ``decoding.n`` samples."""
        ...

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], decoding: Decoding, adapter: str | None = None
    ) -> list[TokenSample]:
        """Token-in/token-out: one continuation of each prompt (already token ids, never
        re-tokenised) by ``adapter`` (None = the base model), in prompt order; ``decoding.n`` is 1.
        Episode turns go through here (:mod:`rlexp.environments.episodes`)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Engine facts for the eval metadata (name, versions, settings that change outputs)."""
        ...

    def close(self) -> None:
        """Release what the engine holds (models, GPU memory, HTTP connections). Idempotent; a
        closed engine refuses ``generate`` with :class:`EngineClosed`."""
        ...


class EngineClosed(RuntimeError):
    """``generate`` on an engine whose ``close()`` already ran."""


class ClosingMixin:
    """Context-manager support for engines: ``with LocalEngine(...) as engine: ...`` closes it."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]


def close_engine(engine: object) -> None:
    """``engine.close()`` when it has one (engines handed in by tests or older code may not)."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def check_token_request(prompts: Sequence[Sequence[int]], decoding: Decoding) -> None:
    """What every ``generate_tokens`` refuses: more than one sample per prompt, an empty prompt."""
    if decoding.n != 1:
        raise ValueError("generate_tokens plays one continuation per prompt (decoding.n must be 1)")
    for ids in prompts:
        if not ids:
            raise ValueError("generate_tokens needs prompts of at least one token id")


def normalise_finish_reason(reason: object) -> str:
    """Map an engine's finish reason to ``stop``/``length``; anything else is kept verbatim so an
    unexpected value (``abort``, ``None``) is visible in the records instead of silently hidden."""
    if reason in ("stop", "eos", "eos_token", "stop_sequence"):
        return "stop"
    if reason in ("length", "max_tokens"):
        return "length"
    return str(reason)
