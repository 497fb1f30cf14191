"""The demo's tool task trained by a real TRL run, as the two real-TRL environment tests make it
(``rollout_func`` in tests/test_trl_agent_run.py, ``environment_factory`` in
tests/test_trl_tools_run.py): a small supervised base on the task's data, one attempt from a spec,
launched through `rlexp launch`; and the two files the tests read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path


def train_tool_task(root: Path, spec: str, *, sft_steps: int, actions: str = "text") -> tuple[Path, object]:
    """``root/t1`` launched from ``spec`` over a base supervised for ``sft_steps`` (on tool-call
    episodes for ``actions="tool_calls"``); the attempt directory and the launch's result."""
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_base, build_datasets
    from rlexp.stages.launch import launch

    config = dataclasses.replace(ToolsDemoConfig.fast(), sizes=(8, 4, 8, 4, 4), sft_steps=sft_steps)
    datasets = build_datasets(root / "data", config)
    build_base(root / "models", datasets["pool"], config, actions=actions)
    attempt = root / "t1"
    attempt.mkdir()
    (attempt / "attempt.yaml").write_text(spec)
    result = launch(attempt, tracking_uri=f"sqlite:///{root / 'mlflow.db'}", poll_s=0.2)
    return attempt, result


def read_episodes(attempt: Path) -> list[dict]:
    """Every training episode as TRL was given it (``launch/trl_episodes.jsonl``)."""
    return [json.loads(line) for line in (attempt / "launch" / "trl_episodes.jsonl").read_text().splitlines()]


def read_metrics(attempt: Path) -> dict[int, dict]:
    """``metrics.jsonl`` by global step."""
    return {r["global_step"]: r for r in map(json.loads, (attempt / "metrics.jsonl").read_text().splitlines())}
