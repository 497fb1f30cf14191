"""Recovery and parallel safety: validate before writing, resume after any kill, idempotent MLflow,
a metrics follower that survives a rewrite, parallel reports and loggers on one attempt.

Each test here failed on the code before these fixes (what it failed with is in its docstring).
The launch tests reuse test_launch's stand-in trainer, which follows the local trainer's contract.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_launch import _steps, exp  # noqa: F401 (fixture)
from test_report import fill_attempt, make_experiment
from test_tracking import migrated_db, sqlite_uri  # noqa: F401 (fixtures)

from rlexp.cli import main
from rlexp.experiment import provenance
from rlexp.tracking import runs as tracking
from rlexp.tracking.metric_rows import LOGGED_STEP_TAG
from rlexp.tracking.store import SUPERSEDED_BY_TAG, SUPERSEDED_TAG
from rlexp.training import followers, metrics_file


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _attempt_runs(uri: str, attempt: str = "a2") -> list:
    client = _client(uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    return client.search_runs([exp_id], filter_string=f"tags.`rlexp.attempt_id` = '{attempt}'")


def _rows(client, run_id: str, keys) -> list[tuple[str, int, float]]:
    """Every (key, step, value) the run holds, sorted; timestamps left out."""
    return sorted((k, m.step, m.value) for k in keys for m in client.get_metric_history(run_id, k))


# ------------------------------------------------------------------------- validate before writing

@pytest.mark.parametrize("bad", ['{"global_step": 3, "reward": NaN}', '{"global_step": 3, "reward": "x"}'])
def test_resume_with_bad_metrics_is_refused_before_any_write(exp, capsys, bad):  # noqa: F811
    """Old code: exit 2 only after rewriting argv.json, launch.sh, provenance.json, appending
    launches.jsonl, starting the trainer and flipping state.json finished -> failed."""
    att = exp / "a2"
    assert main(["launch", str(att), "--tracking-uri", "off", "--poll-s", "0.05"]) == 0
    lines = (att / "metrics.jsonl").read_text().splitlines()
    lines[2] = bad
    (att / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    before = _snapshot(exp)
    assert main(["launch", str(att), "--resume", "--tracking-uri", "off", "--poll-s", "0.05"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl: line 3" in err
    assert _snapshot(exp) == before


# ------------------------------------------------------------------------- recover from a kill

def test_killed_before_first_checkpoint_resumes_from_step_0_into_a_new_run(exp, sqlite_uri, monkeypatch):  # noqa: F811
    """Old code: stuck (`--resume`: "no checkpoint to resume from"; a new launch: "already has
    training metrics"), and MLflow kept the dead attempt's step 1 beside the re-done one."""
    att = exp / "a2"
    monkeypatch.setenv("FAKE_CRASH_AT", "1")  # the trainer dies after step 1's row, before the step-2 checkpoint
    assert main(["launch", str(att), "--tracking-uri", sqlite_uri, "--poll-s", "0.05"]) == 1
    assert _steps(att) == [1] and not (att / "checkpoints").exists()
    [first] = _attempt_runs(sqlite_uri)
    assert first.info.status == "FAILED"
    assert [m.step for m in _client(sqlite_uri).get_metric_history(first.info.run_id, "reward")] == [1]
    monkeypatch.delenv("FAKE_CRASH_AT")
    assert main(["launch", str(att), "--resume", "--tracking-uri", sqlite_uri, "--poll-s", "0.05"]) == 0
    assert _steps(att) == list(range(1, 7))
    [second] = _attempt_runs(sqlite_uri)
    client = _client(sqlite_uri)
    assert second.info.run_id != first.info.run_id and second.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(second.info.run_id, "reward")] == list(range(1, 7))
    old = client.get_run(first.info.run_id)
    assert old.data.tags[SUPERSEDED_TAG] == "true"
    assert old.data.tags[SUPERSEDED_BY_TAG] == second.info.run_id


def test_mlflow_rows_are_not_duplicated_after_a_kill_between_batch_and_bookkeeping(tmp_path, sqlite_uri):  # noqa: F811
    """Old code: the steps logged were remembered in a tag set after ``log_batch``; a launcher
    killed in between re-logged them all (15 duplicate (key, step) rows)."""
    experiment = make_experiment(tmp_path)
    fill_attempt(experiment / "a2")
    run_id = tracking.log_attempt(experiment / "a2", sqlite_uri)
    client = _client(sqlite_uri)
    rows = metrics_file.read_metrics(experiment / "a2" / "metrics.jsonl")
    keys = sorted({k for r in rows for k in r if k != "global_step"})
    clean = _rows(client, run_id, keys)
    # a kill right after a batch: the rows reached MLflow, the bookkeeping tag went back to none
    client.set_tag(run_id, LOGGED_STEP_TAG, "-1")
    tracking.log_attempt(experiment / "a2", sqlite_uri)
    live = tracking.LiveLogger(experiment / "a2", sqlite_uri)
    live.log_rows(rows)
    assert _rows(client, run_id, keys) == clean
    assert len(clean) == sum(len(r) - 1 for r in rows)


