"""Engines behind one interface: local (transformers + peft), vllm (up to its boundary, with a
fake module that mirrors vLLM's real signatures), openai (against a local HTTP server)."""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlexp.errors import InputError
from rlexp.evaluation.engines.base import GREEDY, NONDET_PROXY, SAMPLING, Decoding, Engine, Request

# --------------------------------------------------------------------------- decoding modes


def test_decoding_modes_have_honest_settings():
    assert Decoding.greedy(64) == Decoding(GREEDY, 0.0, 1, 64, 0)
    assert Decoding.sampling(8, 64).temperature == 0.6 and Decoding.sampling(8, 64).n == 8
    assert Decoding.nondet_proxy(4, 64) == Decoding(NONDET_PROXY, 0.0, 4, 64, 0)
    assert Decoding.greedy(8).metric_name == "greedy_pass_at_1"
    assert Decoding.sampling(8, 8).metric_name == "sampling_pass_at_8"
    assert Decoding.nondet_proxy(4, 8).metric_name == "nondet_proxy_pass_at_4"
    for bad in [(GREEDY, 0.6, 1, 8), (GREEDY, 0.0, 2, 8), (NONDET_PROXY, 0.6, 4, 8), (SAMPLING, 0.0, 8, 8),
                (GREEDY, 0.0, 1, 0), ("pass@k", 0.0, 1, 8)]:
        with pytest.raises(ValueError):
            Decoding(*bad)


# --------------------------------------------------------------------------- local


@pytest.fixture(scope="module")
def local_setup(tiny_base_model, tmp_path_factory):
    from conftest import make_lora_checkpoints

    root = tmp_path_factory.mktemp("local_engine")
    make_lora_checkpoints(tiny_base_model, root, (1, 2))
    from rlexp.evaluation.engines.local import LocalEngine

    adapters = {f"s{s}": root / "checkpoints" / f"global_step{s}_hf" for s in (1, 2)}
    return LocalEngine(tiny_base_model, adapters, batch_size=4), LocalEngine(tiny_base_model, adapters, merge=True)


def _prompts(engine, n=6):
    from rlexp.evaluation.generation import render_prompt

    return [render_prompt(engine.tokenizer, f"{i}+{2 * i}=", "") for i in range(n)]


def test_local_engine_serves_base_and_adapters_in_one_call(local_setup):
    engine, _merged = local_setup
    assert isinstance(engine, Engine)
    prompts = _prompts(engine)
    mixed = [Request(p, a) for a in (None, "s1", "s2") for p in prompts]
    results = engine.generate(mixed, Decoding.greedy(6))
    assert [r.request for r in results] == mixed  # request order kept
    texts = {a: [r.samples[0].text for r in results if r.request.adapter == a] for a in (None, "s1", "s2")}
    assert texts[None] != texts["s1"] != texts["s2"]  # adapters are really applied
    # serving the base with adapters disabled equals a model that never saw an adapter
    from rlexp.evaluation.engines.local import LocalEngine

    plain = LocalEngine(engine.base_model)
    assert [r.samples[0].text for r in plain.generate([Request(p) for p in prompts], Decoding.greedy(6))] == texts[None]
    for r in results:
        s = r.samples[0]
        assert s.finish_reason in ("stop", "length") and s.completion_tokens <= 6 and s.prompt_tokens > 0


def test_local_merged_weights_equal_adapter(local_setup):
    engine, merged = local_setup
    reqs = [Request(p, "s2") for p in _prompts(engine)]
    a = [r.samples[0].text for r in engine.generate(reqs, Decoding.greedy(6))]
    b = [r.samples[0].text for r in merged.generate(reqs, Decoding.greedy(6))]
    assert a == b


def test_local_unknown_adapter_and_bad_dirs(local_setup, tmp_path):
    engine, _ = local_setup
    with pytest.raises(InputError):
        engine.generate([Request("x", "nope")], Decoding.greedy(2))
    from rlexp.evaluation.engines.local import LocalEngine

    with pytest.raises(InputError):
        LocalEngine(tmp_path)
    with pytest.raises(InputError):
        LocalEngine(engine.base_model, {"x": tmp_path})


def test_local_sampling_gives_k_samples(local_setup):
    engine, _ = local_setup
    results = engine.generate([Request(p) for p in _prompts(engine, 2)], Decoding.sampling(3, 4, temperature=1.0))
    assert [len(r.samples) for r in results] == [3, 3]


# --------------------------------------------------------------------------- vllm (fake module)
# The fake mirrors the real signatures read from vLLM's source (vllm/entrypoints/llm.py,
# vllm/sampling_params.py, vllm/lora/request.py): keyword-only LLM args, SamplingParams defaults
# (max_tokens=16; greedy with n>1 raises), LoRARequest(lora_name, lora_int_id, lora_path).


