"""The local trainer's rollout engine ``vllm``: greedy rollouts through ``vllm serve`` equal
transformers' token for token, with a LoRA adapter loaded at run time.

Runs only in .venv-vllm (scripts/run-vllm-tests, CI's vLLM stage); elsewhere vllm does not import
and the module is skipped. The work happens in the MAIN venv (tests/vllm_rollout_check.py, where the
trainer lives), which starts ``vllm serve`` from this venv's Python, as the trainer does from
``RLEXP_VLLM_PYTHON``. On the demo's tiny base model (its own chat template) with an adapter that is
not the identity:

- the adapter changes the greedy outputs (so loading it is exercised), and vLLM's greedy outputs
  equal transformers' with it and without it (token ids and finish reasons);
- the trainer's greedy rollout (``collect_rollout``) decoded by the server equals the one decoded by
  the policy: every tensor the update reads, exactly (the log-probs are the trainer's own either way);
- two global steps of ``train`` with the server: each step's adapter loaded under its own name, KL 0
  and ratio 1 at the fresh adapter (the old log-probs are the policy's, not the server's), the
  adapters' temporary copies removed; and the server's process group gone once it is closed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from test_vllm_real import _keep_config, main_venv_python  # noqa: E402, F401 (_keep_config: for _say)
from test_vllm_real import _say as say  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_greedy_rollouts_through_vllm_serve_equal_transformers_with_a_runtime_lora(tmp_path):
    out = tmp_path / "check.json"
    started = time.perf_counter()
    proc = subprocess.run([str(main_venv_python()), str(REPO / "tests" / "vllm_rollout_check.py"),
                           str(REPO / "rlexp" / "assets" / "demo-base"), sys.executable, str(out),
                           "--prompts", "8", "--tokens", "24"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    log = out.with_suffix(".vllm.log")
    assert proc.returncode == 0, proc.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    d = json.loads(out.read_text())
    say(f"vllm rollouts check in {time.perf_counter() - started:.0f} s (server up in {d['vllm_start_s']:.0f} s, "
        f"adapter loaded in {d['vllm_load_s']:.2f} s)")
    assert d["hf_lora"] != d["hf_base"]  # the adapter is not the identity
    assert d["vllm_base"] == d["hf_base"]
    assert d["vllm_lora"] == d["hf_lora"]
    assert all(ids for ids, _ in d["hf_lora"]) and len(d["hf_lora"]) == 8

    rollout = d["collect_rollout"]
    assert rollout["equal"] == dict.fromkeys(rollout["equal"], True) and len(rollout["equal"]) == 7
    assert rollout["stats_equal"] and rollout["response_tokens"] > 0

    train = d["train"]
    assert train["steps"] == 2 and train["adapter"] == "policy-step2" and train["temp_adapter_dirs"] == []
    assert [r["global_step"] for r in train["rows"]] == [1, 2]
    first = train["rows"][0]
    assert first["kl"] == 0.0 and first["ratio_max"] == 1.0 and first["response_length"] > 0

    pid = d["server_pid"]
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # no process of the server's group is left
