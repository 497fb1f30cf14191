"""64 concurrent episodes through the generated OpenRLHF agent file and verl agent loop, against a
tool that sleeps 50 ms per step: the environment's steps off the event loop (asyncio.to_thread,
"after") vs on it ("before", the same generated code with to_thread replaced by a direct call).

Both adapters run their trainer's own contract code: OpenRLHF's ``MultiTurnAgentExecutor`` from the
pinned wheel (``release_agent_module``), verl's ``AgentLoopBase``/``AgentLoopOutput``/``register``
executed from the pinned wheel's ``agent_loop.py``. The model server is a scripted stand-in that
answers at once (``calc A*B``, then the boxed product), so the wall time is the environment's:
with the steps on the loop, 64 episodes × 2 steps × 50 ms run one after another (~6.4 s); off
the loop they overlap (bounded by the default thread pool, min(32, cpu + 4) workers).

    .venv/bin/python benchmarks/bench_agent_env_concurrency.py [--episodes 64] [--sleep-ms 50]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import logging
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlexp.environments.interface import CalculatorEnv, register  # noqa: E402

SLEEP_S = [0.05]


@register("bench_sleepy_calculator")
class SleepyCalculator(CalculatorEnv):
    """The calculator, each step taking SLEEP_S (a networked tool's round trip)."""

    def step(self, action_text):
        time.sleep(SLEEP_S[0])
        return CalculatorEnv.step(self, action_text)


def problems(n: int) -> list[dict]:
    return [{"prompt": f"{100 + i}*{10 + i % 90}=", "answer": str((100 + i) * (10 + i % 90))} for i in range(n)]


def scripted_reply(tokenizer: Any, prompt_ids: list[int]) -> list[int]:
    """The model's turn: ``calc A*B`` first, then the boxed product once the tool has answered."""
    from rlexp.evaluation.generation import encode_prompt

    text = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    head = text.split("=", 1)[0].split()[-1]  # the problem "A*B=" opens the conversation
    a, b = head.split("*")
    reply = f"\\boxed{{{int(a) * int(b)}}}" if "calc " in text else f"calc {a}*{b}"
    return encode_prompt(tokenizer, reply) + [tokenizer.eos_token_id]


def restore_to_thread(namespace: dict, inline: bool):
    """``inline``: the generated module's ``asyncio.to_thread`` becomes a direct call (the code as it
    was before the steps moved off the loop)."""

    async def direct(fn, *args, **kwargs):
        return fn(*args, **kwargs)

    shim = ModuleType("asyncio_inline")
    shim.__dict__.update(asyncio.__dict__)
    if inline:
        shim.to_thread = direct
    namespace["asyncio"] = shim


# ----------------------------------------------------------------------------- OpenRLHF


@dataclass
class SamplingParams:  # the fields of vLLM's SamplingParams that OpenRLHF's rollout sets
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 24
    min_tokens: int = 1
    skip_special_tokens: bool = False
    logprobs: int | None = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list | None = None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


class ScriptedVllm:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(0)
        ids = scripted_reply(self.tokenizer, list(prompt_token_ids))
        return RequestOutput([CompletionOutput(ids, self.tokenizer.decode(ids[:-1]), "stop")])


def openrlhf_wall(tokenizer, tasks, inline: bool, version: str = "0.11.2") -> tuple[float, list]:
    from rlexp.trainers.openrlhf import agent as agent_openrlhf

    with tempfile.TemporaryDirectory() as tmp:
        path = agent_openrlhf.write_agent_file(Path(tmp) / "agent.py", "bench_sleepy_calculator", {"max_calls": 2},
                                               max_turns=3, version=version)
        with agent_openrlhf.release_agent_module(version):
            executor = agent_openrlhf.load_agent_executor(path)
            restore_to_thread(type(executor).execute.__globals__, inline)
            engine = ScriptedVllm(tokenizer)

            async def play():
                return await asyncio.gather(*[
                    executor.execute(prompt=t["prompt"], label=t["answer"], sampling_params=SamplingParams(),
                                     max_length=128, hf_tokenizer=tokenizer, llm_engine=engine) for t in tasks])

            started = time.perf_counter()
            outs = asyncio.run(play())
            return time.perf_counter() - started, outs


# ----------------------------------------------------------------------------- verl

KEEP = ("AgentLoopMetrics", "AgentLoopOutput", "DictConfigWrap", "ToolListWrap", "AgentLoopBase", "register",
        "_agent_loop_registry")


class Cfg(dict):
    def __getattr__(self, name):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return Cfg(value) if isinstance(value, dict) else value


def install_verl_contract(wheel: Path) -> ModuleType:
    """The wheel's agent-loop contract classes, executed, as ``verl.experimental.agent_loop.agent_loop``."""
    import torch
    from pydantic import BaseModel, ConfigDict

    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("verl/experimental/agent_loop/agent_loop.py").decode()
    tree = ast.parse(source)
    kept = [node for node in tree.body
            if (isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in KEEP)
            or (isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) in KEEP)]  # fmt: skip
    module = ModuleType("verl.experimental.agent_loop.agent_loop")
    stub = object
    module.__dict__.update({
        "ABC": __import__("abc").ABC, "abstractmethod": __import__("abc").abstractmethod, "Any": Any,
        "Optional": __import__("typing").Optional, "BaseModel": BaseModel, "ConfigDict": ConfigDict, "torch": torch,
        "DictConfig": stub, "LLMServerClient": stub, "AutoTokenizer": stub, "AutoProcessor": stub, "RLHFDataset": stub,
        "logger": logging.getLogger("verl-agent-loop"),
        "create_continuous_token_builder": lambda *a, **k: None, "get_event_loop": lambda: None,
    })  # fmt: skip
    exec(compile(ast.Module(body=kept, type_ignores=[]), "verl/agent_loop.py", "exec"), module.__dict__)  # noqa: S102
    for package in ("verl", "verl.experimental", "verl.experimental.agent_loop"):
        sys.modules[package] = ModuleType(package)
        sys.modules[package].__path__ = []
    sys.modules[module.__name__] = module
    return module


