"""`rlexp launch`: dry runs, refusals, files written, kill/resume consistency, early stop, secrets.

The kill/resume tests drive a small fake trainer (``fake_trainer.py`` below) that follows the
local trainer's documented contract (docs/ARCHITECTURE.md): append ``metrics.jsonl``, save
``checkpoints/global_step{N}_hf``, finish the step and exit 0 on SIGTERM, continue on --resume.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import make_experiment
from test_tracking import migrated_db, sqlite_uri  # noqa: F401 (fixtures)

from rlexp.backends.process import pid_alive, wait_for
from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.stages import launch as launch_cmd
from rlexp.trainers.local import launch as local_launch
from rlexp.training.metrics_file import read_metrics

FAKE_TRAINER = r'''
import json, os, signal, sys, time
from pathlib import Path

attempt = Path(sys.argv[1])
total = int(os.environ.get("FAKE_STEPS", "6"))
delay = float(os.environ.get("FAKE_DELAY", "0.02"))
monitor = [float(x) for x in os.environ.get("FAKE_MONITOR", "").split(",") if x]
env_errors = [float(x) for x in os.environ.get("FAKE_ENV_ERRORS", "").split(",") if x]  # per step, the last repeats
stop = False

def on_term(signum, frame):
    global stop
    stop = True

signal.signal(signal.SIGTERM, on_term)
ckpt = attempt / "checkpoints"
start = 0
if "--resume" in sys.argv:  # from the latest state, or from step 0 when there is none (the local trainer's rule)
    start = max((int(p.name[len("global_step"):]) for p in (ckpt / "state").glob("global_step*")), default=0)
crash_at = int(os.environ.get("FAKE_CRASH_AT", "0"))  # SIGKILL itself right after writing this step's row
metrics = attempt / "metrics.jsonl"
done = set()
if metrics.exists():
    done = {json.loads(l)["global_step"] for l in metrics.read_text().splitlines() if l.strip()}
print("fake trainer starting at", start, "token", os.environ.get("HF_TOKEN"), flush=True)
for step in range(start + 1, total + 1):
    time.sleep(delay)
    row = {"global_step": step, "reward": 0.5, "actor_lr": 1e-4, "grad_norm": 80.0 if step == 3 else 2.0,
           "step_time_s": delay, "time": round(time.time(), 3)}
    if os.environ.get("FAKE_BAD") and step == 2:
        row["reward"] = "oops"
    if env_errors:
        row["env_errors"] = env_errors[min(step - 1, len(env_errors) - 1)]
    if monitor and step % 2 == 0:
        row["monitor_acc"] = monitor[min(step // 2 - 1, len(monitor) - 1)]
    if step not in done:
        with open(metrics, "a") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    if step == crash_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if step % 2 == 0 or stop or step == total:
        (ckpt / f"global_step{step}_hf").mkdir(parents=True, exist_ok=True)
        (ckpt / "state" / f"global_step{step}").mkdir(parents=True, exist_ok=True)
    if stop:
        print("fake trainer: SIGTERM, saved step", step, flush=True)
        break
sys.exit(0)
'''

RUNNER = r'''
import sys
import rlexp.trainers.local.launch as local_launch
local_launch.LOCAL_TRAINER_MODULE = "fake_trainer"
from rlexp.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture
def exp(tmp_path, monkeypatch):
    experiment = make_experiment(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "fake_trainer.py").write_text(FAKE_TRAINER)
    (tools / "runner.py").write_text(RUNNER)
    monkeypatch.setattr(local_launch, "LOCAL_TRAINER_MODULE", "fake_trainer")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tools), str(Path(__file__).resolve().parents[1])]))
    monkeypatch.chdir(tmp_path)
    return experiment


def test_dry_run_local_prints_argv_and_writes_nothing(exp, capsys):
    assert main(["launch", str(exp / "a2"), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"argv": [sys.executable, "-m", "fake_trainer", str(exp / "a2")], "backend": "local"}
    assert not (exp / "a2" / "launch").exists()


def test_openrlhf_resume_needs_a_deepspeed_checkpoint(tmp_path, capsys, monkeypatch):
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    spec = experiment / "a1" / "attempt.yaml"
    spec.write_text(spec.read_text().replace("save_steps: 5}", "save_steps: 5, disable_ds_ckpt: true}"))
    (experiment / "a2" / "checkpoints" / "global_step10_hf").mkdir(parents=True)  # eval adapters only
    monkeypatch.chdir(tmp_path)
    assert main(["launch", str(experiment / "a2"), "--resume", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "checkpoints/_actor: no checkpoint to resume from (recipe.disable_ds_ckpt is set" in err
    (experiment / "a2" / "checkpoints" / "_actor" / "global_step10").mkdir(parents=True)
    assert main(["launch", str(experiment / "a2"), "--resume", "--dry-run", "--json"]) == 0
    assert "--load_checkpoint" in json.loads(capsys.readouterr().out)["argv"]


def test_repository_seed_a30_example_dry_runs(capsys, monkeypatch):
    root = Path(__file__).resolve().parents[1]
    example = root / "experiments" / "seed-a30" / "a30"
    if not (example / "attempt.yaml").exists():
        pytest.skip("experiments/seed-a30 not in this checkout")
    assert main(["launch", str(example), "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--micro_train_batch_size") + 1] == "2"  # A30's one change
    assert argv[argv.index("--eps_clip") + 1] == "0.1"  # inherited from A29B
    assert not (example / "launch").exists()


def test_dry_run_openrlhf_is_the_train_argv(tmp_path, capsys, monkeypatch):
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    monkeypatch.chdir(tmp_path)
    assert main(["launch", str(experiment / "a2" / "attempt.yaml"), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "process" and doc["argv"][:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    argv = doc["argv"]
    assert argv[argv.index("--eps_clip") + 1] == "0.1"
    assert argv[argv.index("--ckpt_path") + 1] == str(experiment / "a2" / "checkpoints")
    assert argv[argv.index("--prompt_data") + 1] == str(experiment / "data" / "pool.jsonl")
    assert not (experiment / "a2" / "launch").exists()


def test_unreachable_ray_address_one_line_nothing_written(tmp_path, capsys, monkeypatch):
    import socket

    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.11.0")
    monkeypatch.chdir(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["launch", str(experiment / "a2"), "--ray-address", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ray-address: Ray dashboard unreachable" in err
    assert not (experiment / "a2" / "launch").exists()


def test_plan_errors_refuse_and_force_needs_a_reason(exp, capsys):
    plan = json.loads((exp / "a2" / "plan.json").read_text())
    plan["checks"].append({"name": "warmup_never_ends", "passed": False, "severity": "error",
                           "rule": "LR never leaves warm-up"})
    (exp / "a2" / "plan.json").write_text(json.dumps(plan))
    assert main(["launch", str(exp / "a2"), "--tracking-uri", "off"]) == 1
    assert "warmup_never_ends" in capsys.readouterr().err
    assert not (exp / "a2" / "launch").exists()
    assert main(["launch", str(exp / "a2"), "--force", "--tracking-uri", "off"]) == 2
    assert main(["launch", str(exp / "a2"), "--force", "--reason", "testing the guard",
                 "--tracking-uri", "off", "--json"]) == 0
    assert json.loads((exp / "a2" / "launch" / "argv.json").read_text())["force_reason"] == "testing the guard"
    assert json.loads((exp / "a2" / "launch" / "state.json").read_text())["force_reason"] == "testing the guard"
    assert "# launched with --force: testing the guard" in (exp / "a2" / "launch" / "launch.sh").read_text()


def test_resume_without_checkpoint_starts_over_from_step_0(exp, capsys):
    assert main(["launch", str(exp / "a2"), "--resume", "--tracking-uri", "off", "--poll-s", "0.05"]) == 0
    assert _steps(exp / "a2") == list(range(1, 7))


def test_local_run_writes_files_and_keeps_secrets_out(exp, capsys, monkeypatch, sqlite_uri):  # noqa: F811
    secrets = {"HF_TOKEN": "hf_SECRETVALUE_123456", "WANDB_API_KEY": "wandbSECRET987654",
               "MY_PASSWORD": "pw-SECRET-000111"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    assert main(["launch", str(exp / "a2"), "--tracking-uri", sqlite_uri, "--json", "--poll-s", "0.05"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["state"] == "finished" and result["steps"] == 6 and result["spikes"] == 1
    att = exp / "a2"
    assert [r["global_step"] for r in read_metrics(att / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    argv = json.loads((att / "launch" / "argv.json").read_text())
    assert argv["backend"] == "local" and argv["argv"][-1] == str(att)
    prov = json.loads((att / "launch" / "provenance.json").read_text())
    assert prov["datasets"]["pool"]["sha256"] and prov["seed"] == 42 and prov["versions"]["python"]
    assert prov["git"]["sha"] is None or len(prov["git"]["sha"]) == 40
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "finished"
    spikes = [json.loads(line) for line in (att / "launch" / "spikes.jsonl").read_text().splitlines()]
    assert [s["global_step"] for s in spikes] == [3]  # grad norm 80 > 50
    assert argv["metrics_source"] == "stdout" and state["metrics_source"] == "stdout"
    # 6 steps: the 10-step smoke gate is still pending, written in the one guards/ schema
    g3 = json.loads((att / "guards" / "g3.json").read_text())
    assert g3["name"] == "g3" and g3["passed"] is None and g3["numbers"]["steps_done"] == 6
    assert g3["notes"] == ["6 of 10 smoke steps done"]
    assert not (att / "guards" / "G3.json").exists()
    # the fake trainer printed HF_TOKEN into its log (a child may do anything with its env):
    # rlexp scrubs stdout.log when the run ends, so no file keeps the value
    assert "<redacted>" in (att / "launch" / "stdout.log").read_text()
    assert main(["report", str(att), "--tracking-uri", sqlite_uri]) == 0
    written = [p for p in [*att.rglob("*"), *(exp.parent / "reports").rglob("*")] if p.is_file()]
    for path in written:
        data = path.read_bytes()
        for name, value in secrets.items():
            assert value.encode() not in data, f"{name} leaked into {path}"
            if path.name != "stdout.log":  # the trainer printed "token" itself; rlexp never names them
                assert name.encode() not in data, f"{name} named in {path}"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(sqlite_uri)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert len(runs) == 1
    blob = json.dumps({"params": runs[0].data.params, "tags": runs[0].data.tags})
    for name, value in secrets.items():
        assert value not in blob and name not in blob
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "reward")] == [1, 2, 3, 4, 5, 6]
    # logged live while the trainer ran, each step stamped with the trainer's own time of it
    trainer_ms = [(r["global_step"], round(r["time"] * 1000)) for r in read_metrics(att / "metrics.jsonl")]
    assert [(m.step, m.timestamp) for m in client.get_metric_history(runs[0].info.run_id, "reward")] == trainer_ms
    assert "time" not in runs[0].data.metrics


def _start_runner(exp: Path, *extra: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "FAKE_DELAY": "0.4", "FAKE_STEPS": "12", **(env_extra or {})}
    return subprocess.Popen([sys.executable, str(exp.parent / "tools" / "runner.py"), "launch", str(exp / "a2"),
                             "--tracking-uri", "off", "--poll-s", "0.1", *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _steps(att: Path) -> list[int]:
    path = att / "metrics.jsonl"
    return [r["global_step"] for r in read_metrics(path)] if path.exists() else []


def _resume_and_finish(exp: Path) -> None:
    att = exp / "a2"
    assert main(["launch", str(att), "--resume", "--tracking-uri", "off", "--poll-s", "0.05"]) == 0
    assert _steps(att) == list(range(1, 7))  # FAKE_STEPS defaults to 6 here: resumes and finishes
    assert json.loads((att / "launch" / "state.json").read_text())["state"] == "finished"
    assert len((att / "launch" / "launches.jsonl").read_text().splitlines()) == 2
    assert json.loads((att / "launch" / "argv.json").read_text())["metrics_source"] == "stdout"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_launch_stops_trainer_gracefully_then_resume(exp, sig):
    att = exp / "a2"
    proc = _start_runner(exp)
    assert wait_for(lambda: len(_steps(att)) >= 2, 30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "stopped" and signal.Signals(sig).name in state["reason"]
    steps = _steps(att)  # consistent: strictly increasing, complete lines
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 12
    assert (att / "checkpoints" / f"global_step{steps[-1]}_hf").is_dir()  # saved on SIGTERM
    assert not pid_alive(state["pid"])
    _resume_and_finish(exp)


def test_killed_trainer_is_recorded_failed_then_resume(exp):
    att = exp / "a2"
    proc = _start_runner(exp)
    assert wait_for(lambda: len(_steps(att)) >= 3, 30)
    trainer_pid = json.loads((att / "launch" / "state.json").read_text())["pid"]
    os.kill(trainer_pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == 1
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "failed" and "SIGKILL" in state["reason"]
    steps = _steps(att)
    assert steps == list(range(1, len(steps) + 1))
    _resume_and_finish(exp)


def test_killed_launcher_takes_trainer_down_and_status_says_lost(exp, capsys):
    att = exp / "a2"
    proc = _start_runner(exp)
    assert wait_for(lambda: len(_steps(att)) >= 2, 30)
    trainer_pid = json.loads((att / "launch" / "state.json").read_text())["pid"]
    proc.kill()  # SIGKILL to the launcher only (the trainer is in its own process group)
    proc.communicate(timeout=30)
    assert wait_for(lambda: not pid_alive(trainer_pid), 30)  # parent-death signal -> graceful stop
    assert json.loads((att / "launch" / "state.json").read_text())["state"] == "running"  # never half-written
    assert main(["status", str(exp), "--json"]) == 0
    rows = {r["attempt"]: r for r in json.loads(capsys.readouterr().out)["attempts"]}
    assert rows["a2"]["state"] == "lost"
    _resume_and_finish(exp)


def test_early_stop_rule_stops_the_run(exp, monkeypatch):
    # monitor every 2 steps: 0.50 then flat 0.49: smoothed best at step 6, no +1pp gain for 5 evals
    monkeypatch.setenv("FAKE_STEPS", "40")
    monkeypatch.setenv("FAKE_DELAY", "0.01")
    monkeypatch.setenv("FAKE_MONITOR", "0.5,0.5,0.5,0.49")
    att = exp / "a2"
    assert main(["launch", str(att), "--tracking-uri", "off", "--poll-s", "0.05"]) == 0
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "stopped" and state["reason"].startswith("early stop")
    assert state["early_stop"]["best_step"] == 6 and state["early_stop"]["stop_step"] == 16
    assert _steps(att)[-1] < 40


def test_environment_errors_past_the_sops_rate_stop_the_run(exp, monkeypatch):
    # 20% of episodes fail for 5 steps (masked, the run goes on), then 60%: steps 2..6 average
    # (0.2 x 4 + 0.6) / 5 = 0.28 > the SOP's 0.25 over 5 steps
    monkeypatch.setenv("FAKE_STEPS", "40")
    monkeypatch.setenv("FAKE_DELAY", "0.01")
    monkeypatch.setenv("FAKE_ENV_ERRORS", "0.2,0.2,0.2,0.2,0.2,0.6")
    att = exp / "a2"
    assert main(["launch", str(att), "--tracking-uri", "off", "--poll-s", "0.05"]) == 0
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "stopped" and state["reason"].startswith("environment errors")
    assert state["env_errors"]["to_step"] == 6 and state["env_errors"]["rate"] == pytest.approx(0.28)
    assert _steps(att)[-1] < 40


def test_bad_metrics_line_from_trainer_stops_run_one_line_error(exp, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_BAD", "1")
    monkeypatch.setenv("FAKE_STEPS", "200")
    monkeypatch.setenv("FAKE_DELAY", "0.05")
    att = exp / "a2"
    assert main(["launch", str(att), "--tracking-uri", "off", "--poll-s", "0.05"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl: line 2: reward: expected a finite number" in err
    state = json.loads((att / "launch" / "state.json").read_text())
    assert state["state"] == "failed" and "line 2" in state["reason"]
    assert not pid_alive(state["pid"])


def test_process_backend_parses_stdout_into_metrics(tmp_path, monkeypatch):
    """The OpenRLHF path with a stand-in child that prints OpenRLHF's stdout lines."""
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    monkeypatch.chdir(tmp_path)
    prepared = launch_cmd.prepare(experiment / "a2")
    script = ("import time\n"
              "for s in range(1, 4):\n"
              "    print(f\"✨ Global step {s}: {{'policy_loss': 0.1, 'reward': 0.5, 'kl': nan, 'actor_lr': 1e-06}}\","
              " flush=True)\n"
              "    time.sleep(0.05)\n")
    prepared.argv = [sys.executable, "-c", script]
    launch_cmd.write_launch_files(prepared)
    assert (experiment / "a2" / "launch" / "reward_func.py").exists()
    result = launch_cmd.run(prepared, tracking_uri="off", poll_s=0.05)
    assert result["state"] == "finished" and result["steps"] == 3
    rows = read_metrics(experiment / "a2" / "metrics.jsonl")
    assert math.isnan(rows[0].pop("kl"))  # the trainer's kl: nan is kept (strict JSON "NaN" on disk), flagged
    assert rows[0] == {"global_step": 1, "policy_loss": 0.1, "reward": 0.5, "actor_lr": 1e-06}
    assert result["nonfinite_steps"] == [1, 2, 3] and not result["dropped_values"]
    assert '"kl": "NaN"' in (experiment / "a2" / "metrics.jsonl").read_text()


