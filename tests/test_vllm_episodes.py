"""vLLM for real on episodes: the CPU build (`vllm-cpu`) plays the tool demo's eval episodes.

Runs only in the venv that scripts/setup-vllm makes (`.venv-vllm`); elsewhere vllm does not import
and the module is skipped. The CI stage (scripts/run-vllm-tests) runs it after the main suite.

The local engine's side is played by tests/vllm_tools_episodes.py in the MAIN venv (the demo's
datasets and supervised base, Baseline-S0, built by `rlexp demo --task tools`'s own functions):
144 greedy episodes of the calculator environment (ood_primary, id, sanity; up to 3 turns, a tool
call then an answer). The same episodes are then played here through
:class:`rlexp.evaluation.engines.vllm.VllmEngine` (one `LLM`, float32, eager), the episode runner handing it
the ids each episode holds, turn by turn. The two sides must agree as
:func:`rlexp.stages.guard_integrity.episode_integrity` says: equal input ids on every turn compared (G0 per
turn), every turn token-equal on the episodes whose first turn agrees (G1 per turn), and >= 99%
of the episodes identical. The rates are printed to the log.

Three paths, all with Baseline-S0 and the K=3 LoRA checkpoints of the demo's attempt trained with
an adapter (``t1l``, built by the same script): the engine directly (token level), `rlexp eval`
with ``engine: vllm`` (records, G1 per file), and `vllm serve` + the openai engine (token ids as
the prompt, ``return_token_ids``; token level).
"""

from __future__ import annotations

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

from test_vllm_real import _keep_config, main_venv_python  # noqa: E402, F401 (_keep_config: the fixture _say needs)
from test_vllm_real import _say as say  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MIN_EPISODES = 20
MIN_IDENTICAL = 0.99


@pytest.fixture(scope="module")
def local_episodes(tmp_path_factory) -> dict:
    """The tool demo's eval episodes played by the local engine, in the main venv."""
    main_python = main_venv_python()
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


def _say(text: str) -> None:
    say(text, "vllm episodes")


def _rows(local_episodes: dict):
    from rlexp.environments.interface import Budgets, rows_from_dataset
    from rlexp.experiment.datasets import read_dataset

    env = local_episodes["environment"]
    budgets = Budgets(env["max_turns"], env["max_tokens_per_turn"], env["max_total_tokens"])
    rows, hashes = [], []
    for role in ("ood_primary", "id", "sanity"):
        problems = read_dataset(local_episodes["data"][role])
        rows += rows_from_dataset(problems, role, default_env=env["name"], default_config=env["config"])
        hashes += [p["problem_hash"] for p in problems]
    return budgets, rows, hashes


