"""The eval engines rlexp knows (``eval.engine``), and what the rules need to know of each.

The engines themselves are opened by :mod:`rlexp.evaluation.engines.registry` (adapters layer); this table
is what the pure rules ask (the preflight catalogue, the sweep spec, environment evals) instead
of comparing ``eval.engine`` with a name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineTraits:
    """What one eval engine is to the rules."""

    name: str
    serves_lora_up_to_max_rank: bool  # adapters are served with a rank bound (eval.max_lora_rank: vLLM's LoRA)
    needs_local_model: bool  # the base model must be a local directory (config.json)
    plays_episodes: bool  # environment tasks can be evaluated on it (rlexp.stages.evaluate_env)


# eval.engine -> its traits; rlexp.evaluation.engines.registry.OPENERS holds the same names
ENGINES: dict[str, EngineTraits] = {
    "local": EngineTraits("local", serves_lora_up_to_max_rank=False, needs_local_model=True, plays_episodes=True),
    "vllm": EngineTraits("vllm", serves_lora_up_to_max_rank=True, needs_local_model=False, plays_episodes=False),
    "openai": EngineTraits("openai", serves_lora_up_to_max_rank=True, needs_local_model=False, plays_episodes=False),
}


def engine_traits(name: str) -> EngineTraits | None:
    """The traits of engine ``name``; None for a name rlexp does not know."""
    return ENGINES.get(name)


def episode_engines() -> tuple[str, ...]:
    return tuple(name for name, t in ENGINES.items() if t.plays_episodes)
