"""verl's generated agent loop against the pinned wheel's own classes, and its keys under Hydra.

verl itself does not run here (it needs GPUs, Ray and vLLM/SGLang). What runs is verl's own code
for the contract: ``AgentLoopMetrics``, ``AgentLoopOutput`` (a pydantic model: field names and
types are validated), ``AgentLoopBase`` (its ``__init__``, ``_cap_text_prompt_length``), the
``register`` decorator and its registry, ``DictConfigWrap`` — taken from the wheel's
``verl/experimental/agent_loop/agent_loop.py`` by AST (the module's other imports — Ray, tensordict,
vLLM — do not install on this CPU box) and executed. The generated loop, built as verl's worker
builds it (``hydra.utils.instantiate`` of the registry entry with the worker's keyword
arguments), plays the demo tool task against the local engine behind verl's
``server_manager.generate(request_id, prompt_ids=, sampling_params=)``; its output must equal
rlexp's own rollout (prompt, response ids, response mask, reward on the last token).
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib
import inspect
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlexp.trainers.verl import agent as agent_verl
from rlexp.trainers.verl import releases as verl_config

VERSION = "0.9.1"
AGENT_LOOP = "verl/experimental/agent_loop/agent_loop.py"
KEEP = ("AgentLoopMetrics", "AgentLoopOutput", "DictConfigWrap", "ToolListWrap", "AgentLoopBase", "register",
        "_agent_loop_registry")
N_EPISODES = 24


@pytest.fixture(scope="module")
def wheel() -> Path:
    if os.environ.get("CI"):
        return verl_config.fetch(verl_config.listed_releases()[0])
    try:
        return verl_config.wheel_for(VERSION)
    except verl_config.ReleaseError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def verl_source(wheel) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(AGENT_LOOP).decode()


class Cfg(dict):
    """An attribute-access mapping standing in for OmegaConf's DictConfig (``.get`` and ``.x``)."""

    def __getattr__(self, name):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return Cfg(value) if isinstance(value, dict) else value


@pytest.fixture(scope="module")
def verl_module(verl_source):
    """The wheel's contract classes, executed, installed as ``verl.experimental.agent_loop.agent_loop``."""
    pytest.importorskip("pydantic")
    import torch
    from pydantic import BaseModel, ConfigDict

    tree = ast.parse(verl_source)
    kept = [node for node in tree.body
            if (isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in KEEP)
            or (isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) in KEEP)]  # fmt: skip
    assert {getattr(n, "name", None) or n.target.id for n in kept} == set(KEEP)
    module = ModuleType("verl.experimental.agent_loop.agent_loop")
    stub = object  # type names used only in annotations of the kept code
    module.__dict__.update({
        "ABC": __import__("abc").ABC, "abstractmethod": __import__("abc").abstractmethod, "Any": Any,
        "Optional": __import__("typing").Optional, "BaseModel": BaseModel, "ConfigDict": ConfigDict, "torch": torch,
        "DictConfig": stub, "LLMServerClient": stub, "AutoTokenizer": stub, "AutoProcessor": stub, "RLHFDataset": stub,
        "logger": logging.getLogger("verl-agent-loop"),
        # AgentLoopBase.__init__ builds verl's tokenisation helper and takes the event loop: not used by the loop
        "create_continuous_token_builder": lambda *a, **k: None, "get_event_loop": lambda: None,
    })  # fmt: skip
    exec(compile(ast.Module(body=kept, type_ignores=[]), f"{VERSION}/{AGENT_LOOP}", "exec"), module.__dict__)  # noqa: S102
    names = ["verl", "verl.experimental", "verl.experimental.agent_loop", module.__name__]
    saved = {name: sys.modules.get(name) for name in names}
    for package in names[:-1]:
        sys.modules[package] = ModuleType(package)
        sys.modules[package].__path__ = []
    sys.modules[module.__name__] = module
    yield module
    for name, old in saved.items():
        if old is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = old