def test_vllm_plays_the_tool_demo_episodes_like_the_local_engine(local_episodes, monkeypatch):
    """Token level: Baseline-S0 and the K=3 adapters, every episode's ids compared turn by turn."""
    from transformers import AutoTokenizer

    from rlexp.environments.episodes import engine_turns, play_episodes
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.evaluation.engines.vllm import VllmEngine
    from rlexp.experiment.records import BASELINE_S0
    from rlexp.stages.guard_integrity import episode_integrity

    budgets, rows, hashes = _rows(local_episodes)
    local = local_episodes["episodes"]
    adapters = local_episodes["adapters"]
    assert sorted(local) == sorted([BASELINE_S0, *adapters]) and len(adapters) == 3
    assert all([e["problem_hash"] for e in local[t]] == hashes for t in local) and len(hashes) >= MIN_EPISODES
    # the adapters are real: each changes some episodes of the base (so the check is not the base 4 times)
    assert all(any(a["token_ids"] != b["token_ids"] for a, b in zip(local[t], local[BASELINE_S0], strict=True))
               for t in adapters)

    calls = []
    real_generate = vllm.LLM.generate

    def recording_generate(self, prompts, sampling_params=None, **kwargs):
        loras = kwargs.get("lora_request")
        calls.append({"prompts": [list(p["prompt_token_ids"]) for p in prompts],
                      "loras": sorted({None if r is None else r.lora_name for r in loras} if loras else {None}, key=str),
                      "max_tokens": sampling_params.max_tokens, "temperature": sampling_params.temperature})
        return real_generate(self, prompts, sampling_params, **kwargs)

    monkeypatch.setattr(vllm.LLM, "generate", recording_generate)
    tokenizer = AutoTokenizer.from_pretrained(local_episodes["base"])
    started = time.perf_counter()
    engine = VllmEngine(local_episodes["base"], adapters, max_lora_rank=16, tokenizer=tokenizer,
                        llm_kwargs={"dtype": "float32", "max_model_len": 128, "enforce_eager": True})
    up = time.perf_counter() - started
    played, seconds = {}, {}
    with engine:
        for target in local:
            first_call = len(calls)
            t0 = time.perf_counter()
            adapter = None if target == BASELINE_S0 else target
            played[target] = [t for (t,) in play_episodes(
                engine_turns(engine, adapter, Decoding.greedy(budgets.max_tokens_per_turn)), tokenizer, rows,
                budgets=budgets, seed=0)]
            seconds[target] = time.perf_counter() - t0
            mine = calls[first_call:]
            # one generate call per turn, every active episode in it, greedy, the turn budget as
            # max_tokens, this target's adapter only; later turns continue from the ids the episodes hold
            assert len(mine) == max(len(e["actions"]) for e in local[target]) and len(mine[0]["prompts"]) == len(rows)
            assert all(c["temperature"] == 0 and c["max_tokens"] == budgets.max_tokens_per_turn
                       and c["loras"] == [adapter] for c in mine)
            finals = [tuple(t.token_ids) for t in played[target]]
            for call in mine[1:]:
                assert all(any(f[:len(p)] == tuple(p) for f in finals) for p in call["prompts"])

    eos = tokenizer.eos_token_id
    lines, verdicts = [], {}
    for target in local:
        ours = [{"problem_hash": h, "token_ids": list(t.token_ids), "agent_mask": list(t.agent_mask)}
                for h, t in zip(hashes, played[target], strict=True)]
        # an episode that stopped ends on the model's EOS id (kept as generated: the trainer learns to stop)
        assert all(t.token_ids[-1] == eos for t in played[target] if t.finish_reason == "stop")
        multi = sum(1 for t in played[target] if len(t.turns) > 1)
        assert multi >= MIN_EPISODES // 2, "the episodes are not multi-turn: the check would be single-turn"
        v = verdicts[target] = episode_integrity(local[target], ours, labels=("local", "vllm"),
                                                 min_identical=MIN_IDENTICAL)
        n = v.numbers
        lines.append(f"  {target:<12} {n['identical_episodes']:>3}/{n['episodes']} identical ({n['identical_rate']:.1%}); "
                     f"first turn agrees {n['first_turn_agrees']}, later-turn differences {n['later_turn_differences']}, "
                     f"turn-input differences {n['turn_input_differences']} / {n['turns_compared']} turns; "
                     f"{multi} multi-turn; success local {sum(e['return'] for e in local[target]):.0f} "
                     f"vllm {sum(t.episode_return for t in played[target]):.0f}; {seconds[target]:.1f} s")
    total = sum(v.numbers["episodes"] for v in verdicts.values())
    same = sum(v.numbers["identical_episodes"] for v in verdicts.values())
    _say(f"vLLM {vllm.__version__} (CPU), LLM with {len(adapters)} LoRA adapters up in {up:.0f} s; "
         f"episodes vs the local engine, per target:\n" + "\n".join(lines)
         + f"\n  overall: {same}/{total} episodes identical ({same / total:.1%})")
    assert all(v.passed for v in verdicts.values()), {t: (v.numbers, v.notes) for t, v in verdicts.items()}
    assert same / total >= MIN_IDENTICAL