@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False


class FakeEngineCore:
    """``LLM.llm_engine.engine_core``: the client of vLLM V1's engine-core process."""

    def __init__(self):
        self.shutdowns = 0

    def shutdown(self, timeout=None):
        self.shutdowns += 1


class FakeSamplingParams:
    def __init__(self, *, n=1, temperature=1.0, top_p=1.0, top_k=0, seed=None, max_tokens=16,
                 skip_special_tokens=True, **unknown):
        assert not unknown, f"unknown SamplingParams args {unknown}"
        if temperature < 1e-5 and n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")
        self.n, self.temperature, self.top_p, self.top_k = n, temperature, top_p, top_k
        self.seed, self.max_tokens, self.skip_special_tokens = seed, max_tokens, skip_special_tokens


class FakeLLM:
    instances: list = []

    def __init__(self, model, *, seed=None, tensor_parallel_size=1, gpu_memory_utilization=0.9,
                 enable_lora=False, max_loras=1, max_lora_rank=16, max_model_len=None, **kwargs):
        self.init = dict(model=model, seed=seed, enable_lora=enable_lora, max_loras=max_loras,
                         max_lora_rank=max_lora_rank, tensor_parallel_size=tensor_parallel_size, **kwargs)
        self.calls = []
        self.llm_engine = types.SimpleNamespace(engine_core=FakeEngineCore())
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None):
        self.calls.append(dict(prompts=prompts, params=sampling_params, use_tqdm=use_tqdm, lora_request=lora_request))
        if isinstance(lora_request, list):
            assert len(lora_request) == len(prompts)
        outs = []
        for i, prompt in enumerate(prompts):
            lora = lora_request[i] if isinstance(lora_request, list) else lora_request
            tag = lora.lora_name if lora else "base"
            choices = [types.SimpleNamespace(text=f"{tag} \\boxed{{{i}}}", token_ids=list(range(3 + j)),
                                             finish_reason="length" if j % 2 else "stop")
                       for j in range(sampling_params.n)]
            ids = prompt["prompt_token_ids"] if isinstance(prompt, dict) else list(range(len(prompt)))
            outs.append(types.SimpleNamespace(prompt_token_ids=ids, outputs=choices))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams, vllm.__version__ = FakeLLM, FakeSamplingParams, "fake"
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    FakeLLM.instances.clear()
    return FakeLLM


def _adapter(tmp_path, name, rank):
    d = tmp_path / name
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return d


def test_vllm_engine_one_call_with_per_prompt_adapters(fake_vllm, tmp_path, tiny_base_model):
    from transformers import AutoTokenizer

    from rlexp.evaluation.engines.vllm import VllmEngine
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    adapters = {"global_step10": _adapter(tmp_path, "a", 32), "global_step20": _adapter(tmp_path, "b", 32)}
    engine = VllmEngine("/models/base", adapters, max_lora_rank=32, tokenizer=tok, seed=3)
    llm = fake_vllm.instances[0]
    assert llm.init["enable_lora"] is True
    assert llm.init["max_loras"] >= 2 and llm.init["max_lora_rank"] >= 32 and llm.init["seed"] == 3
    prompts = [render_prompt(tok, f"{i}+1=", "") for i in range(3)]
    reqs = [Request(p, a) for a in (None, "global_step10", "global_step20") for p in prompts]
    results = engine.generate(reqs, Decoding.greedy(2048))
    assert len(llm.calls) == 1  # base + every adapter in ONE generate call
    call = llm.calls[0]
    assert call["params"].max_tokens == 2048 and call["params"].temperature == 0.0 and call["params"].n == 1
    assert call["use_tqdm"] is False
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [encode_prompt(tok, r.prompt) for r in reqs]
    names = [lr.lora_name if lr else None for lr in call["lora_request"]]
    assert names == [r.adapter for r in reqs]
    ids = {lr.lora_name: lr.lora_int_id for lr in call["lora_request"] if lr}
    assert sorted(ids.values()) == [1, 2]
    assert results[4].samples[0].text.startswith("global_step10")
    assert results[0].samples[0].prompt_tokens == len(encode_prompt(tok, prompts[0]))
    assert results[0].samples[0].completion_tokens == 3