@pytest.fixture(scope="module")
def generated(verl_module, tmp_path_factory):
    directory = tmp_path_factory.mktemp("agent-loop")
    module_path, config_path = agent_verl.write_agent_loop(directory, "calculator", {"max_calls": 2}, max_turns=3,
                                                           max_tokens_per_turn=12, max_total_tokens=30)
    sys.path.insert(0, str(directory))
    try:
        module = importlib.import_module(agent_verl.MODULE_NAME)
        yield {"module": module, "dir": directory, "config": config_path, "path": module_path}
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(agent_verl.MODULE_NAME, None)


def test_the_loop_subclasses_the_wheels_base_and_matches_run(verl_module, generated):
    cls = getattr(generated["module"], agent_verl.CLASS_NAME)
    assert issubclass(cls, verl_module.AgentLoopBase) and not inspect.isabstract(cls)
    base, ours = inspect.signature(verl_module.AgentLoopBase.run), inspect.signature(cls.run)
    assert list(base.parameters) == list(ours.parameters) == ["self", "sampling_params", "kwargs"]
    assert ours.parameters["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    assert inspect.iscoroutinefunction(cls.run)


def test_registered_by_name_as_the_yaml_says(verl_module, generated):
    target = f"{agent_verl.MODULE_NAME}.{agent_verl.CLASS_NAME}"
    assert verl_module._agent_loop_registry[agent_verl.AGENT_NAME] == {"_target_": target}
    import yaml

    assert yaml.safe_load(generated["config"].read_text()) == [{"name": agent_verl.AGENT_NAME, "_target_": target}]


def test_output_fields_are_the_wheels(verl_source):
    """Every keyword the loop passes to AgentLoopOutput is a field of the wheel's model, and every
    required field is passed (read by AST: the test above executes the same model)."""
    tree = ast.parse(verl_source)
    [output] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentLoopOutput"]
    fields = {n.target.id: n.value is not None for n in output.body if isinstance(n, ast.AnnAssign)}
    required = {name for name, has_default in fields.items() if not has_default}
    from rlexp.trainers.verl import agent_runtime

    # the generated class builds its output as OUTPUT(...), OUTPUT being the wheel's AgentLoopOutput
    assert "OUTPUT = AgentLoopOutput" in agent_verl.render_agent_loop("calculator", {}, max_turns=2,
                                                                      max_tokens_per_turn=8, max_total_tokens=16)
    loop = ast.parse(inspect.getsource(agent_runtime))
    [call] = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "OUTPUT"]
    passed = {k.arg for k in call.keywords}
    assert required == {"prompt_ids", "response_ids", "response_mask", "metrics"}
    assert required <= passed <= set(fields)


# ----------------------------------------------------------------------------- played for real


@dataclasses.dataclass
class TokenOutput:  # verl/workers/rollout/replica.py: the fields the loop reads
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = "completed"


class LocalServer:
    """The local engine (greedy) behind verl's ``server_manager.generate``."""

    def __init__(self, model, tokenizer, response_length, with_logprobs=False):
        self.model, self.tokenizer, self.response_length = model, tokenizer, response_length
        self.with_logprobs = with_logprobs

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from rlexp.evaluation.generation import generate_ids

        await asyncio.sleep(0)
        assert sampling_params["temperature"] == 0
        # vLLM's server: max_tokens from the request, capped by response_length
        max_tokens = min(sampling_params.get("max_tokens", self.response_length), self.response_length)
        [[completion]] = generate_ids(self.model, self.tokenizer, [list(prompt_ids)], max_new_tokens=max_tokens)
        ids = list(completion.token_ids)
        # vLLM's log-probs of the sampled tokens (here a marker of each token: where it lands is checked)
        return TokenOutput(ids, [served_logprob(t) for t in ids] if self.with_logprobs else None)


