"""`rlexp eval` through the `openai` engine, end to end, against a loopback OpenAI-compatible
/v1/completions server backed by the REAL tiny model (the way `vllm serve BASE --enable-lora
--lora-modules name=path` serves the base and each adapter by model name).

The same attempt is evaluated with engine `local` and engine `openai`; the per-problem records must
agree (one pipeline: the engine is the only thing that changed), and the API key named by
`eval.api_key_env` must reach the server's Authorization header but no file under the attempt.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from loopback_json import LoopbackJsonServer

from rlexp.experiment.records import read_records

KEY_ENV = "RLEXP_E2E_OPENAI_KEY"
KEY_VALUE = "sk-e2e-4f1c9a7d-never-on-disk"
SERVED_BASE = "tiny-base"


class ModelServer:
    """A minimal OpenAI-compatible completions server: the base model under ``served_name``, each
    LoRA adapter under its adapter name (peft, adapters disabled for the base), greedy decoding
    with :func:`rlexp.evaluation.generation.generate`, one request at a time (a lock around the model)."""

    def __init__(self, base_dir: Path, adapters: dict[str, Path], served_name: str, api_key: str):
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        self.tokenizer.padding_side = "left"
        base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
        names = list(adapters)
        self.model = PeftModel.from_pretrained(base, adapters[names[0]], adapter_name=names[0])
        for name in names[1:]:
            self.model.load_adapter(adapters[name], adapter_name=name)
        self.model.eval()
        self.served_name = served_name
        self.adapter_names = set(names)
        self.api_key = api_key
        self.lock = threading.Lock()
        self.bodies: list[dict] = []
        self.auth_headers: list[str | None] = []
        self.server = LoopbackJsonServer(self.answer)
        self.url, self.thread = self.server.url, self.server.thread

    def answer(self, path: str, body: dict, headers) -> tuple[int, dict]:
        auth = headers.get("Authorization")
        with self.lock:
            self.bodies.append(body)
            self.auth_headers.append(auth)
        if path != "/v1/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        if auth != f"Bearer {self.api_key}":  # like `vllm serve --api-key`
            return 401, {"error": {"message": "Unauthorized"}}
        if body.get("model") not in self.adapter_names | {self.served_name}:
            return 404, {"error": {"message": f"model {body.get('model')!r} not served"}}
        return 200, self.complete(body)

    def complete(self, body: dict) -> dict:
        from rlexp.evaluation.generation import generate

        assert body["n"] == 1 and body["temperature"] == 0.0
        # the engine sends the rendered chat template; a second BOS would break prompt parity
        assert body["add_special_tokens"] is False
        with self.lock:
            if body["model"] == self.served_name:
                with self.model.disable_adapter():
                    out = generate(self.model, self.tokenizer, [body["prompt"]],
                                   max_new_tokens=int(body["max_tokens"]), temperature=0.0)
            else:
                self.model.set_adapter(body["model"])
                out = generate(self.model, self.tokenizer, [body["prompt"]],
                               max_new_tokens=int(body["max_tokens"]), temperature=0.0)
        c = out[0][0]
        return {
            "id": f"cmpl-{len(self.bodies)}", "object": "text_completion", "model": body["model"],
            "choices": [{"index": 0, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                      "total_tokens": c.prompt_tokens + c.completion_tokens},
        }

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)


def _let_eos_win_over(model_dir: Path, token: str) -> None:
    """Make the untrained tiny model stop: EOS's output row = ``token``'s row × 1.01, so wherever
    greedy decoding would say ``token`` it ends instead (both engines then see some ``stop`` and
    some ``length`` finishes). Done before any adapter or engine loads the base."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head[tok.eos_token_id] = head[tok.convert_tokens_to_ids(token)] * 1.01
    model.save_pretrained(model_dir)


def _records(att: Path) -> dict[str, list[dict]]:
    root = att / "eval"
    return {str(p.relative_to(root)): read_records(p) for p in sorted(root.glob("*/*.jsonl"))
            if p.parent.name != "paired"}


@pytest.mark.slow
def test_eval_openai_engine_equals_local_engine(eval_experiment, monkeypatch, capsys):
    from rlexp.cli import main

    local = eval_experiment(steps=(2, 4), mid=2, max_tokens=12)
    exp = local.parent
    _let_eos_win_over(exp / "models" / "tiny-base", "=")
    adapters = {p.name.removesuffix("_hf"): p for p in sorted((local / "checkpoints").glob("global_step*_hf"))}
    remote = exp / "a2"
    shutil.copytree(local, remote)
    spec = (remote / "attempt.yaml").read_text()
    monkeypatch.setenv(KEY_ENV, KEY_VALUE)

    with ModelServer(exp / "models" / "tiny-base", adapters, SERVED_BASE, KEY_VALUE) as server:
        eval_line = (f'eval: {{engine: openai, base_url: "{server.url}", model: {SERVED_BASE}, '
                     f"api_key_env: {KEY_ENV}, max_tokens: 12, prompt_suffix: \"\"}}")
        spec = spec.replace("id: a1", "id: a2")
        spec = "\n".join(eval_line if line.startswith("eval:") else line for line in spec.splitlines()) + "\n"
        (remote / "attempt.yaml").write_text(spec)

        assert main(["eval", str(local), "--json"]) == 0
        assert main(["eval", str(remote), "--json"]) == 0
        out = capsys.readouterr()

    assert KEY_VALUE not in out.out + out.err
    # every request reached the server authorised, as the base or an adapter by name
    assert server.bodies and all(h == f"Bearer {KEY_VALUE}" for h in server.auth_headers)
    assert {b["model"] for b in server.bodies} == {SERVED_BASE, *adapters}
    assert all(b["max_tokens"] == 12 for b in server.bodies)

    local_records, remote_records = _records(local), _records(remote)
    assert set(local_records) == set(remote_records)
    assert {k.split("/")[0] for k in local_records} == {"baseline_s0", *adapters}
    keys = ("problem_hash", "output", "answer", "correct", "finish_reason")
    n = 0
    for name, recs in local_records.items():
        assert len(recs) == len(remote_records[name]) > 0, name
        for a, b in zip(recs, remote_records[name], strict=True):
            assert {k: a[k] for k in keys} == {k: b[k] for k in keys}, name
            assert a["prompt_tokens"] == b["prompt_tokens"] and a["completion_tokens"] == b["completion_tokens"]
            n += 1
    # both finish reasons occur (the EOS bias above), and the server's report reaches the records
    assert {r["finish_reason"] for v in local_records.values() for r in v} == {"stop", "length"}
    assert n == len(server.bodies)  # one request per record: nothing retried, nothing lost
    # real model outputs, not a stub: the adapters change what the model says
    outputs = {k.split("/")[0]: [r["output"] for r in v] for k, v in local_records.items() if k.endswith("/id.jsonl")}
    assert len({tuple(v) for v in outputs.values()}) > 1
    meta = json.loads((remote / "eval" / "baseline_s0" / "id.meta.json").read_text())
    assert meta["engine"] == "openai"

    # the key's value is in no file under the attempt (its variable's name may be)
    for path in remote.rglob("*"):
        if path.is_file():
            assert KEY_VALUE.encode() not in path.read_bytes(), path
    assert not server.thread.is_alive()
