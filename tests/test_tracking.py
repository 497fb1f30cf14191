"""MLflow mirror: idempotent run per attempt on SQLite, PostgreSQL, and an `mlflow server` over REST."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_report import fill_attempt, make_experiment

from rlexp.tracking import runs as tracking
from rlexp.tracking.comparison import VIEW_KEY
from rlexp.tracking.metric_rows import log_metric_rows, metric_name
from rlexp.tracking.store import ensure_store, resolve_tracking_uri


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory) -> Path:
    """An empty, migrated SQLite store made once (MLflow's schema migration takes seconds)."""
    path = tmp_path_factory.mktemp("store") / "template.db"
    ensure_store(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_uri(tmp_path, migrated_db) -> str:
    import shutil

    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture
def experiment(tmp_path):
    exp = make_experiment(tmp_path)
    fill_attempt(exp / "a2")
    return exp


def _check_logged(uri: str, exp: Path, run_id: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("exp")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]  # one run per attempt, however often logged
    run = client.get_run(run_id)
    assert run.data.params["recipe.eps_clip"] == "0.1" and run.data.params["recipe.seed"] == "42"
    assert run.data.params["trainer.name"] == "local"
    tags = run.data.tags
    assert tags["rlexp.attempt_id"] == "a2" and tags["rlexp.parent"] == "a1"
    assert tags["rlexp.changed_variable"] == "eps_clip" and tags["rlexp.decision"] == "CONTINUE"
    assert tags["rlexp.sop_version"] == "v2.1-final"
    history = client.get_metric_history(run_id, "reward")
    assert [m.step for m in history] == list(range(1, 21))  # per global step, no duplicates
    assert history[0].value == pytest.approx(0.41)
    m = run.data.metrics
    # metric names by checkpoint role (final = step 20 in selection.json), the step as a tag
    assert m["eval/ood_primary/final/acc"] == pytest.approx(0.70)
    assert m["eval/ood_primary/mid/acc"] == pytest.approx(0.45)
    assert m["eval/ood_primary/baseline_sota/acc"] == pytest.approx(0.50)
    assert tags["rlexp.step.final"] == "20" and tags["rlexp.step.mid"] == "10"
    assert m["primary/final/delta_pp"] == 20.0 and m["primary/final/b"] == 2
    assert m["primary/final/ci_low_pp"] == -5.0 and m["primary/final/pvalue"] == 0.2890625
    assert m["primary/delta_pp"] == 20.0 and tags["rlexp.primary_checkpoint"] == "global_step20"
    assert not any("global_step" in k for k in m)
    assert not any("@" in k or "(" in k for k in m)
    assert tags["mlflow.note.content"].startswith("**CONTINUE**: no gate passes.")
    # datasets as MLflow inputs, the SHA-256 (first 36 hex digits: MLflow's digest column) as digest
    from rlexp.experiment.files import sha256_file

    inputs = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"pool", "ood_monitor", "ood_primary", "id"}
    pool_sha = sha256_file(exp / "data" / "pool.jsonl")
    assert inputs["pool"].digest == pool_sha[:36] and json.loads(inputs["pool"].profile)["sha256"] == pool_sha
    assert json.loads(inputs["pool"].source) == {"uri": "data/pool.jsonl"}
    view = json.loads(client.get_experiment(experiment.experiment_id).tags[
        "mlflow.sharedViewState." + VIEW_KEY])
    assert "tags.`rlexp.decision`" in view["selectedColumns"] and "metrics.`primary/delta_pp`" in view["selectedColumns"]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"plan.json", "decision.json"} <= artifacts


def test_sqlite_log_attempt_is_idempotent(experiment, sqlite_uri):
    uri = sqlite_uri
    first = tracking.log_attempt(experiment / "a2", uri)
    second = tracking.log_attempt(experiment / "a2", uri)
    assert first == second
    _check_logged(uri, experiment, first)
    # a second attempt of the same experiment lands in the same MLflow experiment, its own run
    other = tracking.log_attempt(experiment / "a1", uri)
    assert other != first
    # lineage: once the parent has a run, the child's run links to it (a tag, not MLflow nesting)
    from mlflow.tracking import MlflowClient

    tracking.log_attempt(experiment / "a2", uri)
    run = MlflowClient(uri).get_run(first)
    assert run.data.tags["rlexp.parent_run"] == f"#/experiments/{run.info.experiment_id}/runs/{other}"
    assert "mlflow.parentRunId" not in run.data.tags
    assert len(run.inputs.dataset_inputs) == 4  # logged three times, each dataset once


