"""Eval episodes of an environment task as MLflow traces: one trace per episode, a span per turn, a
tool span per tool call named after the tool called, an environment tag, status from success, one
nested MLflow run per evaluated checkpoint; read back through MLflow's client; a second report adds
none."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rlexp.tracking import runs as tracking
from rlexp.tracking.store import ensure_store


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / "template.db"
    ensure_store(f"sqlite:///{path}")
    return path


def _turn(action, feedback="", tool=False, reward=0.0):
    return {"action": action, "feedback": feedback, "reward": reward, "tool_call": tool, "latency_s": 0.001}


def _record(prompt, answer, turns, finish="stop"):
    reward = sum(t["reward"] for t in turns)
    return {"problem_hash": hashlib.sha256(prompt.encode()).hexdigest(), "gold": answer, "output": turns[-1]["action"],
            "answer": None, "parse_method": "none", "correct": int(reward >= 1.0), "finish_reason": finish,
            "prompt_tokens": 4, "completion_tokens": 6, "bucket": None, "reward": reward,
            "trajectory": {"finish_reason": finish, "return": reward, "error": None, "turns": turns}}


# hand-written episodes: (checkpoint, set) -> records; spans per trace = 1 root + turns + tool calls
EPISODES = {
    ("baseline_s0", "ood_primary"): [
        _record("12*34=", "408", [_turn("calc 12*34", "408", tool=True), _turn("\\boxed{408}", reward=1.0)]),
        _record("11*11=", "121", [_turn("\\boxed{120}")]),
        _record("21*3=", "63", [_turn("calc 21*3", "63", tool=True), _turn("calc 21*3", "63", tool=True),
                                _turn("x")], finish="max_turns"),
    ],
    ("global_step2", "ood_primary"): [
        _record("12*34=", "408", [_turn("\\boxed{408}", reward=1.0)]),
        _record("11*11=", "121", [_turn("calc 11*11", "121", tool=True), _turn("\\boxed{121}", reward=1.0)]),
        # a row of the search environment in the same set: its tool is `look`, not the calculator
        _record("k417?", "83", [_turn("look k417", "k417=83", tool=True), _turn("\\boxed{83}", reward=1.0)]),
    ],
}


@pytest.fixture
def env_experiment(tmp_path):
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    prompts = ["12*34=", "11*11=", "21*3="]
    (exp / "data" / "ood_primary.jsonl").write_text("".join(
        json.dumps({"problem_hash": hashlib.sha256(p.encode()).hexdigest(), "prompt": p,
                    "answer": str(eval(p[:-1]))}) + "\n" for p in prompts)  # noqa: S307 - literal products
        + json.dumps({"problem_hash": hashlib.sha256(b"k417?").hexdigest(), "prompt": "k417?", "answer": "83",
                      "gold_docs": ["k417"], "env": "search"}) + "\n")
    att = exp / "t1"
    att.mkdir()
    (att / "attempt.yaml").write_text(
        "id: t1\ntrainer: {name: local, version: \"0.11.0\"}\nrecipe: {pretrain: models/none}\n"
        "datasets:\n  pool: {size: 4}\n  ood_primary: {path: data/ood_primary.jsonl}\n"
        "environment: {name: calculator, max_turns: 3, max_tokens_per_turn: 8, max_total_tokens: 32}\n")
    for (checkpoint, role), records in EPISODES.items():
        folder = att / "eval" / checkpoint
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{role}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (folder / f"{role}.meta.json").write_text("{}")
    return att


def _traces(client, exp_id, **kw):
    return client.search_traces(locations=[exp_id], max_results=100, **kw)


def test_one_trace_per_episode_with_turn_and_tool_spans(env_experiment, tmp_path, migrated_db):
    from mlflow import MlflowClient

    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.log_attempt(env_experiment, uri)
    client = MlflowClient(uri)
    exp_id = client.get_run(run_id).info.experiment_id
    traces = _traces(client, exp_id)
    assert len(traces) == 6  # 3 + 3 episodes
    # one run per evaluated checkpoint, nested under the attempt's run, holding that checkpoint's traces
    children = client.search_runs([exp_id], filter_string=f"tags.`rlexp.episodes_of` = '{run_id}'")
    by_checkpoint = {r.data.tags["rlexp.checkpoint"]: r for r in children}
    assert sorted(by_checkpoint) == ["baseline_s0", "global_step2"]
    for checkpoint, run in by_checkpoint.items():
        assert run.data.tags["mlflow.parentRunId"] == run_id and run.info.run_name == f"t1/{checkpoint}"
        mine = _traces(client, exp_id, run_id=run.info.run_id)
        assert len(mine) == len(EPISODES[(checkpoint, "ood_primary")])
        assert {t.info.tags["rlexp.checkpoint"] for t in mine} == {checkpoint}
    by_key = {t.info.tags["rlexp.episode"]: t for t in traces}
    for (checkpoint, role), records in EPISODES.items():
        for r in records:
            trace = by_key[f"{checkpoint}/{role}/{r['problem_hash']}"]
            turns = r["trajectory"]["turns"]
            names = [s.name for s in trace.data.spans]
            assert names.count("episode") == 1
            assert sum(n.startswith("turn ") for n in names) == len(turns)
            search = turns[0]["action"].startswith("look")
            tool = "tool: look" if search else "tool: calc"
            assert names.count(tool) == sum(t["tool_call"] for t in turns)
            assert not any(n == "tool: calculator" for n in names)
            assert trace.info.tags["rlexp.environment"] == ("search" if search else "calculator")
            assert trace.info.tags["rlexp.success"] == str(r["correct"])
            # green only for a success: the two failed baseline episodes are ERROR traces
            assert trace.info.state.value == ("OK" if r["correct"] else "ERROR")
            root = next(s for s in trace.data.spans if s.parent_id is None)
            assert root.inputs["prompt"] in ("12*34=", "11*11=", "21*3=", "k417?")
            tools = [s for s in trace.data.spans if s.span_type == "TOOL"]
            turn_ids = {s.span_id for s in trace.data.spans if s.name.startswith("turn ")}
            assert all(s.parent_id in turn_ids for s in tools)
            assert sorted(s.outputs["result"] for s in tools) == sorted(t["feedback"] for t in turns if t["tool_call"])
    # a second report logs no trace twice and makes no second checkpoint run; a new episode file is added alone
    assert tracking.log_attempt(env_experiment, uri) == run_id
    assert len(_traces(client, exp_id)) == 6
    assert len(client.search_runs([exp_id], filter_string=f"tags.`rlexp.episodes_of` = '{run_id}'")) == 2
    extra = env_experiment / "eval" / "global_step4"
    extra.mkdir()
    (extra / "ood_primary.jsonl").write_text(json.dumps(EPISODES[("global_step2", "ood_primary")][0]) + "\n")
    (extra / "ood_primary.meta.json").write_text("{}")
    tracking.log_attempt(env_experiment, uri)
    assert len(_traces(client, exp_id)) == 7
    # an episode played again (its record replaced) is traced as it now stands, once
    replayed = _record("12*34=", "408", [_turn("\\boxed{407}")])
    (extra / "ood_primary.jsonl").write_text(json.dumps(replayed) + "\n")
    tracking.log_attempt(env_experiment, uri)
    traces = _traces(client, exp_id)
    assert len(traces) == 7
    (mine,) = [t for t in traces if t.info.tags["rlexp.checkpoint"] == "global_step4"]
    assert [s.outputs for s in mine.data.spans if s.name == "turn 1"] == [{"action": "\\boxed{407}"}]
    assert mine.info.state.value == "ERROR"


def test_single_turn_attempts_log_no_traces(tmp_path, migrated_db):
    from mlflow import MlflowClient
    from test_report import fill_attempt, make_experiment

    exp = make_experiment(tmp_path)
    fill_attempt(exp / "a2")
    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.log_attempt(exp / "a2", uri)
    client = MlflowClient(uri)
    exp_id = client.get_run(run_id).info.experiment_id
    assert len(client.search_traces(locations=[exp_id], max_results=10)) == 0


def test_sparkline_by_hand():
    from rlexp.reporting.episodes import sparkline

    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"  # (v - 0) / 7 * 8 → bins 0, 1, 2, ..., 7
    assert sparkline([2.0, 2.0, 2.0]) == "▄▄▄"
    assert sparkline([0.0, 1.0] * 40, width=40) == "▄" * 40  # each bin averages one 0 and one 1
    assert sparkline([]) == ""


def test_report_section_draws_training_curves_and_counts_tool_calls(env_experiment):
    from rlexp.reporting.episodes import episode_section

    rows = [{"global_step": s, "turns_per_episode": t, "tool_calls_per_episode": c, "episode_return": 0.1 * s}
            for s, t, c in [(1, 1.0, 0.0), (2, 1.5, 0.5), (3, 2.0, 1.0)]]
    (env_experiment / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = episode_section(env_experiment)
    assert "| turns_per_episode | 1.000 | 2.000 | 1.000 | 2.000 | `▁▅█` |" in text
    assert "| tool_calls_per_episode | 0.000 | 1.000 | 0.000 | 1.000 | `▁▅█` |" in text
    # S0's 3 episodes: 6 turns, 3 tool calls (hand-counted from EPISODES)
    assert "| baseline_s0 | 3 | 0.333 | 0.333 | 2.00 | 1.00 |" in text
    assert "left out of the loss" not in text  # no environment error: nothing said
    # by environment class: S0's three calculator episodes, 1 solved; finish reasons hand-counted
    assert "| baseline_s0 | `calculator` | 3 | 0.333 | max_turns 1, stop 2 |" in text


def test_report_shows_environment_errors_and_that_they_were_masked(env_experiment):
    from rlexp.reporting.episodes import episode_section

    # an environment failing 20% of its episodes (2 of 10 per step), as the local trainer logs it
    rows = [{"global_step": s, "episode_return": 0.5, "env_errors": 0.2, "env_error_episodes_masked": 2.0}
            for s in (1, 2, 3)]
    (env_experiment / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = episode_section(env_experiment)
    assert "| env_errors | 0.200 | 0.200 | 0.200 | 0.200 |" in text
    assert "| env_error_episodes_masked | 2.000 | 2.000 | 2.000 | 2.000 |" in text
    assert "left out of the loss and of their group's baseline" in text


def test_success_and_finish_reasons_by_environment_class():
    from rlexp.reporting.episodes import by_environment

    records = EPISODES[("global_step2", "ood_primary")] + [
        _record("k9?", "1", [_turn("look k9", "k9=1", tool=True)] * 3, finish="max_turns")]
    env_of = {r["problem_hash"]: "search" for r in records if r["output"].startswith(("\\boxed{83}", "look"))}
    got = by_environment(records, env_of, "calculator")
    assert got == {"calculator": {"n": 2, "success": 1.0, "finish_reasons": {"stop": 2}},
                   "search": {"n": 2, "success": 0.5, "finish_reasons": {"max_turns": 1, "stop": 1}}}


def test_tracing_leaves_the_global_tracking_uri_as_it_was(tmp_path, monkeypatch):
    import os

    import mlflow

    from rlexp.environments.traces import _tracing_to

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    before = mlflow.get_tracking_uri()
    with _tracing_to(f"sqlite:///{tmp_path / 'traces.db'}"):
        assert mlflow.get_tracking_uri().endswith("traces.db")
    assert mlflow.get_tracking_uri() == before and os.environ["MLFLOW_TRACKING_URI"].endswith("elsewhere.db")


def test_a_judge_error_episode_is_an_error_trace_with_its_reason(env_experiment, tmp_path, migrated_db):
    from mlflow import MlflowClient

    record = _record("11*11=", "121", [_turn("\\boxed{121}", reward=1.0)])
    record.update(reward=None, correct=0, reward_parts={"env": 1.0, "judge": {"error": "judge_error", "reason": "boom"}},
                  reward_error={"kind": "judge_error", "reason": "boom"})
    folder = env_experiment / "eval" / "global_step9"
    folder.mkdir()
    (folder / "ood_primary.jsonl").write_text(json.dumps(record) + "\n")
    (folder / "ood_primary.meta.json").write_text("{}")
    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.log_attempt(env_experiment, uri)
    client = MlflowClient(uri)
    exp_id = client.get_run(run_id).info.experiment_id
    traces = client.search_traces(locations=[exp_id], max_results=100,
                                  filter_string="tags.`rlexp.checkpoint` = 'global_step9'")
    assert len(traces) == 1
    (trace,) = traces
    root = next(s for s in trace.data.spans if s.parent_id is None)
    assert trace.info.state.value == "ERROR" and root.outputs["reward"] is None
    assert root.outputs["reward_error"] == {"kind": "judge_error", "reason": "boom"}
