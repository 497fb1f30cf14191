"""Fan-out (rlexp.backends.fanout, rlexp.stages.fanout): N rlexp stage runs as concurrent Ray jobs on a
REAL local Ray head, or one after another locally; every job's result, resumable after a kill.

The Ray tests are marked ``ray`` and ``slow`` and reuse ``tests/test_ray_jobs.py``'s head fixture
(``RLEXP_TEST_RAY_ADDRESS``, started by ``scripts/start-ray``). What is asserted about a job's
status, exit code, start/end times and submissions is read back from Ray's Job API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ray_jobs import ADDRESS, ray_head  # noqa: F401  (the session's Ray head fixture)

from rlexp.backends import fanout
from rlexp.backends.fanout import Job, Step, run_jobs
from rlexp.errors import InputError
from rlexp.experiment.layout import ExperimentDir

REPO = Path(__file__).resolve().parents[1]
SOP_SHOW = Step(("sop", "show"))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "RLEXP_TORCH_THREADS": "1"}


@pytest.fixture(autouse=True)
def _forwarded_env(monkeypatch):
    # a Ray job runs in the head's environment: PYTHONPATH (forwarded by ray_jobs.runtime_env) makes it
    # import this tree's rlexp, as the local runs do
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.setenv("RLEXP_TORCH_THREADS", "1")


def _missing_attempt(tmp_path: Path) -> Step:
    return Step(("plan", str(tmp_path / "no-such-attempt")))  # bad input: exit 2, one line naming the file


# ---------------------------------------------------------------------------- without Ray

def test_the_runner_runs_steps_in_order_and_stops_at_the_first_intolerable_exit(tmp_path):
    def run(*steps: Step) -> subprocess.CompletedProcess:
        job = Job("j", steps)
        return subprocess.run(job.argv(), capture_output=True, text=True, env=_env(), timeout=120)

    both = run(SOP_SHOW, SOP_SHOW)
    assert both.returncode == 0, both.stderr
    assert [line for line in both.stdout.splitlines() if line.startswith("fanout: step")][::2] == [
        "fanout: step 1/2: rlexp sop show", "fanout: step 2/2: rlexp sop show"]
    stopped = run(_missing_attempt(tmp_path), SOP_SHOW)
    assert stopped.returncode == 2 and "step 2/2" not in stopped.stdout
    assert "no-such-attempt" in stopped.stderr
    tolerated = run(Step(_missing_attempt(tmp_path).argv, ok_codes=(0, 2)), SOP_SHOW)
    assert tolerated.returncode == 0 and "fanout: step 2/2: exit code 0" in tolerated.stdout


def test_a_library_call_by_name_is_a_step(tmp_path):
    steps = (Step(call="rlexp.spec.sop:load_sop"),  # returns: exit 0
             Step(call="rlexp.stages.plan:plan", kwargs={"attempt": str(tmp_path / "nope")}, ok_codes=(0, 2)),
             Step(call="rlexp.stages.plan:no_such_function", ok_codes=(0, 1)),
             SOP_SHOW)
    done = subprocess.run(Job("j", steps).argv(), capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    codes = [line.split("exit code ")[1].split()[0] for line in done.stdout.splitlines() if "exit code" in line]
    assert codes == ["0", "2", "1", "0"]  # returned; bad input (one line); an exception; the next step ran
    assert "nope" in done.stderr and "AttributeError" in done.stderr
    assert "fanout: step 2/4: rlexp.stages.plan:plan(attempt=" in done.stdout
    for bad in ("os:system", "rlexp.stages.plan", "rlexp.x:y;z"):
        with pytest.raises(InputError):
            Step(call=bad)
    with pytest.raises(InputError):
        Step(("plan", "x"), call="rlexp.stages.plan:plan")


def test_the_runner_refuses_a_malformed_step_in_one_line():
    done = subprocess.run([sys.executable, "-m", fanout.RUNNER_MODULE, '{"argv": "plan x"}'], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "step" in done.stderr
    assert fanout.main([]) == 2
    assert fanout.main(['{"call": "os:system", "kwargs": {"command": "true"}}']) == 2  # rlexp functions only


def test_local_fanout_runs_one_after_another_reports_every_job_and_resumes(tmp_path):
    exp = tmp_path / "exp"
    jobs = [Job("bad", (_missing_attempt(tmp_path),)), Job("good", (SOP_SHOW,))]
    first = run_jobs(jobs, experiment_dir=exp, batch="b1")
    assert first.mode == "local" and not first.ok
    bad, good = first.results
    # the failure does not hide the other job's result; each has its exit code and its own log tail
    assert (bad.status, bad.exit_code, good.status, good.exit_code) == ("FAILED", 2, "SUCCEEDED", 0)
    assert "no-such-attempt" in bad.log_tail and "no-such-attempt" not in good.log_tail
    assert "warn_above_versions" in good.log_tail  # the SOP table `rlexp sop show` prints (its last row)
    assert bad.ended_at <= good.started_at  # one after another
    assert first.overlap_s() == 0.0
    state = json.loads(ExperimentDir(exp).fanout_state("b1").read_text())
    assert {n: e["status"] for n, e in state["jobs"].items()} == {"bad": "FAILED", "good": "SUCCEEDED"}

    # a rerun runs the failed job again and not the one that succeeded
    good_log = Path(good.log_path).read_text()
    again = run_jobs(jobs, experiment_dir=exp, batch="b1")
    assert again.result("good").reused and again.result("good").submission_id == good.submission_id
    assert Path(good.log_path).read_text() == good_log  # not run again
    assert not again.result("bad").reused and again.result("bad").submission_id != bad.submission_id
    # a job whose steps changed is another job: it runs again
    changed = run_jobs([Job("good", (SOP_SHOW, SOP_SHOW))], experiment_dir=exp, batch="b1")
    assert not changed.result("good").reused and changed.ok


def test_local_fanout_in_parallel_overlaps_echoes_and_keeps_each_log_apart(tmp_path):
    exp = tmp_path / "exp"
    jobs = [Job(name, (SOP_SHOW,)) for name in ("a", "b", "c")] + [Job("bad", (_missing_attempt(tmp_path),))]
    echoed: list[tuple[str, str]] = []
    done = run_jobs(jobs, experiment_dir=exp, batch="p", parallel=3, echo=lambda job, line: echoed.append((job, line)))
    assert [r.name for r in done.results] == ["a", "b", "c", "bad"]  # the order given, whatever ended first
    assert [r.status for r in done.results] == ["SUCCEEDED"] * 3 + ["FAILED"]
    first_three = done.results[:3]
    # three at once: each started before any of the three ended; the fourth waited for a free place
    assert max(r.started_at for r in first_three) < min(r.ended_at for r in first_three)
    assert done.results[3].started_at >= min(r.ended_at for r in first_three)
    for r in done.results:
        log = Path(r.log_path).read_text()
        mine = [line for job, line in echoed if job == r.name]
        assert mine and all(line in log for line in mine)  # echoed lines are the job's own log lines
        assert ("no-such-attempt" in log) == (r.name == "bad")
    assert run_jobs(jobs[:3], experiment_dir=exp, batch="p", parallel=2).result("b").reused
    with pytest.raises(InputError, match="parallel"):
        run_jobs(jobs, experiment_dir=exp, batch="q", parallel=0)


def test_fanout_names_and_state_are_checked(tmp_path):
    exp = ExperimentDir(tmp_path / "exp")
    for bad in ("", "../x", "a/b", ".hidden", "x" * 101):
        with pytest.raises(InputError):
            exp.fanout_state(bad)
    with pytest.raises(InputError, match="unique"):
        run_jobs([Job("a", (SOP_SHOW,)), Job("a", (SOP_SHOW,))], experiment_dir=exp.root, batch="b")
    path = exp.fanout_state("b")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"batch": "b", "jobs": {"a": {"submission_id": "x", "status": 3, "steps": []}}}))
    with pytest.raises(InputError) as err:
        run_jobs([Job("a", (SOP_SHOW,))], experiment_dir=exp.root, batch="b")
    assert "jobs.a.status" in err.value.one_line() and str(path) in err.value.one_line()


def test_an_attempts_job_is_the_demos_sequence_with_absolute_paths(tmp_path):
    from rlexp.stages.fanout import SOP_STEPS, attempt_job

    attempt = tmp_path / "exp" / "d1"
    job = attempt_job(attempt, "sqlite:////abs/mlflow.db", SOP_STEPS)
    verbs = [" ".join(s.argv[: s.argv.index(str(attempt))]) for s in job.steps]
    assert verbs == ["plan", "guard g0", "guard g2", "launch", "guard g1", "eval", "guard g4", "guard audit"]
    launch = next(s for s in job.steps if s.argv[0] == "launch")
    assert launch.argv[1:] == (str(attempt), "--backend", "local", "--resume", "--json", "--tracking-uri",
                               "sqlite:////abs/mlflow.db") and launch.ok_codes == (0,)
    # a guard's failed verdict (exit 1) is a record and the job goes on; bad input (2) stops it
    assert {s.ok_codes for s in job.steps if s.argv[0] == "guard"} == {(0, 1)}
    assert job.name == "d1" and Path(job.steps[0].argv[1]).is_absolute()


def test_the_fanout_command_refuses_bad_attempts_in_one_line(tmp_path, capsys):
    from rlexp.cli import main

    assert main(["fanout", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
    for name in ("e1", "e2"):  # two experiments: one state file cannot hold both
        (tmp_path / name / "a").mkdir(parents=True)
        (tmp_path / name / "a" / "attempt.yaml").write_text(
            "id: a\ntrainer: {name: local, version: '0.11.0'}\nrecipe: {pretrain: m}\n")
    assert main(["fanout", str(tmp_path / "e1" / "a"), str(tmp_path / "e2" / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one experiment directory" in err
    assert not (tmp_path / "e1" / "fanout").exists()  # nothing written


# ---------------------------------------------------------------------------- on a real Ray head

def _client():
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(ADDRESS)


def _status(job) -> str:
    return str(getattr(job.status, "value", job.status))


def _submissions(exp: Path) -> dict[str, list]:
    """The cluster's fan-out submissions for this experiment directory, by job name, oldest first."""
    found: dict[str, list] = {}
    for job in sorted(_client().list_jobs(), key=lambda j: j.start_time or 0):
        meta = job.metadata or {}
        if meta.get("rlexp.experiment_dir") == str(exp.resolve()) and "rlexp.fanout.job" in meta:
            found.setdefault(meta["rlexp.fanout.job"], []).append(job)
    return found


