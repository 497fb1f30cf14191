"""optuna-dashboard opened on a ladder's study, looked at in headless Chromium.

The study is made by ``run_ladder`` (three rungs, a stand-in rung runner: no training), served by
optuna-dashboard on a free loopback port; the test reads the served API, renders the study page in
headless Chromium, and checks the rendered DOM and the screenshot. The screenshot's path is printed
(``pytest -s``) and kept under the test's temporary directory."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from test_ladder import experiment


def _require(module):
    """Skipped on a developer's machine without it; CI (``CI`` set) must have it (scripts/setup installs it)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is not installed (scripts/setup installs the dashboard extra)")
        pytest.skip(f"{module} is not installed (pip install -e '.[dashboard]')")


def chromium(*args, timeout=180):
    profile = tempfile.mkdtemp(prefix="rlexp-chromium-")
    try:
        return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                               "--disable-background-networking", "--disable-component-update", "--disable-sync",
                               "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars",
                               "--window-size=1600,1000", "--virtual-time-budget=20000", *args],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_optuna_dashboard_shows_the_ladder_study_in_headless_chromium(tmp_path):
    _require("optuna_dashboard")
    if shutil.which("chromium") is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (scripts/install-chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from rlexp.experiment.files import atomic_write_json
    from rlexp.stages.ladder import RungResult, run_ladder

    exp = experiment(tmp_path, "root: r\nvariables: {eps_clip: [0.1, 0.3]}\nseeds: [42]\nrungs: 3\n")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    deltas = {"r": 0.0, "r-r1": 1.5, "r-r2": -0.5}

    def runner(experiment_dir, attempt_id, **_):
        atomic_write_json(experiment_dir / attempt_id / "decision.json", {"decision": "CONTINUE", "reason": "test"})
        return RungResult(attempt_id, "CONTINUE", "no gate passes", deltas[attempt_id], f"run-{attempt_id}")

    ran = run_ladder(exp, rungs=3, storage=storage, runner=runner)
    assert [r.attempt for r in ran.ran] == ["r", "r-r1", "r-r2"]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys, optuna_dashboard; "
                               "optuna_dashboard.run_server(sys.argv[1], host='127.0.0.1', port=int(sys.argv[2]))",
         storage, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/api/studies", timeout=2) as r:
                    studies = json.loads(r.read())["study_summaries"]
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("optuna-dashboard did not start: " + server.stderr.read().decode()[-500:])
                time.sleep(0.3)
        # the served API: the one study of the experiment, with its three trials and their attributes
        assert [s["study_name"] for s in studies] == ["ladder:exp"]
        study_id = studies[0]["study_id"]
        with urllib.request.urlopen(f"{base}/api/studies/{study_id}?after=0", timeout=10) as r:
            detail = json.loads(r.read())
        attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"]]
        assert [a["attempt_id"] for a in attrs] == ["r", "r-r1", "r-r2"]
        assert [a["mlflow_run_id"] for a in attrs] == ["run-r", "run-r-r1", "run-r-r2"]
        assert [t["values"] for t in detail["trials"]] == [[0.0], [1.5], [-0.5]]

        url = f"{base}/dashboard/studies/{study_id}/trials?numbers=1"
        dom = chromium("--dump-dom", url)
        assert dom.returncode == 0, dom.stderr[-500:]
        # rendered by the dashboard's own JavaScript (the served HTML is an empty shell): the study's
        # name, its three trials with the best marked, and trial 1 (the rung eps_clip 0.1) with its
        # parameter and the rung's attributes
        text = " ".join(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", " ", dom.stdout, flags=re.S))
                        .split())
        (tmp_path / "dashboard-text.txt").write_text(text)
        for piece in ("ladder:exp", "3 Trials", "Best Trial", "Trial 1 (trial_id=2)", "eps_clip", "0.1",
                      "attempt_id r-r1", "changed_variable eps_clip", "parent r", "mlflow_run_id run-r-r1",
                      "decision CONTINUE"):
            assert piece in text, piece
        shot = tmp_path / "optuna-dashboard-trials.png"
        done = chromium(f"--screenshot={shot}", url)
        assert done.returncode == 0 and shot.is_file(), done.stderr[-500:]
        print(f"\noptuna-dashboard screenshot: {shot}")
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (1000, 1600)
    assert pixels[..., :3].std() > 0.05  # something rendered, not a blank page
