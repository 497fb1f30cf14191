"""The local engine's side of the real-vLLM episode test: run in the MAIN venv (transformers, the
local engine), never in .venv-vllm. ``python tests/vllm_tools_episodes.py ROOT`` builds the tool
demo's datasets and its supervised base (Baseline-S0) under ``ROOT`` (``rlexp demo --task
tools``'s own functions and settings; what is on disk is reused), plays the demo's eval episodes
(ood_primary, id, sanity) with the local engine the way ``rlexp eval`` does (greedy, the demo
spec's environment and budgets, token-in/token-out through ``generate_tokens``), writes each
episode's ids to ``ROOT/local_episodes.json`` and prints that path.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

EVAL_SETS = ("ood_primary", "id", "sanity")


def demo_settings(config, data: dict[str, Path]) -> dict:
    """The demo's ``environment:`` section (its spec, as `rlexp demo --task tools` writes it)."""
    import yaml

    from rlexp.stages.demo_tools import attempt_spec

    return yaml.safe_load(attempt_spec(config, data))["environment"]


def episode_rows(data: dict[str, Path], environment: dict) -> list[tuple[str, dict, object]]:
    """``(set, problem, row)`` of every eval episode, in set order."""
    from rlexp.core.environments import rows_from_dataset
    from rlexp.storage.datasets import read_dataset

    out = []
    for role in EVAL_SETS:
        problems = read_dataset(data[role])
        rows = rows_from_dataset(problems, str(data[role]), default_env=environment["name"],
                                 default_config=environment["config"])
        out += [(role, p, r) for p, r in zip(problems, rows, strict=True)]
    return out


def trajectory_json(role: str, problem: dict, trajectory) -> dict:
    return {"set": role, "problem_hash": problem["problem_hash"], "token_ids": list(trajectory.token_ids),
            "agent_mask": list(trajectory.agent_mask), "finish_reason": trajectory.finish_reason,
            "return": trajectory.episode_return, "actions": [t.action for t in trajectory.turns]}


def build(root: Path) -> Path:
    from rlexp.adapters.episodes import engine_turns, play_episodes
    from rlexp.core.environments import Budgets
    from rlexp.engines.base import Decoding
    from rlexp.engines.local import LocalEngine
    from rlexp.stages.demo_tools import EXPERIMENT, ToolsDemoConfig, build_base, build_datasets

    config = ToolsDemoConfig()
    experiment = root / "experiments" / EXPERIMENT
    started = time.perf_counter()
    data = build_datasets(experiment / "data", config)
    base = build_base(experiment / "models", data["pool"], config)
    built = time.perf_counter() - started
    environment = demo_settings(config, data)
    budgets = Budgets(environment["max_turns"], environment["max_tokens_per_turn"], environment["max_total_tokens"])
    items = episode_rows(data, environment)
    t0 = time.perf_counter()
    with LocalEngine(base) as engine:
        played = play_episodes(engine_turns(engine, None, Decoding.greedy(budgets.max_tokens_per_turn)),
                               engine.tokenizer, [row for _, _, row in items], budgets=budgets, seed=0)
    out = root / "local_episodes.json"
    out.write_text(json.dumps({
        "base": str(base), "environment": environment, "data": {k: str(v) for k, v in data.items()},
        "seconds": {"datasets_and_base": round(built, 1), "local_episodes": round(time.perf_counter() - t0, 1)},
        "episodes": [trajectory_json(role, p, t) for (role, p, _), (t,) in zip(items, played, strict=True)],
    }))
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