def test_run_status_follows_the_attempts_final_state(tmp_path, sqlite_uri):  # noqa: F811
    """Old code: a run once FAILED (or KILLED) stayed so after the resumed run finished."""
    experiment = make_experiment(tmp_path)
    fill_attempt(experiment / "a2")
    state = experiment / "a2" / "launch" / "state.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    statuses = []
    for name in ("failed", "running", "finished"):
        state.write_text(json.dumps({"state": name}))
        run_id = tracking.log_attempt(experiment / "a2", sqlite_uri)
        statuses.append(_client(sqlite_uri).get_run(run_id).info.status)
    assert statuses == ["FAILED", "RUNNING", "FINISHED"]


def test_metrics_follower_survives_the_trainer_rewriting_the_file(tmp_path):
    """Old code followed a byte offset: after a resumed trainer rewrote the file with a longer
    row, it read from the middle of a line ("malformed JSON") or lost a row."""
    path = tmp_path / "metrics.jsonl"

    def write(rows):
        tmp = path.with_name("new")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)  # what the trainer does: an atomic rewrite

    write([{"global_step": s, "reward": 0.5} for s in (1, 2, 3)])
    follower = followers.MetricsFileFollower(path)
    assert [r["global_step"] for r in follower.poll()] == [1, 2, 3]
    longer = {"global_step": 3, "reward": 0.123456789012345, "kl": 0.000123456789, "entropy": 1.23456789}
    write([{"global_step": 1, "reward": 0.5}, {"global_step": 2, "reward": 0.5}, longer])
    with open(path, "a") as fh:
        fh.write(json.dumps({"global_step": 4, "reward": 0.25}) + "\n")
        fh.write('{"global_step": 5, "rew')  # torn: still being written
    assert follower.poll() == [{"global_step": 4, "reward": 0.25}]
    with open(path, "a") as fh:
        fh.write('ard": 0.75}\n')
    assert follower.poll() == [{"global_step": 5, "reward": 0.75}]
    assert follower.close() == []


def test_cut_metrics_keeps_rows_up_to_the_resume_point_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"global_step": s, "reward": s / 10}) + "\n" for s in (1, 2, 3, 4))
                    + '{"global_step": 5, "re')
    assert metrics_file.cut_metrics(path, 2) == 2
    assert path.read_text() == '{"global_step": 1, "reward": 0.1}\n{"global_step": 2, "reward": 0.2}\n'
    assert metrics_file.cut_metrics(path, 2) == 0


# ------------------------------------------------------------------------- parallel

def test_secret_scrubber_reads_a_snapshot_while_another_thread_changes_the_environment():
    """Old code iterated os.environ itself: KeyError / RuntimeError when MLflow's thread set or
    removed a variable meanwhile."""
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            os.environ[f"RLEXP_CHURN_{i % 50}"] = "x" * 8
            os.environ.pop(f"RLEXP_CHURN_{(i + 25) % 50}", None)
            i += 1

    os.environ["RLEXP_TEST_TOKEN"] = "secret-value-123"
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(3000):
            assert provenance.scrub("x secret-value-123 y") == "x <redacted> y"
    finally:
        stop.set()
        thread.join()
        for i in range(50):
            os.environ.pop(f"RLEXP_CHURN_{i}", None)
        os.environ.pop("RLEXP_TEST_TOKEN")


LOGGER = r'''
import sys
from rlexp.training.metrics_file import read_metrics
from rlexp.tracking.runs import LiveLogger
live = LiveLogger(sys.argv[1], sys.argv[2])
rows = read_metrics(sys.argv[1] + "/metrics.jsonl")
for start in range(0, len(rows), 3):
    live.log_rows(rows[start : start + 3])
'''


def test_parallel_reports_and_live_loggers_on_one_attempt(tmp_path, sqlite_uri):  # noqa: F811
    """Old code: 5 of 8 parallel `rlexp report` crashed on the plot's fixed temp file name, and two
    first loggers of an attempt could create two runs and log a step twice."""
    experiment = make_experiment(tmp_path)
    fill_attempt(experiment / "a2")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "MPLBACKEND": "Agg"}
    procs = [subprocess.Popen([sys.executable, "-m", "rlexp.cli", "report", str(experiment / "a2"), "--tracking-uri",
                               sqlite_uri, "--reports-dir", str(tmp_path / "reports")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(6)]
    procs += [subprocess.Popen([sys.executable, "-c", LOGGER, str(experiment / "a2"), sqlite_uri], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    failures = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            failures.append(err.decode()[-400:])
    assert failures == []
    [run] = _attempt_runs(sqlite_uri)
    rows = metrics_file.read_metrics(experiment / "a2" / "metrics.jsonl")
    keys = sorted({k for r in rows for k in r if k != "global_step"})
    logged = _rows(_client(sqlite_uri), run.info.run_id, keys)
    pairs = [(k, s) for k, s, _ in logged]
    assert len(pairs) == len(set(pairs)) == sum(len(r) - 1 for r in rows)
    assert sorted(p.name for p in (tmp_path / "reports" / "exp").iterdir() if p.name.startswith(".")) == []