def test_new_metric_rows_are_appended_not_duplicated(experiment, sqlite_uri):
    from mlflow.tracking import MlflowClient

    uri = sqlite_uri
    run_id = tracking.log_attempt(experiment / "a2", uri)
    with open(experiment / "a2" / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"global_step": 21, "reward": 0.9}) + "\n")
    assert tracking.log_attempt(experiment / "a2", uri) == run_id
    steps = [m.step for m in MlflowClient(uri).get_metric_history(run_id, "reward")]
    assert steps == list(range(1, 22))


def test_metric_names_are_mlflow_safe():
    assert metric_name("greedy_pass@1") == "greedy_pass_at_1"
    assert metric_name("acc(ood)") == "acc_ood_"


def test_log_batch_respects_the_1000_limit(experiment, tmp_path):
    calls = []

    class Client:
        def log_batch(self, run_id, metrics=()):
            calls.append(len(metrics))

    rows = [{"global_step": s, **{f"m{i}": float(i) for i in range(30)}} for s in range(1, 101)]
    assert log_metric_rows(Client(), "r", rows) == 100
    assert sum(calls) == 3000 and max(calls) == 1000


@pytest.mark.postgres
def test_postgres_store(experiment):
    uri = os.environ.get("RLEXP_TEST_POSTGRES_URI")
    if not uri:
        pytest.skip("RLEXP_TEST_POSTGRES_URI is not set (scripts/start-postgres prints one)")
    import uuid

    import psycopg2

    db = f"rlexp_test_{uuid.uuid4().hex[:8]}"  # a fresh database: MLflow migrates its schema there
    admin = psycopg2.connect(uri)
    admin.autocommit = True
    try:
        admin.cursor().execute(f"CREATE DATABASE {db}")
        db_uri = uri.rsplit("/", 1)[0] + "/" + db
        first = tracking.log_attempt(experiment / "a2", db_uri)
        assert tracking.log_attempt(experiment / "a2", db_uri) == first
        _check_logged(resolve_tracking_uri(db_uri), experiment, first)
    finally:
        # MLflow keeps pooled connections to the database open: end them before dropping it
        admin.cursor().execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db,))
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db}")
        admin.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rest(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_mlflow_server_rest_roundtrip(experiment, tmp_path, sqlite_uri):
    port = _free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", sqlite_uri, "--artifacts-destination", str(tmp_path / "artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("mlflow server did not start: " + server.stderr.read().decode()[-500:])
                time.sleep(0.5)
        run_id = tracking.log_attempt(experiment / "a2", base)
        assert tracking.log_attempt(experiment / "a2", base) == run_id
        exp_id = _rest(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=exp")["experiment"][
            "experiment_id"]
        found = _rest(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id]})["runs"]
        assert [r["info"]["run_id"] for r in found] == [run_id]
        tags = {t["key"]: t["value"] for t in found[0]["data"]["tags"]}
        assert tags["rlexp.attempt_id"] == "a2" and tags["rlexp.decision"] == "CONTINUE"
        params = {p["key"]: p["value"] for p in found[0]["data"]["params"]}
        assert params["recipe.eps_clip"] == "0.1"
        metrics = {m["key"]: m["value"] for m in found[0]["data"]["metrics"]}
        assert metrics["primary/final/delta_pp"] == 20.0
        history = _rest(base, f"/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=reward")
        assert len(history["metrics"]) == 20
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_seed_siblings_share_a_group_run_and_lineage_is_no_nesting(experiment, sqlite_uri):
    """a1 and a1s2 differ only in the seed (a rung's seeds): both nested under one group run; a2,
    a1's one-variable child, is not nested under a1 (lineage stays the rlexp.parent tag)."""
    from mlflow.tracking import MlflowClient

    spec = (experiment / "a1" / "attempt.yaml").read_text()
    (experiment / "a1s2").mkdir()
    (experiment / "a1s2" / "attempt.yaml").write_text(spec.replace("id: a1", "id: a1s2").replace("seed: 42", "seed: 43"))
    fill_attempt(experiment / "a1")
    ids = {a: tracking.log_attempt(experiment / a, sqlite_uri) for a in ("a1", "a2")}
    client = MlflowClient(sqlite_uri)
    assert "mlflow.parentRunId" not in client.get_run(ids["a1"]).data.tags  # alone, no group yet
    ids["a1s2"] = tracking.log_attempt(experiment / "a1s2", sqlite_uri)
    tags = {a: client.get_run(run_id).data.tags for a, run_id in ids.items()}
    group = tags["a1"]["mlflow.parentRunId"]
    assert tags["a1s2"]["mlflow.parentRunId"] == group and group not in ids.values()
    assert "mlflow.parentRunId" not in tags["a2"] and tags["a2"]["rlexp.parent"] == "a1"
    holder = client.get_run(group)
    assert holder.data.tags["rlexp.group_run"] == "seeds" and "rlexp.attempt_id" not in holder.data.tags
    assert holder.info.run_name == "seeds of a1" and holder.info.status == "FINISHED"
    # logging again keeps one group run
    tracking.log_attempt(experiment / "a1", sqlite_uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    assert len(client.search_runs([exp_id], filter_string="tags.`rlexp.group_run` = 'seeds'")) == 1


def test_step_metrics_carry_the_trainers_own_step_time(experiment, sqlite_uri):
    """MLflow's timestamp of each step metric is the trainer's time of that step (``time`` in
    metrics.jsonl, Unix seconds), not the time rlexp logged it; ``time`` is no metric of its own."""
    from mlflow.tracking import MlflowClient

    metrics = experiment / "a2" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    trainer_start = 1_767_225_600.0  # 2026-01-01T00:00:00Z: hours before this test runs
    for row in rows:
        row["time"] = trainer_start + 60.25 * row["global_step"]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_id = tracking.log_attempt(experiment / "a2", sqlite_uri)
    client = MlflowClient(sqlite_uri)
    history = client.get_metric_history(run_id, "reward")
    assert [(m.step, m.timestamp) for m in history] == [
        (s, 1_767_225_600_000 + 60_250 * s) for s in range(1, 21)]
    assert "time" not in client.get_run(run_id).data.metrics
    tracking.LiveLogger(experiment / "a2", sqlite_uri)  # the live logger's path: nothing logged twice
    assert len(client.get_metric_history(run_id, "reward")) == 20


@pytest.mark.slow
def test_mlflow_ui_screenshot_in_headless_chromium(experiment, sqlite_uri, tmp_path):
    """The runs table through the shared view, and the compare view of a1 and a2 with the metrics
    table at the primary deltas: each run's Δ side by side, in the rendered DOM and on the PNG."""
    import shutil

    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    fill_attempt(experiment / "a1")
    decision = experiment / "a1" / "decision.json"  # a1's own Δ, so the two columns differ
    doc = json.loads(decision.read_text())
    doc["checkpoints"][doc["primary_checkpoint"]]["delta_pp"] = -2.5
    decision.write_text(json.dumps(doc))
    for attempt in ("a1", "a2"):
        tracking.log_attempt(experiment / attempt, sqlite_uri)
    script = Path(__file__).resolve().parents[1] / "scripts" / "screenshot-mlflow-ui"
    out = tmp_path / "screenshots"
    done = subprocess.run([str(script), sqlite_uri, str(out), "exp"], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "RLEXP_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-500:]
    print(done.stdout)  # the PNG paths, to look at
    import matplotlib.image

    for name in ("mlflow-experiment.png", "mlflow-compare.png"):
        pixels = matplotlib.image.imread(out / name)
        assert pixels.shape[0] >= 900 and pixels.shape[1] >= 1400
        assert pixels[..., :3].std() > 0.05  # the page rendered something, not a blank screen
    # the compare view as rendered: a1 and a2 in columns; the Δ rows in view, with both runs' values
    shown = json.loads((out / "mlflow-compare-metrics.json").read_text())
    assert shown["runs"] == ["a1", "a2"]
    rows = shown["rows"]
    assert rows["primary/delta_pp"] == ["-2.5", "20"]  # decision.json of a1 (set above), of a2 (fill_attempt)
    assert rows["primary/final/delta_pp"] == ["-2.5", "20"] and rows["primary/final/b"] == ["2", "2"]
    html = (out / "mlflow-compare.html").read_text()
    assert ">primary/delta_pp<" in html and ">-2.5<" in html and ">20<" in html
