"""``rlexp eval`` / ``decide`` on an environment task: K=3 checkpoints + Baseline-S0 play the same
greedy episodes on the local engine (the other engines: tests/test_env_engines.py); records hold the trajectory, the reward and the success flag."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from rlexp.errors import InputError  # noqa: E402
from rlexp.experiment.records import read_meta, read_records, record_path  # noqa: E402

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

    from rlexp.environments.episodes import run_episodes
    from rlexp.environments.interface import Budgets, rows_from_dataset
    from rlexp.experiment.datasets import read_dataset
    from rlexp.stages.evaluate import evaluate

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

    reports = env_attempt.parent.parent / "reports"
    assert main(["report", str(env_attempt), "--tracking-uri", "off", "--reports-dir", str(reports)]) == 0
    text = (reports / env_attempt.parent.name / f"{env_attempt.name}.md").read_text()
    section = text[text.index("## Environment task: episodes"):]
    assert "Primary metric: **success**" in section
    for name in ("baseline_s0", "global_step2", "global_step4"):
        assert f"| {name} | 8 |" in section
    assert "Discordant trajectories, baseline_s0 vs " in section
    # the primary metric is the spec's: mean reward → the paired mean-score statistics (paired t);
    # it is not part of the records' identity, so the same records serve
    spec = env_attempt / "attempt.yaml"
    spec.write_text(spec.read_text().replace("primary_metric: success", "primary_metric: mean_reward"))
    assert main(["report", str(env_attempt), "--tracking-uri", "off", "--reports-dir", str(reports)]) == 0
    section = (reports / env_attempt.parent.name / f"{env_attempt.name}.md").read_text().split("## Environment")[1]
    assert "Primary metric: **mean_reward**" in section and "| paired t |" in section

    # decide on mean reward: give global_step4 three solved episodes (records edited by hand), so the
    # expected numbers are known: Δ = 3/8 of a reward = 37.5 pp, 0 fell, 3 rose, p of a paired t-test
    from scipy import stats as sps

    path = record_path(env_attempt, "global_step4", "ood_primary")
    records = read_records(path)
    for r in records[:3]:
        r["reward"], r["correct"] = 1.0, 1
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    base = {r["problem_hash"]: r["reward"] for r in read_records(record_path(env_attempt, "baseline_s0",
                                                                             "ood_primary"))}
    assert set(base.values()) == {0.0}  # the untrained base solves none
    assert main(["decide", str(env_attempt), "--json"]) == 0
    decision = json.loads((env_attempt / "decision.json").read_text())
    assert decision["primary_metric"] == {"name": "mean_reward", "test": "paired t"}
    ck = decision["checkpoints"]["global_step4"]
    ref = sps.ttest_rel([r["reward"] for r in records], [base[r["problem_hash"]] for r in records])
    assert ck["delta_pp"] == pytest.approx(37.5) and (ck["b"], ck["c"]) == (0, 3)
    assert ck["mcnemar_p"] == pytest.approx(ref.pvalue, rel=1e-9)


def test_other_budgets_do_not_mix_into_existing_records(env_attempt):
    from rlexp.stages.evaluate import evaluate

    evaluate(env_attempt, sets=["sanity"], checkpoints=["baseline_s0"], show_progress=False)
    spec = env_attempt / "attempt.yaml"
    spec.write_text(spec.read_text().replace("max_turns: 2", "max_turns: 3"))
    with pytest.raises(InputError) as info:
        evaluate(env_attempt, sets=["sanity"], checkpoints=["baseline_s0"], show_progress=False)
    assert "grading" in info.value.one_line() and "refusing to mix" in info.value.one_line()


def test_vllm_engine_without_vllm_is_refused_in_one_line_before_any_write(env_attempt, monkeypatch):
    """Episodes run on every engine (tests/test_env_engines.py, tests/test_vllm_episodes.py); where
    vllm does not import, `engine: vllm` stops in one line naming eval.engine, nothing written."""
    import sys

    from rlexp.stages.evaluate import evaluate

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, even where it is installed
    spec = env_attempt / "attempt.yaml"
    spec.write_text(spec.read_text().replace("engine: local", "engine: vllm"))
    with pytest.raises(InputError) as info:
        evaluate(env_attempt, show_progress=False)
    assert "eval.engine" in info.value.one_line()
    assert not (env_attempt / "eval" / "selection.json").exists()


def _rec(h, reward, turns):
    return {"problem_hash": h, "gold": "5", "reward": reward, "correct": int(reward >= 1.0),
            "trajectory": {"finish_reason": "stop", "turns": [
                {"action": a, "feedback": f, "reward": 0.0, "tool_call": a.startswith("calc")} for a, f in turns]}}


def test_episode_summary_comparison_and_discordant_pairs_by_hand():
    from scipy import stats as sps

    from rlexp.reporting.episodes import (
        discordant_pairs,
        episode_summary,
        primary_comparison,
        trajectory_table,
    )

    base = [_rec("h1", 1.0, [("\\boxed{5}", "")]), _rec("h2", 0.0, [("calc 2+3", "5"), ("x", "")]),
            _rec("h3", 1.0, [("\\boxed{5}", "")]), _rec("h4", 0.5, [("y", "")])]
    new = [_rec("h4", 1.0, [("calc 2+3", "5"), ("\\boxed{5}", "")]), _rec("h3", 0.0, [("z", "")]),
           _rec("h2", 1.0, [("\\boxed{5}", "")]), _rec("h1", 1.0, [("\\boxed{5}", "")])]
    s = episode_summary(base)
    # by hand: success 2/4, rewards (1+0+1+0.5)/4, turns (1+2+1+1)/4, one tool call in 4 episodes
    assert (s["success"], s["mean_reward"], s["turns_per_episode"], s["tool_calls_per_episode"]) == \
        (0.5, 0.625, 1.25, 0.25)
    c = primary_comparison(base, new, "success", resamples=200)
    # base correct (h1..h4) 1,0,1,0; new 1,1,0,1: b = 1 (h3), c = 2 (h2, h4), Δ = +1/4
    assert (c["b"], c["c"], c["n"]) == (1, 2, 4) and c["delta_pp"] == pytest.approx(25.0)
    m = primary_comparison(base, new, "mean_reward", resamples=200)
    ref = sps.ttest_rel([1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.5])  # new vs base, aligned by hash
    assert m["delta"] == pytest.approx(0.125) and m["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
    lost, won = discordant_pairs(base, new)
    assert lost[0]["problem_hash"] == "h3" and won[0]["problem_hash"] == "h2"
    table = trajectory_table("baseline_s0", "global_step4", *won)
    assert table[2].startswith("| 1 | `calc 2+3` (tool) → `5` | `\\boxed{5}` → ``")
    assert table[-1] == "| reward / finish | 0 / stop | 1 / stop |"
