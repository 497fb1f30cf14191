"""The TRL venv the real-TRL tests run in, found as ``rlexp launch`` finds it
(:func:`rlexp.trainers.trl.script.trl_python`): where it is missing the module is skipped, and in
CI (``$CI`` set) that is an error, since scripts/run-tests builds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def trl_python_or_skip() -> Path:
    from rlexp.trainers.trl.script import trl_python

    python = trl_python(must_exist=False)
    if not python.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"CI: {python} is missing; scripts/run-tests builds it with scripts/setup-trl")
        pytest.skip(f"no TRL venv at {python} (run scripts/setup-trl)", allow_module_level=True)
    return python


def trl_attempt(root: Path, estimator: str, recipe: dict, pool: int, name: str) -> Path:
    """An attempt of TRL 1.16.0 running the trainer ``estimator`` names (``rloo``, ``async_grpo``),
    with ``recipe`` over a pool of ``pool`` prompts."""
    import yaml

    d = root / "exp" / name
    d.mkdir(parents=True)
    spec = {"trainer": {"name": "trl", "version": "1.16.0"},
            "recipe": {"advantage_estimator": estimator, "model_name_or_path": "m", **recipe},
            "datasets": {"pool": {"size": pool}, "ood_primary": {"size": 500}}}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    return d


def plan_of(d: Path) -> dict:
    """The plan rlexp builds for the attempt in ``d``."""
    from rlexp.spec import load_attempt
    from rlexp.stages.plan import build_plan

    return build_plan(load_attempt(d))
