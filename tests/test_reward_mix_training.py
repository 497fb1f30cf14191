"""One reward rule in training and in eval: ``environment.reward`` weighs the same parts, applied to
the same rows, in the local trainer's rollout and in the eval's records.

Search episodes (the registered ``search`` environment's rows, with ``gold_docs``) and calculator
episodes (no gold documents: NDCG does not apply) under ``{env: 0.5, ndcg: 0.5}``: the reward the
local trainer's rollout trains on (``collect_env_rollout``'s returns, its group baseline's input)
equals the eval record's ``reward`` for the same episode, and both equal the weighted mean written
here with NDCG computed by hand (binary gains, DCG over the retrieved list, IDCG over the gold
documents, the discount 1/log2(rank + 1)). The episodes are fixed (the rollout's ``run_episodes`` returns them) so the
retrieved lists are known; everything after is the trainer's and the eval's own code.
"""

from __future__ import annotations

import copy
import math
import types

import pytest

from rlexp.environments.interface import Trajectory, Turn

pytest.importorskip("torch")
pytest.importorskip("transformers")

WEIGHTS = {"env": 0.5, "ndcg": 0.5}
GOLD = ["k417", "k500"]
ROWS = [{"env": "search", "task": {"prompt": "k417?", "answer": "83", "gold_docs": GOLD}},
        {"env": "calculator", "task": {"prompt": "2+2=", "answer": "4"}}]
# per row, two episodes: (documents retrieved in rank order, the environment's return)
EPISODES = [[(["k300", "k417", "k999"], 1.0), (["k500"], 0.0)],
            [([], 1.0), ([], 0.0)]]


def hand_ndcg(retrieved, gold):
    dcg = sum(1.0 / math.log2(rank + 1) for rank, doc in enumerate(retrieved, start=1) if doc in gold)
    idcg = sum(1.0 / math.log2(rank + 1) for rank in range(1, len(gold) + 1))
    return dcg / idcg


EXPECTED = [[0.5 * ret + 0.5 * hand_ndcg(docs, GOLD) for docs, ret in EPISODES[0]],
            [ret for _, ret in EPISODES[1]]]  # no gold_docs: the return alone, at full scale


def test_the_reference_values():
    assert hand_ndcg(["k300", "k417", "k999"], GOLD) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert hand_ndcg(["k500"], GOLD) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def trajectory(tokenizer, prompt, retrieved, episode_return, final="83"):
    """A two-turn episode: a search (the retrieved documents, reward 0), then the answer (the return)."""
    def ids(text):
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt_ids, search, feedback, answer = ids(prompt), ids("look k4"), ids(" found"), ids(final)
    token_ids = prompt_ids + search + feedback + answer
    mask = [0] * len(prompt_ids) + [1] * len(search) + [0] * len(feedback) + [1] * len(answer)
    rewards = [0.0] * (len(token_ids) - 1) + [episode_return]
    turns = (Turn("look k4", len(search), " found", len(feedback), 0.0, {"tool_call": True, "retrieved": retrieved}, 0.0),
             Turn(final, len(answer), "", 0, episode_return, {}, 0.0))
    return Trajectory(tuple(token_ids), tuple(mask), tuple(rewards), len(prompt_ids), turns, "stop")


@pytest.fixture
def played(tiny_base_model):
    from transformers import AutoTokenizer

    from rlexp.environments.interface import parse_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_base_model)
    rows = parse_rows(ROWS)
    episodes = [[trajectory(tokenizer, row.task["prompt"], docs, ret) for docs, ret in group]
                for row, group in zip(rows, EPISODES, strict=True)]
    return tokenizer, rows, episodes


def settings(**reward):
    from rlexp.spec import EnvironmentSettings

    return EnvironmentSettings(name="search", reward=reward or WEIGHTS, success_threshold=0.5)


