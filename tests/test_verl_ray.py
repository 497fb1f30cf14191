"""A verl launch through the Ray Jobs path against a REAL local Ray head.

verl needs GPUs, so the job's entrypoint is swapped for a stand-in that writes what verl's file
logger writes (tests/test_verl_plan.py, STAND_IN) to ``$VERL_FILE_LOGGER_PATH``: the variable must
reach the job through its runtime env, and the rows must come back into ``metrics.jsonl``. Marked
``ray`` and ``slow``; skipped unless a head answers at ``RLEXP_TEST_RAY_ADDRESS`` (scripts/run-tests
starts one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest
from test_verl_plan import STAND_IN, attempt, write_set

ADDRESS = os.environ.get("RLEXP_TEST_RAY_ADDRESS", "")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_head():
    if not ADDRESS:
        pytest.skip("no Ray head: set RLEXP_TEST_RAY_ADDRESS (scripts/start-ray)")
    pytest.importorskip("ray")
    from rlexp.backends.ray_jobs import check_ray_dashboard

    check_ray_dashboard(ADDRESS)  # set but dead fails loudly
    return ADDRESS


def test_a_verl_job_on_ray_is_followed_through_its_file_logger(ray_head, tmp_path, monkeypatch):
    from ray.job_submission import JobSubmissionClient

    from rlexp.stages import launch as launch_stage
    from rlexp.training.metrics_file import read_metrics

    root = tmp_path / "verl-exp"
    for name, n in (("pool", 1000), ("monitor", 50), ("primary", 400)):
        write_set(root / "data" / f"{name}.jsonl", n, name)
    attempt_dir = attempt(root, "r1").resolve()
    monkeypatch.chdir(tmp_path)
    prepared = launch_stage.prepare(attempt_dir, backend="ray", ray_address=ray_head)
    metrics_file = str(attempt_dir / "launch" / "verl_metrics.jsonl")
    assert prepared.ray_job.runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"] == metrics_file
    assert prepared.ray_job.argv[:3] == ("python3", "-m", "verl.trainer.main_ppo")
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    prepared.ray_job = dataclasses.replace(prepared.ray_job, argv=(sys.executable, str(script),
                                                                   str(attempt_dir / "plan.json")))
    launch_stage.write_launch_files(prepared)
    result = launch_stage.run(prepared, tracking_uri="off", poll_s=0.1)
    assert result["state"] == "finished" and result["exit_code"] == 0 and result["steps"] == 12
    assert [r["global_step"] for r in read_metrics(attempt_dir / "metrics.jsonl")] == list(range(13))
    state = json.loads((attempt_dir / "launch" / "state.json").read_text())
    info = JobSubmissionClient(ray_head).get_job_info(state["ray_submission_id"])
    assert str(getattr(info.status, "value", info.status)) == "SUCCEEDED"
    assert info.runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"] == metrics_file
    assert json.loads((attempt_dir / "guards" / "g5.json").read_text())["passed"] is True