def test_launch_sh_quotes_every_argument(tmp_path, monkeypatch):
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    spec = experiment / "a1" / "attempt.yaml"
    spec.write_text(spec.read_text().replace("pretrain: models/tiny", "pretrain: \"m; rm -rf ~ $(id)\""))
    monkeypatch.chdir(tmp_path)
    prepared = launch_cmd.prepare(experiment / "a2")
    launch_cmd.write_launch_files(prepared)
    text = (experiment / "a2" / "launch" / "launch.sh").read_text()
    assert "'m; rm -rf ~ $(id)'" in text
    # bash parses launch.sh's command back into exactly our argv (printed, never executed)
    body = text.split("\n", 4)[4].replace("\\\n", " ")
    parsed = subprocess.run(["bash", "-c", f"printf '%s\\n' {body}"], capture_output=True, text=True, check=True)
    assert parsed.stdout.splitlines() == json.loads((experiment / "a2" / "launch" / "argv.json").read_text())["argv"]


@pytest.mark.slow
def test_real_local_trainer_sigterm_then_resume(tmp_path, monkeypatch):
    """The trainer engineer's rlexp.backends.local_trainer on the tiny model: stop mid-run, resume."""
    from rlexp.models.tiny import build_tiny_model

    experiment = make_experiment(tmp_path)
    build_tiny_model(experiment / "models" / "tiny", seed=0)
    spec = experiment / "a1" / "attempt.yaml"
    spec.write_text(spec.read_text()
                    .replace("rollout_batch_size: 4, train_batch_size: 16", "rollout_batch_size: 2, train_batch_size: 8")
                    .replace("eval_steps: 5, save_steps: 5", "eval_steps: -1, save_steps: 1")
                    .replace("seed: 42,", "seed: 42, max_samples: 6,"))
    monkeypatch.chdir(tmp_path)
    att = experiment / "a2"
    # the planned LR the resume gate checks against: the real plan's rows for this spec (make_experiment's
    # plan.json holds a stand-in table)
    from rlexp.spec import load_attempt
    from rlexp.stages.plan import build_plan

    doc = json.loads((att / "plan.json").read_text())
    doc["lr_table"] = build_plan(load_attempt(att))["lr_rows"]
    (att / "plan.json").write_text(json.dumps(doc))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rlexp.cli", "launch", str(att), "--tracking-uri", "off",
                             "--poll-s", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    assert wait_for(lambda: len(_steps(att)) >= 1 or proc.poll() is not None, 300), "no step in 300 s"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    state = json.loads((att / "launch" / "state.json").read_text())
    assert proc.returncode == 0 and state["state"] == "stopped", (state, err[-300:])
    first = _steps(att)
    assert first == list(range(1, len(first) + 1)) and 1 <= len(first) < 3
    assert main(["launch", str(att), "--resume", "--tracking-uri", "off", "--poll-s", "0.2"]) == 0
    assert _steps(att) == [1, 2, 3]
    assert json.loads((att / "launch" / "state.json").read_text())["state"] == "finished"
    assert (att / "checkpoints" / "global_step3_hf").is_dir()
    # the resume gate (rlexp.protocol.run_health): steps and the LR continue the plan after the resume
    gate = json.loads((att / "guards" / "resume.json").read_text())
    assert gate["passed"] is True, gate
    [entry] = gate["numbers"]["checked"]
    assert entry["first_step"] == entry["from_step"] + 1 and entry["steps"] == 3 - entry["from_step"]
    launches = [json.loads(x) for x in (att / "launch" / "launches.jsonl").read_text().splitlines()]
    assert launches[-1]["resume"] is True and launches[-1]["resume_step"] == entry["from_step"]


