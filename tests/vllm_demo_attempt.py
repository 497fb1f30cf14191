"""Build the demo's trained attempt for the real-vLLM tests: run in the MAIN venv (trainer, local
engine), never in .venv-vllm. ``python tests/vllm_demo_attempt.py ROOT`` writes
``ROOT/experiments/demo/d1`` — the demo's fast mode (datasets, supervised tiny base, the d1 spec),
trained on the local backend and evaluated with the local engine — and prints its path. Every
step reuses what is already on disk (datasets, base model, training by resume, eval records), as
the demo does, so a kept ROOT makes a second run quick.

One change to the demo's fast d1: every training step is saved (``save_steps: 1``) and step 1 is
pre-registered as an extra checkpoint, so the eval has three distinct adapters (final step 4, the
pre-registered mid step 2, the extra step 1; best-by-monitor is one of 2 and 4) plus the base.
"""

from __future__ import annotations

import sys
from pathlib import Path


def build(root: Path) -> Path:
    import yaml
    from rich.console import Console

    from rlexp.experiment.files import atomic_write_text
    from rlexp.stages.demo import (
        EXPERIMENT,
        DemoConfig,
        _build_base_model,
        _build_datasets,
        _forget_stale_attempts,
        _started,
        attempt_specs,
    )
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.launch import launch
    from rlexp.stages.plan import plan

    fast = DemoConfig.fast()
    config = DemoConfig(**{**fast.__dict__, "recipe": {**fast.recipe, "save_steps": 1}})
    experiment = root / "experiments" / EXPERIMENT
    console = Console(stderr=True)
    datasets = _build_datasets(experiment / "data", config)
    model_dir = _build_base_model(experiment / "models", datasets, config, console)
    _forget_stale_attempts(experiment, model_dir, datasets, console)  # trained on another base: start over
    spec = yaml.safe_load(attempt_specs(config, datasets)["d1"])
    spec["checkpoints"]["extra"] = [1]
    attempt = experiment / "d1"
    text = yaml.safe_dump(spec, sort_keys=False)
    if not (attempt / "attempt.yaml").exists() or (attempt / "attempt.yaml").read_text() != text:
        atomic_write_text(attempt / "attempt.yaml", text)
    planned = plan(attempt)
    if not planned.ok:
        raise SystemExit(f"plan of {attempt} has error checks: {planned.errors}")
    launched = launch(attempt, backend="local", tracking_uri="off", resume=_started(attempt))
    if launched.state != "finished":
        raise SystemExit(f"the training run of {attempt} ended {launched.state}: {launched.run.get('reason')}")
    evaluate(attempt, show_progress=False)
    return attempt


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