@dataclass
class TokenOutput:  # verl/workers/rollout/replica.py
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = "completed"


class ScriptedServer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        await asyncio.sleep(0)
        ids = scripted_reply(self.tokenizer, list(prompt_ids))
        return TokenOutput(ids, [-0.5] * len(ids))


def verl_wall(tokenizer, tasks, inline: bool, contract: ModuleType, loop_module: ModuleType) -> tuple[float, list]:
    from rlexp.trainers.verl import agent as agent_verl
    from rlexp.trainers.verl.hydra import verl_row

    restore_to_thread(loop_module.__dict__, inline)
    config = Cfg({"actor_rollout_ref": {"rollout": {"prompt_length": 64, "response_length": 96}}, "data": {}})
    server = ScriptedServer(tokenizer)

    async def one(i, task):
        row = agent_verl.agent_row(verl_row(task, "bench.jsonl", "rlexp_pool", i), task)
        entry = contract._agent_loop_registry[row["agent_name"]]
        module_name, _, cls_name = entry["_target_"].rpartition(".")
        loop = getattr(importlib.import_module(module_name), cls_name)(
            trainer_config=contract.DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
            processor=None, hf_model_type=None, dataset_cls=None, data_config=contract.DictConfigWrap(config.data),
            tools=contract.ToolListWrap([]))
        kwargs = {"raw_prompt": row["prompt"], **{k: v for k, v in row.items() if k != "prompt"}}
        return await loop.run({"temperature": 0, "top_p": 1.0, "top_k": -1}, **kwargs)

    async def play():
        return await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)])

    started = time.perf_counter()
    outs = asyncio.run(play())
    return time.perf_counter() - started, outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--sleep-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=1, help="before/after pairs, interleaved")
    args = parser.parse_args()
    SLEEP_S[0] = args.sleep_ms / 1000.0

    from rlexp.models.tiny import build_tokenizer
    from rlexp.trainers.verl import agent as agent_verl
    from rlexp.trainers.verl import releases as verl_releases

    tokenizer = build_tokenizer()
    tasks = problems(args.episodes)
    print(f"{args.episodes} concurrent episodes, 2 environment steps each, {args.sleep_ms:g} ms per step")

    contract = install_verl_contract(verl_releases.wheel_for("0.9.1"))
    with tempfile.TemporaryDirectory() as tmp:
        agent_verl.write_agent_loop(tmp, "bench_sleepy_calculator", {"max_calls": 2}, max_turns=3,
                                    max_tokens_per_turn=24, max_total_tokens=90)
        sys.path.insert(0, tmp)
        loop_module = importlib.import_module(agent_verl.MODULE_NAME)
        for name, run in (("OpenRLHF 0.11.2 agent file", lambda inline: openrlhf_wall(tokenizer, tasks, inline)),
                          ("verl 0.9.1 agent loop", lambda inline: verl_wall(tokenizer, tasks, inline, contract,
                                                                             loop_module))):
            before, after = [], []
            for _ in range(args.rounds):
                for inline, into in ((True, before), (False, after)):
                    wall, outs = run(inline)
                    into.append(wall)
            solved = check(name, outs)
            b, a = min(before), min(after)
            print(f"{name}: on the event loop {b:.2f} s, off it (to_thread) {a:.2f} s: {b / a:.1f}x "
                  f"({solved}/{len(tasks)} episodes solved in the last run)")


def check(name: str, outs: list) -> int:
    """Episodes that ended solved (the scripted model always answers right): a sanity check that
    the benchmark played real episodes."""
    if name.startswith("OpenRLHF"):
        return sum(1 for o in outs if float(o["reward"] if "reward" in o else o.get("rewards", 0)) >= 1.0)
    return sum(1 for o in outs if float(o.reward_score) >= 1.0)


if __name__ == "__main__":
    main()