def test_ray_backend_dry_run_is_the_job_it_submits(tmp_path, exp, capsys, monkeypatch):
    """--ray-address: the job is submitted through Ray's Job API (tests/test_ray_jobs.py runs it on
    a real head); the dry run shows the same submission as a `ray job submit` command."""
    experiment = make_experiment(tmp_path / "o", trainer="openrlhf", version="0.11.0")
    address = "http://127.0.0.1:8265"
    assert main(["launch", str(experiment / "a2"), "--ray-address", address, "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    argv = doc["argv"]
    assert doc["backend"] == "ray" and argv[:5] == ["ray", "job", "submit", "--address", address]
    assert argv[argv.index("--submission-id") + 1].startswith("rlexp-a2-")
    env_vars = json.loads(argv[argv.index("--runtime-env-json") + 1])["env_vars"]
    assert env_vars == {"PYTHONUNBUFFERED": "1", "RAY_JOB_STOP_WAIT_TIME_S": "60"}  # the cluster's own Python env
    assert argv[argv.index("--") + 1:][:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]

    # the local trainer runs on the ray backend too: this Python, an absolute attempt path, and
    # the variables that pick the rlexp it imports (never one naming a secret)
    monkeypatch.setenv("PYTHONPATH", "/opt/src")
    monkeypatch.setenv("HF_TOKEN", "hf_SECRET_123456")
    assert main(["launch", str(exp / "a2"), "--ray-address", address, "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--") + 1:] == [sys.executable, "-m", "fake_trainer", str((exp / "a2").resolve())]
    env_vars = json.loads(argv[argv.index("--runtime-env-json") + 1])["env_vars"]
    assert env_vars["PYTHONPATH"] == "/opt/src" and "HF_TOKEN" not in env_vars
    assert "hf_SECRET_123456" not in json.dumps(argv)
    assert not (exp / "a2" / "launch").exists()
    assert main(["launch", str(exp / "a2"), "--backend", "process", "--dry-run"]) == 2
    assert "trainer 'local' runs on the local or the ray backend" in capsys.readouterr().err


def test_ray_job_view_reads_the_exit_code_of_any_ray_release():
    """Ray >= 2.x records driver_exit_code; older releases state it only in a FAILED job's message
    (job_supervisor.py: "Job entrypoint command failed with exit code N, last available logs ...")."""
    from types import SimpleNamespace

    from rlexp.backends.ray_jobs import view_from_info

    message = ("Job entrypoint command failed with exit code 3, last available logs (truncated to 20,000 chars):\n"
               "Traceback ...")
    old = view_from_info("s1", SimpleNamespace(status="FAILED", message=message))
    assert old.exit_code == 3 and not old.alive
    assert old.summary() == "Ray job s1 FAILED: Job entrypoint command failed with exit code 3"
    new = view_from_info("s2", SimpleNamespace(status="FAILED", message=message, driver_exit_code=4))
    assert new.exit_code == 4
    stopped = view_from_info("s3", SimpleNamespace(status="STOPPED", message="Job was intentionally stopped.",
                                                   driver_exit_code=None))
    assert stopped.exit_code is None and stopped.summary() == "Ray job s3 STOPPED: Job was intentionally stopped"
    assert view_from_info("s4", SimpleNamespace(status="RUNNING", message=None)).alive
    assert view_from_info("s5", SimpleNamespace(status="SUCCEEDED", message="ok")).exit_code == 0


def test_redact_env_and_scrub_file(tmp_path):
    from rlexp.experiment.provenance import redact_env, scrub_file

    env = {"HF_TOKEN": "hf_abcdefgh", "WANDB_API_KEY": "k" * 12, "DB_PASSWORD": "p" * 8, "AWS_SECRET_X": "s" * 9,
           "CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/cache", "PATH": "/bin"}
    assert redact_env(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/cache", "PATH": "/bin"}
    assert redact_env(env, keep=("HF_",)) == {"HF_HOME": "/cache"}
    log = tmp_path / "stdout.log"
    log.write_text("token hf_abcdefgh and kkkkkkkkkkkk\n")
    assert scrub_file(log, env) is True
    assert log.read_text() == "token <redacted> and <redacted>\n"
    assert scrub_file(log, env) is False


def test_provenance_records_the_rollout_engine_and_not_the_test_services():
    """The variables that change what the local trainer does (who decodes its rollouts, where the
    model runs) are recorded; rlexp's test-service URIs, which may hold credentials, are not."""
    from rlexp.experiment.provenance import RECORDED_ENV_PREFIXES, redact_env

    env = {"RLEXP_ROLLOUT_ENGINE": "vllm", "RLEXP_DEVICE": "cuda", "RLEXP_VLLM_PYTHON": "/v/bin/python",
           "RLEXP_TEST_POSTGRES_URI": "postgresql://u:pw@127.0.0.1/db", "RLEXP_MODEL_CACHE": "/c", "PATH": "/bin"}
    assert redact_env(env, keep=RECORDED_ENV_PREFIXES) == {
        "RLEXP_ROLLOUT_ENGINE": "vllm", "RLEXP_DEVICE": "cuda", "RLEXP_VLLM_PYTHON": "/v/bin/python"}


def test_no_follow_returns_at_once_and_status_reports_the_exit(exp, capsys):
    att = exp / "a2"
    done = subprocess.run([sys.executable, str(exp.parent / "tools" / "runner.py"), "launch", str(att), "--no-follow",
                           "--tracking-uri", "off", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["state"] == "running" and out["pid"] > 0
    assert wait_for(lambda: not pid_alive(out["pid"]), 30)
    assert _steps(att) == list(range(1, 7))  # the child ran on its own
    assert main(["status", str(exp), "--json"]) == 0
    rows = {r["attempt"]: r for r in json.loads(capsys.readouterr().out)["attempts"]}
    assert rows["a2"]["state"] == "exited" and rows["a2"]["steps"] == 6


def test_missing_plan_is_computed_with_rlexp_plan_and_its_errors_refuse(exp, capsys):
    from rlexp.experiment.files import sha256_file

    att = exp / "a2"
    (att / "plan.json").unlink()
    assert main(["launch", str(att), "--dry-run", "--json"]) == 1  # mid step 10 > 5 steps; sets overlap
    assert "plan has 4 error check(s), first schedule.mid_beyond_run" in capsys.readouterr().err
    assert not (att / "plan.json").exists()  # a dry run writes nothing
    assert main(["launch", str(att), "--tracking-uri", "off"]) == 1
    plan = json.loads((att / "plan.json").read_text())
    assert plan["spec_sha256"] == sha256_file(att / "attempt.yaml")
    assert any(c["severity"] == "error" for c in plan["checks"])
    assert not (att / "launch").exists()


TB_TRAINER = """
import sys, time
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(sys.argv[1])  # OpenRLHF's TensorboardLogger: a run directory under --use_tensorboard
for step in range(1, 5):
    writer.add_scalar("train/policy_loss", 0.5 / step, step)
    writer.add_scalar("train/reward", 0.25 * step, step)
    writer.add_scalar("train/actor_lr", 1e-6, step)
    if step == 2:
        writer.add_scalar("eval/eval_probe_pass1", 0.5, step)
    writer.flush()
    time.sleep(0.4)
writer.close()
"""


def test_process_backend_follows_tensorboard_scalars(tmp_path, monkeypatch):
    """--metrics-source tensorboard: OpenRLHF's TensorBoard scalars under ATTEMPT/tensorboard,
    followed live (many polls per step) into one metrics.jsonl row per step, none twice."""
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    monkeypatch.chdir(tmp_path)
    att = experiment / "a2"
    prepared = launch_cmd.prepare(att, metrics_source="tensorboard")
    assert prepared.argv[prepared.argv.index("--use_tensorboard") + 1] == str(att / "tensorboard")
    polls = []
    from rlexp.training import followers

    original = followers.MetricsFollower.poll

    def counting_poll(self, final=False):
        assert self.kind == "tensorboard" and self.source == att / "tensorboard"
        rows = original(self, final)
        polls.append([r["global_step"] for r in rows])
        return rows

    monkeypatch.setattr(followers.MetricsFollower, "poll", counting_poll)
    prepared.argv = [sys.executable, "-c", TB_TRAINER, str(att / "tensorboard" / "run1")]
    launch_cmd.write_launch_files(prepared)
    result = launch_cmd.run(prepared, tracking_uri="off", poll_s=0.05)
    assert result["state"] == "finished" and result["steps"] == 4, result
    lines = (att / "metrics.jsonl").read_text().splitlines()
    rows = read_metrics(att / "metrics.jsonl")  # strict: a step written twice is an error
    assert len(lines) == 4 and [r["global_step"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["monitor_acc"] == pytest.approx(0.5) and rows[3]["reward"] == pytest.approx(1.0)
    assert len(polls) > 4  # polled repeatedly while steps were being written
    assert sorted(s for p in polls for s in p) == [1, 2, 3, 4]
    # the source is saved: a resume follows it without being told again
    assert json.loads((att / "launch" / "argv.json").read_text())["metrics_source"] == "tensorboard"
    assert json.loads((att / "launch" / "state.json").read_text())["metrics_source"] == "tensorboard"
    (att / "checkpoints" / "_actor" / "global_step4").mkdir(parents=True)
    assert launch_cmd.prepare(att, resume=True).metrics_source == "tensorboard"


def test_metrics_source_is_checked(tmp_path, exp, capsys):
    assert main(["launch", str(exp / "a2"), "--dry-run", "--metrics-source", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metrics-source" in err and "OpenRLHF" in err
    experiment = make_experiment(tmp_path / "o", trainer="openrlhf", version="0.9.3")
    assert main(["launch", str(experiment / "a2"), "--dry-run", "--metrics-source", "wandb"]) == 2
    assert "unknown source 'wandb'" in capsys.readouterr().err


def test_resume_reuses_the_saved_metrics_source_and_refuses_another(tmp_path, monkeypatch, capsys):
    experiment = make_experiment(tmp_path, trainer="openrlhf", version="0.9.3")
    monkeypatch.chdir(tmp_path)
    att = experiment / "a2"
    first = launch_cmd.prepare(att, metrics_source="tensorboard")
    launch_cmd.write_launch_files(first)  # what the original launch saves before it starts the trainer
    launch_cmd.write_state(att, "failed", pid=None, metrics_source="tensorboard", exit_code=1)
    assert json.loads((att / "launch" / "argv.json").read_text())["metrics_source"] == "tensorboard"
    (att / "checkpoints" / "_actor" / "global_step10").mkdir(parents=True)

    assert launch_cmd.prepare(att, resume=True).metrics_source == "tensorboard"  # option left out
    assert launch_cmd.prepare(att, resume=True, metrics_source="tensorboard").metrics_source == "tensorboard"
    assert main(["launch", str(att), "--resume", "--dry-run", "--json", "--metrics-source", "tensorboard"]) == 0
    capsys.readouterr()
    assert main(["launch", str(att), "--resume", "--dry-run", "--metrics-source", "stdout"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argv.json: metrics_source" in err
    assert "'tensorboard'" in err and "--metrics-source 'stdout'" in err
    before = (att / "launch" / "argv.json").read_text()
    assert main(["launch", str(att), "--resume", "--metrics-source", "stdout", "--tracking-uri", "off"]) == 2
    assert (att / "launch" / "argv.json").read_text() == before  # refused before anything is written

    # a launch whose argv.json predates the saved source: state.json still tells
    doc = json.loads(before)
    del doc["metrics_source"]
    (att / "launch" / "argv.json").write_text(json.dumps(doc))
    assert launch_cmd.prepare(att, resume=True).metrics_source == "tensorboard"
    with pytest.raises(InputError, match="state.json: metrics_source"):
        launch_cmd.prepare(att, resume=True, metrics_source="stdout")
    # neither file has it (an older launch): the option, else stdout as before
    launch_cmd.write_state(att, "failed", pid=None, exit_code=1)
    assert launch_cmd.prepare(att, resume=True).metrics_source == "stdout"
    assert launch_cmd.prepare(att, resume=True, metrics_source="tensorboard").metrics_source == "tensorboard"
    # a new launch is not tied to anything saved
    assert launch_cmd.prepare(att, metrics_source="stdout").metrics_source == "stdout"


def test_a_parent_edit_makes_the_childs_plan_stale(tmp_path):
    """plan.json records a digest of the whole spec chain: editing the parent recomputes the child's plan."""
    from rlexp.experiment.files import atomic_write_json
    from rlexp.spec import load_attempt
    from rlexp.stages.launch import load_plan
    from rlexp.stages.plan import build_plan

    exp = tmp_path / "exp"
    (exp / "p").mkdir(parents=True)
    (exp / "c").mkdir()
    recipe = ("recipe: {advantage_estimator: dr_grpo, n_samples_per_prompt: 8, rollout_batch_size: 16,"
              " train_batch_size: 16, micro_train_batch_size: 1, actor_learning_rate: 5.0e-7,"
              " lr_warmup_ratio: 0.05, eval_steps: 10, save_steps: 10}\n")
    (exp / "p" / "attempt.yaml").write_text("id: p\ntrainer: {name: openrlhf, version: '0.9.3'}\n" + recipe
                                            + "datasets: {pool: {size: 3200}, ood_primary: {size: 1000}}\n")
    (exp / "c" / "attempt.yaml").write_text("id: c\nparent: p\nchange: {eps_clip: 0.1}\nrecipe: {eps_clip: 0.1}\n")
    child = load_attempt(exp / "c")
    atomic_write_json(exp / "c" / "plan.json", build_plan(child))
    assert load_plan(child, write=False)["steps"]["global_steps_total"] == 200
    parent_spec = exp / "p" / "attempt.yaml"
    parent_spec.write_text(parent_spec.read_text().replace("size: 3200", "size: 1600"))
    child = load_attempt(exp / "c")  # the child's own file is unchanged
    assert load_plan(child, write=False)["steps"]["global_steps_total"] == 100


class _FakeJobs:
    """Stands in for Ray's JobSubmissionClient: get_job_info answers from a script, the log stream
    gives its first line and ends, the full log has one more line."""

    def __init__(self, answers):
        self.answers = list(answers)

    def get_job_info(self, submission_id):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def tail_job_logs(self, submission_id):
        yield "line 1\n"

    def get_job_logs(self, submission_id):
        return "line 1\nline 2\n"


def test_ray_job_run_rides_out_a_silent_dashboard_and_completes_its_log(tmp_path):
    from types import SimpleNamespace

    from rlexp.backends.ray_jobs import RayJobRun

    running = SimpleNamespace(status="RUNNING", message=None)
    failed = SimpleNamespace(status="FAILED", message="Job entrypoint command failed with exit code 3",
                             driver_exit_code=3)
    log = tmp_path / "stdout.log"
    log.write_text("an earlier launch\n")
    run = RayJobRun(_FakeJobs([running, ConnectionError("down"), RuntimeError("502"), failed]), "http://h:8265",
                    "s1", log, log.stat().st_size)
    run.min_interval_s = 0.0
    assert [run.poll(), run.poll(), run.poll()] == [None, None, None]  # a blip: the last answer stands
    assert run.poll() == 3 and run.view().status == "FAILED"
    assert log.read_text() == "an earlier launch\nline 1\nline 2\n"  # streamed, then completed, once

    silent = RayJobRun(_FakeJobs([running, ConnectionError("down"), ConnectionError("down")]), "http://h:8265",
                       "s2", tmp_path / "other.log", 0)
    silent.min_interval_s, silent.unreachable_grace_s = 0.0, 0.0
    assert silent.poll() is None and silent.poll() is None
    with pytest.raises(InputError, match="has not answered .* rlexp launch --resume re-attaches"):
        silent.poll()
