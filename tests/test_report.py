"""The one-page report: verdict first, every deliverable, plots, and graceful gaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.experiment.files import sha256_file, sha256_text

PROBLEMS = [{"problem_hash": sha256_text(f"{i}+{i}=?"), "prompt": f"{i}+{i}=?", "answer": str(2 * i)}
            for i in range(20)]


def _jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_experiment(root: Path, *, trainer: str = "local", version: str | None = None) -> Path:
    """experiments/exp with a root attempt a1 and a child a2 changing one training variable."""
    exp = root / "exp"
    for name in ("pool", "ood_monitor", "ood_primary", "id"):
        _jsonl(exp / "data" / f"{name}.jsonl", PROBLEMS)
    trainer_line = f"trainer: {{name: {trainer}" + (f", version: \"{version}\"" if version else "") + "}"
    (exp / "a1").mkdir(parents=True)
    (exp / "a1" / "attempt.yaml").write_text(
        "id: a1\n" + trainer_line + "\n"
        "recipe: {advantage_estimator: dr_grpo, eps_clip: 0.2, n_samples_per_prompt: 4, rollout_batch_size: 4, train_batch_size: 16,\n"
        "         micro_train_batch_size: 4, actor_learning_rate: 1.0e-4, num_episodes: 1, seed: 42,\n"
        "         pretrain: models/tiny, eval_steps: 5, save_steps: 5}\n"
        "datasets:\n"
        "  pool: {path: data/pool.jsonl}\n"
        "  ood_monitor: {path: data/ood_monitor.jsonl}\n"
        "  ood_primary: {path: data/ood_primary.jsonl}\n"
        "  id: {path: data/id.jsonl}\n"
        "eval: {engine: local, max_tokens: 16}\n"
        "checkpoints: {mid: 10}\n")
    (exp / "a2").mkdir()
    (exp / "a2" / "attempt.yaml").write_text("id: a2\nparent: a1\nchange: {eps_clip: 0.1}\nrecipe: {eps_clip: 0.1}\n")
    for a in ("a1", "a2"):
        (exp / a / "plan.json").write_text(json.dumps({
            "checks": [{"id": "step_count", "severity": "info", "passed": True, "message": "ok"}],
            "lr_table": [{"global_step": s, "actor_lr_logged": 1e-4 * min(1.0, s / 2)} for s in range(1, 21)]}))
    return exp


def fill_attempt(attempt: Path) -> None:
    """Metrics, eval records, selection, decision, guards: what the later stages write."""
    rows = []
    for s in range(1, 21):
        row = {"global_step": s, "policy_loss": 0.01, "actor_lr": 1e-4 * min(1.0, s / 2), "reward": 0.4 + s / 100,
               "grad_norm": 60.0 if s == 7 else 3.0, "ratio_max": 1.5, "log_ratio_abs_p99": 0.2, "step_time_s": 1.0}
        if s % 5 == 0:
            row["monitor_acc"] = [0.40, 0.45, 0.50, 0.48][s // 5 - 1]
        rows.append(row)
    _jsonl(attempt / "metrics.jsonl", rows)
    # baseline right on 0..9; step 20 right on 0..7 and 10..15 -> b=2 (problems 8, 9), c=6
    for name, right in (("baseline_sota", range(10)), ("global_step20", [*range(8), *range(10, 16)]),
                        ("global_step10", range(9)), ("global_step15", range(11))):
        _jsonl(attempt / "eval" / name / "ood_primary.jsonl",
               [{"problem_hash": p["problem_hash"], "gold": p["answer"], "correct": int(i in right)}
                for i, p in enumerate(PROBLEMS)])
    (attempt / "eval" / "selection.json").write_text(json.dumps(
        {"final": 20, "mid": 10, "best_by_monitor": 15, "checkpoints": ["global_step20", "global_step10",
                                                                         "global_step15"], "notes": []}))
    (attempt / "decision.json").write_text(json.dumps({
        "decision": "CONTINUE", "reason": "no gate passes", "sop_version": "v2.1-final", "sop_sha256": "ab" * 32,
        "baseline": "baseline_sota", "primary_set": "ood_primary", "primary_checkpoint": "global_step20",
        "decide_on": "per_checkpoint",
        "gates": {"gate_1a": {"passed": False, "rule": "delta >= +2.0pp AND (p < 0.10 OR CI low > -0.5pp)",
                              "per_checkpoint": {"global_step20": {
                                  "name": "gate_1a", "passed": False,
                                  "numbers": {"delta_pp": 20.0, "p": 0.2890625, "ci_low_pp": -5.0, "delta_ok": True,
                                              "p_ok": False, "ci_ok": False}, "notes": [], "details": []}}},
                  "gate_1b": {"passed": False, "rule": "delta >= +3.0pp AND p < 0.05"}},
        "checkpoints": {"global_step20": {"delta_pp": 20.0, "b": 2, "c": 6, "mcnemar_p": 0.2890625,
                                          "ci_pp": [-5.0, 45.0], "holm_p": 0.8671875}},
        "fault_tree": {}}))
    (attempt / "guards").mkdir(exist_ok=True)
    (attempt / "guards" / "parser_audit.json").write_text(json.dumps(
        {"name": "parser_audit", "passed": True, "rule": "mis-parse rate <= 5% of 50 reviewed", "numbers": {},
         "notes": [], "details": []}))


@pytest.fixture
def attempt(tmp_path):
    exp = make_experiment(tmp_path)
    fill_attempt(exp / "a2")
    return exp / "a2"


def test_report_has_all_eight_deliverables_and_plots(attempt, tmp_path):
    from rlexp.reporting import DELIVERABLES
    from rlexp.stages.report import write_report

    path = write_report(attempt, tmp_path / "reports")
    assert path == tmp_path / "reports" / "exp" / "a2.md"
    text = path.read_text()
    for heading in DELIVERABLES:
        assert f"## {heading}" in text
    assert "**Decision: CONTINUE**" in text
    assert "| eps_clip | 0.2 | 0.1 | training |" in text  # recipe diff from the parent
    assert sha256_file(attempt.parent / "data" / "pool.jsonl") in text
    assert "| global_step20 | 20 | 2/6 | 0.2891 | [-5, 45] | 0.8672 |" in text
    assert "50.0% (n=20)" in text and "70.0% (n=20)" in text  # baseline 10/20, step 20 14/20
    assert "global_step15 (best by monitor)" in text
    assert "spikes (grad norm > 50): **1** of 20 steps (steps 7)" in text
    assert "PASS — mis-parse rate" in text
    # the gate as the numbers that decided it, beside the SOP v2.1 thresholds (+2.0pp, p < 0.1, CI low > -0.5pp)
    assert ("| Gate-1a · step 20 (final) | ✗ | Δ +20.0 ≥ +2.0 ✓ AND (p 0.289 < 0.1 ✗ OR CI low -5.0 > -0.5 ✗) |"
            in text)
    lines = text.splitlines()
    assert lines[2] == "**Decision: CONTINUE** — no gate passes."
    assert lines[4].startswith("**Next:** change one variable from a1: `write exp/<next>/attempt.yaml")
    for name in ("lr", "monitor", "grad_norm", "discordant"):
        png = tmp_path / "reports" / "exp" / f"a2_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(a2_{name}.png)" in text
    assert len(text.splitlines()) < 110  # one page


def test_in_run_gates_and_guardrails_read_the_one_verdict_schema(attempt, tmp_path):
    from rlexp.experiment.verdicts import write_verdict
    from rlexp.protocol.verdict import Verdict
    from rlexp.reporting import DELIVERABLES
    from rlexp.stages.report import write_report
    from rlexp.training import monitor

    # in-run gates as `rlexp launch` writes them: g3 decided, g5 still pending
    rows = [{"global_step": s, "step_time_s": 300.0 if s == 1 else 100.0, "reward": 0.5, "grad_norm": 2.0}
            for s in range(1, 11)]
    write_verdict(attempt, monitor.g3_smoke(rows))
    write_verdict(attempt, monitor.g5_runtime(rows[:9], None))
    write_verdict(attempt, Verdict("g0", False, "training input_ids == eval input_ids on 5 samples",
                                        {"samples": 5, "mismatches": 5}, ("the suffix differs",)))
    (attempt / "guards" / "g4_samples.meta.json").write_text(json.dumps({"engine": "local"}))  # not a verdict
    text = write_report(attempt, tmp_path / "reports").read_text()
    stability, rest = text.split("## " + DELIVERABLES[6])
    assert "| g3 | PASS | no crash; max step time 1.00x the median |" in stability
    assert "| g5 | pending | step 10 not logged yet |" in stability
    guardrails = rest.split("Guardrails:")[1]
    assert "| g0 | FAIL | training input_ids == eval input_ids on 5 samples; the suffix differs |" in guardrails
    assert "g3" not in guardrails and "g5" not in guardrails and "g4_samples" not in text
    assert "PASS — mis-parse rate" in rest  # parser_audit in its own section, not the table
    assert "| parser_audit |" not in guardrails
    (attempt / "guards" / "g0.json").write_text(json.dumps({"name": "g0", "passed": "yes", "rule": "r",
                                                            "numbers": {}, "notes": [], "details": []}))
    with pytest.raises(InputError, match="g0.json: passed"):
        write_report(attempt, tmp_path / "reports")


def test_missing_pieces_render_as_not_available(tmp_path):
    from rlexp.stages.report import write_report

    exp = make_experiment(tmp_path)
    text = write_report(exp / "a1", tmp_path / "reports").read_text()
    assert "No decision yet: `decision.json` is missing" in text
    assert "not available (no metrics.jsonl)" in text and "not available (no eval records)" in text
    assert "No parent: this attempt is a root." in text
    assert not list((tmp_path / "reports" / "exp").glob("a1_grad_norm.png"))


def test_bad_eval_record_is_one_line_error_and_nothing_written(attempt, tmp_path):
    from rlexp.stages.report import write_report

    bad = attempt / "eval" / "global_step20" / "ood_primary.jsonl"
    bad.write_text(bad.read_text().replace('"correct": 1', '"correct": "yes"', 1))
    with pytest.raises(InputError) as info:
        write_report(attempt, tmp_path / "reports")
    assert info.value.field.endswith(": correct")
    assert not (tmp_path / "reports" / "exp" / "a2.md").exists()


def test_report_command_writes_and_logs(attempt, tmp_path, monkeypatch):
    from rlexp.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["report", str(attempt), "--tracking-uri", "off", "--json"]) == 0
    assert (tmp_path / "reports" / "exp" / "a2.md").exists()


def test_status_table_shows_every_attempt(attempt, capsys):
    from rlexp.cli import main

    (attempt / "launch").mkdir()
    dead = 2 ** 22 + 12345  # above Linux's pid_max: no such process
    (attempt / "launch" / "state.json").write_text(json.dumps({"state": "running", "pid": dead,
                                                               "launcher_pid": dead}))
    assert main(["status", str(attempt.parent), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["attempt"]: r for r in doc["attempts"]}
    assert rows["a1"]["state"] == "planned" and rows["a1"]["steps"] == 0 and rows["a1"]["decision"] is None
    assert rows["a2"]["state"] == "lost" and rows["a2"]["steps"] == 20 and rows["a2"]["decision"] == "CONTINUE"
    assert main(["status", str(attempt.parent)]) == 0
    out = capsys.readouterr().out
    assert "a1" in out and "CONTINUE" in out
    # a --no-follow launch has no launcher to record the end: "exited", not "lost"
    (attempt / "launch" / "state.json").write_text(json.dumps({"state": "running", "pid": dead,
                                                               "launcher_pid": None}))
    assert main(["status", str(attempt.parent), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attempts"][1]["state"] == "exited"
    assert main(["status", str(attempt.parent / "nope")]) == 2


def test_report_shows_exact_command_and_flags_changed_data(attempt, tmp_path):
    from rlexp.stages.report import write_report

    (attempt / "launch").mkdir()
    (attempt / "launch" / "argv.json").write_text(json.dumps(
        {"argv": ["/usr/bin/python3", "-m", "openrlhf.cli.train_ppo_ray", "--pretrain", "a b;c",
                  "--save_path", str(attempt / "checkpoints")], "backend": "process"}))
    (attempt / "launch" / "provenance.json").write_text(json.dumps(
        {"datasets": {"pool": {"sha256": "0" * 64}}, "git": {"sha": "f" * 40, "dirty": True}}))
    text = write_report(attempt, tmp_path / "reports").read_text()
    assert "<details><summary>exact command (process backend; paths relative to the experiment)</summary>" in text
    # machine paths rendered relative to the experiment (the interpreter by its name)
    assert "python3 -m openrlhf.cli.train_ppo_ray --pretrain 'a b;c' --save_path a2/checkpoints" in text
    assert str(tmp_path) not in text and "/usr/bin" not in text
    assert f"| pool | `{'0' * 64}` ⚠ file changed since launch |" in text
    assert "· git ffffffffffff (dirty)" in text


def test_status_and_report_scrub_logs_of_runs_that_ended(attempt, tmp_path, monkeypatch, capsys):
    """A --no-follow run has nobody to scrub launch/stdout.log when it ends: status and report do,
    once state.json is no longer running or its trainer pid is dead; a live trainer's log is untouched."""
    import os

    from rlexp.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_s3cr3tvalue")
    monkeypatch.chdir(tmp_path)
    launch = attempt / "launch"
    launch.mkdir()
    log, state = launch / "stdout.log", launch / "state.json"
    dead = 2 ** 22 + 12345  # above Linux's pid_max: no such process
    leaked = "env HF_TOKEN=hf_s3cr3tvalue\nGlobal step 1: {}\n"

    def status_run():
        assert main(["status", str(attempt.parent), "--json"]) == 0
        capsys.readouterr()

    log.write_text(leaked)
    state.write_text(json.dumps({"state": "running", "pid": os.getpid(), "launcher_pid": None}))
    status_run()
    assert log.read_text() == leaked  # the trainer still writes it
    state.write_text(json.dumps({"state": "running", "pid": dead, "launcher_pid": None}))
    status_run()
    assert log.read_text() == "env HF_TOKEN=<redacted>\nGlobal step 1: {}\n"
    log.write_text(leaked)
    state.write_text(json.dumps({"state": "finished", "pid": os.getpid(), "exit_code": 0}))
    status_run()
    assert "hf_s3cr3tvalue" not in log.read_text()
    log.write_text(leaked)
    state.write_text(json.dumps({"state": "running", "pid": dead, "launcher_pid": None}))
    assert main(["report", str(attempt / "attempt.yaml"), "--tracking-uri", "off", "--json"]) == 0
    assert log.read_text() == "env HF_TOKEN=<redacted>\nGlobal step 1: {}\n"