def test_vllm_engine_keeps_an_empty_lora_slot_on_cpu(fake_vllm, tmp_path, monkeypatch):
    """vLLM's CPU LoRA ops give "no LoRA" tokens (index -1) the LAST slot's adapter: on the CPU
    platform the engine asks for one slot more than it has adapters, so that slot stays empty."""
    from rlexp.evaluation.engines.vllm import VllmEngine

    adapters = {n: _adapter(tmp_path, n, 8) for n in ("s1", "s2", "s3")}
    platforms = types.ModuleType("vllm.platforms")
    sys.modules["vllm"].__path__ = []  # a package, so its submodules import
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    for is_cpu, slots in ((True, 4), (False, 3)):
        platforms.current_platform = types.SimpleNamespace(is_cpu=lambda is_cpu=is_cpu: is_cpu)
        VllmEngine("/m", adapters)
        assert fake_vllm.instances[-1].init["max_loras"] == slots
    # an explicit max_loras above the adapter count already leaves empty slots
    VllmEngine("/m", adapters, max_loras=5)
    assert fake_vllm.instances[-1].init["max_loras"] == 5


def test_vllm_nondet_proxy_sends_copies_and_sampling_uses_n(fake_vllm, tmp_path):
    from rlexp.evaluation.engines.vllm import VllmEngine

    engine = VllmEngine("/models/base", {})
    llm = fake_vllm.instances[0]
    assert llm.init["enable_lora"] is False
    res = engine.generate([Request("p1"), Request("p2")], Decoding.nondet_proxy(4, 16))
    assert len(llm.calls[0]["prompts"]) == 8 and llm.calls[0]["params"].n == 1
    assert [len(r.samples) for r in res] == [4, 4]
    res = engine.generate([Request("p1")], Decoding.sampling(8, 16, seed=5))
    params = llm.calls[1]["params"]
    assert (params.n, params.temperature, params.seed, params.max_tokens) == (8, 0.6, 5, 16)
    assert [s.finish_reason for s in res[0].samples][:2] == ["stop", "length"]


def test_vllm_rank_too_large_and_missing_module(fake_vllm, tmp_path, monkeypatch):
    from rlexp.evaluation.engines.vllm import VllmEngine

    with pytest.raises(InputError, match="max_lora_rank"):
        VllmEngine("/m", {"x": _adapter(tmp_path, "big", 64)}, max_lora_rank=16)
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(InputError, match="vllm"):
        VllmEngine("/m", {})


@pytest.mark.vllm
def test_real_vllm_signatures():
    """Runs only where vllm is importable: the names and arguments the engine uses exist."""
    vllm = pytest.importorskip("vllm")
    import inspect

    from vllm.lora.request import LoRARequest

    params = inspect.signature(vllm.LLM.generate).parameters
    assert "lora_request" in params and "use_tqdm" in params
    init = inspect.signature(vllm.LLM.__init__).parameters
    assert "seed" in init
    from vllm.engine.arg_utils import EngineArgs

    fields = set(inspect.signature(EngineArgs).parameters)
    assert {"enable_lora", "max_loras", "max_lora_rank"} <= fields
    sp = vllm.SamplingParams(n=1, temperature=0.0, top_p=1.0, top_k=0, seed=None, max_tokens=7,
                             skip_special_tokens=True)
    assert sp.max_tokens == 7
    assert vllm.SamplingParams().max_tokens == 16
    with pytest.raises(Exception):  # noqa: B017 - vLLM's own validation error type varies by version
        vllm.SamplingParams(n=2, temperature=0.0)
    lr = LoRARequest("a", 1, "/p")
    assert (lr.lora_name, lr.lora_int_id, lr.lora_path) == ("a", 1, "/p")
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory  # VllmEngine.close()

    assert callable(cleanup_dist_env_and_memory)


# --------------------------------------------------------------------------- openai (local server)