def test_training_and_eval_give_the_same_reward(tiny_base_model, played, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    import rlexp.environments.episodes as episodes
    from rlexp.environments.episode_rewards import EpisodeRewarder
    from rlexp.environments.interface import Budgets, episode_record
    from rlexp.trainers.local.config import EnvTrainingOptions
    from rlexp.trainers.local.env_train import EnvTask, collect_env_rollout

    tokenizer, rows, trajectories = played
    monkeypatch.setattr(episodes, "run_episodes", lambda *a, **k: trajectories)
    cfg = types.SimpleNamespace(n_samples_per_prompt=2, temperature=1.0, advantage_estimator="group_norm",
                                micro_train_batch_size=4, environment=settings(), pool_path=tmp_path / "pool.jsonl")
    options = EnvTrainingOptions(budgets=Budgets(2, 8, 32))
    task = EnvTask(cfg, options)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    rollout, _ = collect_env_rollout(model, tokenizer, rows, cfg, options, seed=0, reward_of=task.episode_reward,
                                     reference=copy.deepcopy(model).eval())
    trained = rollout.rewards.tolist()

    rewarder = EpisodeRewarder(cfg.environment, tmp_path)
    evaluated = [[rewarder.apply(episode_record(row.task, t, problem_hash="h", success_threshold=0.5), row.task)["reward"]
                  for t in group] for row, group in zip(rows, trajectories, strict=True)]
    for got_train, got_eval, want in zip(trained, evaluated, EXPECTED, strict=True):
        assert got_eval == pytest.approx(want, rel=1e-12)
        assert got_train == pytest.approx(want, rel=1e-6)  # the rollout holds float32
    assert rollout.stats["reward_error_episodes_masked"] == 0.0
    # the advantages are the group-normalised mixed rewards: the search group's differ from its returns'
    search = torch.tensor(EXPECTED[0])
    want = (search - search.mean()) / (search.std() + 1e-9)  # GRPO's group_norm
    assert rollout.advantages[0][rollout.action_mask[0] > 0][0] == pytest.approx(float(want[0]), rel=1e-4)


def test_a_row_no_weighted_part_applies_to_is_out_of_training(tiny_base_model, played, tmp_path, monkeypatch):
    """{ndcg: 1} on a calculator row (no gold documents): the eval's no_reward_part error; in
    training the episode is left out of the loss and the baseline, and counted."""
    from transformers import AutoModelForCausalLM

    import rlexp.environments.episodes as episodes
    from rlexp.environments.interface import Budgets
    from rlexp.trainers.local.config import EnvTrainingOptions
    from rlexp.trainers.local.env_train import EnvTask, collect_env_rollout

    tokenizer, rows, trajectories = played
    monkeypatch.setattr(episodes, "run_episodes", lambda *a, **k: trajectories)
    cfg = types.SimpleNamespace(n_samples_per_prompt=2, temperature=1.0, advantage_estimator="group_norm",
                                micro_train_batch_size=4, environment=settings(ndcg=1.0),
                                pool_path=tmp_path / "pool.jsonl")
    options = EnvTrainingOptions(budgets=Budgets(2, 8, 32))
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    rollout, _ = collect_env_rollout(model, tokenizer, rows, cfg, options, seed=0,
                                     reward_of=EnvTask(cfg, options).episode_reward, reference=copy.deepcopy(model).eval())
    assert rollout.stats["reward_error_episodes_masked"] == 2.0
    assert float(rollout.action_mask[2:].sum()) == 0.0 and float(rollout.action_mask[:2].sum()) > 0
    assert rollout.rewards[0].tolist() == pytest.approx([hand_ndcg(d, GOLD) for d, _ in EPISODES[0]], rel=1e-6)


def test_the_local_trainer_asks_the_judge_as_the_eval_does(tiny_base_model, tmp_path, monkeypatch):
    """{env: 0.5, judge: 0.5} against a judge on loopback (yes when the answer holds "42"): the
    training reward of each episode equals its eval reward; training keeps its own judge cache
    (launch/judge_cache.jsonl); a judge that fails leaves the episodes out of training, counted."""
    from test_rewards import StubJudge
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlexp.environments.episodes as episodes
    from rlexp.environments.episode_rewards import EpisodeRewarder
    from rlexp.environments.interface import Budgets, episode_record, parse_rows
    from rlexp.spec import EnvironmentSettings
    from rlexp.spec.model import ENV_JUDGE_DEFAULTS
    from rlexp.trainers.local.config import EnvTrainingOptions
    from rlexp.trainers.local.env_train import EnvTask, collect_env_rollout

    tokenizer = AutoTokenizer.from_pretrained(tiny_base_model)
    rows = parse_rows(ROWS)
    returns = [[1.0, 0.0], [0.0, 1.0]]
    trajectories = [[trajectory(tokenizer, row.task["prompt"], [], ret, final) for ret, final in zip(rs, ("42", "41"), strict=True)]
                    for row, rs in zip(rows, returns, strict=True)]
    monkeypatch.setattr(episodes, "run_episodes", lambda *a, **k: trajectories)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    options = EnvTrainingOptions(budgets=Budgets(2, 8, 32))
    for mode in ("ok", "fail"):
        attempt = tmp_path / mode
        with StubJudge(mode) as stub:
            env = EnvironmentSettings(name="search", reward={"env": 0.5, "judge": 0.5}, success_threshold=0.5,
                                      judge={**ENV_JUDGE_DEFAULTS, "base_url": stub.url, "model": "j", "retries": 0})
            cfg = types.SimpleNamespace(n_samples_per_prompt=2, temperature=1.0, advantage_estimator="group_norm",
                                        micro_train_batch_size=4, environment=env, pool_path=tmp_path / "pool.jsonl")
            task = EnvTask(cfg, options, attempt_dir=attempt)
            rollout, _ = collect_env_rollout(model, tokenizer, rows, cfg, options, seed=0, reward_of=task.episode_reward,
                                             reference=copy.deepcopy(model).eval())
            if mode == "fail":
                assert rollout.stats["reward_error_episodes_masked"] == 4.0 and float(rollout.action_mask.sum()) == 0.0
                continue
            rewarder = EpisodeRewarder(env, attempt)
            evaluated = [[rewarder.apply(episode_record(row.task, t, problem_hash="h", success_threshold=0.5),
                                         row.task)["reward"] for t in group]
                         for row, group in zip(rows, trajectories, strict=True)]
        want = [[0.5 * ret + 0.5 * (final == "42") for ret, final in zip(rs, ("42", "41"), strict=True)] for rs in returns]
        assert evaluated == want
        assert rollout.rewards.tolist() == want  # halves of 0, 1: exact in float32
        assert rollout.stats["reward_error_episodes_masked"] == 0.0
        assert (attempt / "launch" / "judge_cache.jsonl").exists() and (attempt / "eval" / "judge_cache.jsonl").exists()


@pytest.mark.parametrize("trainer", [{"name": "openrlhf", "version": "0.11.2", "gpus": 2},
                                     {"name": "verl", "version": "0.9.1", "gpus": 2}])
def test_a_mix_is_refused_where_the_trainer_trains_on_the_return(tmp_path, capsys, trainer):
    from rlexp.cli import main
    from tests.test_agentic_checks import OPENRLHF_RECIPE, _experiment

    env = {"name": "search", "max_turns": 2, "max_tokens_per_turn": 32, "max_total_tokens": 64,
           "reward": {"env": 0.5, "ndcg": 0.5}}
    recipe = OPENRLHF_RECIPE if trainer["name"] == "openrlhf" else {"actor_rollout_ref.model.path": "models/base"}
    attempt = _experiment(tmp_path, trainer, recipe, env)
    assert main(["plan", str(attempt)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"ndcg reward in training not supported on trainer {trainer['name']}" in err[0]
    assert not (attempt / "plan.json").exists()