def test_status_names_a_broken_spec_instead_of_hiding_it(tmp_path, capsys):
    from rlexp.cli import main

    attempt = tmp_path / "exp" / "a1"
    attempt.mkdir(parents=True)
    (attempt / "attempt.yaml").write_text("id: a1\ntrainer: {name: openrlhf, version: '0.9.3'}\n"
                                          "recipe: {eps_clipp: 0.1}\n")
    assert main(["status", str(attempt.parent), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["attempts"][0]
    assert row["state"] == "not launched"
    assert "recipe.eps_clipp" in row["reason"] and "eps_clip" in row["reason"]


def test_report_prints_what_each_comparison_could_see(attempt, tmp_path):
    from rlexp.stages.report import write_report

    decision = json.loads((attempt / "decision.json").read_text())
    decision["checkpoints"]["global_step20"].update(n=1000, b=61, c=57)  # discordance 11.8%
    (attempt / "decision.json").write_text(json.dumps(decision))
    text = write_report(attempt, tmp_path / "reports").read_text()
    line = next(x for x in text.splitlines() if x.startswith("- global_step20: n 1000"))
    # the exact McNemar MDE, 3.12pp (Miller's z approximation: 3.04; tests/test_gate_power.py checks the exact
    # power against an independent sum); an independent simulation: a true +3pp passes Gate-1b ~52%, 80% needs
    # ~3.87pp
    assert "MDE 3.12 pp (80% power of the exact McNemar test)" in line
    assert "passes Gate-1b 52% of the time for this one checkpoint" in line and "80% needs 3.8" in line


def test_plan_prints_the_parent_diff_as_a_person_reads_it(attempt, capsys):
    from rlexp.cli import main

    main(["plan", str(attempt)])
    out = capsys.readouterr().out
    assert "Changed from parent a1" in out
    row = next(line for line in out.splitlines() if "eps_clip" in line)
    assert "0.2" in row and "0.1" in row and "training" in row


def test_report_html_inlines_the_plots_for_mlflow(attempt, tmp_path):
    from rlexp.reporting import report_html
    from rlexp.stages.report import write_report

    path = write_report(attempt, tmp_path / "reports")
    html = report_html(path)
    assert "<table>" in html and "<strong>Decision: CONTINUE</strong>" in html
    assert html.count("data:image/png;base64,") >= 4 and "(a2_lr.png)" not in html


def test_guard_numbers_print_as_a_person_reads_them():
    from rlexp.commands.guard import readable

    assert readable(None) == "—" and readable(True) == "yes" and readable(["a", "b"]) == "a, b"
    assert readable({"misparse_rate": 0.02, "cases": [1, 2]}) == "misparse rate 0.02; cases 1, 2"
    assert readable(0.123456) == "0.1235" and readable([]) == "none"


def _verdict_family(delta: float, p: float, ci_low: float, passed: bool) -> dict:
    numbers = {"delta_pp": delta, "p": p, "ci_low_pp": ci_low, "delta_ok": delta >= 2.0, "p_ok": p < 0.1,
               "ci_ok": ci_low > -0.5}
    return {"passed": passed, "rule": "Gate-1a: ...", "per_checkpoint": {
        "global_step20": {"name": "gate_1a", "passed": passed, "numbers": numbers, "notes": [], "details": []}}}


def test_report_verdict_first_with_named_baselines_family_and_no_machine_paths(tmp_path):
    """The acceptance shape on a hand-made family: a1 (root), a1s2 (its seed sibling, the SOTA pin),
    a2 (a1's one-variable child), decision files in the decide stage's format."""
    import re
    import shutil

    from rlexp.stages.report import write_report

    exp = make_experiment(tmp_path)
    fill_attempt(exp / "a1")
    fill_attempt(exp / "a2")
    shutil.copytree(exp / "a1", exp / "a1s2")
    (exp / "a1s2" / "attempt.yaml").write_text((exp / "a1" / "attempt.yaml").read_text()
                                               .replace("id: a1", "id: a1s2").replace("seed: 42", "seed: 43"))
    # a2's step 20 gets problems 8 and 9 right as well: against its parent a1 (same roles) b=0, c=2
    a2_final = exp / "a2" / "eval" / "global_step20" / "ood_primary.jsonl"
    _jsonl(a2_final, [{"problem_hash": p["problem_hash"], "gold": p["answer"], "correct": int(i < 16)}
                      for i, p in enumerate(PROBLEMS)])
    # Baseline-SOTA records made from a1s2's step 20 (the meta names the adapter they came from)
    (exp / "a2" / "eval" / "baseline_sota" / "ood_primary.meta.json").write_text(json.dumps(
        {"adapter_path": str(exp / "a1s2" / "checkpoints" / "global_step20_hf")}))
    s0 = {"ood_primary": {"n": 20, "acc_base": 0.3, "acc_new": 0.8, "delta_pp": 50.0, "b": 0, "c": 10,
                          "mcnemar_p": 0.002, "ci_pp": [30.0, 70.0]}}
    for attempt, seed, decision, delta in (("a1", 42, "CONFIRM", 20.0), ("a1s2", 43, "STOP-1", 20.0),
                                           ("a2", 42, "CONFIRM", 30.0)):
        doc = json.loads((exp / attempt / "decision.json").read_text())
        doc.update(decision=decision, reason="Gate-1a passes: run a confirmation seed (same pool, same config)",
                   recipe_sha256="r" * 64 if attempt != "a2" else "s" * 64, pool_sha256="p" * 64, seed=seed,
                   notes=[f"selection under {exp}/a1/eval"])
        doc["checkpoints"]["global_step20"].update(delta_pp=delta, acc_base=0.5, acc_new=0.5 + delta / 100,
                                                   vs={"baseline_s0": s0})
        doc["gates"]["gate_1a"] = _verdict_family(delta, 0.0289, 5.0, True)
        doc["gates"]["gray_zone"] = {"name": "gray_zone", "passed": True, "rule": "gray zone",
                                     "numbers": {"delta_pp": 2.5}, "notes": [], "details": []}
        doc["fault_tree"] = {"class": "A) reward sparsity"}
        (exp / attempt / "decision.json").write_text(json.dumps(doc))

    text = write_report(exp / "a2", tmp_path / "reports").read_text()
    head = text.splitlines()[:10]
    assert "**Decision: CONFIRM** — Gate-1a passes: run a confirmation seed (same pool, same config)." in head
    assert any(line.startswith("**Next:** run a confirmation seed") and "rlexp plan exp/a2s2" in line
               for line in head)
    deltas = text.split("## Δ against the baselines")[1].split("\n## ")[0]
    # SOTA named by the records' own adapter; parent at the same role: 70% -> 80%, b=0, c=2 (hand count)
    assert "| step 20 (final) | SOTA = a1s2 step 20 (50.0%) | 50.0% → 80.0% | +30.0 | 2/6 |" in deltas
    assert "| step 20 (final) | parent a1 step 20 | 70.0% → 80.0% | +10.0 | 0/2 | 0.500 |" in deltas
    assert "| step 20 (final) | S0 (base model) | 30.0% → 80.0% | +50.0 | 0/10 | 0.002 | [+30.0, +70.0] |" in deltas
    gates = text.split("## Gates")[1].split("\n## ")[0]
    assert "| Gate-1a · step 20 (final) | ✓ | Δ +30.0 ≥ +2.0 ✓ AND (p 0.029 < 0.1 ✓ OR CI low +5.0 > -0.5 ✓) |" in gates
    # the gray zone never contradicts a passing gate; no fault tree on CONFIRM
    assert "| gray zone | n/a | Δ +2.5 in [+1.0, +3.0); applies only when no gate passes (decision CONFIRM) |" in gates
    assert "Fault tree" not in text
    assert str(tmp_path) not in text and not re.search(r"(^|[\s`'(=])/(tmp|work|home|root)/", text)

    text = write_report(exp / "a1", tmp_path / "reports").read_text()
    family = text.split("## Family")[1].split("\n## ")[0]
    assert "| a1 | this attempt |" in family and "| [a1s2](a1s2.md) | seed sibling |" in family
    assert "| [a2](a2.md) | child | eps_clip=0.1 |" in family
    assert "No parent: this attempt is a root; seed sibling of a1s2 (same recipe, another seed)." in text
    assert (tmp_path / "reports" / "exp" / "a1_family.png").exists()


def test_baseline_sota_is_named_by_its_adapter_folder():
    """The records' meta names the adapter Baseline-SOTA was loaded from: ``<attempt>/checkpoints/
    global_step{N}_hf`` names checkpoint global_step{N} of that attempt; another folder there keeps its name."""
    from rlexp.experiment.layout import Checkpoint
    from rlexp.stages.report import _checkpoint_of

    assert _checkpoint_of("exp/a1s2/checkpoints/global_step20_hf") == {"attempt": "a1s2", "checkpoint": "global_step20"}
    assert _checkpoint_of("/m/run/checkpoints/checkpoint-30") == {"attempt": "run", "checkpoint": "checkpoint-30"}
    assert _checkpoint_of("/m/tiny-base") is None and _checkpoint_of(None) is None
    assert Checkpoint.of_adapter(Path("x/global_step7_hf")) == Checkpoint(7, path=Path("x/global_step7_hf"))
    assert Checkpoint.of_adapter("x/global_step7") is None and Checkpoint.of_adapter("checkpoint-7") is None
