"""`rlexp demo --task tools --fast`: plan → launch → eval → decide → report on the calculator
environment task, end to end (plumbing: a few supervision steps, 2 global steps)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]


def test_demo_tools_fast_end_to_end(tmp_path, monkeypatch, capsys):
    from rlexp.cli import main
    from rlexp.experiment.records import read_records

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RLEXP_TORCH_THREADS", "1")
    assert main(["demo", "--task", "tools", "--fast", "--dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("\n{") + 1:])
    assert summary["decision"] and set(summary["timings"]) >= {"base_model", "launch", "eval", "total"}
    attempt = tmp_path / "experiments" / "demo-tools" / "t1"
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [1, 2] and "tool_calls_per_episode" in rows[0]
    records = read_records(attempt / "eval" / "baseline_s0" / "ood_primary.jsonl")
    assert len(records) == 8 and all("trajectory" in r for r in records)
    assert json.loads((attempt / "decision.json").read_text())["decision"]
    report = (tmp_path / "reports" / "demo-tools" / "t1.md").read_text()
    assert "## Environment task: episodes" in report and "Discordant trajectories" in report
    # tool calls and turns per episode over training, plotted from metrics.jsonl
    assert "(t1_episodes.png)" in report and (tmp_path / "reports" / "demo-tools" / "t1_episodes.png").stat().st_size
    # two environment classes in one dataset: lookups carry their gold documents and retrieval ids
    assert {bool(r.get("gold_docs")) for r in records} == {True, False}
    looked = [t for r in records if r.get("gold_docs") for t in r["trajectory"]["turns"] if t["tool_call"]]
    assert all(t["action"].startswith("look k") and len(t["retrieved"]) == 2 for t in looked)
    assert "Rows of ood_primary by environment:" in report and "| NDCG |" in report
    # every eval episode is one MLflow trace of the attempt's run
    from mlflow import MlflowClient

    from rlexp.experiment.layout import AttemptDir

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    episodes = sum(len(read_records(p)) for _, _, p in AttemptDir(attempt).evals.record_files())
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    traces = client.search_traces(locations=[experiment.experiment_id], max_results=1000, include_spans=False)
    assert len(traces) == episodes


def test_demo_unknown_task_is_one_line_exit_2(tmp_path, capsys):
    from rlexp.cli import main

    assert main(["demo", "--task", "chess", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--task" in err[0]