def test_vllm_serve_and_the_openai_engine_play_the_same_episodes(local_episodes, tmp_path):
    """`vllm serve BASE --enable-lora --lora-modules ...` and the openai engine's token path:
    prompts as token ids, ids back through `return_token_ids`; episodes compared token by token."""
    import subprocess
    import sys

    from test_vllm_real import SERVER_START_TIMEOUT_S, _free_port, _served_models, _stop
    from transformers import AutoTokenizer

    from rlexp.environments.episodes import engine_turns, play_episodes
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.evaluation.engines.openai import OpenAIEngine
    from rlexp.experiment.records import BASELINE_S0
    from rlexp.stages.guard_integrity import episode_integrity

    budgets, rows, hashes = _rows(local_episodes)
    adapters = local_episodes["adapters"]
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", local_episodes["base"],
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tools-base", "--dtype", "float32",
            "--max-model-len", "128", "--enforce-eager", "--seed", "0", "--enable-lora", "--max-lora-rank", "16",
            "--max-loras", str(len(adapters) + 1),  # an empty last slot (rlexp.evaluation.engines.vllm.on_cpu_platform)
            "--lora-modules", *[f"{name}={path}" for name, path in adapters.items()]]
    log_path = tmp_path / "vllm-serve.log"
    started = time.perf_counter()
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    played, seconds = {}, {}
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        served = None
        while time.monotonic() < deadline and server.poll() is None:
            served = _served_models(url)
            if served:
                break
            time.sleep(2)
        assert served == {"tools-base", *adapters}, (served, server.poll(), log_path.read_text()[-4000:])
        up = time.perf_counter() - started
        tokenizer = AutoTokenizer.from_pretrained(local_episodes["base"])
        with OpenAIEngine(url, "tools-base", {name: name for name in adapters}, concurrency=16) as engine:
            for target in local_episodes["episodes"]:
                t0 = time.perf_counter()
                turns = engine_turns(engine, None if target == BASELINE_S0 else target,
                                     Decoding.greedy(budgets.max_tokens_per_turn))
                played[target] = [t for (t,) in play_episodes(turns, tokenizer, rows, budgets=budgets, seed=0)]
                seconds[target] = time.perf_counter() - t0
        judged = _judge_smoke(url, tmp_path, rows, played[BASELINE_S0])
    finally:
        _stop(server)
    assert server.poll() is not None
    lines, same, total = [], 0, 0
    for target, local in local_episodes["episodes"].items():
        ours = [{"problem_hash": h, "token_ids": list(t.token_ids), "agent_mask": list(t.agent_mask)}
                for h, t in zip(hashes, played[target], strict=True)]
        v = episode_integrity(local, ours, labels=("local", "openai"), min_identical=MIN_IDENTICAL)
        n = v.numbers
        same, total = same + n["identical_episodes"], total + n["episodes"]
        lines.append(f"  {target:<12} {n['identical_episodes']:>3}/{n['episodes']} identical ({n['identical_rate']:.1%}); "
                     f"later-turn differences {n['later_turn_differences']}, turn-input differences "
                     f"{n['turn_input_differences']}; {seconds[target]:.1f} s")
        assert v.passed, (target, n, v.notes)
    _say(judged)
    _say(f"`vllm serve` {vllm.__version__} (CPU) up in {up:.0f} s; episodes through the openai engine "
         "(token-id prompts, return_token_ids) vs the local engine:\n" + "\n".join(lines)
         + f"\n  overall: {same}/{total} episodes identical ({same / total:.1%})")


