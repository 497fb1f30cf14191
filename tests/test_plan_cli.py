"""`rlexp plan` end to end: the seed's acceptance numbers, plan.json, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlexp.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "experiments" / "seed-a30"

REQUIRED_STEPS = (
    "optimizer_steps_total",
    "optimizer_steps_per_global_step",
    "global_steps_total",
    "warmup_steps",
)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    dest = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("plan.json"))
    return dest


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def variant(example: Path, attempt_id: str, **recipe) -> Path:
    """A root attempt: the example's a29b with recipe overrides and a pool size."""
    content = yaml.safe_load((example / "a29b" / "attempt.yaml").read_text())
    content["id"] = attempt_id
    pool = recipe.pop("pool", None)
    if pool is not None:
        content["datasets"]["pool"]["size"] = pool
    intent = recipe.pop("intent", None)
    if intent is not None:
        content["intent"] = intent
    content["recipe"].update(recipe)
    path = example / attempt_id / "attempt.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path.parent


def plan_json(attempt_dir: Path, capsys) -> tuple[int, dict]:
    code, out, err = run(["plan", str(attempt_dir), "--json"], capsys)
    data = json.loads(out)
    assert data == json.loads((attempt_dir / "plan.json").read_text())  # --json prints what it wrote
    return code, data


def by_step(data: dict) -> dict[int, dict]:
    return {row["global_step"]: row for row in data["lr"]}


def test_example_a30_plans_clean(example, capsys):
    code, data = plan_json(example / "a30", capsys)
    assert code == 0
    for key in REQUIRED_STEPS:
        assert key in data["steps"]
    assert data["steps"]["optimizer_steps_total"] == 1600 and data["steps"]["global_steps_total"] == 200
    assert data["steps"]["micro_batches_per_optimizer_step"] == 2  # micro 2 on 4 actor GPUs, train batch 16
    assert {"global_step", "lr_first", "lr_mean", "fraction_of_peak"} <= set(data["lr"][0])
    assert data["lr_rows"] == "all" and len(data["lr"]) == 200
    assert data["eval_global_steps"] == list(range(10, 201, 10)) == data["save_global_steps"]
    assert data["checkpoints"]["final"] == 200 and data["checkpoints"]["mid"] == 100
    assert all({"name", "severity", "rule"} <= set(c) for c in data["checks"])
    assert not [c for c in data["checks"] if c["severity"] == "error"]
    assert data["power"]["mde_pp"] == pytest.approx(3.04, abs=0.01)  # n=1000, discordance 0.118
    assert 0.78 < data["power"]["power_at_win_threshold"] < 0.8
    # what a claim needs: a true +3pp passes Gate-1b only ~52% of the time; 80% needs ~3.87pp
    # (an independent simulation's figures at n=1000, 12% discordance; here 11.8%)
    assert data["power"]["gate_1b_pass_power_at_win_threshold"] == pytest.approx(0.52, abs=0.015)
    assert data["power"]["gate_1b_effect_80_pp"] == pytest.approx(3.87, abs=0.03)
    # the exact McNemar test (what the SOP runs) needs a little more than Miller's z approximation
    assert data["power"]["mde_exact_pp"] > data["power"]["mde_pp"]
    assert data["power"]["power_exact_at_win_threshold"] < data["power"]["power_at_win_threshold"]
    # the best of the K=3 checkpoints passes Gate-1b more often than one: about 70-82% by correlation
    best = data["power"]["gate_1b_best_of_k_at_win_threshold"]
    assert best["k"] == 3 and best["correlations"] == [0.3, 0.6, 0.9]
    assert 0.67 < min(best["rates"]) < max(best["rates"]) < 0.85
    # the claim itself (STOP-1: Gate-1b on the best of 3, a second seed, Gate-2) is rarer than Gate-1b
    # alone, rho by rho; sop/README.md's calibration quotes 62-78% at +3pp for N = 1000, 12% discordance
    claim = data["power"]["claim_probability_at_win_threshold"]
    assert claim["correlations"] == best["correlations"] and claim["effect_pp"] == 3.0
    assert all(c < b for c, b in zip(claim["rates"], best["rates"], strict=True))
    assert all(0.55 < r < 0.82 for r in claim["rates"])
    assert data["diff"] == [{"key": "micro_train_batch_size", "parent": 1, "value": 2, "kind": "training"}]


def test_human_output_has_the_tables(example, capsys):
    code, out, _ = run(["plan", str(example / "a30")], capsys)
    assert code == 0
    for title in ("Steps", "LR at milestones", "Eval / save schedule", "Preflight checks", "Power"):
        assert title in out
    assert (example / "a30" / "plan.json").exists()


