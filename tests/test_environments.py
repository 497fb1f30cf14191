"""Environment tasks: the interface, rows, grouping and caching, and episodes token-in/token-out."""

from __future__ import annotations

import pytest

from rlexp.environments.interface import (
    BaseEnvironment,
    Budgets,
    EnvironmentCache,
    ExactMatchEnv,
    StepResult,
    TrajectoryBuilder,
    episode_metrics,
    group_rows,
    parse_rows,
    register,
    resolve,
)
from rlexp.errors import InputError


@register("test_counter")
class CounterEnv(BaseEnvironment):
    """Ends after ``config.turns`` steps; the reward of step k is k; feedback says which step."""

    instances = 0

    def __init__(self, config=None):
        super().__init__(config)
        CounterEnv.instances += 1
        self.steps = 0

    def reset(self, task):
        self.steps = 0
        return f"go {task['name']}"

    def step(self, action_text):
        self.steps += 1
        done = self.steps >= int(self.config.get("turns", 2))
        return StepResult(feedback=f"f{self.steps}", reward=float(self.steps), done=done,
                          info={"tool_call": not done})


class BrokenEnv(BaseEnvironment):
    def reset(self, task):
        return "q"

    def step(self, action_text):
        raise RuntimeError("tool crashed")


# ------------------------------------------------------------------------------------ pure core


def test_exact_match_is_the_one_step_environment():
    env = ExactMatchEnv({"suffix": " Answer:"})
    assert env.reset({"prompt": "2+3=", "answer": "5"}) == "2+3= Answer:"
    hit = env.step("\\boxed{5}")
    assert (hit.reward, hit.done) == (1.0, True)
    env.reset({"prompt": "2+2=", "answer": "4"})  # reused across episodes: reset forgets the old gold
    assert env.step("\\boxed{5}").reward == 0.0
    assert env.step("\\boxed{4}").reward == 1.0


def test_registry_by_name_and_import_path():
    assert resolve("exact_match") is ExactMatchEnv
    assert resolve("test_environments:BrokenEnv").__name__ == "BrokenEnv"
    assert resolve("rlexp.environments.interface.ExactMatchEnv") is ExactMatchEnv
    with pytest.raises(InputError, match="data.jsonl: env: cannot import"):
        resolve("no_such_module_xyz:Env", "data.jsonl")
    with pytest.raises(InputError, match="neither a registered"):
        resolve("unknown", "data.jsonl")


def test_rows_group_by_env_and_config_and_each_group_builds_once():
    raw = [
        {"env": "test_counter", "config": {"turns": 2, "seed": 1}, "task": {"name": "a"}},
        {"env": "exact_match", "config": {}, "task": {"prompt": "1+1=", "answer": "2"}},
        {"env": "test_counter", "config": {"seed": 1, "turns": 2}, "task": {"name": "b"}},  # same config, keys reordered
        {"env": "test_counter", "config": {"turns": 3}, "task": {"name": "c"}},
    ]
    rows = parse_rows(raw, "data.jsonl")
    groups = group_rows(rows)
    assert list(groups.values()) == [[0, 2], [1], [3]]
    cache = EnvironmentCache()
    before = CounterEnv.instances
    for _ in range(3):  # three "steps" over the same rows
        envs = [cache.get(r) for r in rows]
    assert cache.builds == 3 and CounterEnv.instances - before == 2
    assert envs[0] is envs[2] and envs[0] is not envs[3]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"env": "", "task": {}}, "row 0: env"),
        ({"env": "x", "config": [1], "task": {}}, "row 0: config"),
        ({"env": "x", "config": {"a": float("nan")}, "task": {}}, "row 0: config"),
        ({"env": "x", "task": "t"}, "row 0: task"),
        ({"env": "x", "task": {}, "extra": 1}, "row 0: extra"),
    ],
)
def test_bad_rows_name_file_and_field(row, field):
    with pytest.raises(InputError) as err:
        parse_rows([row], "data.jsonl")
    assert err.value.one_line().startswith(f"data.jsonl: {field}:")
    assert "\n" not in err.value.one_line()


