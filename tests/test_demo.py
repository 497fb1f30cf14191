"""`rlexp demo --fast` end to end: every stage's artefacts, MLflow runs, and the plan's predictions
matching what the trainer actually logged (the whole point of `rlexp plan`)."""

import json
import math
import re
import sqlite3
import subprocess
import sys

import pytest

from rlexp.experiment.files import read_jsonl
from rlexp.stages.demo import DEMO_RECIPE, DemoConfig, attempt_specs

ATTEMPTS = ("d1", "d1s2", "d2")
DECISIONS = {"STOP-1", "CONFIRM", "CONTINUE", "STOP-3a", "STOP-3b", "DEBUG"}


def test_demo_specs_change_one_variable_and_plan_without_errors(tmp_path):
    """The written specs are what the demo promises: d2 differs from d1 in eps_clip only, d1s2 in
    the seed only, and each plans with no error check (pure: no training)."""
    import yaml

    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.protocol.checks import preflight
    from rlexp.spec import diff_against_parent, load_attempt

    config = DemoConfig.fast()
    exp = tmp_path / "experiments" / "demo"
    datasets = build_task_datasets(exp / "data", seed=0, pool_size=config.pool_size, monitor_size=8,
                                   primary_size=8, id_size=8, sanity_size=4)
    for attempt_id, text in attempt_specs(config, datasets).items():
        (exp / attempt_id).mkdir(parents=True)
        (exp / attempt_id / "attempt.yaml").write_text(text)
    d1, d1s2, d2 = (load_attempt(exp / a) for a in ATTEMPTS)
    assert [(d.key, d.parent, d.value) for d in diff_against_parent(d2)] == [("eps_clip", 0.2, 0.1)]
    assert {k for k in d1.recipe if d1.recipe[k] != d1s2.recipe[k]} == {"seed"}
    assert yaml.safe_load((exp / "d2" / "attempt.yaml").read_text())["change"] == {"eps_clip": 0.1}
    for att in (d1, d1s2, d2):
        assert [c.name for c in preflight(att) if c.severity == "error"] == []
    assert DEMO_RECIPE["rollout_batch_size"] * d1.intent["global_steps"] == config.pool_size


@pytest.fixture(scope="module")
def fast_demo(tmp_path_factory):
    """`rlexp demo --fast > log.txt` (PYTHONHASHSEED=1), once for the module: (dir, log, stderr,
    timestamped lines seen while it ran, exit code)."""
    import os
    import re
    import time

    tmp_path = tmp_path_factory.mktemp("demo-a")
    log = tmp_path / "log.txt"
    # not a terminal, so progress arrives as plain timestamped lines, flushed as written: poll the
    # log while the demo runs
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", re.M)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlexp.cli", "demo", "--fast", "--dir", str(tmp_path)],
            stdout=out, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DEMO_API_KEY": ENV_SECRET, "COLUMNS": "200", "PYTHONHASHSEED": "1"},
        )
        seen_while_running: list[str] = []
        deadline = time.monotonic() + 1500
        while proc.poll() is None and time.monotonic() < deadline:
            lines = stamp.findall(log.read_text())
            if len(lines) > len(seen_while_running):
                seen_while_running = lines
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        stderr = proc.stderr.read()
        proc.wait()
    return tmp_path, log.read_text(), stderr, seen_while_running, proc.returncode


ENV_SECRET = "sk-demo-secret-value-123"