def served_logprob(token_id):
    return -0.01 * (token_id % 97 + 1)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.experiment.datasets import read_dataset
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_base, build_datasets

    root = tmp_path_factory.mktemp("tools")
    config = dataclasses.replace(ToolsDemoConfig.fast(), sft_steps=100, sft_batch=16, sizes=(64, 4, N_EPISODES, 4, 4),
                                 search_share=0.0)  # the calculator task alone: its episodes are the ones compared
    datasets = build_datasets(root / "data", config)
    base = build_base(root / "models", datasets["pool"], config)
    return {"model": AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
            "tokenizer": AutoTokenizer.from_pretrained(base), "records": read_dataset(datasets["ood_primary"])}


RESPONSE_LENGTH = 64
PROMPT_LENGTH = 32

# An environment outside rlexp whose reset fails for about half the tasks (imported by path)
BROKEN_ENV = """
from rlexp.environments.interface import CalculatorEnv


class BrokenResetCalculator(CalculatorEnv):
    def reset(self, task):
        if sum(map(ord, str(task["prompt"]))) % 2:
            raise RuntimeError("task store down")
        return CalculatorEnv.reset(self, task)
"""


def play_loop(verl_module, demo, with_logprobs=False):
    """Every record through the registered loop, as AgentLoopWorker._run_agent_loop runs it
    (instantiate the registry entry, run with the row's fields)."""
    from rlexp.trainers.verl.hydra import verl_row

    config = Cfg({"actor_rollout_ref": {"rollout": {"prompt_length": PROMPT_LENGTH,
                                                    "response_length": RESPONSE_LENGTH}}, "data": {}})
    server = LocalServer(demo["model"], demo["tokenizer"], RESPONSE_LENGTH, with_logprobs)

    async def play():
        outs = []
        for i, record in enumerate(demo["records"]):
            row = agent_verl.agent_row(verl_row(record, "ood_primary.jsonl", "rlexp_pool", i),
                                       {"prompt": record["prompt"], "answer": record["answer"]})
            entry = verl_module._agent_loop_registry[row["agent_name"]]
            module_name, _, cls_name = entry["_target_"].rpartition(".")
            loop = getattr(importlib.import_module(module_name), cls_name)(
                trainer_config=verl_module.DictConfigWrap(config), server_manager=server,
                tokenizer=demo["tokenizer"], processor=None, hf_model_type=None, dataset_cls=None,
                data_config=verl_module.DictConfigWrap(config.data), tools=verl_module.ToolListWrap([]))
            kwargs = {"raw_prompt": row["prompt"], **{k: v for k, v in row.items() if k != "prompt"}}
            outs.append(await loop.run({"temperature": 0, "top_p": 1.0, "top_k": -1}, **kwargs))
        return outs

    return asyncio.run(play())


