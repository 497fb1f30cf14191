"""The TRL rollout adapter without TRL: what `rlexp launch` writes for an environment attempt on
TRL (the committed example's dry run), what it refuses, how played episodes become TRL's
``prompt_ids``/``completion_ids``/``env_mask``/``logprobs``, and the generated ``rollout_func`` run
against a stand-in for the trainer on the tiny model. The real GRPOTrainer run is
tests/test_trl_agent_run.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlexp.environments.interface import BaseEnvironment, StepResult, TrajectoryBuilder, register

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "experiments" / "tools-trl"


@register("trl_test_echo")
class EchoEnv(BaseEnvironment):
    """Answers the first turn with feedback (a tool call), ends the episode at the second."""

    def reset(self, task):
        self._turn = 0
        return str(task["prompt"])

    def step(self, action_text):
        self._turn += 1
        if self._turn == 1:
            return StepResult("seven", 0.0, False, {"tool_call": True})
        return StepResult("", 1.0, True, {})


@pytest.fixture()
def example(tmp_path, monkeypatch):
    exp = tmp_path / "tools-trl"
    shutil.copytree(EXAMPLE, exp, ignore=shutil.ignore_patterns("launch", "plan.json"))
    monkeypatch.setenv("RLEXP_TRL_PYTHON", str(tmp_path / "no-venv" / "python"))  # a dry run needs none
    return exp / "t1"


def _edit(attempt: Path, **sections):
    spec = yaml.safe_load((attempt / "attempt.yaml").read_text())
    for section, values in sections.items():
        spec[section] = {**spec[section], **values}
    (attempt / "attempt.yaml").write_text(yaml.safe_dump(spec))


def test_dry_run_of_the_committed_example_writes_the_adapters_it_names(example, capsys):
    from rlexp.cli import main

    assert main(["launch", str(example), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    launch = example.resolve() / "launch"
    assert doc["argv"][1:] == [str(launch / "train_trl.py"), "--rollout-module", str(launch / "trl_rollout.py")]
    assert doc["adapters"] == [str(launch / "train_trl.py"), str(launch / "trl_rollout.py")]
    assert sorted(p.name for p in example.iterdir()) == ["attempt.yaml", "launch"]  # no plan.json, no run files
    assert sorted(p.name for p in launch.iterdir()) == ["train_trl.py", "trl_rollout.py"]
    module = (launch / "trl_rollout.py").read_text()
    compile(module, "trl_rollout.py", "exec")
    compile((launch / "train_trl.py").read_text(), "train_trl.py", "exec")
    # the environment is imported from its own module, not copied
    assert "from rlexp.environments.interface import CalculatorEnv as Env0" in module
    assert "class CalculatorEnv" not in module
    config = json.loads(module.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])
    assert config["environment"]["max_total_tokens"] == 48 and config["environment"]["config"] == {"max_calls": 2}
    assert config["episodes_path"] == str(launch / "trl_episodes.jsonl")
    # the text form names the adapters too
    assert main(["launch", str(example), "--dry-run"]) == 0
    assert f"# adapter written: {launch / 'trl_rollout.py'}" in capsys.readouterr().out


@pytest.mark.parametrize(("section", "values", "field", "words"), [
    ("recipe", {"top_p": 0.9}, "recipe.top_p", "plain softmax"),
    ("recipe", {"use_vllm": True}, "recipe.use_vllm", "plain softmax"),
    ("recipe", {"max_completion_length": 32}, "environment.max_total_tokens", "48 exceeds the recipe's "
                                                                              "max_completion_length 32"),
    ("environment", {"advantage_mode": "token_rewards"}, "environment.advantage_mode", "one scalar reward"),
    # GSPO's clip range is the environment's: the example's token-level epsilon 0.2 contradicts it
    ("environment", {"loss": "gspo"}, "recipe.epsilon", "0.2 contradicts environment.loss gspo"),
    ("environment", {"name": "no_such_env"}, "environment.name", "no_such_env"),
])  # fmt: skip
def test_what_the_adapter_cannot_serve_is_refused_naming_the_field(example, capsys, section, values, field, words):
    from rlexp.cli import main

    _edit(example, **{section: values})
    assert main(["launch", str(example), "--dry-run", "--force", "--reason", "adapter check"]) == 2
    err = capsys.readouterr().err
    assert field in err and words in err, err
    assert not (example / "launch").exists()


def test_plan_refuses_what_the_adapter_cannot_serve(example, capsys):
    from rlexp.cli import main

    _edit(example, recipe={"repetition_penalty": 1.1})
    assert main(["plan", str(example)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "recipe.repetition_penalty" in line and "attempt.yaml" in line
    assert not (example / "plan.json").exists()


def test_gspo_is_served_with_or_without_the_recipe_stating_trl_s_fields(example, capsys):
    from rlexp.cli import main

    spec = yaml.safe_load((example / "attempt.yaml").read_text())
    del spec["recipe"]["epsilon"]  # the token-level clip: GSPO's range is the environment's
    (example / "attempt.yaml").write_text(yaml.safe_dump(spec))
    _edit(example, environment={"loss": "gspo"})  # rlexp writes TRL's GSPO fields
    assert main(["launch", str(example), "--dry-run", "--json", "--force", "--reason", "gspo"]) == 0
    _edit(example, recipe={"importance_sampling_level": "sequence", "epsilon": 3e-4})  # the same, stated
    assert main(["launch", str(example), "--dry-run", "--json", "--force", "--reason", "gspo"]) == 0
    _edit(example, recipe={"importance_sampling_level": "token"})  # says otherwise: refused
    assert main(["launch", str(example), "--dry-run", "--json", "--force", "--reason", "gspo"]) == 2
    assert "recipe.importance_sampling_level: 'token' contradicts environment.loss gspo" in capsys.readouterr().err


def test_rollout_output_is_trl_s_contract_of_the_trajectories():
    from rlexp.trainers.trl.agent import rollout_output

    b = TrajectoryBuilder([1, 2, 3])
    b.add_agent([4, 5])
    b.add_env([6, 7, 8])
    b.add_agent([9, 2])
    b.set_turn_reward(1.0)
    played = b.finish("stop")
    failed = TrajectoryBuilder([1, 2]).finish("env_error", "reset: boom")
    mid = TrajectoryBuilder([1, 2])  # the environment failed on the model's first action
    mid.add_agent([5, 2])
    failed_step = mid.finish("env_error", "step: TimeoutError")
    out = rollout_output([played, failed, failed_step], pad_id=0,
                         logprobs=[[-0.5, -0.25, None, None, None, -1.0, -2.0], [], [-0.1, -0.2]])
    assert out["prompt_ids"] == [[1, 2, 3], [1, 2], [1, 2]]
    assert out["completion_ids"] == [[4, 5, 6, 7, 8, 9, 2], [0], [5, 2]]  # an empty completion: one masked pad
    # an environment error is out of the loss (masked whole) and unscorable (None: out of the baseline)
    assert out["env_mask"] == [[1, 1, 0, 0, 0, 1, 1], [0], [0, 0]]
    assert out["logprobs"] == [[-0.5, -0.25, None, None, None, -1.0, -2.0], [None], [-0.1, -0.2]]
    assert out["episode_return"] == [1.0, None, None]
    metrics = out["episode_metrics"]
    assert metrics["env_errors"] == 2 / 3 and metrics["agent_token_fraction"] == 6 / 9
    assert {"turns_per_episode", "tool_calls_per_episode", "env_latency_s"} <= set(metrics)


def test_trl_leaves_a_completion_whose_rewards_are_all_none_out_of_the_baseline():
    """What the None reward of an environment-error episode relies on, in the pinned TRL's own
    GRPOTrainer: a row where every reward function returned None is NaN in the group's nan-aware
    mean and std, and its advantage is 0."""
    from tests.trl_venv import trl_python_or_skip

    python = trl_python_or_skip()
    [source] = python.parent.parent.glob("lib/python*/site-packages/trl/trainer/grpo_trainer.py")
    text = source.read_text(encoding="utf-8")
    for line in ("unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
                 "rewards[unscorable_mask] = torch.nan",
                 "mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)",
                 "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)",
                 "advantages = torch.nan_to_num(advantages, nan=0.0)",
                 "loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask"):
        assert line in text, line


def test_the_generated_rollout_func_plays_one_episode_per_prompt(tmp_path):
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.interface import EnvRow
    from rlexp.models.tiny import build_tiny_model
    from rlexp.trainers.trl.agent import encode_row
    from rlexp.trainers.trl.rollout_template import render_rollout_module

    config = {"rlexp_root": str(REPO), "episodes_path": str(tmp_path / "episodes.jsonl"),
              "environment": {"name": "trl_test_echo", "config": {}, "max_turns": 2, "max_tokens_per_turn": 6,
                              "max_total_tokens": 40, "success_threshold": 1.0}}  # fmt: skip
    path = tmp_path / "trl_rollout.py"
    path.write_text(render_rollout_module("t", {"trl_test_echo": (EchoEnv.__module__, "EchoEnv")}, config))
    spec = importlib.util.spec_from_file_location("rollout_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    model_dir = build_tiny_model(tmp_path / "tiny", seed=0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # the untrained model rarely stops by itself: its last token of a turn is made EOS, so turns end
    # "stop" and the environment answers (feedback = environment tokens)
    model.generation_config.forced_eos_token_id = tok.eos_token_id
    trainer = SimpleNamespace(
        model=model, processing_class=tok, temperature=1.0, args=SimpleNamespace(seed=3),
        state=SimpleNamespace(global_step=5),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, is_main_process=True))  # fmt: skip
    rows = [EnvRow("trl_test_echo", {}, {"prompt": p}) for p in ("1+1=", "22+3=")]
    prompts = [encode_row(r) for r in rows for _ in range(2)]  # as RepeatSampler lays them out, G = 2
    out = module.rollout_func(prompts, trainer)
    assert len(out["completion_ids"]) == len(out["env_mask"]) == len(out["logprobs"]) == 4
    assert out["prompt_ids"][0] == out["prompt_ids"][1] != out["prompt_ids"][2]
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [6] * 4
    for i, (ids, mask, lps) in enumerate(zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True)):
        assert (records[i]["completion_ids"], records[i]["env_mask"]) == (ids, mask)
        assert [lp is None for lp in lps] == [m == 0 for m in mask]
        # the sampler's log-probs, recomputed here one unpadded trajectory at a time
        full = torch.tensor([out["prompt_ids"][i] + ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(full).logits[0, :-1].float(), -1)
        start = len(out["prompt_ids"][i])
        for k, (token, lp) in enumerate(zip(ids, lps, strict=True)):
            if lp is not None:
                assert math.isclose(lp, logp[start + k - 1, token].item(), rel_tol=1e-4, abs_tol=1e-5)
        if any(m == 0 for m in mask):  # the echo environment's feedback sits where the mask is 0
            first_turn = records[i]["turns"][0]
            assert first_turn["feedback"] == "seven" and mask.count(0) == first_turn["feedback_tokens"]
    assert sum(0 in m for m in out["env_mask"]) >= 1
    logged: dict[str, float] = {}
    rewards = module.episode_return(prompts, None, out["episode_return"], [out["episode_metrics"]] * 4,
                                    log_metric=lambda name, value: logged.setdefault(name, value))
    assert rewards == out["episode_return"] and logged == out["episode_metrics"]


# ----------------------------------------------------------------------------- actions as tool calls (environment_factory)


def _as_tool_calls(attempt: Path, **environment):
    _edit(attempt, environment={"actions": "tool_calls", "max_tokens_per_turn": 48, **environment},
          recipe={"model_name_or_path": "models/tools-base-calls"})


def test_dry_run_with_tool_call_actions_writes_the_environment_factory(example, capsys):
    from rlexp.cli import main

    _as_tool_calls(example)
    assert main(["launch", str(example), "--dry-run", "--json", "--force", "--reason", "tools"]) == 0
    doc = json.loads(capsys.readouterr().out)
    launch = example.resolve() / "launch"
    assert doc["argv"][1:] == [str(launch / "train_trl.py"), "--rollout-module", str(launch / "trl_tools.py")]
    assert sorted(p.name for p in launch.iterdir()) == ["train_trl.py", "trl_tools.py"]
    module, script = (launch / "trl_tools.py").read_text(), (launch / "train_trl.py").read_text()
    compile(module, "trl_tools.py", "exec")
    compile(script, "train_trl.py", "exec")
    assert "from rlexp.environments.interface import CalculatorEnv as Env0" in module and "class CalculatorEnv" not in module
    assert "def calc(self, expression: str) -> str:" in module
    assert "return train(CONFIG, argv, environment_factory=True)" in script
    config = json.loads(script.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])
    assert config["grpo_config"]["max_tool_calling_iterations"] == 2  # max_turns 3 - 1


def test_the_text_actions_script_has_no_environment_factory_line(example, capsys):
    from rlexp.cli import main
    from rlexp.trainers.trl.template import FACTORY_ARGUMENT

    assert main(["launch", str(example), "--dry-run", "--json"]) == 0
    script = (example / "launch" / "train_trl.py").read_text()
    assert "environment_factory" not in script and FACTORY_ARGUMENT not in script
    assert "return train(CONFIG, argv)\n" in script


@pytest.mark.parametrize(("environment", "recipe", "field", "words"), [
    ({"name": "exact_match", "config": {}}, {}, "environment.actions", "declares no tools"),
    ({"max_tokens_per_turn": 14}, {}, "environment.max_tokens_per_turn", "no per-turn budget"),
    ({}, {"max_completion_length": 64}, "environment.max_total_tokens", "max_completion_length 64"),
    ({}, {"max_tool_calling_iterations": 5}, "recipe.max_tool_calling_iterations", "max_turns - 1 = 2"),
    ({"advantage_mode": "token_rewards"}, {}, "environment.advantage_mode", "one scalar reward"),
])  # fmt: skip
def test_plan_refuses_what_the_tool_loop_cannot_serve(example, capsys, environment, recipe, field, words):
    from rlexp.cli import main

    _as_tool_calls(example, **environment)
    if recipe:
        _edit(example, recipe=recipe)
    assert main(["plan", str(example)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "attempt.yaml" in line and field in line and words in line, line
    assert not (example / "plan.json").exists()


def test_tool_call_actions_are_refused_for_a_trainer_that_plays_text(example, capsys):
    from rlexp.cli import main

    spec = yaml.safe_load((example / "attempt.yaml").read_text())
    spec["trainer"] = {"name": "local", "version": "0.11.0", "gpus": 0}
    spec["recipe"] = {"pretrain": "models/tools-base"}
    spec["environment"]["actions"] = "tool_calls"
    (example / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert main(["plan", str(example)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "environment.actions" in line and "trainer local plays text turns only" in line, line


def test_text_actions_keep_the_recipe_digest_and_the_plan(example):
    from rlexp.spec import attempt_recipe_sha256, load_attempt
    from rlexp.stages.plan import build_plan

    att = load_attempt(example)
    assert att.environment.actions == "text"
    assert "actions" not in build_plan(att)["environment"]  # a plan of before the field stays the same
    digest = attempt_recipe_sha256(att)
    _edit(example, environment={"actions": "text"})  # stated as the default: the same recipe
    assert attempt_recipe_sha256(load_attempt(example)) == digest
    _as_tool_calls(example)
    assert attempt_recipe_sha256(load_attempt(example)) != digest


def test_the_generated_tool_classes_play_the_environment(tmp_path):
    import importlib.util

    from transformers.utils import get_json_schema

    from rlexp.environments.interface import CalculatorEnv, EnvRow, SearchEnv, environment_tools
    from rlexp.trainers.trl.agent import encode_row
    from rlexp.trainers.trl.tools_template import render_tools_module

    tables = {name: [{"name": t.name, "description": t.description, "params": [list(p) for p in t.params],
                      "action": t.action} for t in environment_tools(cls)]
              for name, cls in (("calculator", CalculatorEnv), ("search", SearchEnv))}  # fmt: skip
    config = {"rlexp_root": str(REPO), "episodes_path": str(tmp_path / "episodes.jsonl"),
              "model_name_or_path": str(tmp_path / "none"),
              "environment": {"name": "calculator", "config": {"max_calls": 1}, "max_turns": 3,
                              "max_tokens_per_turn": 48, "max_total_tokens": 48, "success_threshold": 1.0,
                              "actions": "tool_calls"}}  # fmt: skip
    path = tmp_path / "trl_tools.py"
    path.write_text(render_tools_module("t", {"calculator": ("rlexp.environments.interface", "CalculatorEnv"),
                                              "search": ("rlexp.environments.interface", "SearchEnv")}, tables, config))
    spec = importlib.util.spec_from_file_location("tools_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.rollout_func is None and sorted(module.ENVIRONMENT_FACTORY) == ["calculator", "search"]
    episode = module.ENVIRONMENT_FACTORY["calculator"]()
    # what TRL takes for tools: the public functions other than reset/get_reward (trl GRPOTrainer.__init__)
    import inspect

    public = [n for n, _ in inspect.getmembers(type(episode), inspect.isfunction) if not n.startswith("_")]
    assert public == ["calc", "reset"]
    schema = get_json_schema(episode.calc)["function"]
    assert schema["name"] == "calc" and schema["parameters"]["properties"]["expression"]["type"] == "string"
    assert schema["parameters"]["required"] == ["expression"]
    row = encode_row(EnvRow("calculator", {"max_calls": 1}, {"prompt": "12*34=", "answer": "408"}))
    (train_row,) = module.train_rows([{"prompt": "12*34=", "answer": "408", "config": {"max_calls": 1}}], "", "pool")
    assert train_row == {"prompt": [{"role": "user", "content": ""}], "row": row, "environment": "calculator"}
    assert episode.reset(**{k: v for k, v in train_row.items() if k != "environment"}) == "12*34="
    assert episode.calc(expression="12*34") == "408"  # played as the action "calc 12*34": 12 × 34 by hand
    messages = [{"role": "assistant", "content": "", "tool_calls": [{}]}, {"role": "tool", "content": "408"},
                {"role": "assistant", "content": "\\boxed{408}"}]
    record = episode._finish(messages, False, 3)
    assert (record["return"], record["finish_reason"], record["tool_calls"], record["model_turns"]) == (1.0, "stop", 1, 2)
    assert [t["action"] for t in record["turns"]] == ["calc 12*34", "\\boxed{408}"]
    # a second call beyond max_calls 1 ends the episode with 0; a call after the end is an error TRL reports
    episode.reset(row=row)
    episode.calc(expression="1*2")
    assert episode.calc(expression="1*2") == "" and episode._finish([], False, 3)["return"] == 0.0
    with pytest.raises(RuntimeError, match="episode has ended"):
        episode.calc(expression="1*2")
    search = module.ENVIRONMENT_FACTORY["search"]()
    search.reset(row=encode_row(EnvRow("search", {"corpus_size": 5}, {"prompt": "k1?", "answer": "1"})))
    keys = SearchEnv({"corpus_size": 5}).search("k100")
    assert search.look(key="k100") == " ".join(f"{k}={SearchEnv({'corpus_size': 5}).corpus[k]}" for k in keys)


def test_eval_refuses_tool_call_episodes_in_one_line(example, capsys):
    from rlexp.cli import main

    _as_tool_calls(example)
    assert main(["eval", str(example)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "attempt.yaml" in line and "environment.actions" in line and "text turns only" in line, line
    assert not (example / "eval").exists()


def test_the_tiny_tool_template_renders_calls_and_parses_them_back(tmp_path):
    from transformers import AutoTokenizer

    from rlexp.models.tiny import build_tokenizer, with_tool_template

    plain = build_tokenizer()
    with_tool_template(build_tokenizer()).save_pretrained(tmp_path, save_jinja_files=False)
    tok = AutoTokenizer.from_pretrained(tmp_path)  # what a checkpoint carries
    assert tok.response_template is not None
    chat = [{"role": "user", "content": "12*34="}, {"role": "assistant", "content": "\\boxed{408}"},
            {"role": "user", "content": "again"}]
    for n in (1, 2, 3):  # no tool calls: the plain template's text, so the text episodes see no change
        for gen in (False, True):
            assert tok.apply_chat_template(chat[:n], tokenize=False, add_generation_prompt=gen) == \
                plain.apply_chat_template(chat[:n], tokenize=False, add_generation_prompt=gen)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"expression": "12*34"}}}]}
    text = tok.apply_chat_template([chat[0], call, {"role": "tool", "name": "calc", "content": "408"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|user|>12*34=<|assistant|>@calc expression=12*34<|eos|><|user|>408<|assistant|>"
    prefix = tok.apply_chat_template([chat[0]], tokenize=True, add_generation_prompt=True, return_dict=False)
    parsed = tok.parse_response(tok("@calc expression=12*34<|eos|>", add_special_tokens=False)["input_ids"],
                                prefix=prefix)
    assert parsed["tool_calls"] == call["tool_calls"]
    answer = tok.parse_response(tok("\\boxed{408}<|eos|>", add_special_tokens=False)["input_ids"], prefix=prefix)
    assert answer == {"role": "assistant", "content": "\\boxed{408}"}


def _drop_recipe_key(attempt: Path, key: str) -> None:
    spec = yaml.safe_load((attempt / "attempt.yaml").read_text())
    del spec["recipe"][key]
    (attempt / "attempt.yaml").write_text(yaml.safe_dump(spec))


def test_an_unstated_completion_cap_is_trls_default_and_null_caps_nothing(example, capsys):
    """The turn budget is held against max_completion_length as TRL runs it: unstated, GRPOConfig's own
    default (512 in TRL 1.16; tests/test_trl_recipe.py holds rlexp's table to TRL's dataclass); stated
    null, TRL passes no cap to generation, so no budget can be exceeded (not a 512 of rlexp's)."""
    from rlexp.cli import main

    _drop_recipe_key(example, "max_completion_length")
    _edit(example, environment={"max_total_tokens": 600}, recipe={"eval_strategy": "no"})
    assert main(["launch", str(example), "--dry-run", "--force", "--reason", "cap"]) == 2
    err = capsys.readouterr().err
    assert "environment.max_total_tokens" in err and "600 exceeds the recipe's max_completion_length 512" in err, err

    _edit(example, recipe={"max_completion_length": None})
    assert main(["launch", str(example), "--dry-run", "--force", "--reason", "no cap"]) == 0, capsys.readouterr().err


def test_a_null_completion_cap_is_refused_where_a_number_is_needed(example, capsys):
    """TRL's tool loop compares every completion's length with max_completion_length (None fails
    there), and the greedy monitor decodes as far as training does: both need a number."""
    from rlexp.cli import main

    _edit(example, recipe={"max_completion_length": None})  # eval_strategy: steps, so the monitor runs
    assert main(["launch", str(example), "--dry-run", "--force", "--reason", "monitor"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "recipe.max_completion_length" in line and "greedy monitor" in line, line

    _as_tool_calls(example)
    _edit(example, recipe={"eval_strategy": "no"})
    assert main(["plan", str(example)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "recipe.max_completion_length" in line and "tool loop" in line, line
    assert not (example / "plan.json").exists()
