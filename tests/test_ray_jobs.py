"""`rlexp launch --backend ray` against a REAL local Ray head: the local trainer as a Ray job.

Marked ``ray`` (and ``slow``); skipped unless a head answers at ``RLEXP_TEST_RAY_ADDRESS``
(``scripts/run-tests`` starts one with ``scripts/start-ray``). Everything asserted about a job's
status, exit code and submissions is read back from Ray's Job API, not from rlexp's own files.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.backends.process import wait_for

ADDRESS = os.environ.get("RLEXP_TEST_RAY_ADDRESS", "")
REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.ray, pytest.mark.slow]

# The fast demo's recipe (rlexp.demo.DemoConfig.fast) on an untrained tiny model; the pool size
# and rollout batch set the length: 32 prompts / 8 per rollout = 4 global steps.
SPEC = """\
id: {id}
trainer: {{name: local, version: "0.11.0", gpus: 0}}
recipe: {recipe}
datasets:
  pool: {{path: data/pool.jsonl, size: 32}}
  ood_monitor: {{path: data/ood_monitor.jsonl, size: 10}}
  ood_primary: {{path: data/ood_primary.jsonl, size: 20}}
  id: {{path: data/id.jsonl, size: 10}}
  sanity: {{path: data/sanity.jsonl, size: 4}}
