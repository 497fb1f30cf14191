"""The sweep and the ladder with ``--ray-address`` on a REAL local Ray head: a sweep's candidates as
concurrent Ray jobs (their records then reused by the sweep's loop), and two ladder runners as
concurrent Ray jobs on one Optuna study and one MLflow store, running two seeds of one rung at once
(``seeds_at_once``) and deciding them in order so that Gate-2 sees both.

Marked ``ray`` and ``slow``; the head comes from ``tests/test_ray_jobs.py``'s fixture.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from test_fanout import _delta_pp, _status, _submissions
from test_ray_jobs import ray_head  # noqa: F401  (the session's Ray head fixture)

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _forwarded_env(monkeypatch):
    # the jobs import this tree's rlexp (PYTHONPATH is forwarded to Ray jobs), one torch thread each
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("RLEXP_TORCH_THREADS", "1")


def _overlap(jobs) -> float:
    return (min(j.end_time for j in jobs) - max(j.start_time for j in jobs)) / 1000


def test_a_sweeps_candidates_run_as_concurrent_ray_jobs(ray_head, tmp_path):  # noqa: F811
    import yaml

    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model
    from rlexp.stages.sweep import sweep_models

    exp = tmp_path / "exp"
    files = build_task_datasets(exp / "data", seed=0, pool_size=10, monitor_size=10, primary_size=24, id_size=10,
                                sanity_size=4)
    names = ("c0", "c1", "c2")
    for seed, name in enumerate(names):
        build_tiny_model(exp / "models" / name, seed=seed)
    spec = {"candidates": [{"name": n, "model": f"models/{n}"} for n in names],
            "datasets": {r: {"path": f"data/{Path(files[r].path).name}"} for r in ("ood_primary", "id", "sanity")},
            "eval": {"engine": "local", "max_tokens": 8, "batch_size": 24},
            "stages": {"stage2": {"finalists": 2}}, "criteria": {"band": [0.0, 1.0]}}
    path = exp / "sweeps" / "s1" / "sweep.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))

    result = sweep_models(path, tracking_uri="off", ray_address=ray_head)
    # every candidate of stage 1 and every finalist of stage 2 was one Ray job; the loop loaded no engine
    subs = _submissions(exp)
    assert sorted(subs) == list(names)
    stage1 = [jobs[0] for jobs in subs.values()]
    assert all(_status(j) == "SUCCEEDED" and j.driver_exit_code == 0 for js in subs.values() for j in js)
    assert _overlap(stage1) > 0, "stage 1's candidate jobs did not run at once"
    assert sorted(n for n, js in subs.items() if len(js) == 2) == sorted(result.ranking["finalists"])
    assert result.evaluations and not any(e.engine_loaded for e in result.evaluations)
    # the same ranking as the sweep run here, one candidate after another, on a copy of the inputs
    import shutil

    here = tmp_path / "here"
    shutil.copytree(exp, here, ignore=shutil.ignore_patterns("eval", "fanout", "ranking*", "*.md", "*.lock"))
    local = sweep_models(here / "sweeps" / "s1" / "sweep.yaml", tracking_uri="off")
    assert all(e.engine_loaded for e in local.evaluations)

    def rows(ranking):
        return [{k: r[k] for k in ("rank", "name", "primary", "finalist", "selected", "stage2")}
                for r in ranking["candidates"]]

    assert rows(result.ranking) == rows(local.ranking)
    assert result.ranking["selection"] == local.ranking["selection"]


def _ladder(root: Path) -> Path:
    """The demo's d1 (fast recipe, small sets, an untrained tiny base) with a ladder over eps_clip
    whose rungs run with their confirmation seeds at once."""
    import dataclasses

    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model
    from rlexp.stages.demo import DemoConfig, attempt_specs

    config = dataclasses.replace(DemoConfig.fast(), monitor_size=10, primary_size=24, id_size=12, sanity_size=4)
    exp = root / "experiments" / "demo"
    datasets = build_task_datasets(exp / "data", seed=0, pool_size=config.pool_size, monitor_size=config.monitor_size,
                                   primary_size=config.primary_size, id_size=config.id_size,
                                   sanity_size=config.sanity_size)
    build_tiny_model(exp / "models" / "tiny-base", seed=0)
    (exp / "d1").mkdir(parents=True)
    (exp / "d1" / "attempt.yaml").write_text(attempt_specs(config, datasets)["d1"])
    (exp / "ladder.yaml").write_text("root: d1\nvariables:\n  eps_clip: [0.1, 0.3]\nseeds: [42, 43]\nrungs: 3\n"
                                        "seeds_at_once: true\n")
    return exp


def test_two_ladder_runners_run_two_seeds_of_one_rung_at_once_on_ray_and_gate_2_sees_both(ray_head,  # noqa: F811
                                                                                            tmp_path, capsys):
    import time

    import optuna

    from rlexp.cli import main
    from rlexp.spec import load_attempt

    exp = _ladder(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # each runner may run 2 rungs; the ladder spec caps the ladder at 3: the root d1 with its
    # confirmation seed d1s2 (at once, seeds_at_once), then one grid rung once d1 is decided
    started = time.monotonic()
    code = main(["ladder", "run", str(exp), "--rungs", "2", "--runners", "2", "--ray-address", ray_head,
                 "--tracking-uri", uri, "--json"])
    wall = time.monotonic() - started
    assert code == 0, capsys.readouterr()

    # two runner jobs, both succeeded, on Ray, at the same time
    subs = _submissions(exp)
    assert sorted(subs) == ["runner1", "runner2"]
    assert all(_status(js[0]) == "SUCCEEDED" and js[0].driver_exit_code == 0 for js in subs.values())
    assert _overlap([js[0] for js in subs.values()]) > 0
    # the study (beside the MLflow store) holds three complete trials, no rung twice
    study = optuna.load_study(study_name="ladder:demo", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    trials = {t.user_attrs["attempt_id"]: t for t in study.get_trials()}
    assert len(study.get_trials()) == 3 and sorted(trials) == ["d1", "d1-r1", "d1s2"]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials.values())
    # each trial carries its attempt's seed, decision and MLflow run; the two seeds of d1 differ
    db = sqlite3.connect(tmp_path / "mlflow.db")
    runs = dict(db.execute("select name, run_uuid from runs where lifecycle_stage = 'active'").fetchall())
    for attempt, trial in trials.items():
        decision = json.loads((exp / attempt / "decision.json").read_text())
        assert trial.user_attrs["decision"] == decision["decision"]
        assert trial.user_attrs["seed"] == load_attempt(exp / attempt).recipe["seed"]
        assert trial.user_attrs["mlflow_run_id"] == runs[attempt]
    seed, sibling = trials["d1"], trials["d1s2"]
    assert (sibling.user_attrs["kind"], sibling.user_attrs["seed_of"], sibling.user_attrs["changed_variable"]) == (
        "confirmation", "d1", "seed")
    assert {seed.user_attrs["seed"], sibling.user_attrs["seed"]} == {42, 43}
    # the two seeds ran at the same time: their trials (claim to record) and their MLflow runs
    assert max(seed.datetime_start, sibling.datetime_start) < min(seed.datetime_complete, sibling.datetime_complete)
    (s1, e1), (s2, e2) = (db.execute("select start_time, end_time from runs where run_uuid = ?", (runs[a],)).fetchone()
                          for a in ("d1", "d1s2"))
    assert max(s1, s2) < min(e1, e2), "the two seeds' MLflow runs did not overlap"
    # decided in order: d1 alone, then d1s2 with Gate-2 over both seeds
    first = json.loads((exp / "d1" / "decision.json").read_text())
    second = json.loads((exp / "d1s2" / "decision.json").read_text())
    assert first["gates"]["gate_2"]["numbers"]["siblings"] == []
    gate2 = second["gates"]["gate_2"]["numbers"]
    assert gate2["siblings"] == ["d1"] and gate2["seeds"] == 2
    by_hand = [_delta_pp(exp / "d1s2", second["primary_checkpoint"]), _delta_pp(exp / "d1", first["primary_checkpoint"])]
    assert gate2["seed_deltas_pp"] == pytest.approx(by_hand)
    assert second["decision"] != "CONFIRM"  # its sibling decided: no third seed is asked for
    print(f"ladder with seeds at once on Ray: {wall:.1f} s wall; decisions {first['decision']} / "
          f"{second['decision']} / {trials['d1-r1'].user_attrs['decision']}")
