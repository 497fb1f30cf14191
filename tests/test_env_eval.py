"""``rlexp eval`` / ``decide`` on an environment task: K=3 checkpoints + Baseline-S0 play the same
greedy episodes on the local engine; records hold the trajectory, the reward and the success flag."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from rlexp.errors import InputError  # noqa: E402
from rlexp.storage.records import read_meta, read_records, record_path  # noqa: E402

ENV = ("environment: {name: calculator, config: {max_calls: 1}, max_turns: 2, max_tokens_per_turn: 6, "
       "max_total_tokens: 12, primary_metric: success}\n")


@pytest.fixture
def env_attempt(eval_experiment):
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 8, "id": 4, "sanity": 2})
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text() + ENV)
    return att


def test_eval_plays_episodes_for_every_target_and_resumes(env_attempt, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.adapters.episodes import run_episodes
    from rlexp.core.environments import Budgets, rows_from_dataset
    from rlexp.stages.evaluate import evaluate
    from rlexp.storage.datasets import read_dataset

    outcome = evaluate(env_attempt, show_progress=False)
    names = {f.checkpoint for f in outcome.files}
    assert names == {"global_step2", "global_step4", "baseline_s0"}
    for f in outcome.files:
        records = read_records(f.path)
        assert len(records) == {"ood_primary": 8, "id": 4, "sanity": 2}[f.set_role]
        for r in records:
            t = r["trajectory"]
            assert 1 <= len(t["turns"]) <= 2 and t["finish_reason"] in ("stop", "length", "max_turns", "env_error")
            assert r["correct"] == int(r["reward"] >= 1.0) and r["finish_reason"] == t["finish_reason"]
            assert {"action", "feedback", "reward", "tool_call"} <= set(t["turns"][0])
        meta = read_meta(f.path)
        assert meta["environment"]["name"] == "calculator" and meta["grading"].startswith("episode:")
    assert outcome.paired  # paired records baseline × checkpoint × set

    # an independent replay of S0's episodes: the base model loaded directly, greedy, the same budgets
    base = env_attempt.parent / "models" / "tiny-base"
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    problems = read_dataset(env_attempt.parent / "data" / "ood_primary.jsonl")
    rows = rows_from_dataset(problems, default_env="calculator", default_config={"max_calls": 1})
    played = run_episodes(model, tok, rows, budgets=Budgets(2, 6, 12), temperature=0.0, seed=0)
    s0 = {r["problem_hash"]: r for r in read_records(record_path(env_attempt, "baseline_s0", "ood_primary"))}
    for p, (traj,) in zip(problems, played, strict=True):
        rec = s0[p["problem_hash"]]
        assert [turn["action"] for turn in rec["trajectory"]["turns"]] == [turn.action for turn in traj.turns]
        assert rec["reward"] == traj.episode_return

    again = evaluate(env_attempt, show_progress=False)  # resumable: nothing left to play
    assert all(f.new_records == 0 for f in again.files)

    from rlexp.cli import main

    assert main(["decide", str(env_attempt), "--json"]) == 0
    decision = json.loads((env_attempt / "decision.json").read_text())
    assert decision["decision"]


def test_other_budgets_do_not_mix_into_existing_records(env_attempt):
    from rlexp.stages.evaluate import evaluate

    evaluate(env_attempt, sets=["sanity"], checkpoints=["baseline_s0"], show_progress=False)
    spec = env_attempt / "attempt.yaml"
    spec.write_text(spec.read_text().replace("max_turns: 2", "max_turns: 3"))
    with pytest.raises(InputError) as info:
        evaluate(env_attempt, sets=["sanity"], checkpoints=["baseline_s0"], show_progress=False)
    assert "grading" in info.value.one_line() and "refusing to mix" in info.value.one_line()


def test_engines_other_than_local_are_refused_in_one_line(env_attempt):
    from rlexp.stages.evaluate import evaluate

    spec = env_attempt / "attempt.yaml"
    spec.write_text(spec.read_text().replace("engine: local", "engine: vllm"))
    with pytest.raises(InputError) as info:
        evaluate(env_attempt, show_progress=False)
    assert "eval.engine" in info.value.one_line()
    assert not (env_attempt / "eval" / "selection.json").exists()
