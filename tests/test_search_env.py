"""The search environment (lookups in a generated corpus) and the tool demo's dataset with two
environment classes: rows grouped by (environment, config), each group's environment built once."""

from __future__ import annotations

from rlexp.environments.interface import (
    EnvironmentCache,
    SearchEnv,
    group_rows,
    rows_for_task,
    search_corpus,
)
from rlexp.environments.rewards import ndcg


def test_search_ranks_by_digits_in_place_then_key_and_grades_by_exact_match():
    env = SearchEnv({"corpus_size": 4, "top_k": 2, "max_calls": 1})
    env.corpus = {"k417": "83", "k911": "10", "k411": "12", "k123": "55"}  # a corpus written by hand
    assert env.reset({"prompt": "k417?", "answer": "83", "gold_docs": ["k417"]}) == "k417?"
    step = env.step("look k417")
    # characters in place against k417: k417 4, k411 3 (k, 4, 1), k911 2 (k, 1), k123 1
    assert step.feedback == "k417=83 k411=12" and step.info == {"tool_call": True, "retrieved": ["k417", "k411"]}
    assert (step.reward, step.done) == (0.0, False)
    assert env.step("look k417").info.get("invalid") == "too many calls"
    env.reset({"prompt": "k417?", "answer": "83"})
    wrong = env.step("look k917")  # not in the corpus: k417 and k911 share 3 characters with it (key order)
    assert wrong.info["retrieved"] == ["k417", "k911"]
    assert ndcg(wrong.info["retrieved"], ["k411"]) == 0.0
    assert env.step("\\boxed{83}").reward == 1.0
    env.reset({"prompt": "k417?", "answer": "83"})
    assert env.step("\\boxed{82}").reward == 0.0
    env.reset({"prompt": "k417?", "answer": "83"})
    assert env.step("hello").info["invalid"]


def test_corpus_is_repeatable_and_bounded():
    a, b = search_corpus(3, 50), search_corpus(3, 50)
    assert a == b and len(a) == 50 and search_corpus(4, 50) != a
    assert all(k[0] == "k" and 100 <= int(k[1:]) <= 999 and 10 <= int(v) <= 99 for k, v in a.items())


def test_tool_demo_dataset_has_two_environment_groups_each_built_once(tmp_path):
    from rlexp.experiment.datasets import read_dataset
    from rlexp.spec import EnvironmentSettings
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_datasets

    config = ToolsDemoConfig()
    paths = build_datasets(tmp_path, config)
    settings = EnvironmentSettings(name="calculator", config={"max_calls": 2}, max_turns=3, max_tokens_per_turn=14,
                                   max_total_tokens=48)
    seen_prompts: set[str] = set()
    for role, path in paths.items():
        problems = read_dataset(path)
        assert not seen_prompts & {p["prompt"] for p in problems}  # roles disjoint
        seen_prompts |= {p["prompt"] for p in problems}
        rows = rows_for_task(problems, settings, where=str(path))
        groups = group_rows(rows)
        assert {env for env, _ in groups} == {"calculator", "search"}, role
        assert len(groups) == 2 and sum(map(len, groups.values())) == len(rows)
        cache = EnvironmentCache()
        for row in rows:
            env = cache.get(row)
            observation = env.reset(row.task)
            if row.env == "search":  # the right query finds the gold document first, holding the answer
                key = row.task["gold_docs"][0]
                assert observation == f"{key}?"
                step = env.step(f"look {key}")
                assert step.info["retrieved"][0] == key and step.feedback.startswith(f"{key}={row.task['answer']}")
                assert ndcg(step.info["retrieved"], row.task["gold_docs"]) == 1.0
            else:
                a, b = row.task["prompt"].rstrip("=").split("*")
                assert env.step(f"calc {a}*{b}").feedback == row.task["answer"] == str(int(a) * int(b))
        assert cache.builds == 2 and len(cache) == 2