@pytest.mark.slow
def test_demo_fast_end_to_end(fast_demo):
    tmp_path, text_log, stderr, seen_while_running, returncode = fast_demo
    env_secret = ENV_SECRET
    assert returncode == 0, text_log[-3000:] + stderr[-3000:]
    assert len(seen_while_running) >= 3, "no progress lines in the log while the demo ran"
    for phase in ("demo: datasets started", "supervising the base model: step", "demo: launch started",
                  "[d1] ", "[d1s2] ", "[d2] ", "training global step ", "demo: d2.report done"):
        assert phase in text_log, phase
    # third-party INFO (MLflow's table creation) stays out of the user's output
    assert "Creating initial MLflow database tables" not in text_log + stderr
    exp = tmp_path / "experiments" / "demo"

    for attempt_id in ATTEMPTS:
        attempt = exp / attempt_id
        plan = json.loads((attempt / "plan.json").read_text())
        metrics = read_jsonl(attempt / "metrics.jsonl")
        # step counts: exactly the planned global steps, once each
        assert [r["global_step"] for r in metrics] == list(range(1, plan["steps"]["global_steps_total"] + 1))
        # LR: the logged actor_lr equals the plan's prediction at every global step
        predicted = {row["global_step"]: row["actor_lr_logged"] for row in plan["lr"]}
        for row in metrics:
            assert math.isclose(row["actor_lr"], predicted[row["global_step"]], rel_tol=1e-12), row["global_step"]
        # checkpoints at exactly the planned save steps
        saved = sorted(int(p.name[len("global_step"):-len("_hf")]) for p in (attempt / "checkpoints").glob("global_step*_hf"))
        assert saved == plan["save_global_steps"]
        decision = json.loads((attempt / "decision.json").read_text())
        assert decision["decision"] in DECISIONS
        assert decision["sop_version"] == "v2.1-final"
        report = tmp_path / "reports" / "demo" / f"{attempt_id}.md"
        text = report.read_text()
        assert decision["decision"] in text and attempt_id in text
        for written in [report, *attempt.rglob("*.json"), attempt / "launch" / "stdout.log"]:
            assert env_secret not in written.read_text(errors="replace"), written

    # the d2 report, verdict first: decision, reason and next command in the first 10 lines; Δ against
    # the parent, SOTA (named: attempt and checkpoint) and S0; every gate row with numbers; no machine path
    d2 = json.loads((exp / "d2" / "decision.json").read_text())
    report = (tmp_path / "reports" / "demo" / "d2.md").read_text()
    head = report.splitlines()[:10]
    assert f"**Decision: {d2['decision']}** — {d2['reason']}." in head
    assert any(line.startswith("**Next:**") and "`" in line for line in head)
    deltas = report.split("## Δ against the baselines")[1].split("\n## ")[0]
    assert "| parent d1 step " in deltas and "| S0 (base model) |" in deltas
    sota = json.loads((exp / "sota.json").read_text()) if (exp / "sota.json").exists() else None
    if d2["baseline"] == "baseline_sota":
        assert f"SOTA = {sota['attempt']} {sota['checkpoint'].replace('global_step', 'step ')}" in deltas
    gates = report.split("## Gates")[1].split("\n## ")[0]
    rows = [line for line in gates.splitlines() if line.startswith("| ") and not line.startswith("| gate |")]
    assert len(rows) >= 5
    for row in rows:
        assert re.search(r"\d", row.split("|")[3]), row  # the numbers that decided it
    assert str(tmp_path) not in report and not re.search(r"(^|[\s`'(=])/(work|home|tmp|root|usr)/", report)
    if d2["decision"] in ("CONFIRM", "STOP-1"):
        assert "Fault tree:" not in report

    # the ledger holds the three decisions in order
    ledger = [json.loads(line) for line in (exp / "ledger.jsonl").read_text().splitlines()]
    assert [e["attempt"] for e in ledger] == list(ATTEMPTS)

    # one MLflow run per attempt in the default SQLite store, with the recipe as params
    db = sqlite3.connect(tmp_path / "mlflow.db")
    runs = dict(db.execute("select name, run_uuid from runs where lifecycle_stage = 'active' and run_uuid not in "
                           "(select run_uuid from tags where key = 'rlexp.group_run')").fetchall())
    assert set(runs) == set(ATTEMPTS)
    # MLflow nesting groups a rung's seeds only: d1 and d1s2 under one group run, d2 (d1's child) not nested
    nested = dict(db.execute("select r.name, t.value from tags t join runs r on r.run_uuid = t.run_uuid "
                             "where t.key = 'mlflow.parentRunId'").fetchall())
    assert nested.get("d1") and nested.get("d1") == nested.get("d1s2") and "d2" not in nested
    assert nested["d1"] not in runs.values()  # the group run is no attempt's run
    eps = dict(db.execute(
        "select r.name, p.value from params p join runs r on r.run_uuid = p.run_uuid where p.key = 'recipe.eps_clip'"
    ).fetchall())
    assert float(eps["d1"]) == 0.2 and float(eps["d2"]) == 0.1
    n_lr = db.execute("select count(*) from metrics m join runs r on r.run_uuid = m.run_uuid "
                      "where r.name = 'd1' and m.key = 'actor_lr'").fetchone()[0]
    assert n_lr == DemoConfig.fast().global_steps

    # the library and the CLI are one: rlexp.decide() in a fresh process equals decision.json field by
    # field (the decision time aside), and deciding again adds no ledger line (same result)
    code = ("import json, sys, rlexp\n"
            "print(json.dumps(rlexp.decide(sys.argv[1]).to_dict()))")
    lib = subprocess.run([sys.executable, "-c", code, str(exp / "d2")], capture_output=True, text=True, timeout=300)
    assert lib.returncode == 0, lib.stderr[-2000:]
    from_library = json.loads(lib.stdout)
    from_cli = json.loads((exp / "d2" / "decision.json").read_text())
    from_library.pop("decided_at")
    from_cli.pop("decided_at")
    assert from_library == from_cli
    assert len((exp / "ledger.jsonl").read_text().splitlines()) == len(ATTEMPTS)


def _identity_check():
    """scripts/compare_demo_dirs.py: what two runs of the demo must share (also run by hand to compare a
    demo before and after a refactor)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "compare_demo_dirs.py"
    spec = importlib.util.spec_from_file_location("compare_demo_dirs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_fast_demos_are_identical_where_they_can_be(fast_demo, tmp_path):
    """Two fast demos, in two directories under two hash seeds: every model and adapter hash equal,
    every model, adapter, dataset and record file byte-identical, and every other file identical up
    to the run's directory and its wall-clock fields, but for the run records listed in MAY_DIFFER."""
    import os

    first, _log, _err, _seen, returncode = fast_demo
    assert returncode == 0
    second = tmp_path / "demo-b"
    done = subprocess.run([sys.executable, "-m", "rlexp.cli", "demo", "--fast", "--dir", str(second)],
                          capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "PYTHONHASHSEED": "2"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    check = _identity_check()
    kept = check.compared_files(first)
    hashed = [f for f in kept if check.is_hashed(f)]
    assert any("adapter_model.safetensors" in f for f in hashed) and any("tiny-base/" in f for f in hashed)
    assert check.differences(first, second) == []
    metas = sorted(f for f in kept if f.endswith(".meta.json"))  # MLflow's copies live under run ids
    hashes_a, hashes_b = ([{k: v for k, v in json.loads((root / rel).read_text()).items()
                            if k in ("model_sha256", "adapter_sha256")} for rel in metas] for root in (first, second))
    assert hashes_a == hashes_b and any(h.get("adapter_sha256") for h in hashes_a)