def test_builder_places_each_turn_reward_at_its_last_agent_token():
    b = TrajectoryBuilder([1, 2, 3])
    b.add_agent([10, 11])
    b.set_turn_reward(0.5)
    b.add_env([20, 21, 22])
    b.add_agent([12])
    b.set_turn_reward(2.0)
    t = b.finish("stop")
    assert t.token_ids == (1, 2, 3, 10, 11, 20, 21, 22, 12)
    assert t.agent_mask == (0, 0, 0, 1, 1, 0, 0, 0, 1)
    assert t.token_rewards == (0, 0, 0, 0, 0.5, 0, 0, 0, 2.0)
    assert t.episode_return == 2.5
    with pytest.raises(ValueError):
        b.finish("timeout")
    with pytest.raises(InputError, match="budgets.max_turns"):
        Budgets(max_turns=0, max_tokens_per_turn=16, max_total_tokens=96)
    with pytest.raises(TypeError):  # no defaults of its own: an attempt's are its spec's
        Budgets()  # type: ignore[call-arg]


# ------------------------------------------------------------------------------- the episode runner


@pytest.fixture(scope="module")
def tokenizer():
    from rlexp.models.tiny import build_tokenizer

    return build_tokenizer()


class ScriptedModel:
    """Stands in for generate_ids: answers every turn with the next text of a script (+ EOS), or
    with ``n`` tokens and no EOS for the entry ``("cut", n)``."""

    def __init__(self, tokenizer, script):
        self.tok, self.script, self.inputs = tokenizer, list(script), []

    def __call__(self, model, tokenizer, encoded, *, max_new_tokens, **_):
        from rlexp.evaluation.generation import Completion

        self.inputs.append([list(x) for x in encoded])
        item = self.script.pop(0)
        out = []
        for prompt in encoded:
            if isinstance(item, tuple):
                ids = self.tok("9" * item[1], add_special_tokens=False)["input_ids"][:max_new_tokens]
                finish = "length"
            else:
                ids = self.tok(item, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                finish = "stop" if len(ids) <= max_new_tokens else "length"
                ids = ids[:max_new_tokens]
            out.append([Completion(self.tok.decode(ids, skip_special_tokens=True), tuple(ids), finish, len(prompt), len(ids))])
        return out


def _play(monkeypatch, tokenizer, script, rows, budgets, **kw):
    from rlexp.environments import episodes
    from rlexp.evaluation import generation

    fake = ScriptedModel(tokenizer, script)
    monkeypatch.setattr(generation, "generate_ids", fake)
    cache = episodes.SlotCache()
    out = episodes.run_episodes(None, tokenizer, parse_rows(rows), budgets=budgets, cache=cache, **kw)
    return out, fake, cache


def test_multi_turn_episode_token_in_token_out(monkeypatch, tokenizer):
    from rlexp.environments.episodes import render_user_turn
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    rows = [{"env": "test_counter", "config": {"turns": 2}, "task": {"name": "a"}}]
    (traj,), fake, _ = _play(monkeypatch, tokenizer, ["ab", "c"], rows, Budgets(4, 8, 64))
    (t,) = traj
    prompt = encode_prompt(tokenizer, render_prompt(tokenizer, "go a", ""))
    eos = tokenizer.eos_token_id
    a, b, c = (tokenizer.convert_tokens_to_ids(x) for x in "abc")
    feedback = encode_prompt(tokenizer, render_user_turn(tokenizer, "f1"))
    assert render_user_turn(tokenizer, "f1") == "<|user|>f1<|assistant|>"
    assert list(t.token_ids) == prompt + [a, b, eos] + feedback + [c, eos]
    assert list(t.agent_mask) == [0] * len(prompt) + [1, 1, 1] + [0] * len(feedback) + [1, 1]
    rewards = [0.0] * len(t.token_ids)
    rewards[len(prompt) + 2] = 1.0  # turn 1's reward at its EOS
    rewards[-1] = 2.0
    assert list(t.token_rewards) == rewards and t.episode_return == 3.0
    assert t.finish_reason == "stop" and t.tool_calls == 1
    # the second turn's input is exactly the ids held so far: nothing re-tokenised
    assert fake.inputs[1] == [prompt + [a, b, eos] + feedback]


@pytest.mark.parametrize(
    ("script", "budgets", "reason", "turns"),
    [
        (["x", "y", "z"], Budgets(max_turns=2, max_tokens_per_turn=8, max_total_tokens=64), "max_turns", 2),
        ([("cut", 8)], Budgets(max_turns=4, max_tokens_per_turn=5, max_total_tokens=64), "length", 1),
        (["xxxx", "yyyy"], Budgets(max_turns=4, max_tokens_per_turn=8, max_total_tokens=12), "length", 2),
    ],
)
def test_finish_reasons_and_budgets(monkeypatch, tokenizer, script, budgets, reason, turns):
    rows = [{"env": "test_counter", "config": {"turns": 9}, "task": {"name": "a"}}]
    ((t,),), _, _ = _play(monkeypatch, tokenizer, script, rows, budgets)
    assert t.finish_reason == reason and len(t.turns) == turns
    per_turn = [turn.action_tokens for turn in t.turns]
    assert max(per_turn) <= budgets.max_tokens_per_turn
    assert len(t.token_ids) - t.prompt_len <= budgets.max_total_tokens


def test_env_error_is_a_finish_reason_and_counted(monkeypatch, tokenizer):
    rows = [
        {"env": "test_environments:BrokenEnv", "task": {}},
        {"env": "test_counter", "config": {"turns": 1}, "task": {"name": "a"}},
    ]
    out, _, cache = _play(monkeypatch, tokenizer, ["x"], rows, Budgets(2, 8, 64), num_samples=2)
    assert [t.finish_reason for t in out[0]] == ["env_error", "env_error"]
    assert "tool crashed" in out[0][0].error
    assert [t.finish_reason for t in out[1]] == ["stop", "stop"]
    assert cache.builds == 4  # two groups × two concurrent episodes
    m = episode_metrics([t for row in out for t in row])
    assert m["env_errors"] == 0.5 and m["finish_stop"] == 0.5 and m["turns_per_episode"] == 1.0
    # agent tokens: "x" + EOS in each of the 4 episodes; nothing else after the prompts
    assert m["agent_token_fraction"] == 1.0


def test_one_step_environment_on_the_tiny_model_matches_the_single_turn_path(tiny_base_model):
    """ExactMatchEnv through the episode runner gives the single-turn path's ids and rewards:
    the same greedy completion of the same rendered prompt, graded by the same extractor."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.episodes import run_episodes
    from rlexp.evaluation.generation import generate, render_prompt
    from rlexp.trainers.local.train import reward_of

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    problems = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(1, 2), (13, 4), (7, 70)]]
    rows = parse_rows([{"env": "exact_match", "config": {"suffix": " ="}, "task": p} for p in problems])
    trajs = run_episodes(model, tok, rows, budgets=Budgets(1, 6, 6))
    single = generate(model, tok, [render_prompt(tok, p["prompt"], " =") for p in problems], max_new_tokens=6)
    for p, (t,), (c,) in zip(problems, trajs, single, strict=True):
        assert list(t.token_ids[t.prompt_len:]) == list(c.token_ids)
        assert t.finish_reason == ("stop" if c.finish_reason == "stop" else "length")
        assert t.episode_return == reward_of(c.text, p["answer"])  # a cut answer is graded too


# ------------------------------------------------------------------------------- the calculator tool


def test_calculator_tool_calls_answers_and_limits():
    from rlexp.environments.interface import CalculatorEnv

    env = resolve("calculator")({"max_calls": 2})
    assert isinstance(env, CalculatorEnv)
    assert env.reset({"prompt": "123*45=", "answer": "5535"}) == "123*45="
    r = env.step("calc 123*45")
    assert (r.feedback, r.reward, r.done, r.info["tool_call"]) == ("5535", 0.0, False, True)
    assert env.step("calc 7+8").feedback == "15" and env.step("calc 7-8").done  # third call: over the limit
    env.reset({"prompt": "123*45=", "answer": "5535"})  # reset clears the call count
    assert env.step("calc 2-9").feedback == "-7"
    assert env.step("\\boxed{5535}").reward == 1.0
    env.reset({"prompt": "2*2=", "answer": "4"})
    for bad in ("calc 1234567*2", "calc __import__('os')", "hello"):
        env.reset({"prompt": "2*2=", "answer": "4"})
        r = env.step(bad)
        assert (r.reward, r.done) == (0.0, True) and "invalid" in r.info
    env.reset({"prompt": "2*2=", "answer": "4"})
    assert env.step("\\boxed{5}").reward == 0.0


def test_calculator_episode_with_the_scripted_policy(monkeypatch, tokenizer):
    rows = [{"env": "calculator", "task": {"prompt": "123*45=", "answer": "5535"}},
            {"env": "exact_match", "task": {"prompt": "2+2=", "answer": "4"}}]  # fmt: skip
    out, fake, cache = _play(monkeypatch, tokenizer, ["calc 123*45", "\\boxed{5535}"], rows, Budgets(3, 16, 100))
    calc, single = out[0][0], out[1][0]
    assert calc.finish_reason == "stop" and calc.episode_return == 1.0 and calc.tool_calls == 1
    assert [t.feedback for t in calc.turns] == ["5535", ""]
    fb = tokenizer.decode([i for i, m in zip(calc.token_ids, calc.agent_mask, strict=True) if not m][calc.prompt_len:])
    assert fb == "<|user|>5535<|assistant|>"  # the only non-agent tokens after the prompt: the tool's answer
    # the one-step environment finished after its first turn (its answer "calc 123*45" is wrong)
    assert single.finish_reason == "stop" and len(single.turns) == 1 and single.episode_return == 0.0
    assert len(fake.inputs[1]) == 1  # only the calculator episode played turn 2
    rec = calc.to_record()
    assert rec["turns"][0]["tool_call"] and rec["finish_reason"] == "stop" and rec["return"] == 1.0


# ------------------------------------------------------------------------------- eval records


def test_episode_records_hold_trajectories_and_pass_the_record_checks(monkeypatch, tokenizer, tmp_path):
    from rlexp.environments.interface import episode_record
    from rlexp.experiment.files import append_jsonl
    from rlexp.experiment.records import RECORD_FIELDS, iter_records, make_record

    tasks = [{"prompt": "123*45=", "answer": "5535", "bucket": "b1"}, {"prompt": "2+2=", "answer": "4"}]
    rows = [{"env": "calculator", "task": tasks[0]}, {"env": "exact_match", "task": tasks[1]}]
    out, _, _ = _play(monkeypatch, tokenizer, ["calc 123*45", "\\boxed{5535}"], rows, Budgets(3, 16, 100))
    records = [episode_record(task, group[0], problem_hash=f"h{i}", include_tokens=True)
               for i, (task, group) in enumerate(zip(tasks, out, strict=True))]  # fmt: skip
    path = tmp_path / "ood_primary.jsonl"
    for r in records:
        append_jsonl(path, r)
    lines = list(iter_records(path))
    assert [(x.problem_hash, x.correct) for x in lines] == [("h0", 1), ("h1", 0)]
    calc = lines[0].record
    assert set(RECORD_FIELDS) <= set(calc) and calc["reward"] == 1.0 and calc["bucket"] == "b1"
    assert [t["feedback"] for t in calc["trajectory"]["turns"]] == ["5535", ""]
    assert calc["trajectory"]["turns"][0]["tool_call"] and calc["output"] == "\\boxed{5535}"
    assert sum(calc["trajectory"]["agent_mask"]) == calc["completion_tokens"]
    # the one-step environment's record is the single-turn record plus reward and trajectory
    single = out[1][0]
    expected = make_record({"problem_hash": "h1", "answer": "4"}, single.turns[0].action, single.finish_reason,
                           single.prompt_len, single.agent_tokens)  # fmt: skip
    got = {k: v for k, v in records[1].items() if k not in ("reward", "trajectory")}
    assert got == expected


def test_rows_from_an_ordinary_dataset_file(tmp_path):
    from rlexp.environments.interface import rows_from_dataset
    from rlexp.experiment.datasets import problem_hash, read_dataset
    from rlexp.experiment.files import append_jsonl

    path = tmp_path / "pool.jsonl"
    for prompt, answer, extra in [("2+2=", "4", {}), ("123*45=", "5535", {"env": "calculator", "config": {"max_calls": 1}})]:
        append_jsonl(path, {"prompt": prompt, "answer": answer, "problem_hash": problem_hash(prompt), **extra})
    rows = rows_from_dataset(read_dataset(path), str(path), default_config={"suffix": " ="})  # the dataset checks pass
    assert [(r.env, dict(r.config)) for r in rows] == [("exact_match", {"suffix": " ="}), ("calculator", {"max_calls": 1})]
    assert rows[1].task == {"prompt": "123*45=", "answer": "5535", "problem_hash": problem_hash("123*45=")}
    with pytest.raises(InputError, match=r"pool.jsonl: row 0: config"):
        rows_from_dataset([{"prompt": "x", "answer": "1", "config": 3}], "pool.jsonl")


class NoisyEnv(BaseEnvironment):
    """Draws its observation from its seed: shows the runner seeds each episode repeatably."""

    def reset(self, task):
        import random

        return f"n{random.Random(self.seed_value).randint(0, 10**6)}"

    def step(self, action_text):
        return StepResult("", 0.0, True)


def test_episodes_are_seeded_repeatably(monkeypatch, tokenizer):
    rows = [{"env": "test_environments:NoisyEnv", "task": {}}]

    def observations(seed):
        out, fake, _ = _play(monkeypatch, tokenizer, ["x"], rows, Budgets(1, 4, 4), num_samples=3, seed=seed)
        return [tuple(ids) for ids in fake.inputs[0]]

    first, again, other = observations(5), observations(5), observations(6)
    assert first == again and first != other
    assert len(set(first)) == 3  # the samples of one row get different seeds