def test_the_loop_plays_rlexps_episodes(wheel, verl_module, generated, demo, tmp_path, monkeypatch):
    from rlexp.environments.episodes import run_episodes
    from rlexp.environments.interface import Budgets, rows_from_dataset

    (tmp_path / "broken_env_mod.py").write_text(BROKEN_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    played, references = [], []
    for env in ("calculator", "broken_env_mod:BrokenResetCalculator"):
        rows = rows_from_dataset(demo["records"], default_env=env, default_config={"max_calls": 2})
        refs = [t for [t] in run_episodes(demo["model"], demo["tokenizer"], rows, budgets=Budgets(3, 12, 30))]
        monkeypatch.setattr(generated["module"].RUN, "environment", env)
        monkeypatch.setattr(generated["module"].RUN, "idle", [])
        played += play_loop(verl_module, demo)
        references += refs
    assert {t.finish_reason for t in references} >= {"stop", "length", "env_error"}
    assert any(t.tool_calls for t in references) and any(not t.turns for t in references)

    for i, (out, ref) in enumerate(zip(played, references, strict=True)):
        assert isinstance(out, verl_module.AgentLoopOutput), i
        p = ref.prompt_len
        assert out.prompt_ids == list(ref.token_ids[:p]), i
        if ref.finish_reason == "env_error":  # no response: out of verl's loss, counted as aborted
            assert out.response_ids == out.response_mask == [], i
        else:
            assert out.response_ids == list(ref.token_ids[p:]), i
            assert out.response_mask == list(ref.agent_mask[p:]), i  # the response only, 1 = model token
        assert out.reward_score == pytest.approx(ref.episode_return, abs=1e-9)
        if ref.turns:
            as_dict = out.as_dict()  # verl's own conversion: the reward on the last response token
            assert float(as_dict["rm_scores"][-1]) == pytest.approx(ref.episode_return, abs=1e-6)
            assert float(as_dict["rm_scores"][:-1].abs().sum()) == 0.0
        assert out.extra_fields["finish_reason"] == ref.finish_reason
        assert out.extra_fields["tool_calls_per_episode"] == out.extra_fields["tool_call_counts"] == ref.tool_calls
        assert out.extra_fields["turns_per_episode"] == len(ref.turns)
        assert out.extra_fields["env_errors"] == int(ref.finish_reason == "env_error")
        assert (out.metrics.tool_calls > 0) == bool(ref.turns)  # the environment's seconds
    assert_logged_as_rlexp(wheel, played, references)


# ----------------------------------------------------------------------------- what reaches the log


def release_functions(wheel: Path, names: tuple[str, ...] | None, path: str,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Module-level functions of the wheel's ``path``, taken by AST and executed (their modules
    import verl's DataProto, Ray and the like, which do not install here). ``names=None``: every
    function and every module-level constant of the file; ``extra`` adds to their namespace."""
    import numbers
    import pprint

    import numpy as np
    import torch

    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(path).decode())
    if names is None:
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.Assign | ast.AnnAssign)]
    else:
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
        assert {n.name for n in found} == set(names)
    namespace = {"torch": torch, "np": np, "numbers": numbers, "pprint": pprint, "Any": Any, "DataProto": object,
                 "logger": logging.getLogger("verl-metrics"), **(extra or {})}
    exec(compile(ast.Module(body=found, type_ignores=[]), f"{VERSION}/{path}", "exec"), namespace)  # noqa: S102
    return namespace


def verl_batch(outputs):
    """The rollout batch of the outputs as verl's agent loop worker pads it
    (``_agent_loop_postprocess``: prompts left-padded, responses right-padded, the reward on the
    last response token) and its ``_postprocess`` (``__num_turns__``, the extra fields)."""
    import types

    import numpy as np
    import torch

    n = len(outputs)
    prompts = torch.zeros(n, PROMPT_LENGTH, dtype=torch.long)
    responses = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.long)
    attention = torch.zeros(n, PROMPT_LENGTH + RESPONSE_LENGTH, dtype=torch.long)
    response_mask = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.long)
    scores = torch.zeros(n, RESPONSE_LENGTH)
    for i, out in enumerate(outputs):
        p, r = len(out.prompt_ids), len(out.response_ids)
        prompts[i, PROMPT_LENGTH - p:] = torch.tensor(out.prompt_ids)
        attention[i, PROMPT_LENGTH - p:PROMPT_LENGTH + r] = 1
        responses[i, :r] = torch.tensor(out.response_ids, dtype=torch.long)
        response_mask[i, :r] = torch.tensor(out.response_mask, dtype=torch.long)
        scores[i, r - 1] = out.reward_score  # response_length - 1: -1 for an empty response, as verl's
    tool_calls = np.empty(n, dtype=object)
    tool_calls[:] = [out.extra_fields.get("tool_call_counts") for out in outputs]
    batch = {"prompts": prompts, "responses": responses, "attention_mask": attention, "response_mask": response_mask,
             "token_level_scores": scores, "token_level_rewards": scores, "advantages": torch.zeros_like(scores),
             "returns": torch.zeros_like(scores)}  # fmt: skip
    non_tensor = {"__num_turns__": np.array([out.num_turns for out in outputs], dtype=np.int32),
                  "tool_call_counts": tool_calls}
    return types.SimpleNamespace(batch=batch, non_tensor_batch=non_tensor, meta_info={})


def assert_logged_as_rlexp(wheel, outputs, references):
    """The batch through verl's own ``compute_data_metrics`` (``trainer/ppo/metric_utils.py``),
    printed by its console logger (``utils/logger/aggregate_logger.py::concat_dict_to_str``), read
    back by rlexp's reader: the local trainer's names carry rlexp's own metrics of the same episodes
    (:func:`rlexp.environments.interface.episode_metrics`), the return as ``reward`` over the episodes
    that have a response."""
    from rlexp.environments.interface import episode_metrics
    from rlexp.trainers.verl.metrics import read_verl_console

    compute = release_functions(wheel, ("compute_data_metrics", "_compute_response_info"), "verl/trainer/ppo/metric_utils.py")
    console = release_functions(wheel, ("concat_dict_to_str",), "verl/utils/logger/aggregate_logger.py")
    metrics = compute["compute_data_metrics"](verl_batch(outputs), use_critic=False)
    line = console["concat_dict_to_str"](metrics, step=1)
    assert "num_turns/mean:np.float64(" in line  # numpy scalars, as verl prints them
    [row] = read_verl_console(line + "\n").runs[0].rows
    expected = episode_metrics(references)
    assert row["turns_per_episode"] == pytest.approx(expected["turns_per_episode"], rel=1e-12)
    assert row["tool_calls_per_episode"] == pytest.approx(expected["tool_calls_per_episode"], rel=1e-12)
    started = [t for t in references if t.turns]
    assert len(started) < len(references)
    assert row["reward"] == pytest.approx(episode_metrics(started)["episode_return"], rel=1e-6)
    # the episodes with no response (environment errors under rlexp's loop): verl's aborted ratio
    assert row["env_errors"] == pytest.approx(expected["env_errors"], rel=1e-6) and row["env_errors"] > 0


# ----------------------------------------------------------------------------- the keys, under Hydra


_HYDRA_CHILD = """
import json, sys
request = json.load(sys.stdin)
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
with initialize_config_dir(config_dir=request["config_dir"], version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=request["overrides"])
loops = OmegaConf.load(request["agent_loop_config"])
print(json.dumps({"config": OmegaConf.to_container(cfg, resolve=False),
                  "loops": [{"name": c.name, "_target_": c._target_} for c in loops]}))
"""


def test_agent_keys_compose_with_verls_config(wheel, tmp_path):
    """The keys are in the release's key table, and Hydra composes them with the wheel's
    ppo_trainer.yaml (as ``python -m verl.trainer.main_ppo`` would); verl's loader reads the YAML."""
    from rlexp.trainers.verl.hydra import overrides

    hydra_path = verl_config.hydra_dir()
    if not (hydra_path / "hydra").is_dir():
        pytest.skip(f"Hydra is not in {hydra_path}: run {verl_config.FETCH_SCRIPT}")
    _, config_path = agent_verl.write_agent_loop(tmp_path, "calculator", {}, max_turns=3, max_tokens_per_turn=14,
                                                 max_total_tokens=40)
    from rlexp.trainers.verl import advantage

    # the keys rlexp adds for an environment task on grpo (rlexp's estimator, imported by verl as external_lib)
    keys = {**agent_verl.agent_keys(config_path, max_turns=3), **advantage.estimator_keys({advantage.ESTIMATOR_KEY: "grpo"})}
    table = verl_config.read_table(VERSION)
    assert set(keys) <= set(table)
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(verl_config.CONFIG_DIR + "/") and n.endswith(".yaml")]
        archive.extractall(tmp_path / "cfg", members)
    request = {"config_dir": str(tmp_path / "cfg" / verl_config.CONFIG_DIR), "overrides": overrides(keys),
               "agent_loop_config": str(config_path)}
    done = subprocess.run([sys.executable, "-c", _HYDRA_CHILD], input=json.dumps(request),
                          env={**os.environ, "PYTHONPATH": str(hydra_path)}, capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    rollout = answer["config"]["actor_rollout_ref"]["rollout"]
    assert rollout["agent"]["agent_loop_config_path"] == str(config_path)
    assert rollout["agent"]["default_agent_loop"] == agent_verl.AGENT_NAME
    assert rollout["multi_turn"]["enable"] is True and rollout["multi_turn"]["max_assistant_turns"] == 3
    assert answer["config"]["algorithm"]["adv_estimator"] == advantage.ESTIMATOR
    assert answer["config"]["actor_rollout_ref"]["model"]["external_lib"] == advantage.MODULE_NAME
    assert answer["loops"] == [{"name": agent_verl.AGENT_NAME,
                                "_target_": f"{agent_verl.MODULE_NAME}.{agent_verl.CLASS_NAME}"}]


def test_agent_row_keeps_the_task_whole():
    from rlexp.trainers.verl.hydra import verl_row

    task = {"prompt": "12*3=", "answer": "36", "gold_docs": [1, 2]}
    row = agent_verl.agent_row(verl_row(task, "pool.jsonl", "rlexp_pool", 0), task)
    assert row["agent_name"] == agent_verl.AGENT_NAME and json.loads(row["extra_info"]["rlexp_task"]) == task
    assert row["extra_info"]["problem_hash"] is None and row["reward_model"]["ground_truth"] == "36"


@pytest.mark.parametrize("name", ["smollm2", "llama3.1", "tiny"])
def test_the_loops_turns_are_the_chat_templates_rendering(name, verl_module, generated, monkeypatch):
    """On a real ChatML (SmolLM2) and Llama 3.1 template, the loop's prompt + response ids are the
    template's rendering of the conversation (what verl's own tool loop builds by rendering
    messages): ChatML's newline after ``<|im_end|>`` included."""
    from tests.chat_templates import ACTIONS, check_ids, scripted_turns, tokenizer_for

    tokenizer = tokenizer_for(name)
    turns, _ = scripted_turns(tokenizer, ACTIONS)

    class ScriptedServer:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            [completion] = turns([list(prompt_ids)], sampling_params["max_tokens"], None)
            return TokenOutput(list(completion.token_ids))

    run = generated["module"].RUN  # the generated module's state
    for key, value in {"environment": "test_chat_turns", "config": {"turns": 3}, "idle": [],
                       "max_tokens_per_turn": 64, "max_total_tokens": 400}.items():
        monkeypatch.setattr(run, key, value)
    config = Cfg({"actor_rollout_ref": {"rollout": {"prompt_length": 400, "response_length": 400}}, "data": {}})
    entry = verl_module._agent_loop_registry[agent_verl.AGENT_NAME]
    module_name, _, cls_name = entry["_target_"].rpartition(".")
    loop = getattr(importlib.import_module(module_name), cls_name)(
        trainer_config=verl_module.DictConfigWrap(config), server_manager=ScriptedServer(), tokenizer=tokenizer,
        processor=None, hf_model_type=None, dataset_cls=None, data_config=verl_module.DictConfigWrap(config.data),
        tools=verl_module.ToolListWrap([]))
    out = asyncio.run(loop.run({"temperature": 0, "top_p": 1.0, "top_k": -1},
                               raw_prompt=[{"role": "user", "content": "a"}],
                               extra_info={"rlexp_task": json.dumps({"name": "a"})}))
    assert out.extra_fields["finish_reason"] == "stop" and out.extra_fields["turns_per_episode"] == 3
    check_ids(tokenizer, name, out.prompt_ids + out.response_ids)


def _verl_tokenizer_package(wheel, monkeypatch):
    """verl's ``utils/tokenizer`` modules (``tokenizer``, ``chat_template``, ``continuous_token``),
    executed from the wheel as a private package (their only outside import is transformers),
    installed in ``sys.modules`` for the test."""
    name = "_verl_tokenizer_under_test"
    package = ModuleType(name)
    package.__path__ = []
    monkeypatch.setitem(sys.modules, name, package)
    modules = {name: package}
    with zipfile.ZipFile(wheel) as archive:
        for part in ("tokenizer", "chat_template", "continuous_token"):
            module = ModuleType(f"{name}.{part}")
            module.__package__ = name
            monkeypatch.setitem(sys.modules, module.__name__, module)  # the later parts import the earlier ones
            modules[module.__name__] = module
            source = archive.read(f"verl/utils/tokenizer/{part}.py").decode()
            exec(compile(source, f"{VERSION}/verl/utils/tokenizer/{part}.py", "exec"), module.__dict__)  # noqa: S102
    return modules


def test_rlexps_chatml_episode_is_what_verls_own_qwen_token_builder_builds(wheel, monkeypatch):
    """verl 0.9.1's own multi-turn tokenisation (``QwenContinuousTokenBuilder``: the suffix diff of
    two renderings, plus the newline it inserts after a generation that stopped at ``<|im_end|>``)
    on SmolLM2's ChatML template gives the ids of rlexp's rollout of the same episode."""
    from rlexp.environments import episodes
    from rlexp.environments.interface import Budgets, parse_rows
    from rlexp.evaluation import generation
    from tests.chat_templates import ACTIONS, FEEDBACKS, scripted_turns, tokenizer_for

    tokenizer = tokenizer_for("smollm2")
    modules = _verl_tokenizer_package(wheel, monkeypatch)
    builder = modules["_verl_tokenizer_under_test.continuous_token"].QwenContinuousTokenBuilder(tokenizer)
    messages = [{"role": "user", "content": "Compute a."}]
    runtime = builder.build_initial_tokens(messages)
    for k, action in enumerate(ACTIONS):
        generated = tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        runtime = builder.merge_assistant_tokens(runtime, generated).token_ids
        messages = [*messages, {"role": "assistant", "content": action}]
        if k < len(FEEDBACKS):
            updated = [*messages, {"role": "user", "content": FEEDBACKS[k]}]
            runtime = builder.merge_context_tokens(messages, updated, runtime).token_ids
            messages = updated

    turns, _ = scripted_turns(tokenizer, ACTIONS)
    monkeypatch.setattr(generation, "generate_ids",
                        lambda model, tok, batch, *, max_new_tokens, **_: [(c,) for c in turns(batch, max_new_tokens, None)])
    rows = parse_rows([{"env": "test_chat_turns", "config": {"turns": 3}, "task": {"name": "a"}}])
    [[trajectory]] = episodes.run_episodes(None, tokenizer, rows, budgets=Budgets(3, 64, 400))
    assert list(trajectory.token_ids) == runtime


def test_the_loop_returns_the_servers_logprobs_aligned_with_the_response(verl_module, generated, demo, monkeypatch):
    """verl's rollout correction reads rollout_log_probs (AgentLoopOutput.response_logprobs): the
    server's value at every sampled token, 0.0 at the environment's tokens (masked out), one per
    response token; a server that sends none leaves the field None (verl then computes its own)."""
    monkeypatch.setattr(generated["module"].RUN, "environment", "calculator")
    monkeypatch.setattr(generated["module"].RUN, "idle", [])
    outs = play_loop(verl_module, demo, with_logprobs=True)
    assert any(0 in out.response_mask for out in outs)  # multi-turn episodes: feedback positions exist
    for out in outs:
        assert len(out.response_logprobs) == len(out.response_ids) == len(out.response_mask)
        expected = [served_logprob(t) if m else 0.0 for t, m in zip(out.response_ids, out.response_mask, strict=True)]
        assert out.response_logprobs == expected
    assert all(out.response_logprobs is None for out in play_loop(verl_module, demo))


def rollout_correction_functions(wheel):
    """verl's rollout correction (``trainer/ppo/rollout_corr_helper.py``) from the wheel, its
    functions and constants executed with the wheel's own masked mean and sum
    (``utils/torch_functional.py``); DataProto, Ray and the configs do not install here."""
    import math
    import types
    from typing import Optional

    verl_f = release_functions(wheel, ("masked_sum", "masked_mean"), "verl/utils/torch_functional.py")
    extra = {"math": math, "Optional": Optional, "DataProto": types.SimpleNamespace(from_dict=lambda tensors: tensors),
             "verl_F": types.SimpleNamespace(**verl_f), "RolloutCorrectionConfig": object, "PolicyLossConfig": object}
    namespace = release_functions(wheel, None, "verl/trainer/ppo/rollout_corr_helper.py", extra)
    return namespace["compute_rollout_correction_and_rejection_mask"]


def test_verls_rollout_correction_reads_the_loops_logprobs(wheel, verl_module, generated, demo, monkeypatch):
    """The loop's response_logprobs through verl 0.9.1's own rollout correction, padded as its
    agent loop worker pads them (0.0 after the response). With a training policy equal to the
    server's, every agent token's importance weight is exactly 1, nothing is rejected and the
    measured KL is 0; the feedback tokens (0.0 in the list) count nowhere because the loop's
    response_mask leaves them out. A list shifted by one token, or the mask ignored, shows up."""
    import torch

    correct = rollout_correction_functions(wheel)
    monkeypatch.setattr(generated["module"].RUN, "environment", "calculator")
    monkeypatch.setattr(generated["module"].RUN, "idle", [])
    outs = play_loop(verl_module, demo, with_logprobs=True)
    n = len(outs)
    rollout = torch.zeros(n, RESPONSE_LENGTH)
    training = torch.zeros(n, RESPONSE_LENGTH)
    mask = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.long)
    for i, out in enumerate(outs):
        r = len(out.response_ids)
        rollout[i, :r] = torch.tensor(out.response_logprobs)
        # the trainer's recomputed log-probs: the same policy, a real value at every position
        training[i, :r] = torch.tensor([served_logprob(t) for t in out.response_ids])
        mask[i, :r] = torch.tensor(out.response_mask, dtype=torch.long)
    assert int((mask == 0).logical_and(training != 0).sum()) > 0  # feedback tokens exist, and differ there

    def run(rollout_logprobs, response_mask):
        return correct(training, rollout_logprobs, response_mask, rollout_is="token", rollout_is_threshold=2.0,
                       rollout_rs="token_k1", rollout_rs_threshold="0.999_1.001")

    weights, kept, metrics = run(rollout, mask)
    on = mask.bool()
    assert torch.equal(weights["rollout_is_weights"][on], torch.ones(int(on.sum())))
    assert torch.equal(kept, mask)  # not one agent token rejected
    assert metrics["rollout_corr/kl"] == 0.0
    _, shifted_kept, shifted = run(torch.roll(rollout, 1, dims=1), mask)
    assert shifted["rollout_corr/kl"] != 0.0 and int(shifted_kept.sum()) < int(mask.sum())
    _, _, unmasked = run(rollout, (training != 0).long())
    assert unmasked["rollout_corr/kl"] != 0.0


def test_environment_steps_run_off_the_event_loop(verl_module, generated, demo, monkeypatch):
    """reset and step run in worker threads: the event loop's thread never runs the environment."""
    import threading

    from rlexp.environments.interface import CalculatorEnv

    seen = []

    class Recording(CalculatorEnv):
        def reset(self, task):
            seen.append(threading.get_ident())
            return CalculatorEnv.reset(self, task)

        def step(self, action_text):
            seen.append(threading.get_ident())
            return CalculatorEnv.step(self, action_text)

    loop_thread = threading.get_ident()  # asyncio.run runs the loop on the calling thread
    monkeypatch.setattr(generated["module"].RUN, "idle", [Recording({"max_calls": 2}) for _ in range(N_EPISODES)])
    play_loop(verl_module, demo)
    assert seen and loop_thread not in seen
