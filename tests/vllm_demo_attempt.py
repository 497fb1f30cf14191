"""Build the demo's trained attempt for the real-vLLM tests: run in the MAIN venv (trainer, local
engine), never in .venv-vllm. ``python tests/vllm_demo_attempt.py ROOT`` writes
``ROOT/experiments/demo/d1`` — the demo's fast mode (datasets, supervised tiny base, the d1 spec),
trained on the local backend and evaluated with the local engine — and prints its path.

One change to the demo's fast d1: every step is saved (``save_steps: 1``) and step 1 is
pre-registered as an extra checkpoint, so the eval has three distinct adapters (final step 4, the
pre-registered mid step 2, the extra step 1; best-by-monitor is one of 2 and 4) plus the base.
"""

from __future__ import annotations

import sys
from pathlib import Path


def build(root: Path) -> Path:
    import yaml
    from rich.console import Console

    from rlexp.cli import main as rlexp_main
    from rlexp.demo import EXPERIMENT, DemoConfig, _build_base_model, _build_datasets, attempt_specs
    from rlexp.files import atomic_write_text

    fast = DemoConfig.fast()
    config = DemoConfig(**{**fast.__dict__, "recipe": {**fast.recipe, "save_steps": 1}})
    experiment = root / "experiments" / EXPERIMENT
    console = Console(stderr=True)
    datasets = _build_datasets(experiment / "data", config)
    _build_base_model(experiment / "models", datasets, config, console)
    spec = yaml.safe_load(attempt_specs(config, datasets)["d1"])
    spec["checkpoints"]["extra"] = [1]
    attempt = experiment / "d1"
    atomic_write_text(attempt / "attempt.yaml", yaml.safe_dump(spec, sort_keys=False))
    for argv in (["plan", str(attempt)],
                 ["launch", str(attempt), "--backend", "local", "--tracking-uri", "off"],
                 ["eval", str(attempt), "--json"]):
        code = rlexp_main(argv)
        if code != 0:
            raise SystemExit(f"`rlexp {' '.join(argv)}` exited {code}")
    return attempt


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