eval: {{engine: local, max_tokens: 16}}
checkpoints: {{mid: 2}}
"""


def _client():
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(ADDRESS)


@pytest.fixture(scope="session")
def ray_head():
    if not ADDRESS:
        pytest.skip("no Ray head: set RLEXP_TEST_RAY_ADDRESS (scripts/start-ray)")
    pytest.importorskip("ray")
    from rlexp.backends.ray_jobs import check_ray_dashboard

    check_ray_dashboard(ADDRESS)  # an address that is set but dead fails loudly, never skips
    return ADDRESS


def _problems() -> dict[str, list[dict]]:
    """One-digit arithmetic: an untrained model's random digits match some answers (the reward
    falls back to the last number), so GRPO gets non-zero rewards and gradients without an SFT'd
    base, and equal metrics on two backends mean equal training, not two runs of zeros."""
    plus = [(f"{a}+{b}=", str(a + b)) for a in range(10) for b in range(10) if a + b <= 9]  # 55
    minus = [(f"{a}-{b}=", str(a - b)) for a in range(10) for b in range(10) if a >= b]  # 55

    def rows(pairs):
        return [{"problem_hash": hashlib.sha256(p.strip().encode()).hexdigest(), "prompt": p, "answer": a}
                for p, a in pairs]

    return {"pool": rows(plus[:32]), "ood_monitor": rows(plus[32:42]), "id": rows(plus[42:52]),
            "ood_primary": rows(minus[:20]), "sanity": rows(minus[20:24])}


@pytest.fixture(scope="session")
def ray_experiment(tmp_path_factory, ray_head):
    """Datasets and an untrained tiny model, built once; attempts are added per test."""
    from rlexp.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("rayexp") / "exp"
    (root / "data").mkdir(parents=True)
    for role, rows in _problems().items():
        (root / "data" / f"{role}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_tiny_model(root / "models" / "tiny-base", seed=0)
    return root


def make_attempt(root: Path, attempt_id: str, **overrides) -> Path:
    from rlexp.stages.demo import DemoConfig

    recipe = {"pretrain": "models/tiny-base", **DemoConfig.fast().recipe, "rollout_batch_size": 8,
              "train_batch_size": 32, "micro_train_batch_size": 32, **overrides}
    attempt = root / attempt_id
    attempt.mkdir()
    (attempt / "attempt.yaml").write_text(SPEC.format(id=attempt_id, recipe=json.dumps(recipe)))
    return attempt


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "RLEXP_TORCH_THREADS": "1"}


def launch(attempt: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlexp.cli", "launch", str(attempt), *extra], env=env(),
                          capture_output=True, text=True, timeout=timeout)


def start_launch(attempt: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlexp.cli", "launch", str(attempt), "--tracking-uri", "off",
                             "--poll-s", "0.2", *extra], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def state(attempt: Path) -> dict:
    return json.loads((attempt / "launch" / "state.json").read_text())


def steps(attempt: Path) -> list[int]:
    path = attempt / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["global_step"] for line in path.read_text().splitlines() if line.endswith("}")]


def jobs_of(attempt: Path) -> list:
    """The cluster's submissions for this attempt (rlexp names it in each job's metadata), since
    the attempt's directory was made (a head outlives test runs, which may reuse a path)."""
    since_ms = (attempt / "attempt.yaml").stat().st_mtime * 1000 - 1000
    return sorted((j for j in _client().list_jobs() if (j.metadata or {}).get("rlexp.attempt_dir") == str(attempt)
                   and (j.start_time or 0) >= since_ms), key=lambda j: j.start_time or 0)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_ray_job_trains_exactly_like_the_local_backend(ray_experiment, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    on_ray, on_local = make_attempt(ray_experiment, "r1"), make_attempt(ray_experiment, "l1")
    done = launch(on_ray, "--backend", "ray", "--ray-address", ADDRESS, "--tracking-uri", uri, "--json",
                  "--poll-s", "0.2")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["state"] == "finished" and result["backend"] == "ray" and result["steps"] == 4, result
    local = launch(on_local, "--backend", "local", "--tracking-uri", "off", "--json", "--poll-s", "0.2")
    assert local.returncode == 0, local.stderr[-2000:]

    # the Job API: one submission, succeeded, exit code 0, the id recorded in state.json
    [job] = jobs_of(on_ray)
    assert job.submission_id == state(on_ray)["ray_submission_id"]
    assert str(job.status.value if hasattr(job.status, "value") else job.status) == "SUCCEEDED"
    assert job.driver_exit_code == 0 and state(on_ray)["exit_code"] == 0
    assert job.entrypoint.split()[1:4] == ["-m", "rlexp.backends.local_trainer", str(on_ray)]
    # same seed, same numbers: every metric of every step but the wall-clock time
    def numbers(attempt):
        rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("step_time_s", "time")} for r in rows]

    assert [r["global_step"] for r in numbers(on_ray)] == [1, 2, 3, 4]
    assert numbers(on_ray) == numbers(on_local)
    assert any(r["reward"] > 0 for r in numbers(on_ray)) and any(r["grad_norm"] > 0 for r in numbers(on_ray))
    assert any("monitor_acc" in r for r in numbers(on_ray))
    # checkpoints at the planned steps, byte-identical adapters (so eval and decide agree too)
    planned = json.loads((on_ray / "plan.json").read_text())["save_global_steps"]
    saved = sorted(int(p.name[len("global_step"):-len("_hf")]) for p in (on_ray / "checkpoints").glob("global_step*_hf"))
    assert saved == planned == [2, 4]
    for step in planned:
        name = f"global_step{step}_hf/adapter_model.safetensors"
        assert sha256(on_ray / "checkpoints" / name) == sha256(on_local / "checkpoints" / name)
    # the job's own output came back into launch/stdout.log; metrics went live to MLflow
    assert f"Running entrypoint for job {job.submission_id}" in (on_ray / "launch" / "stdout.log").read_text()
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "reward")] == [1, 2, 3, 4]
    assert run.data.params["launch.backend"] == "ray"
    argv = json.loads((on_ray / "launch" / "argv.json").read_text())["argv"]
    assert argv[:5] == ["ray", "job", "submit", "--address", ADDRESS.rstrip("/")]

    # and what the protocol makes of the two attempts is the same: every eval record (output, answer,
    # correctness) and every paired statistic of the decision
    for attempt in (on_ray, on_local):
        for verb in ("eval", "decide"):
            done = subprocess.run([sys.executable, "-m", "rlexp.cli", verb, str(attempt)], env=env(),
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (verb, done.stderr[-2000:])

    def records(attempt):
        files = sorted((attempt / "eval").glob("*/*.jsonl"))
        return {f"{p.parent.name}/{p.name}": [{k: r[k] for k in ("problem_hash", "output", "answer", "correct")}
                                             for r in map(json.loads, p.read_text().splitlines())]
                for p in files if p.parent.name != "paired"}

    assert records(on_ray) and records(on_ray) == records(on_local)
    decided = [json.loads((a / "decision.json").read_text()) for a in (on_ray, on_local)]
    assert decided[0]["checkpoints"] == decided[1]["checkpoints"]
    assert decided[0]["gates"]["gate_1a"] == decided[1]["gates"]["gate_1a"]
    assert decided[0]["gates"]["gate_1b"] == decided[1]["gates"]["gate_1b"]


def test_a_failing_trainer_is_failed_with_its_own_exit_code(ray_experiment):
    attempt = make_attempt(ray_experiment, "f1", advantage_estimator="gae")  # the local trainer refuses: exit 2
    (attempt / "plan.json").write_text(json.dumps({"checks": []}))  # (rlexp plan would refuse it first)
    done = launch(attempt, "--ray-address", ADDRESS, "--tracking-uri", "off", "--poll-s", "0.2")
    assert done.returncode == 1, done.stderr[-2000:]
    [job] = jobs_of(attempt)
    assert str(getattr(job.status, "value", job.status)) == "FAILED" and job.driver_exit_code == 2
    st = state(attempt)
    assert st["state"] == "failed" and st["exit_code"] == 2 and "exit code 2" in st["reason"]
    assert "recipe.advantage_estimator" in (attempt / "launch" / "stdout.log").read_text()


def test_stopped_from_outside_is_stopped_and_resume_submits_anew(ray_experiment):
    attempt = make_attempt(ray_experiment, "s1", rollout_batch_size=2, train_batch_size=16, max_samples=16,
                           micro_train_batch_size=16, save_steps=1, eval_steps=8)  # 16 prompts / 2 = 8 steps
    proc = start_launch(attempt, "--ray-address", ADDRESS)
    assert wait_for(lambda: len(steps(attempt)) >= 1 or proc.poll() is not None, 240)
    first = state(attempt)["ray_submission_id"]
    _client().stop_job(first)  # somebody else stops the job
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    st = state(attempt)
    assert st["state"] == "stopped" and "STOPPED" in st["reason"] and "from outside" in st["reason"], st
    done_before = steps(attempt)
    assert done_before == list(range(1, len(done_before) + 1)) and len(done_before) < 8
    assert (attempt / "checkpoints" / "state" / f"global_step{done_before[-1]}").is_dir()  # saved on SIGTERM

    # the submission has ended: --resume submits a new job from the last checkpoint
    done = launch(attempt, "--resume", "--ray-address", ADDRESS, "--tracking-uri", "off", "--poll-s", "0.2")
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = jobs_of(attempt)
    assert [j.submission_id for j in jobs][0] == first and len(jobs) == 2
    assert jobs[1].entrypoint.endswith("--resume") and jobs[1].driver_exit_code == 0
    assert steps(attempt) == list(range(1, 9)) and state(attempt)["state"] == "finished"


def test_sigkill_of_the_launcher_leaves_the_job_running_and_resume_reattaches(ray_experiment, capsys):
    attempt = make_attempt(ray_experiment, "k1", rollout_batch_size=2, train_batch_size=16,
                           micro_train_batch_size=16, save_steps=1, eval_steps=16)  # 16 steps
    first = start_launch(attempt, "--ray-address", ADDRESS)
    assert wait_for(lambda: len(steps(attempt)) >= 1 or first.poll() is not None, 240)
    first.kill()
    first.communicate(timeout=30)
    submission = state(attempt)["ray_submission_id"]
    # the job runs on; rlexp status asks the Job API
    assert str(getattr(_client().get_job_status(submission), "value", "")) == "RUNNING"
    from rlexp.cli import main

    assert main(["status", str(ray_experiment), "--json"]) == 0
    row = {r["attempt"]: r for r in json.loads(capsys.readouterr().out)["attempts"]}["k1"]
    assert row["state"] == "running" and submission in row["reason"], row
    # a second training of the same attempt is refused while the job lives
    assert main(["launch", str(attempt), "--ray-address", ADDRESS, "--tracking-uri", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "still training this attempt" in err and "--resume re-attaches" in err

    # --resume re-attaches to the same submission: no second job; then Ctrl-C stops the job
    again = start_launch(attempt, "--resume", "--ray-address", ADDRESS)
    # following again once state.json names the new launcher (it then handles signals); one more step
    assert wait_for(lambda: state(attempt).get("launcher_pid") == again.pid or again.poll() is not None, 240)
    seen = len(steps(attempt))
    assert wait_for(lambda: len(steps(attempt)) > seen or again.poll() is not None, 240)
    again.send_signal(signal.SIGINT)
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, err[-2000:]
    [job] = jobs_of(attempt)
    assert job.submission_id == submission and str(getattr(job.status, "value", job.status)) == "STOPPED"
    st = state(attempt)
    assert st["state"] == "stopped" and "SIGINT" in st["reason"] and st["ray_submission_id"] == submission
    launches = [json.loads(line) for line in (attempt / "launch" / "launches.jsonl").read_text().splitlines()]
    assert [entry.get("reattach") for entry in launches] == [None, submission]
    done = steps(attempt)
    assert done == list(range(1, len(done) + 1))  # nothing lost or written twice across the re-attach
