"""Rewards beyond exact match: NDCG against independent references, weighted composition, and the
LLM judge's cache and failure accounting against a stub OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import math

import pytest
from loopback_json import LoopbackJsonServer

from rlexp.environments.rewards import (
    JUDGE_ERROR,
    NO_REWARD_PART,
    RewardError,
    applicable_weights,
    combine,
    judge_cache_key,
    ndcg,
    parse_judge_reply,
    weights_problem,
)

# ----------------------------------------------------------------------------- NDCG


def test_ndcg_by_hand():
    # gold {a, c}; ranking [a, b, c]: DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3)
    assert ndcg(["a", "b", "c"], ["a", "c"]) == pytest.approx(1.5 / (1 + 1 / math.log2(3)), rel=1e-12)
    assert ndcg(["c", "a"], {"a", "c"}) == 1.0
    assert ndcg(["x", "y"], ["a"]) == 0.0
    assert ndcg([], ["a"]) == 0.0 and ndcg(["a"], []) == 0.0
    assert ndcg(["a", "a", "c"], ["a", "c"]) == 1.0  # a repeated id counts once
    # cut at k=1: only the first rank counts, the ideal holds one gold document
    assert ndcg(["b", "a"], ["a", "c"], k=1) == 0.0 and ndcg(["a", "b"], ["a", "c"], k=1) == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_ndcg_matches_sklearn(seed):
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    import random

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(12)]
    retrieved = rng.sample(docs, 8)
    graded = seed % 2 == 1
    gold_ids = rng.sample(docs, rng.randint(1, 6))
    gold = {d: float(rng.randint(1, 3)) for d in gold_ids} if graded else gold_ids
    gains = gold if graded else {d: 1.0 for d in gold_ids}
    # sklearn ranks every candidate by score: retrieved docs by rank, the rest below all of them;
    # cutting at k <= len(retrieved) leaves the rest out of the DCG and keeps them in the ideal
    universe = docs
    y_true = [[gains.get(d, 0.0) for d in universe]]
    y_score = [[(len(retrieved) - retrieved.index(d)) if d in retrieved else -1.0 - i for i, d in enumerate(universe)]]
    for k in (1, 3, 8):
        expected = sklearn_metrics.ndcg_score(y_true, y_score, k=k)
        # both compute the same float64 sums in possibly different orders: 1e-12 is ~1e4 ulps
        assert ndcg(retrieved, gold, k=k) == pytest.approx(expected, abs=1e-12)


def test_combine_weights_and_explicit_failure():
    c = combine({"em": 1.0, "ndcg": 0.5, "judge": 0.0}, {"em": 0.5, "ndcg": 0.3, "judge": 0.2})
    assert c.value == pytest.approx(0.5 + 0.15) and c.error is None
    # renormalised over the weights given: (2*1 + 1*0.5) / 3, not the plain sum 2.5
    assert combine({"em": 1.0, "ndcg": 0.5}, {"em": 2.0, "ndcg": 1.0}).value == pytest.approx(2.5 / 3)
    assert combine({}, {}).error.kind == NO_REWARD_PART
    err = RewardError(JUDGE_ERROR, "HTTP 500")
    failed = combine({"em": 1.0, "judge": err}, {"em": 0.5, "judge": 0.5})
    assert failed.value is None and failed.error is err  # not 0.5, not 0
    with pytest.raises(KeyError):
        combine({"em": 1.0}, {"judge": 1.0})


def test_each_part_applies_only_to_the_rows_it_can_score():
    weights = {"env": 0.4, "ndcg": 0.3, "judge": 0.3}
    assert applicable_weights(weights, {"prompt": "2*3=", "answer": "6"}) == {"env": 0.4, "judge": 0.3}
    assert applicable_weights(weights, {"prompt": "q", "gold_docs": ["d1"]}) == {"env": 0.4, "ndcg": 0.3}
    assert applicable_weights(weights, {"prompt": "q", "gold_docs": []}) == {"env": 0.4}  # no gold: no NDCG
    assert applicable_weights({"env": 0.0, "ndcg": 1.0}, {"prompt": "q"}) == {}


@pytest.mark.parametrize("weights,threshold,field", [
    ({"env": 1, "ndcg": 1}, 1.0, "sum to 2"),  # the combined reward would reach 2.0
    ({"env": 0.5, "ndcg": 0.4}, 1.0, "sum to 0.9"),  # a perfect episode could never reach 1
    ({"env": 1.5, "ndcg": -0.5}, 1.0, "env: weight 1.5 outside [0, 1]"),
    ({"env": 0.5, "ndcg": 0.5}, 1.5, "success_threshold 1.5 cannot be reached"),
    ({"env": 0.5, "ndcg": 0.5}, 0.0, "success_threshold 0 cannot be reached"),
])
def test_weights_refused(weights, threshold, field):
    assert field in weights_problem(weights, threshold)


def test_weights_accepted():
    assert weights_problem({"env": 0.5, "ndcg": 0.5}, 1.0) is None
    assert weights_problem({"env": 0.1, "ndcg": 0.2, "judge": 0.7}, 0.5) is None  # 0.1+0.2+0.7 in binary floats
    assert weights_problem({}, 7.0) is None  # no composed reward: the return alone, any threshold


def test_a_correct_calculator_episode_with_env_and_ndcg_weights_scores_one_and_succeeds(tmp_path):
    from types import SimpleNamespace

    from rlexp.environments.episode_rewards import EpisodeRewarder
    from rlexp.environments.interface import CalculatorEnv

    task = {"prompt": "123*45=", "answer": "5535"}  # a calculator row: no gold documents
    env = CalculatorEnv({"max_calls": 2})
    env.reset(task)
    turns = []
    for action in ("calc 123*45", "\\boxed{5535}"):
        result = env.step(action)
        turns.append({"action": action, "feedback": result.feedback, "reward": result.reward})
    assert result.done and sum(t["reward"] for t in turns) == 1.0
    record = {"output": turns[-1]["action"], "correct": 1,
              "trajectory": {"return": sum(t["reward"] for t in turns), "turns": turns}}
    settings = SimpleNamespace(reward={"env": 0.5, "ndcg": 0.5}, success_threshold=1.0, judge={})
    graded = EpisodeRewarder(settings, tmp_path).apply(record, task)
    assert graded["reward"] == 1.0 and graded["correct"] == 1  # was 0.5 and a failure
    assert set(graded["reward_parts"]) == {"env"}  # NDCG was not scored on a row with nothing to rank
    # a search row with gold documents: both parts apply, each half
    search = {"trajectory": {"return": 1.0, "turns": [{"retrieved": ["d2", "d1"]}]}, "output": "x", "correct": 1}
    graded = EpisodeRewarder(settings, tmp_path).apply(search, {"prompt": "q", "gold_docs": ["d1"]})
    assert graded["reward"] == pytest.approx(0.5 + 0.5 * (1 / math.log2(3))) and graded["correct"] == 0


def test_parse_judge_reply():
    assert parse_judge_reply("Yes.") == 1.0 and parse_judge_reply("no") == 0.0
    assert parse_judge_reply("0.75") == 0.75
    assert parse_judge_reply("Correct") == 1.0
    for bad in ("", "maybe", "7"):
        out = parse_judge_reply(bad)
        assert isinstance(out, RewardError) and out.kind == JUDGE_ERROR
    assert judge_cache_key("m", "p", "a") != judge_cache_key("m", "p", "b")
    assert judge_cache_key("m", "p", "a") != judge_cache_key("m2", "p", "a")


# ----------------------------------------------------------------------------- the judge on loopback


class StubJudge:
    """An OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1: replies ``yes`` when the answer
    contains "42", ``no`` otherwise; ``mode`` "fail" answers HTTP 500, "garbage" an unreadable reply."""

    def __init__(self, mode="ok"):
        self.mode, self.requests = mode, []
        self.server = LoopbackJsonServer(self.answer)
        self.url = self.server.url

    def answer(self, path: str, body: dict, headers):
        self.requests.append((path, body))
        if self.mode == "fail":
            return 500, {"error": {"message": "boom"}}
        answer = body["messages"][-1]["content"].split("Answer:\n", 1)[1]
        text = "banana" if self.mode == "garbage" else ("yes" if "42" in answer else "no")
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)


ANSWERS = [("6*7?", "42"), ("6*7?", "41"), ("what is life?", "42"), ("6*7?", "42")]  # the last repeats the first


def test_judge_caches_so_a_rerun_makes_no_call(tmp_path):
    from rlexp.environments.judge import Judge

    with StubJudge() as server:
        judge = Judge(server.url, "judge-m", cache_path=tmp_path / "cache.jsonl", log_path=tmp_path / "calls.jsonl")
        first = [judge.score(p, a) for p, a in ANSWERS]
        assert first == [1.0, 0.0, 1.0, 1.0]
        assert len(server.requests) == 3 and judge.cache_hits == 1  # the repeat is served from the cache
        assert all(path == "/v1/chat/completions" for path, _ in server.requests)
        assert {b["model"] for _, b in server.requests} == {"judge-m"}
        rerun = Judge(server.url, "judge-m", cache_path=tmp_path / "cache.jsonl")
        assert [rerun.score(p, a) for p, a in ANSWERS] == first
        assert len(server.requests) == 3 and rerun.calls == [] and rerun.cache_hits == 4  # zero calls
        other_model = Judge(server.url, "judge-2", cache_path=tmp_path / "cache.jsonl")
        other_model.score(*ANSWERS[0])
        assert len(server.requests) == 4  # the key holds the judge model
    log = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(log) == 3 and all(r["ok"] and r["latency_s"] >= 0 for r in log)


@pytest.mark.parametrize("mode", ["fail", "garbage"])
def test_a_failing_judge_is_an_explicit_counted_error(tmp_path, mode):
    from rlexp.environments.judge import Judge

    with StubJudge(mode) as server:
        judge = Judge(server.url, "judge-m", cache_path=tmp_path / "cache.jsonl", log_path=tmp_path / "calls.jsonl",
                      retries=2, backoff_s=0.0, timeout_s=5.0)  # fmt: skip
        out = [judge.score(p, a) for p, a in ANSWERS[:2]]
        assert all(isinstance(o, RewardError) and o.kind == JUDGE_ERROR for o in out)
        assert judge.errors == 2 and len(judge.calls) == 2
        # bounded: a failing server sees retries + 1 requests per call, then the call is an error
        assert len(server.requests) == (6 if mode == "fail" else 2)
        assert not (tmp_path / "cache.jsonl").exists()  # failures are never cached (nor scored 0)
        log = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
        assert [r["ok"] for r in log] == [False, False] and all(r["error"] for r in log)
        combined = combine({"em": 1.0, "judge": out[0]}, {"em": 0.5, "judge": 0.5})
        assert combined.value is None and combined.error.kind == JUDGE_ERROR