@pytest.mark.ray
@pytest.mark.slow
def test_ray_fanout_reports_every_job_and_resubmits_only_what_did_not_succeed(ray_head, tmp_path):  # noqa: F811
    exp = tmp_path / "exp"
    jobs = [Job("bad", (_missing_attempt(tmp_path),)), Job("good", (SOP_SHOW,))]
    first = run_jobs(jobs, experiment_dir=exp, batch="b1", ray_address=ray_head, poll_s=0.2)
    assert first.mode == "ray" and not first.ok
    subs = _submissions(exp)
    [bad], [good] = subs["bad"], subs["good"]
    # Ray's own view: one job failed with the step's exit code, the other succeeded
    assert _status(bad) == "FAILED" and bad.driver_exit_code == 2
    assert _status(good) == "SUCCEEDED" and good.driver_exit_code == 0
    assert first.result("bad").submission_id == bad.submission_id and first.result("bad").exit_code == 2
    assert first.result("good").submission_id == good.submission_id and first.result("good").exit_code == 0
    assert "no-such-attempt" in first.result("bad").log_tail  # mirrored from Ray's job log
    assert first.result("good").started_at == pytest.approx(good.start_time / 1000)
    assert bad.entrypoint.split()[1:3] == ["-m", "rlexp.backends.fanout"]

    again = run_jobs(jobs, experiment_dir=exp, batch="b1", ray_address=ray_head, poll_s=0.2)
    subs = _submissions(exp)
    assert len(subs["good"]) == 1 and again.result("good").reused  # not resubmitted
    assert len(subs["bad"]) == 2 and again.result("bad").submission_id == subs["bad"][1].submission_id


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_fanout_reattaches_to_its_running_jobs(ray_head, tmp_path):  # noqa: F811
    exp = tmp_path / "exp"
    code = ("import sys; from rlexp.backends.fanout import Job, Step, run_jobs\n"
            "steps = (Step(('sop', 'calibrate', '--sims', '50000', '--json')),)  # some seconds\n"
            "r = run_jobs([Job('slow', steps)], experiment_dir=sys.argv[1], batch='k', ray_address=sys.argv[2],"
            " poll_s=0.2)\n"
            "print(r.result('slow').status, r.result('slow').reused)\n")
    driver = subprocess.Popen([sys.executable, "-c", code, str(exp), ray_head], env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    state = ExperimentDir(exp).fanout_state("k")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _submissions(exp).get("slow"):
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)  # the submitter dies; the Ray job does not
    driver.communicate(timeout=30)
    [job] = _submissions(exp)["slow"]
    assert _status(job) in ("PENDING", "RUNNING")  # a rerun now has a live job to re-attach to
    assert json.loads(state.read_text())["jobs"]["slow"]["submission_id"] == job.submission_id
    rerun = subprocess.run([sys.executable, "-c", code, str(exp), ray_head], env=_env(), capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    [job] = _submissions(exp)["slow"]  # re-attached (or found SUCCEEDED): never submitted twice
    assert _status(job) == "SUCCEEDED" and rerun.stdout.split()[0] == "SUCCEEDED"
    third = subprocess.run([sys.executable, "-c", code, str(exp), ray_head], env=_env(), capture_output=True,
                           text=True, timeout=300)
    assert third.stdout.split() == ["SUCCEEDED", "True"] and len(_submissions(exp)["slow"]) == 1


# ---------------------------------------------------------------------------- two seeds of one rung

def _demo_pair(root: Path) -> Path:
    """The demo's d1 and d1s2 (siblings that differ only in recipe.seed) on the fast demo's recipe,
    with smaller eval sets and an untrained tiny base so that the test stays short."""
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
    for attempt_id, text in attempt_specs(config, datasets).items():
        if attempt_id in ("d1", "d1s2"):
            (exp / attempt_id).mkdir(parents=True)
            (exp / attempt_id / "attempt.yaml").write_text(text)
    return exp


def _delta_pp(attempt: Path, checkpoint: str, set_role: str = "ood_primary") -> float:
    """Δ accuracy (pp) of a checkpoint against Baseline-S0, counted by hand from the eval records."""
    def acc(name: str) -> float:
        rows = [json.loads(line) for line in (attempt / "eval" / name / f"{set_role}.jsonl").read_text().splitlines()]
        return sum(int(r["correct"]) for r in rows) / len(rows)

    return 100.0 * (acc(checkpoint) - acc("baseline_s0"))


@pytest.mark.ray
@pytest.mark.slow
def test_two_seeds_of_one_rung_run_concurrently_on_ray_and_gate_2_sees_both(ray_head, tmp_path, capsys):  # noqa: F811
    import sqlite3

    from rlexp.cli import main

    exp = _demo_pair(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    started = time.monotonic()
    code = main(["fanout", str(exp / "d1"), str(exp / "d1s2"), "--ray-address", ray_head, "--tracking-uri", uri,
                 "--json"])
    wall = time.monotonic() - started
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0, {j["name"]: j["log_tail"][-1500:] for j in result["jobs"]}
    assert result["mode"] == "ray" and result["ok"]

    # both Ray jobs succeeded and ran at the same time (Ray's own start and end times)
    subs = _submissions(exp)
    [d1], [d1s2] = subs["d1"], subs["d1s2"]
    assert _status(d1) == _status(d1s2) == "SUCCEEDED" and d1.driver_exit_code == d1s2.driver_exit_code == 0
    assert max(d1.start_time, d1s2.start_time) < min(d1.end_time, d1s2.end_time), "the two jobs did not overlap"
    overlap = (min(d1.end_time, d1s2.end_time) - max(d1.start_time, d1s2.start_time)) / 1000
    assert result["overlap_s"] == pytest.approx(overlap, abs=0.01)
    for attempt in ("d1", "d1s2"):
        st = json.loads((exp / attempt / "launch" / "state.json").read_text())
        assert st["state"] == "finished" and st["exit_code"] == 0
        assert (exp / attempt / "eval" / "selection.json").is_file()
    # one MLflow SQLite store written by both jobs at once: a run per attempt with every training step
    db = sqlite3.connect(tmp_path / "mlflow.db")
    runs = dict(db.execute("select r.name, count(distinct m.step) from runs r join metrics m on m.run_uuid = "
                           "r.run_uuid where m.key = 'reward' group by r.name").fetchall())
    assert runs == {"d1": 4, "d1s2": 4}
    logs = "".join(Path(j["log"]).read_text() for j in result["jobs"])
    assert "database is locked" not in logs

    # decided in order: d1 alone (no sibling yet), then d1s2 with Gate-2 over both seeds
    first = json.loads((exp / "d1" / "decision.json").read_text())
    second = json.loads((exp / "d1s2" / "decision.json").read_text())
    assert first["gates"]["gate_2"]["numbers"]["siblings"] == []
    gate2 = second["gates"]["gate_2"]
    assert gate2["numbers"]["siblings"] == ["d1"] and gate2["numbers"]["seeds"] == 2
    by_hand = [_delta_pp(exp / "d1s2", second["primary_checkpoint"]), _delta_pp(exp / "d1", first["primary_checkpoint"])]
    assert gate2["numbers"]["seed_deltas_pp"] == pytest.approx(by_hand)
    # the SOP's Gate-2 rule on those two numbers: each > 0 and mean >= +3pp (and the ID guardrail)
    if gate2["passed"]:
        assert min(by_hand) > 0 and sum(by_hand) / 2 >= 3.0
    elif min(by_hand) > 0 and sum(by_hand) / 2 >= 3.0:
        assert gate2["numbers"]["id_guardrail"] is None or not gate2["numbers"]["id_guardrail"]["passed"]
    # with its sibling decided, d1s2 can no longer ask for a confirmation seed: STOP-1 exactly when
    # Gate-1b and Gate-2 pass
    assert second["decision"] != "CONFIRM"
    assert (second["decision"] == "STOP-1") == (second["gates"]["gate_1b"]["passed"] and gate2["passed"])
    assert result["decisions"] == {"d1": {"decision": first["decision"], "reason": first["reason"]},
                                   "d1s2": {"decision": second["decision"], "reason": second["reason"]}}
    print(f"two seeds on Ray: {wall:.1f} s wall, jobs overlapped {overlap:.1f} s; decisions "
          f"{first['decision']} / {second['decision']}")