def test_acceptance_a26(example, capsys):
    code, data = plan_json(
        variant(example, "a26", pool=50_000, num_episodes=20, intent={"global_steps": 40}), capsys
    )
    assert code == 1
    assert data["steps"]["optimizer_steps_total"] == 500_000
    assert any(c["name"] == "lr.low_early" and c["severity"] == "error" for c in data["checks"])
    assert data["lr_rows"] == "sampled"


def test_acceptance_a27(example, capsys):
    code, data = plan_json(variant(example, "a27", pool=50_000, num_episodes=5, intent={}), capsys)
    assert code == 1
    assert data["steps"]["optimizer_steps_total"] == 125_000
    assert round(by_step(data)[46]["fraction_of_peak"] * 100, 1) == 5.8


def test_acceptance_a28(example, capsys):
    code, data = plan_json(variant(example, "a28", pool=400), capsys)
    assert code == 1  # intent 200 vs 25, no eval/save at step 25, mid 100 beyond the run
    assert (data["steps"]["optimizer_steps_total"], data["steps"]["global_steps_total"]) == (200, 25)
    ids = {c["name"] for c in data["checks"] if c["severity"] == "error"}
    assert {"steps.intent", "schedule.final_eval", "schedule.final_save", "schedule.mid_beyond_run"} <= ids


def test_acceptance_a29(example, capsys):
    code, data = plan_json(example / "a29b", capsys)
    assert code == 0
    s = data["steps"]
    assert (s["optimizer_steps_total"], s["global_steps_total"], s["warmup_steps"]) == (1600, 200, 80)
    rows = by_step(data)
    assert [round(rows[g]["fraction_of_peak"] * 100) for g in (50, 100, 150, 200)] == [91, 59, 25, 10]


# ----------------------------------------------------------------------------- exit 2: one line, file and key


def bad(example: Path, text: str, attempt_id: str = "bad") -> Path:
    path = example / attempt_id / "attempt.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path.parent


ROOT = 'trainer: {name: openrlhf, version: "0.9.3"}\ndatasets: {pool: {size: 3200}}\n'


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("recipe: {eps_clip: 0.1\n", "attempt.yaml: line "),  # malformed YAML
        (
            ROOT + "recipe: {eps_clipp: 0.1}\n",
            "attempt.yaml: recipe.eps_clipp: unknown key; did you mean 'eps_clip'?",
        ),
        (
            ROOT + "recipe: {train_batch_size: sixteen}\n",
            "attempt.yaml: recipe.train_batch_size: must be an integer",
        ),
        (
            ROOT + "recipe: {micro_train_batch_size: -1}\n",
            "attempt.yaml: recipe.micro_train_batch_size: must be >= 1",
        ),
        (ROOT + "parent: a28\n", "attempt.yaml: parent: attempt 'a28' not found"),
        (ROOT + "parent: bad\n", "attempt.yaml: parent: cyclic parent chain"),
    ],
    ids=["malformed-yaml", "unknown-key", "wrong-type", "negative-batch", "missing-parent", "cyclic-chain"],
)
def test_bad_input_exits_2_with_one_line(example, capsys, text, where):
    attempt = bad(example, text)
    code, out, err = run(["plan", str(attempt)], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlexp: ") and where in lines[0], err
    assert str(attempt / "attempt.yaml") in lines[0]
    assert not (attempt / "plan.json").exists()  # nothing half-written


def test_cycle_through_two_attempts(example, capsys):
    bad(example, ROOT + "parent: b2\n", "b1")
    attempt = bad(example, "parent: b1\n", "b2")
    code, _, err = run(["plan", str(attempt)], capsys)
    assert code == 2 and "cyclic parent chain" in err and "b1" in err and "b2" in err


def test_missing_spec_exits_2(tmp_path, capsys):
    code, _, err = run(["plan", str(tmp_path / "nope")], capsys)
    assert code == 2 and "file not found" in err


def test_plan_imports_nothing_heavy(example):
    # the start-up budget (< 0.5 s) depends on it; speed itself is measured in benchmarks/
    import subprocess
    import sys

    code = (
        "import sys; from rlexp.cli import main; rc = main(['plan', sys.argv[1], '--json']);"
        "heavy = {'torch', 'mlflow', 'scipy', 'pandas', 'numpy', 'transformers', 'matplotlib', 'vllm', 'statsmodels'};"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}), file=sys.stderr); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(example / "a30")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