class _Server:
    def __init__(self, fail_first=1, delay=0.02):
        self.requests, self.headers = [], []
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.failures_left = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    fail = outer.failures_left > 0
                    outer.failures_left -= 1 if fail else 0
                    outer.requests.append(body)
                    outer.headers.append(dict(self.headers))
                time.sleep(delay)
                with outer.lock:
                    outer.in_flight -= 1
                if fail:
                    self.send_response(503)
                    self.end_headers()
                    return
                text = f"{body['model']}|{body['prompt']}|{body['seed']} \\boxed{{5}}"
                payload = {"choices": [{"text": text, "finish_reason": "length" if body["max_tokens"] < 5 else "stop"}],
                           "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 4}}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_openai_engine_against_local_server(monkeypatch):
    from rlexp.evaluation.engines.openai import OpenAIEngine

    monkeypatch.setenv("RLEXP_TEST_API_KEY", "sk-secret-value")
    with _Server(fail_first=2) as server:
        engine = OpenAIEngine(server.url, "base-model", {"global_step10": "global_step10"}, concurrency=3,
                              backoff_s=0.01, api_key_env="RLEXP_TEST_API_KEY")
        reqs = [Request(f"p{i}", None if i % 2 else "global_step10") for i in range(10)]
        done = []
        results = engine.generate(reqs, Decoding.greedy(16), progress=done.append)
    assert sum(done) == 10
    assert len(server.requests) == 12  # 10 + 2 retried 503s
    assert server.max_in_flight <= 3  # bounded concurrency
    assert all(r["add_special_tokens"] is False and r["max_tokens"] == 16 and r["temperature"] == 0.0
               for r in server.requests)
    for req, res in zip(reqs, results, strict=True):
        model = "global_step10" if req.adapter else "base-model"
        assert res.samples[0].text.startswith(f"{model}|{req.prompt}|")
        assert res.samples[0].finish_reason == "stop" and res.samples[0].completion_tokens == 4
    assert all(h.get("Authorization") == "Bearer sk-secret-value" for h in server.headers)
    assert "sk-secret-value" not in json.dumps(engine.describe())


def test_openai_engine_n_samples_and_failure():
    from rlexp.evaluation.engines.openai import OpenAIEngine, ServerError

    with _Server(fail_first=0) as server:
        engine = OpenAIEngine(server.url + "/v1", "m", concurrency=2)
        res = engine.generate([Request("q")], Decoding.sampling(4, 3, seed=10))
    assert sorted(r["seed"] for r in server.requests) == [10, 11, 12, 13]
    assert [s.finish_reason for s in res[0].samples] == ["length"] * 4
    with _Server(fail_first=100) as server:
        engine = OpenAIEngine(server.url, "m", retries=2, backoff_s=0.0)
        with pytest.raises(ServerError, match="3 tries"):
            engine.generate([Request("q")], Decoding.greedy(3))


def test_openai_engine_sends_no_key_unless_one_is_named(monkeypatch):
    """The spec's eval.api_key_env names the variable; none named, no Authorization header — an
    ambient OPENAI_API_KEY is not sent to whatever server base_url points at."""
    from rlexp.evaluation.engines.openai import OpenAIEngine

    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    with _Server(fail_first=0) as server:
        OpenAIEngine(server.url, "m").generate([Request("q")], Decoding.greedy(3))
        OpenAIEngine(server.url, "m", api_key_env="OPENAI_API_KEY").generate([Request("q")], Decoding.greedy(3))
    assert [h.get("Authorization") for h in server.headers] == [None, "Bearer sk-ambient"]


# --------------------------------------------------------------------------- close()


def test_local_engine_close_releases_models_and_refuses_generate(tiny_base_model):
    from rlexp.evaluation.engines.base import EngineClosed
    from rlexp.evaluation.engines.local import LocalEngine

    with LocalEngine(tiny_base_model, batch_size=2) as engine:
        assert isinstance(engine, Engine)
        prompts = _prompts(engine, 2)
        assert len(engine.generate([Request(p) for p in prompts], Decoding.greedy(2))) == 2
    assert engine.closed and engine.base is None and engine._peft is None and not engine._separate
    with pytest.raises(EngineClosed, match="closed"):
        engine.generate([Request(prompts[0])], Decoding.greedy(2))
    engine.close()  # idempotent


def test_openai_engine_close_refuses_generate():
    from rlexp.evaluation.engines.base import EngineClosed
    from rlexp.evaluation.engines.openai import OpenAIEngine

    with OpenAIEngine("http://127.0.0.1:9", "m") as engine:
        pass
    with pytest.raises(EngineClosed):
        engine.generate([Request("q")], Decoding.greedy(3))


def test_vllm_engine_close_drops_llm_and_runs_vllm_cleanup(fake_vllm, monkeypatch):
    from rlexp.evaluation.engines.base import EngineClosed
    from rlexp.evaluation.engines.vllm import VllmEngine

    # without vllm.distributed (older or stub vLLM): del + gc (+ empty_cache when CUDA)
    engine = VllmEngine("/models/base", {})
    engine_core = engine.llm.llm_engine.engine_core
    engine.close()
    engine.close()
    assert engine.llm is None
    assert engine_core.shutdowns == 1  # the engine-core process is stopped once, not left to the GC
    with pytest.raises(EngineClosed):
        engine.generate([Request("q")], Decoding.greedy(3))
    # with it: vLLM's own cleanup_dist_env_and_memory, once, after the LLM is dropped
    calls = []
    sys.modules["vllm"].__path__ = []  # a package, so its submodules import
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")
    parallel_state.cleanup_dist_env_and_memory = lambda shutdown_ray=False: calls.append(engine.llm)
    monkeypatch.setitem(sys.modules, "vllm.distributed", types.ModuleType("vllm.distributed"))
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", parallel_state)
    with VllmEngine("/models/base", {}) as engine:
        pass
    engine.close()
    assert calls == [None] and engine.llm is None  # called once, after the LLM was dropped
