"""The kill loop: random SIGKILLs to `rlexp launch` and to its trainer, then a resume, give the same
training as one uninterrupted run — metrics (timings left out), checkpoints and MLflow rows.

The local trainer on the tiny model, 6 global steps, a checkpoint every 2 (so kills land before
the first checkpoint too). Seeded: ``RLEXP_KILL_LOOP_SEED`` replays a failure; the kills made are
printed (``pytest -s``). About a minute on a free 2-core machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_report import make_experiment
from test_tracking import migrated_db  # noqa: F401 (fixture)

from rlexp.backends.process import pid_alive, wait_for
from rlexp.training.metrics_file import read_metrics

KILLS = 10
SEED = int(os.environ.get("RLEXP_KILL_LOOP_SEED", "20261126"))
TIMING_KEYS = {"step_time_s", "time"}  # wall-clock: never equal across runs


def _experiment(root: Path, tiny: Path) -> Path:
    exp = make_experiment(root)
    shutil.copytree(tiny, exp / "models" / "tiny")
    spec = exp / "a1" / "attempt.yaml"
    spec.write_text(spec.read_text()
                    .replace("rollout_batch_size: 4, train_batch_size: 16", "rollout_batch_size: 2, train_batch_size: 8")
                    .replace("eval_steps: 5, save_steps: 5", "eval_steps: -1, save_steps: 2")
                    .replace("seed: 42,", "seed: 42, max_samples: 12,"))
    return exp


def _launcher(att: Path, uri: str, resume: bool) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "rlexp.cli", "launch", str(att), "--tracking-uri", uri, "--poll-s", "0.1"]
    return subprocess.Popen(argv + (["--resume"] if resume else []), env=env, cwd=att.parent.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _trainer_pids(att: Path) -> list[int]:
    """Live local-trainer processes of this attempt (read from /proc: the launcher may die
    before it records the trainer's pid)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rlexp.backends.local_trainer" in cmd and str(att).encode() in cmd and pid_alive(int(proc.name)):
            pids.append(int(proc.name))
    return pids


def _steps(att: Path) -> list[int]:
    path = att / "metrics.jsonl"
    return [r["global_step"] for r in read_metrics(path, allow_torn_tail=True)] if path.exists() else []


def _metric_rows(att: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(att / "metrics.jsonl")]


def _adapters(att: Path) -> dict[str, dict]:
    from safetensors.torch import load_file

    out = {}
    for folder in sorted((att / "checkpoints").glob("global_step*_hf")):
        files = sorted(folder.glob("*.safetensors"))
        assert files, f"{folder} holds no weights: {sorted(p.name for p in folder.iterdir())}"
        out[folder.name] = {f"{f.name}:{k}": v for f in files for k, v in load_file(f).items()}
    return out


def _mlflow_rows(uri: str) -> tuple[list[tuple[str, int, float]], str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    [run] = client.search_runs([exp_id], filter_string="tags.`rlexp.attempt_id` = 'a2'")
    keys = [k for k in run.data.metrics if k not in TIMING_KEYS]
    rows = sorted((k, m.step, m.value) for k in keys for m in client.get_metric_history(run.info.run_id, k))
    return rows, run.info.status


@pytest.mark.slow
def test_ten_random_kills_then_resume_equal_an_uninterrupted_run(tmp_path, tiny_base_model, migrated_db):  # noqa: F811
    import torch

    started = time.monotonic()
    ref_att = _experiment(tmp_path / "ref", tiny_base_model) / "a2"
    ref_uri = f"sqlite:///{tmp_path / 'ref.db'}"
    shutil.copy(migrated_db, tmp_path / "ref.db")
    t0 = time.monotonic()
    ref = _launcher(ref_att, ref_uri, resume=False)
    _, err = ref.communicate(timeout=600)
    full_s = time.monotonic() - t0
    assert ref.returncode == 0, err.decode()[-500:]

    att = _experiment(tmp_path / "kill", tiny_base_model) / "a2"
    uri = f"sqlite:///{tmp_path / 'kill.db'}"
    shutil.copy(migrated_db, tmp_path / "kill.db")
    rng = random.Random(SEED)
    kills = []
    for i in range(KILLS):
        done = len(_steps(att))
        proc = _launcher(att, uri, resume=i > 0)
        # where the kill lands: during start-up (before a new row), or inside the step after the
        # next new row, at a random point; the trainer or the launcher, SIGKILL either way
        wait_rows = rng.choice([0, 1])
        delay = rng.uniform(0.2, 6.0) if wait_rows == 0 else rng.uniform(0.0, 1.5)
        target = rng.choice(["launcher", "trainer"])
        if wait_rows:
            wait_for(lambda done=done, proc=proc: len(_steps(att)) > done or proc.poll() is not None, 600, poll_s=0.02)
        time.sleep(delay)
        victims = _trainer_pids(att) if target == "trainer" else []
        if target == "trainer" and not victims:
            target = "launcher"  # no trainer yet (starting) or any more (finished): the launcher then
        if target == "launcher":
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        else:
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=600)
        steps = _steps(att)
        kills.append((i, target, wait_rows, round(delay, 2), proc.returncode, steps[-1] if steps else 0))
        # a killed launcher's trainer stops on its parent-death signal (it saves its step first)
        assert wait_for(lambda: not _trainer_pids(att), 300), "trainer still alive 300 s after its launcher"
    print(f"kill loop seed {SEED}, uninterrupted run {full_s:.1f} s; kills (i, target, after new rows, "
          f"then s, launcher exit, last step): {kills}")
    final = _launcher(att, uri, resume=True)
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err.decode()[-500:]
    assert any(k[-1] < 6 for k in kills[1:]), "the kills all came after the run had finished"
    assert json.loads((att / "launch" / "state.json").read_text())["state"] == "finished"

    assert _metric_rows(att) == _metric_rows(ref_att)
    ours, theirs = _adapters(att), _adapters(ref_att)
    assert sorted(ours) == sorted(theirs) == ["global_step2_hf", "global_step4_hf", "global_step6_hf"]
    for name in theirs:
        assert ours[name].keys() == theirs[name].keys() and ours[name]
        for key in theirs[name]:
            # exact by construction: the same computation (shapes, seeds, kernels) on the same
            # machine, once uninterrupted and once resumed from a saved step
            assert torch.equal(ours[name][key], theirs[name][key]), (name, key)
    rows, status = _mlflow_rows(uri)
    ref_rows, ref_status = _mlflow_rows(ref_uri)
    assert rows == ref_rows and status == ref_status == "FINISHED"
    print(f"kill loop total {time.monotonic() - started:.1f} s")
