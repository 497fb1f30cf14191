"""The local engine's side of the real-vLLM episode test: run in the MAIN venv (trainer, local
engine), never in .venv-vllm. ``python tests/vllm_tools_episodes.py ROOT``

1. builds the tool demo's datasets and its supervised base (Baseline-S0) under ``ROOT``
   (``rlexp demo --task tools``'s own functions and settings);
2. trains ``t1l``: the demo's attempt ``t1`` with a LoRA adapter instead of full weights (vLLM
   serves checkpoints as LoRA adapters), every second step saved and step 2 pre-registered as an
   extra checkpoint, so the eval has K=3 distinct adapters; then ``rlexp eval`` on the local
   engine (records under ``t1l/eval``);
3. plays the demo's eval episodes (ood_primary, id, sanity) with the base and each adapter on the
   local engine the way ``rlexp eval`` does (greedy, the spec's environment and budgets,
   token-in/token-out through ``generate_tokens``), writes each episode's ids to
   ``ROOT/local_episodes.json`` and prints that path.

Every step reuses what is on disk (datasets, base, training by resume, eval records).
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
    from rlexp.environments.interface import rows_from_dataset
    from rlexp.experiment.datasets import read_dataset

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


def train_lora_attempt(experiment: Path, config, data: dict[str, Path]) -> Path:
    """``t1l``: the demo's t1 with a rank-16 LoRA adapter, trained and evaluated (local engine)."""
    import yaml

    from rlexp.experiment.files import atomic_write_text
    from rlexp.experiment.layout import AttemptDir
    from rlexp.stages.demo_tools import attempt_spec
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.launch import launch
    from rlexp.stages.plan import plan

    spec = yaml.safe_load(attempt_spec(config, data))
    spec["id"] = "t1l"
    spec["recipe"].update(lora_rank=16, lora_alpha=32, actor_learning_rate=1e-3, save_steps=2)
    spec["checkpoints"]["extra"] = [2]
    attempt = experiment / "t1l"
    text = yaml.safe_dump(spec, sort_keys=False)
    if not (attempt / "attempt.yaml").exists() or (attempt / "attempt.yaml").read_text() != text:
        atomic_write_text(attempt / "attempt.yaml", text)
    planned = plan(attempt)
    if not planned.ok:
        raise SystemExit(f"plan of {attempt} has error checks: {planned.errors}")
    launched = launch(attempt, backend="local", tracking_uri="off", resume=AttemptDir(attempt).metrics.exists())
    if launched.state not in ("finished", "stopped"):
        raise SystemExit(f"the training run of {attempt} ended {launched.state}: {launched.run.get('reason')}")
    evaluate(attempt, show_progress=False)
    return attempt


def build(root: Path) -> Path:
    from rlexp.environments.episodes import engine_turns, play_episodes
    from rlexp.environments.interface import Budgets
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.evaluation.engines.local import LocalEngine
    from rlexp.experiment.records import BASELINE_S0
    from rlexp.stages.demo_tools import EXPERIMENT, ToolsDemoConfig, build_base, build_datasets

    config = ToolsDemoConfig()
    experiment = root / "experiments" / EXPERIMENT
    seconds = {}
    started = time.perf_counter()
    data = build_datasets(experiment / "data", config)
    base = build_base(experiment / "models", data["pool"], config)
    seconds["datasets_and_base"] = round(time.perf_counter() - started, 1)
    t0 = time.perf_counter()
    attempt = train_lora_attempt(experiment, config, data)
    seconds["train_and_local_eval"] = round(time.perf_counter() - t0, 1)
    targets = sorted(d.name for d in (attempt / "eval").iterdir() if d.is_dir() and d.name != "paired")
    adapters = {t: attempt / "checkpoints" / f"{t}_hf" for t in targets if t != BASELINE_S0}
    environment = demo_settings(config, data)
    budgets = Budgets(environment["max_turns"], environment["max_tokens_per_turn"], environment["max_total_tokens"])
    items = episode_rows(data, environment)
    episodes = {}
    t0 = time.perf_counter()
    with LocalEngine(base, adapters) as engine:
        for target in targets:
            adapter = None if target == BASELINE_S0 else target
            played = play_episodes(engine_turns(engine, adapter, Decoding.greedy(budgets.max_tokens_per_turn)),
                                   engine.tokenizer, [row for _, _, row in items], budgets=budgets, seed=0)
            episodes[target] = [trajectory_json(role, p, t) for (role, p, _), (t,) in zip(items, played, strict=True)]
    seconds["local_episodes"] = round(time.perf_counter() - t0, 1)
    out = root / "local_episodes.json"
    out.write_text(json.dumps({
        "base": str(base), "attempt": str(attempt), "adapters": {k: str(v) for k, v in adapters.items()},
        "environment": environment, "data": {k: str(v) for k, v in data.items()}, "seconds": seconds,
        "episodes": episodes,
    }))
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
