"""vLLM for real on episodes: the CPU build (`vllm-cpu`) plays the tool demo's eval episodes.

Runs only in the venv that scripts/setup-vllm makes (`.venv-vllm`); elsewhere vllm does not import
and the module is skipped. The CI stage (scripts/run-vllm-tests) runs it after the main suite.

The local engine's side is played by tests/vllm_tools_episodes.py in the MAIN venv (the demo's
datasets and supervised base, Baseline-S0, built by `rlexp demo --task tools`'s own functions):
144 greedy episodes of the calculator environment (ood_primary, id, sanity; up to 3 turns, a tool
call then an answer). The same episodes are then played here through
:class:`rlexp.engines.vllm.VllmEngine` (one `LLM`, float32, eager), the episode runner handing it
the ids each episode holds, turn by turn. The two sides must agree as
:func:`rlexp.stages.guard.episode_integrity` says: equal input ids on every turn compared (G0 per
turn), every turn token-equal on the episodes whose first turn agrees (G1 per turn), and >= 99%
of the episodes identical. The rates are printed to the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

# before vllm is imported: a 1 GiB KV cache and no OpenMP core pinning suit a small shared machine
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
MIN_EPISODES = 20
MIN_IDENTICAL = 0.99


@pytest.fixture(scope="module")
def local_episodes(tmp_path_factory) -> dict:
    """The tool demo's eval episodes played by the local engine, in the main venv."""
    main_python = Path(os.environ.get("RLEXP_MAIN_PYTHON") or REPO / ".venv" / "bin" / "python")
    if not main_python.exists():
        pytest.fail(f"the main venv's python {main_python} is missing: run scripts/setup first "
                    "(or set RLEXP_MAIN_PYTHON)")
    kept = os.environ.get("RLEXP_VLLM_TOOLS_DIR")  # a directory kept between runs: datasets, base reused
    root = Path(kept).resolve() if kept else tmp_path_factory.mktemp("vllm-tools")
    started = time.perf_counter()
    proc = subprocess.run(
        [str(main_python), str(REPO / "tests" / "vllm_tools_episodes.py"), str(root)],
        capture_output=True, text=True, timeout=1800, cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(Path(proc.stdout.strip().splitlines()[-1]).read_text())
    _say(f"tool demo base + local episodes (main venv) in {time.perf_counter() - started:.0f} s: {data['seconds']}")
    return data


_CONFIG: list = []


@pytest.fixture(autouse=True)
def _keep_config(pytestconfig):
    _CONFIG[:] = [pytestconfig]


def _say(text: str) -> None:
    """Into the CI log, past pytest's output capture."""
    capture = _CONFIG[0].pluginmanager.getplugin("capturemanager") if _CONFIG else None
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n[vllm episodes] {text}", flush=True)


def test_vllm_plays_the_tool_demo_episodes_like_the_local_engine(local_episodes, monkeypatch):
    from transformers import AutoTokenizer

    from rlexp.adapters.episodes import engine_turns, play_episodes
    from rlexp.core.environments import Budgets, rows_from_dataset
    from rlexp.engines.base import Decoding
    from rlexp.engines.vllm import VllmEngine
    from rlexp.stages.guard import episode_integrity
    from rlexp.storage.datasets import read_dataset

    env = local_episodes["environment"]
    budgets = Budgets(env["max_turns"], env["max_tokens_per_turn"], env["max_total_tokens"])
    rows, hashes = [], []
    for role in ("ood_primary", "id", "sanity"):
        problems = read_dataset(local_episodes["data"][role])
        rows += rows_from_dataset(problems, role, default_env=env["name"], default_config=env["config"])
        hashes += [p["problem_hash"] for p in problems]
    local = local_episodes["episodes"]
    assert [e["problem_hash"] for e in local] == hashes and len(hashes) >= MIN_EPISODES

    calls = []
    real_generate = vllm.LLM.generate

    def recording_generate(self, prompts, sampling_params=None, **kwargs):
        calls.append({"prompts": [list(p["prompt_token_ids"]) for p in prompts],
                      "max_tokens": sampling_params.max_tokens, "temperature": sampling_params.temperature})
        return real_generate(self, prompts, sampling_params, **kwargs)

    monkeypatch.setattr(vllm.LLM, "generate", recording_generate)
    tokenizer = AutoTokenizer.from_pretrained(local_episodes["base"])
    started = time.perf_counter()
    engine = VllmEngine(local_episodes["base"], tokenizer=tokenizer,
                        llm_kwargs={"dtype": "float32", "max_model_len": 128, "enforce_eager": True})
    up = time.perf_counter() - started
    with engine:
        t0 = time.perf_counter()
        played = play_episodes(engine_turns(engine, None, Decoding.greedy(budgets.max_tokens_per_turn)), tokenizer,
                               rows, budgets=budgets, seed=0)
        seconds = time.perf_counter() - t0
    ours = [{"problem_hash": h, "token_ids": list(t.token_ids), "agent_mask": list(t.agent_mask)}
            for h, (t,) in zip(hashes, played, strict=True)]

    # one generate call per turn, every active episode in it, greedy, the turn budget as max_tokens;
    # the first turn's inputs are the rendered prompts, later ones the ids the episodes held
    assert len(calls) == max(len(e["actions"]) for e in local) and len(calls[0]["prompts"]) == len(rows)
    assert all(c["temperature"] == 0 and c["max_tokens"] == budgets.max_tokens_per_turn for c in calls)
    finals = [tuple(t.token_ids) for (t,) in played]
    for call in calls[1:]:
        assert all(any(f[:len(p)] == tuple(p) for f in finals) for p in call["prompts"])
    multi_turn = sum(1 for (t,) in played if len(t.turns) > 1)
    tool_calls = sum(t.tool_calls for (t,) in played)
    assert multi_turn >= MIN_EPISODES // 2, "the episodes are not multi-turn: the check would be single-turn"
    # an episode that stopped ends on the model's EOS id (kept as generated, so the trainer learns to stop)
    eos = tokenizer.eos_token_id
    assert all(t.token_ids[-1] == eos for (t,) in played if t.finish_reason == "stop" and t.turns[-1].action)

    verdict = episode_integrity(local, ours, labels=("local", "vllm"), min_identical=MIN_IDENTICAL)
    n = verdict.numbers
    _say(f"vLLM {vllm.__version__} (CPU): LLM up in {up:.0f} s; {n['episodes']} episodes "
         f"({multi_turn} multi-turn, {tool_calls} tool calls) in {seconds:.1f} s over {len(calls)} generate calls; "
         f"identical episodes {n['identical_episodes']}/{n['episodes']} = {n['identical_rate']:.1%}; "
         f"first turn agrees on {n['first_turn_agrees']}, of which later-turn differences "
         f"{n['later_turn_differences']}; turn-input (G0) differences {n['turn_input_differences']} "
         f"over {n['turns_compared']} turns compared; local success {sum(e['return'] for e in local):.0f}, "
         f"vllm success {sum(t.episode_return for (t,) in played):.0f}")
    assert verdict.passed, verdict