def _judge_smoke(url: str, tmp_path, rows, trajectories) -> str:
    """The judge against a vLLM-served model (the tiny base judging its own answers: plumbing, not
    judgement): every call reaches vLLM's /chat/completions and comes back as a score in [0, 1] or
    an explicit judge_error (never a silent 0), each call is logged, and a second judge on the same
    cache calls again only for the errors. The tiny model's 128-token context cannot hold the judge's
    instructions, so vLLM refuses the request (HTTP 400, prompt too long) and every call here is a
    counted judge_error: the scoring path itself is tested against the stub server of
    tests/test_env_judge.py."""
    from rlexp.environments.judge import Judge
    from rlexp.environments.rewards import RewardError

    pairs = [(row.task["prompt"], t.turns[-1].action if t.turns else "") for row, t in zip(rows, trajectories,
                                                                                            strict=True)][:12]
    cache, log = tmp_path / "judge_cache.jsonl", tmp_path / "judge_calls.jsonl"
    first = Judge(url, "tools-base", cache_path=cache, log_path=log, max_tokens=8, timeout_s=60.0)
    results = [first.score(prompt, answer) for prompt, answer in pairs]
    errors = [r for r in results if isinstance(r, RewardError)]
    assert all(isinstance(r, float) and 0.0 <= r <= 1.0 for r in results if not isinstance(r, RewardError))
    readable = ("unreadable reply", "score ")
    assert all(e.kind == "judge_error" and (e.reason.startswith(readable) or "HTTP 400" in e.reason
                                            and "length" in e.reason) for e in errors), errors
    assert len(log.read_text().splitlines()) == len(pairs) == len(first.calls)
    again = Judge(url, "tools-base", cache_path=cache, log_path=log, max_tokens=8, timeout_s=60.0)
    for prompt, answer in pairs:
        again.score(prompt, answer)
    assert len(again.calls) == len(errors) and again.cache_hits == len(pairs) - len(errors)
    return (f"judge served by vLLM (smoke test): {len(pairs)} calls, {len(pairs) - len(errors)} scored, "
            f"{len(errors)} judge_error ({errors[0].reason[:60] if errors else '-'}…); a rerun called "
            f"{len(again.calls)} times (the errors only)")


def test_rlexp_eval_on_vllm_plays_the_same_episodes_as_on_local(local_episodes):
    """`rlexp eval` of the trained tool attempt with `engine: vllm`: K=3 + S0, every eval set; its
    episode records agree with the local engine's turn by turn (G1 compares every turn's action and
    feedback: `rlexp guard g1 --records LOCAL --records VLLM` passes on every file)."""
    import shutil

    import yaml

    from rlexp.cli import main
    from rlexp.experiment.records import read_meta, read_records

    attempt = Path(local_episodes["attempt"])
    variant = attempt.parent / "t1v"
    shutil.rmtree(variant, ignore_errors=True)
    shutil.copytree(attempt, variant, ignore=shutil.ignore_patterns("eval", "guards"))
    spec = yaml.safe_load((variant / "attempt.yaml").read_text())
    spec["id"] = "t1v"
    spec["eval"] = {**spec["eval"], "engine": "vllm", "dtype": "float32", "max_model_len": 128,
                    "enforce_eager": True, "max_lora_rank": 16}
    (variant / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    assert main(["eval", str(variant), "--json"]) == 0
    seconds = time.perf_counter() - started
    files = sorted(p.relative_to(attempt / "eval") for p in (attempt / "eval").glob("*/*.jsonl") if p.parent.name != "paired")
    assert len(files) == 4 * 3
    results, same_turns, total = [], 0, 0
    for rel in files:
        assert read_meta(variant / "eval" / rel)["engine"] == "vllm"
        a = {r["problem_hash"]: r for r in read_records(attempt / "eval" / rel)}
        b = {r["problem_hash"]: r for r in read_records(variant / "eval" / rel)}
        assert set(a) == set(b) and a
        turns = lambda r: [(t["action"], t["feedback"]) for t in r["trajectory"]["turns"]]  # noqa: E731
        same_turns += sum(turns(a[h]) == turns(b[h]) for h in a)
        total += len(a)
        code = main(["guard", "g1", str(variant), "--records", str(attempt / "eval" / rel),
                     "--records", str(variant / "eval" / rel)])
        verdict = json.loads((variant / "guards" / "g1.json").read_text())
        results.append((str(rel), code, verdict["passed"], verdict["numbers"]["output_differences"]))
    _say(f"`rlexp eval` (engine vllm) of the tool attempt: 4 targets x 3 sets in {seconds:.0f} s (engine start "
         f"included); {same_turns}/{total} episode records identical turn by turn ({same_turns / total:.1%}); "
         "G1 per file: " + "; ".join(f"{f} {'PASS' if p else 'FAIL'} ({d} differ)" for f, _, p, d in results))
    assert all(code == 0 and passed for _, code, passed, _ in results), results
    assert same_turns / total >= MIN_IDENTICAL
