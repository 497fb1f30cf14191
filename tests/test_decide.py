"""`rlexp decide` end to end on record files built here (no model, no eval code involved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.experiment.ledger import read_ledger, read_sota
from rlexp.stages.decide import decide

NOW = "2026-01-01T00:00:00Z"


def decide_attempt(path, **kwargs):
    """The decide stage's record (what decision.json holds)."""
    return decide(path, **kwargs).to_dict()


def outcome_vectors(n: int, base_correct: int, b: int, c: int) -> tuple[list[int], list[int]]:
    n11 = base_correct - b
    n00 = n - n11 - b - c
    assert n11 >= 0 and n00 >= 0
    return [1] * n11 + [1] * b + [0] * c + [0] * n00, [1] * n11 + [0] * b + [1] * c + [0] * n00


def write_records(attempt_dir: Path, checkpoint: str, role: str, ys: list[int], prefix: str = "") -> Path:
    path = attempt_dir / "eval" / checkpoint / f"{role}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"problem_hash": f"{prefix}{role}-{i:05d}", "correct": y, "output": f"o{y}",
                         "parse_method": "boxed"}) for i, y in enumerate(ys)]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_attempt(exp: Path, attempt_id: str, parent: str | None, recipe: dict, *, decide_steps=None,
                 pool: str = "data/pool.jsonl") -> Path:
    d = exp / attempt_id
    d.mkdir(parents=True, exist_ok=True)
    spec = {"id": attempt_id, "trainer": {"name": "local"}, "recipe": recipe,
            "datasets": {"pool": {"path": pool}}, "checkpoints": {"mid": 100}}
    if parent:
        spec = {"id": attempt_id, "parent": parent, "recipe": recipe}
    import yaml

    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    if decide_steps:
        sel = {"final": decide_steps[0], "mid": decide_steps[1] if len(decide_steps) > 1 else None,
               "best_by_monitor": decide_steps[2] if len(decide_steps) > 2 else None}
        (d / "eval").mkdir(exist_ok=True)
        (d / "eval" / "selection.json").write_text(json.dumps(sel))
    return d


def evaluated(d: Path, ood: dict[str, tuple[int, int]], *, s0_ood: int = 700, id_bc=(10, 10), n: int = 1000,
              s0_id: int = 120) -> None:
    """S0 and each checkpoint: ood {checkpoint: (b, c)} vs S0; ID with id_bc for every checkpoint."""
    base, _ = outcome_vectors(n, s0_ood, 0, 0)
    write_records(d, "baseline_s0", "ood_primary", base)
    base_id, new_id = outcome_vectors(200, s0_id, *id_bc)
    write_records(d, "baseline_s0", "id", base_id)
    for ck, (b, c) in ood.items():
        write_records(d, ck, "ood_primary", outcome_vectors(n, s0_ood, b, c)[1])
        write_records(d, ck, "id", new_id)


@pytest.fixture
def exp(tmp_path) -> Path:
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    (exp / "data" / "pool.jsonl").write_text('{"problem_hash": "p1", "prompt": "1+1", "answer": "2"}\n')
    make_attempt(exp, "a29", None, {"pretrain": "models/tiny", "eps_clip": 0.2, "seed": 42})
    return exp


def test_seed_history_replay_no_gate_passes_then_stop_3a(exp):
    # A29B (eps_clip 0.2 -> 0.1) and A30 (micro batch 1 -> 2), same pool, both flat vs Baseline-S0 (docs/plan.md)
    a29b = make_attempt(exp, "a29b", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(a29b, {"global_step200": (60, 59)}, s0_ood=738, s0_id=103, id_bc=(11, 10))
    first = decide_attempt(a29b, now=NOW)
    assert first["decision"] == "CONTINUE" and first["reason"].startswith("no gate passes")
    assert not first["gates"]["stop_3a"]["passed"]  # its parent a29 was never decided

    a30 = make_attempt(exp, "a30", "a29b", {"micro_train_batch_size": 2}, decide_steps=(200, 100, 130))
    evaluated(a30, {"global_step200": (60, 58), "global_step100": (62, 60), "global_step130": (61, 57)},
              s0_ood=738, s0_id=103, id_bc=(11, 10))
    res = decide_attempt(a30, now=NOW)
    g = res["gates"]
    for gate in ("gate_1a", "gate_1b", "gate_1a_holm", "gate_1b_holm", "gate_2"):
        assert g[gate]["passed"] is False, gate
    assert res["decision"] == "STOP-3a"
    ck = res["checkpoints"]["global_step130"]
    assert (ck["b"], ck["c"], ck["delta_pp"]) == (61, 57, pytest.approx(-0.4))
    assert round(ck["mcnemar_p"], 4) == 0.7826
    assert ck["ci_pp"][0] == pytest.approx(-2.5, abs=0.15) and ck["ci_pp"][1] == pytest.approx(1.7, abs=0.15)
    assert ck["holm_p"] == pytest.approx(1.0)
    assert ck["vs"]["baseline_s0"]["id"]["b"] == 11 and ck["vs"]["baseline_s0"]["id"]["c"] == 10
    assert res["baseline"] == "baseline_s0" and any("no baseline_sota" in n for n in res["notes"])
    assert res["sop_version"] == "v2.1-final" and len(res["sop_sha256"]) == 64
    assert set(res["fault_tree"]["classes"]) == {"A", "B", "C", "D"}
    assert "pass_at_1" in res["fault_tree"]["classes"]["A"]["missing"]
    assert res["changed"] == ["micro_train_batch_size"]
    # files: decision.json, paired records per baseline x checkpoint x set, ledger, no pin
    on_disk = json.loads((a30 / "decision.json").read_text())
    assert on_disk["decision"] == "STOP-3a"
    paired = sorted(p.name for p in (a30 / "eval" / "paired").iterdir())
    assert "baseline_s0__global_step130__ood_primary.jsonl" in paired and len(paired) == 6
    line = json.loads((a30 / "eval" / "paired" / "baseline_s0__global_step130__ood_primary.jsonl")
                      .read_text().splitlines()[0])
    assert set(line) == {"problem_hash", "y_baseline", "y_new", "output_baseline", "output_new"}
    ledger = read_ledger(exp)
    assert [e.attempt for e in ledger] == ["a29b", "a30"]
    assert ledger[1].checkpoint == "global_step200" and ledger[1].delta_pp == pytest.approx(-0.2)
    assert ledger[0].pool_sha256 == ledger[1].pool_sha256 is not None
    assert read_sota(exp) is None
    # deciding again with the same inputs appends nothing
    decide_attempt(a30, now="2026-01-02T00:00:00Z")
    assert len(read_ledger(exp)) == 2


def test_confirm_then_second_seed_stop_1_moves_the_pin(exp, capsys):
    s1 = make_attempt(exp, "lr1", "a29", {"actor_learning_rate": 2e-6, "seed": 1}, decide_steps=(200, 100))
    evaluated(s1, {"global_step200": (40, 80), "global_step100": (55, 60)})
    assert main(["decide", str(s1), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["decision"] == "CONFIRM"
    assert first["gates"]["gate_1b"]["passed"] and not first["gates"]["gate_2"]["passed"]
    assert first["checkpoints"]["global_step200"]["delta_pp"] == pytest.approx(4.0)
    assert read_sota(exp) is None

    s2 = make_attempt(exp, "lr2", "a29", {"actor_learning_rate": 2e-6, "seed": 2}, decide_steps=(200, 100))
    evaluated(s2, {"global_step200": (45, 80), "global_step100": (50, 60)}, id_bc=(12, 8))
    res = decide_attempt(s2, now=NOW)
    assert res["decision"] == "STOP-1"
    g2 = res["gates"]["gate_2"]
    n2 = g2["numbers"]
    assert g2["passed"] and n2["siblings"] == ["lr1"]
    assert n2["seed_deltas_pp"] == pytest.approx([3.5, 4.0]) and n2["mean_delta_pp"] == pytest.approx(3.75)
    assert n2["id_guardrail"]["numbers"]["id_delta_pp"] == pytest.approx(-2.0) and n2["gold"] is False
    pin = read_sota(exp)
    assert pin is not None and (pin.attempt, pin.checkpoint) == ("lr2", "global_step200")
    assert pin.path == "lr2/checkpoints/global_step200_hf"
    assert res["sota_moved"] is True
    # re-deciding the pin holder changes nothing: same decision, no new ledger line, pin untouched
    again = decide_attempt(s2, now="2026-02-02T00:00:00Z")
    assert again["decision"] == "STOP-1" and again["sota_moved"] is False
    assert read_sota(exp) == pin and len(read_ledger(exp)) == 2


def test_id_regression_blocks_stop_1(exp):
    s1 = make_attempt(exp, "lr1", "a29", {"actor_learning_rate": 2e-6, "seed": 1}, decide_steps=(200,))
    evaluated(s1, {"global_step200": (40, 80)})
    decide_attempt(s1, now=NOW)
    s2 = make_attempt(exp, "lr2", "a29", {"actor_learning_rate": 2e-6, "seed": 2}, decide_steps=(200,))
    evaluated(s2, {"global_step200": (40, 80)}, id_bc=(14, 7))  # ID -3.5pp vs S0
    res = decide_attempt(s2, now=NOW)
    assert res["gates"]["gate_1b"]["passed"] and not res["gates"]["gate_2"]["passed"]
    assert res["decision"] == "CONTINUE" and read_sota(exp) is None


def test_sota_pin_makes_sota_the_decision_baseline(exp):
    (exp / "sota.json").write_text(json.dumps({"attempt": "a29", "checkpoint": "global_step200",
                                               "path": "a29/checkpoints/global_step200_hf", "decided_at": NOW}))
    d = make_attempt(exp, "k1", "a29", {"eps_clip": 0.15}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    with pytest.raises(InputError, match="SOTA is pinned"):
        decide_attempt(d, now=NOW)
    # SOTA is 2pp better than S0; the checkpoint is +4pp vs S0 but only +2pp vs SOTA
    sota, _ = outcome_vectors(1000, 720, 0, 0)
    write_records(d, "baseline_sota", "ood_primary", sota)
    res = decide_attempt(d, now=NOW)
    assert res["baseline"] == "baseline_sota"
    vs = res["checkpoints"]["global_step200"]["vs"]
    assert vs["baseline_s0"]["ood_primary"]["delta_pp"] == pytest.approx(4.0)
    assert res["checkpoints"]["global_step200"]["delta_pp"] == pytest.approx(vs["baseline_sota"]["ood_primary"]
                                                                               ["delta_pp"])
    assert res["checkpoints"]["global_step200"]["delta_pp"] == pytest.approx(2.0)
    assert not res["gates"]["gate_1b"]["passed"]


def audit_verdict(rate, passed):
    """guards/parser_audit.json as `rlexp guard audit` writes it (rlexp.stages.guard.Verdict)."""
    return {"name": "parser_audit", "passed": passed, "rule": "mis-parse rate <= 5%", "notes": [], "details": [],
            "numbers": {"reviewed": 50, "mis_parse_rate": rate, "max_misparse_rate": 0.05}}


@pytest.mark.parametrize(("rate", "decision"), [(0.085, "DEBUG"), (0.05, "CONFIRM"), (0.051, "DEBUG")])
def test_parser_audit_blocks(exp, rate, decision):
    d = make_attempt(exp, "p1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    (d / "guards").mkdir()
    (d / "guards" / "parser_audit.json").write_text(json.dumps(audit_verdict(rate, passed=rate <= 0.05)))
    res = decide_attempt(d, now=NOW)
    assert res["decision"] == decision
    assert res["gates"]["parser_audit"]["passed"] is (decision != "DEBUG")


def test_parser_audit_guard_verdict_form_and_g4(exp):
    # the shape rlexp.stages.guard writes: {name, passed, rule, numbers: {...}, notes, details}
    d = make_attempt(exp, "p1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    (d / "guards").mkdir()
    audit = {"name": "parser_audit", "passed": False, "rule": "r", "notes": [], "details": [],
             "numbers": {"reviewed": 118, "misparse": 10, "mis_parse_rate": 10 / 118}}
    (d / "guards" / "parser_audit.json").write_text(json.dumps(audit))
    g4 = {"name": "g4", "passed": True, "rule": "r", "notes": [], "details": [],
          "numbers": {"problems": 262, "k": 8, "pass_at_8": 0.31}}
    (d / "guards" / "g4.json").write_text(json.dumps(g4))
    res = decide_attempt(d, now=NOW)
    assert res["decision"] == "DEBUG" and res["gates"]["parser_audit"]["numbers"]["misparse_rate"] == pytest.approx(10 / 118)
    a = res["fault_tree"]["classes"]["A"]
    assert a["indicated"] is True and a["missing"] == [] and "pass@8" in a["evidence"]


def test_parser_audit_reads_only_the_guard_verdict(exp, capsys):
    d = make_attempt(exp, "p1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    (d / "guards").mkdir()
    path = d / "guards" / "parser_audit.json"
    # the audit's own verdict failed (judged under a stricter SOP): decide does not overrule it
    path.write_text(json.dumps(audit_verdict(0.02, passed=False)))
    res = decide_attempt(d, now=NOW)
    assert res["decision"] == "DEBUG" and "parser audit: failed" in res["reason"]
    assert res["gates"]["parser_audit"]["passed"] is False and res["gates"]["parser_audit"]["numbers"]["audit_passed"] is False
    # other layouts (a bare rate, counts, a verdict word) are not read: one line naming file and key
    for doc, key in (({"misparse_rate": 0.02}, "passed"),
                     ({"misparsed": 10, "audited": 118}, "passed"),
                     ({"verdict": "ok"}, "passed"),
                     ({**audit_verdict(0.02, True), "numbers": {"misparse_rate": 0.02}}, "numbers.mis_parse_rate"),
                     ({**audit_verdict(0.02, True), "numbers": {"mis_parse_rate": 1.5}}, "numbers.mis_parse_rate"),
                     ({**audit_verdict(0.02, True), "numbers": {"mis_parse_rate": "2%"}}, "numbers.mis_parse_rate"),
                     ({**audit_verdict(0.02, None)}, "passed")):
        path.write_text(json.dumps(doc))
        with pytest.raises(InputError, match=f"parser_audit.json: {key}") as err:
            decide_attempt(d, now=NOW)
        assert "\n" not in str(err.value)
        capsys.readouterr()
        assert main(["decide", str(d)]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    path.write_text(json.dumps([0.02]))
    with pytest.raises(InputError, match="parser_audit.json: expected a JSON object"):
        decide_attempt(d, now=NOW)


def nothing_written(exp: Path, d: Path) -> bool:
    return not (d / "decision.json").exists() and not (d / "eval" / "paired").exists() \
        and not (exp / "ledger.jsonl").exists()


def test_bad_inputs_exit_2_and_write_nothing(exp, capsys):
    d = make_attempt(exp, "bad", "a29", {"eps_clip": 0.1}, decide_steps=(200, 100))
    evaluated(d, {"global_step200": (40, 80)})
    # the pre-registered mid checkpoint was never evaluated
    assert main(["decide", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "global_step100" in err and "pre-registered" in err
    assert nothing_written(exp, d)
    # mismatched problem sets
    write_records(d, "global_step100", "ood_primary", [1] * 999)
    write_records(d, "global_step100", "id", [1] * 200)
    assert main(["decide", str(d)]) == 2
    assert "problem sets differ" in capsys.readouterr().err and nothing_written(exp, d)
    # non-0/1 correctness
    write_records(d, "global_step100", "ood_primary", [1] * 999 + [2])
    assert main(["decide", str(d)]) == 2
    assert "correct" in capsys.readouterr().err and nothing_written(exp, d)
    # missing selection / missing baseline
    (d / "eval" / "selection.json").unlink()
    assert main(["decide", str(d)]) == 2
    assert "selection.json" in capsys.readouterr().err
    other = make_attempt(exp, "nos0", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    write_records(other, "global_step200", "ood_primary", [1] * 10)
    assert main(["decide", str(other)]) == 2
    assert "Baseline-S0" in capsys.readouterr().err and nothing_written(exp, other)


def test_human_summary(exp, capsys):
    d = make_attempt(exp, "h1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    assert main(["decide", str(d / "attempt.yaml")]) == 0
    out = capsys.readouterr().out
    assert "decision: CONFIRM" in out and "global_step200" in out


def test_fault_tree_reads_metrics_diagnostics(exp):
    # A30-like run: train reward rises, the monitor peaks at step 130 of 200, the LR decays to 0.1 x peak
    d = make_attempt(exp, "m1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (60, 58)})
    rows = []
    for step in range(10, 201, 10):
        lr = 1.0 if step <= 20 else 1.0 - 0.9 * (step - 20) / 180
        row = {"global_step": step, "reward": 0.5 + step / 1000, "actor_lr": lr, "log_ratio_abs_p99": 0.2}
        row["monitor_acc"] = 0.60 + (0.05 if 120 <= step <= 140 else 0.0)
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = decide_attempt(d, now=NOW)
    classes = res["fault_tree"]["classes"]
    assert classes["C"]["indicated"] is True  # train reward +13pp, OOD -0.2pp
    # the trailing 3-point mean peaks at the last of the three high points (step 140)
    assert classes["D"]["indicated"] is True and "step 140/200" in classes["D"]["evidence"]
    assert classes["A"]["indicated"] is None and classes["A"]["missing"] == ["pass_at_1", "pass_at_k"]
    assert res["fault_tree"]["suggestion"].startswith("C)")


def test_ledger_and_pin_files_are_read_strictly(exp):
    from rlexp.experiment.ledger import LedgerEntry, latest_by_attempt, record_decision

    entry = LedgerEntry("x1", None, ("eps_clip",), "P", 3200, None, "R", 1, "global_step200", "baseline_s0",
                        0.5, (-1.0, 2.0), 0.6, "CONTINUE", "v2.1-final", NOW)
    assert record_decision(exp, entry) is True
    assert record_decision(exp, entry) is False  # same outcome: nothing appended
    changed = LedgerEntry(**{**entry.__dict__, "decision": "STOP-3a", "decided_at": "later"})
    assert record_decision(exp, changed) is True
    entries = read_ledger(exp)
    assert len(entries) == 2 and latest_by_attempt(entries)["x1"].decision == "STOP-3a"
    good = json.loads((exp / "ledger.jsonl").read_text().splitlines()[0])
    for bad, field in (({**good, "extra": 1}, "extra"), ({**good, "decision": "WIN"}, "decision"),
                       ({**good, "delta_pp": "0.5"}, "delta_pp"), ({**good, "ci_pp": [1]}, "ci_pp"),
                       ({k: v for k, v in good.items() if k != "seed"}, "seed")):
        (exp / "ledger.jsonl").write_text(json.dumps(bad) + "\n")
        with pytest.raises(InputError) as err:
            read_ledger(exp)
        assert err.value.field == f"line 1: {field}"
    (exp / "sota.json").write_text(json.dumps({"attempt": "a", "checkpoint": "c", "path": "p"}))
    with pytest.raises(InputError, match="decided_at"):
        read_sota(exp)


def test_a_selection_made_under_another_sop_file_is_flagged(exp):
    from rlexp.spec.sop import load_sop

    d = make_attempt(exp, "s1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    selection = d / "eval" / "selection.json"
    sel = json.loads(selection.read_text())
    selection.write_text(json.dumps({**sel, "sop_sha256": load_sop().sha256}))
    assert not any("another SOP file" in n for n in decide_attempt(d)["notes"])
    selection.write_text(json.dumps({**sel, "sop_sha256": "0" * 64}))
    assert any("another SOP file" in n for n in decide_attempt(d)["notes"])


# decide's writers, each made to fail once: (module, name, which call fails)
DECIDE_WRITERS = {
    "paired records": ("rlexp.experiment.paired", "write_paired_records", 2),
    "ledger line": ("rlexp.experiment.ledger", "append_jsonl", 1),
    "decision.json": ("rlexp.experiment.files", "atomic_write_json", 1),
    "SOTA pin": ("rlexp.experiment.ledger", "atomic_write_json", 1),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("writer", sorted(DECIDE_WRITERS))
def test_a_failure_at_any_write_leaves_old_or_new_state_and_a_rerun_repairs(exp, tmp_path, monkeypatch, capsys,
                                                                             writer):
    """STOP-1 writes all four kinds of file. Old code wrote decision.json before the ledger, so a
    failing ledger write left a decision without its ledger line (and a traceback)."""
    import importlib
    import shutil

    s1 = make_attempt(exp, "lr1", "a29", {"actor_learning_rate": 2e-6, "seed": 1}, decide_steps=(200, 100))
    evaluated(s1, {"global_step200": (40, 80), "global_step100": (55, 60)})
    decide_attempt(s1, now=NOW)
    s2 = make_attempt(exp, "lr2", "a29", {"actor_learning_rate": 2e-6, "seed": 2}, decide_steps=(200, 100))
    evaluated(s2, {"global_step200": (45, 80), "global_step100": (50, 60)}, id_bc=(12, 8))
    old = _tree(exp)
    clean_dir = tmp_path / "clean"
    shutil.copytree(exp, clean_dir)
    assert decide_attempt(clean_dir / "lr2", now=NOW)["decision"] == "STOP-1"
    new = _tree(clean_dir)
    assert new["sota.json"] and "sota.json" not in old

    module_name, name, fail_on = DECIDE_WRITERS[writer]
    module = importlib.import_module(module_name)
    real = getattr(module, name)
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == fail_on:
            raise OSError(28, "No space left on device", str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, failing)
    assert main(["decide", str(s2)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    after = _tree(exp)
    for path, data in after.items():  # every file is the old one or the new one
        if path == "ledger.jsonl":
            old_lines, new_lines = old[path].splitlines(), new[path].splitlines()
            assert data.splitlines() in (old_lines, new_lines[: len(old_lines)] + [
                line for line in data.splitlines()[len(old_lines):] if json.loads(line)["attempt"] == "lr2"])
            continue
        if path.endswith("decision.json") or path == "sota.json":
            continue  # the CLI's decided_at is the clock's: checked below by content
        assert data in (old.get(path), new.get(path)), path
    decided = (exp / "lr2" / "decision.json").exists()
    ledger_has_it = any(e.attempt == "lr2" for e in read_ledger(exp))
    assert not decided or ledger_has_it  # a decision on disk always has its ledger line
    assert read_sota(exp) is None or decided  # a moved pin always has its decision behind it
    monkeypatch.setattr(module, name, real)
    decide_attempt(s2, now=NOW)  # the rerun completes the new state
    repaired = _tree(exp)
    ledger = [json.loads(line) for line in repaired.pop("ledger.jsonl").splitlines()]
    clean_ledger = [json.loads(line) for line in new.pop("ledger.jsonl").splitlines()]
    assert [{**e, "decided_at": None} for e in ledger] == [{**e, "decided_at": None} for e in clean_ledger]
    assert repaired == new


def test_a_checkpoint_significantly_worse_than_sota_is_flagged_first_whatever_the_decision(exp, capsys):
    from rlexp.reporting import render_markdown
    from rlexp.stages.report import gather

    (exp / "sota.json").write_text(json.dumps({"attempt": "a29", "checkpoint": "global_step200",
                                               "path": "a29/checkpoints/global_step200_hf", "decided_at": NOW}))
    d = make_attempt(exp, "r1", "a29", {"eps_clip": 0.15}, decide_steps=(200, 100))
    # vs S0 (700 right): step 200 +1pp (flat), step 100 -2pp; SOTA gets 740 right (+4pp over S0)
    evaluated(d, {"global_step200": (30, 40), "global_step100": (50, 30)})
    sota, _ = outcome_vectors(1000, 740, 0, 0)
    write_records(d, "baseline_sota", "ood_primary", sota)
    res = decide_attempt(d, now=NOW)
    flagged = {(r["checkpoint"], r["against"]) for r in res["regressions"]}
    # the reference: McNemar exact (scipy's binomial test) for every comparison decide made, Holm's
    # step-down written out here over that family, and the sign of Δ
    from scipy.stats import binomtest

    family = []
    for ck, entry in res["checkpoints"].items():
        for baseline, per_set in entry["vs"].items():
            for _role, brief in per_set.items():
                p = binomtest(brief["c"], brief["b"] + brief["c"], 0.5).pvalue
                assert brief["mcnemar_p"] == pytest.approx(p)
                family.append(((ck, baseline), p, brief["delta_pp"]))
    m = len(family)
    order = sorted(range(m), key=lambda i: family[i][1])
    holm, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * family[i][1]))
        holm[i] = running
    expected = {family[i][0] for i in range(m) if holm[i] < 0.05 and family[i][2] < 0}
    assert {r["family_size"] for r in res["regressions"]} == {m} and m >= 4
    for r in res["regressions"]:
        i = next(j for j in range(m) if family[j][0] == (r["checkpoint"], r["against"]) and r["set"] == "ood_primary")
        assert r["holm_p"] == pytest.approx(holm[i])
    assert expected == flagged and ("global_step100", "baseline_sota") in flagged
    assert ("global_step200", "baseline_s0") not in flagged
    assert res["decision"] == "CONTINUE"  # flagged whatever the decision
    assert main(["decide", str(d)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("REGRESSION: ")
    head = out.split("vs baseline_sota on ood_primary")[0]  # before the checkpoint table
    assert "REGRESSION: global_step100 is significantly worse than sota on ood_primary: Δ" in head
    assert "Holm p" in head and f"within the attempt's {m} comparisons" in head
    report = render_markdown(gather(d))
    first = report.split("**Decision:")[0]
    assert "REGRESSION: global_step100 is significantly worse than sota" in first


def test_a_healthy_attempt_flags_nothing(exp):
    d = make_attempt(exp, "ok1", "a29", {"eps_clip": 0.1}, decide_steps=(200,))
    evaluated(d, {"global_step200": (40, 80)})
    assert decide_attempt(d, now=NOW)["regressions"] == []


def family_records(d: Path, effect: float, rho: float, seed: int, n: int = 1000, k: int = 3) -> None:
    """S0 and K correlated checkpoints drawn problem by problem under the calibration model (a true Δ of
    ``effect`` for each), written as record files."""
    import math

    import numpy as np
    from scipy.special import ndtri

    rng = np.random.default_rng(seed)
    p0 = 0.7
    y0 = rng.random(n) < p0
    threshold = np.where(y0, ndtri((0.12 - effect) / (2 * p0)), ndtri((0.12 + effect) / (2 * (1 - p0))))
    flips = (math.sqrt(rho) * rng.standard_normal((n, 1)) + math.sqrt(1 - rho) * rng.standard_normal((n, k))
             < threshold[:, None])
    write_records(d, "baseline_s0", "ood_primary", [int(v) for v in y0])
    for j, step in enumerate((300, 200, 100)):
        write_records(d, f"global_step{step}", "ood_primary", [int(v) for v in np.where(flips[:, j], ~y0, y0)])


def test_decide_prints_the_raw_best_of_three_and_its_selection_adjusted_delta(exp, capsys):
    from rlexp.protocol.selection import adjusted_winner

    d = make_attempt(exp, "w1", "a29", {"eps_clip": 0.1}, decide_steps=(300, 200, 100))
    family_records(d, 0.02, 0.6, seed=3)
    res = decide_attempt(d, now=NOW)
    adj = res["selection_adjusted"]
    ck = res["primary_checkpoint"]
    assert adj["checkpoint"] == ck and adj["k"] == 3 and adj["raw_pp"] == pytest.approx(res["checkpoints"][ck]
                                                                                          ["delta_pp"])
    assert adj["adjusted_pp"] < adj["raw_pp"] and adj["ci_pp"][0] < adj["adjusted_pp"] < adj["ci_pp"][1]
    # the same figure from the paired outcomes directly
    from rlexp.experiment.paired import pair_files

    names = list(res["checkpoints"])
    sets = [pair_files(d / "eval" / "baseline_s0" / "ood_primary.jsonl", d / "eval" / n / "ood_primary.jsonl")
            for n in names]
    ref = adjusted_winner(sets[0].y_baseline, [s.y_new for s in sets], names.index(ck))
    assert adj["adjusted_pp"] == pytest.approx(ref.adjusted_pp)
    assert main(["decide", str(d)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"raw Δ {adj['raw_pp']:+.2f} pp" in out and "adjusted for that selection" in out
    assert f"{adj['adjusted_pp']:+.2f} pp" in out
    from rlexp.reporting import render_markdown
    from rlexp.stages.report import gather

    report = " ".join(render_markdown(gather(d)).split())
    assert f"raw Δ {adj['raw_pp']:+.2f} pp" in report and f"{adj['adjusted_pp']:+.2f} pp" in report
    assert "Andrews, Kitagawa & McCloskey 2024" in report


def test_decision_json_reads_back_as_the_decision_recorded(exp):
    """decision.json read back is the Decision that was recorded (the STOP-1 pin's checkpoint included);
    its gates are verdicts; a file of another shape is refused naming the field."""
    from rlexp.experiment.results import read_decision
    from rlexp.protocol.decision import Decision

    s1 = make_attempt(exp, "lr1", "a29", {"actor_learning_rate": 2e-6, "seed": 1}, decide_steps=(200, 100))
    evaluated(s1, {"global_step200": (40, 80), "global_step100": (55, 60)})
    decide(s1, now=NOW)
    s2 = make_attempt(exp, "lr2", "a29", {"actor_learning_rate": 2e-6, "seed": 2}, decide_steps=(200, 100))
    evaluated(s2, {"global_step200": (45, 80), "global_step100": (50, 60)}, id_bc=(12, 8))
    decided = decide(s2, now=NOW)
    written = json.loads((s2 / "decision.json").read_text())
    read = read_decision(s2)
    assert read is not None and read.to_dict() == written
    assert (read.attempt, read.decision, read.reason) == ("lr2", "STOP-1", decided.reason)
    assert read.new_sota_checkpoint == "global_step200" == decided.new_sota_checkpoint
    assert Decision.from_dict(read.to_dict()) == read
    gate2 = read.gate("gate_2")
    assert gate2.name == "gate_2" and gate2.passed is True and gate2.numbers["siblings"] == ["lr1"]
    assert read_decision(exp / "a29") is None
    (s2 / "decision.json").write_text(json.dumps({**written, "sota_moved": "yes"}))
    with pytest.raises(InputError, match="sota_moved: must be true or false"):
        read_decision(s2)


# --------------------------------------------------------------------------- a clustered primary set

CLUSTER_SIZE = 20


def clustered_outcomes() -> tuple[list[int], list[int], list[str]]:
    """1,000 problems in 50 documents of 20. The checkpoint gains 14 problems in each of 10
    documents, loses 14 in each of 6, and matches the baseline on the other 34: Δ = +5.6 pp with
    b = 84, c = 140, so McNemar (problems independent) finds it, but the gain is 16 documents' worth."""
    base, new, docs = [], [], []
    for g in range(50):
        if g < 10:
            yb, yn = [1] * 6 + [0] * 14, [1] * 20
        elif g < 16:
            yb, yn = [1] * 20, [1] * 6 + [0] * 14
        else:
            yb = yn = [1] * 14 + [0] * 6
        base += yb
        new += yn
        docs += [f"doc{g:02d}"] * CLUSTER_SIZE
    return base, new, docs


def clustered_attempt(exp: Path, attempt_id: str, cluster: str | None) -> Path:
    import yaml

    base, new, docs = clustered_outcomes()
    rows = [{"problem_hash": f"ood_primary-{i:05d}", "prompt": f"q{i}", "answer": "1", "doc": doc}
            for i, doc in enumerate(docs)]
    (exp / "data" / "ood.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = make_attempt(exp, attempt_id, None, {"pretrain": "models/tiny", "seed": 1}, decide_steps=[300, 100, 200])
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["datasets"]["ood_primary"] = {"path": "data/ood.jsonl", **({"cluster": cluster} if cluster else {})}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    write_records(d, "baseline_s0", "ood_primary", base)
    base_id, new_id = outcome_vectors(200, 120, 10, 10)
    write_records(d, "baseline_s0", "id", base_id)
    for ck in ("global_step300", "global_step100", "global_step200"):
        write_records(d, ck, "ood_primary", new)
        write_records(d, ck, "id", new_id)
    return d


def cr1_reference(base: list[int], new: list[int], docs: list[str]) -> tuple[float, float, float]:
    """statsmodels' cluster-robust OLS of the per-problem differences on a constant: (Δ, p, CI low), pp."""
    import numpy as np
    import statsmodels.api as sm

    d = np.asarray(new, dtype=float) - np.asarray(base, dtype=float)
    groups = np.unique(docs, return_inverse=True)[1]
    fit = sm.OLS(d, np.ones((len(d), 1))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    return 100 * float(fit.params[0]), float(fit.pvalues[0]), 100 * float(fit.conf_int(0.05)[0][0])


def test_a_clustered_primary_set_is_gated_on_the_cluster_robust_test_where_mcnemar_would_pass(exp, capsys):
    naive = decide_attempt(clustered_attempt(exp, "a1", None), now=NOW)
    assert naive["decision"] == "CONFIRM" and "clustered" not in naive   # McNemar: p ~ 2e-4, Gate-1b passes
    assert naive["checkpoints"]["global_step300"]["mcnemar_p"] < 0.001

    d = clustered_attempt(exp, "a2", "doc")
    assert main(["decide", str(d)]) == 0
    out = capsys.readouterr().out
    rec = json.loads((d / "decision.json").read_text())
    delta, p, ci_low = cr1_reference(*clustered_outcomes())
    ck = rec["checkpoints"]["global_step300"]
    assert ck["delta_pp"] == pytest.approx(delta) and ck["mcnemar_p"] == pytest.approx(p, rel=1e-9)
    assert ck["ci_pp"][0] == pytest.approx(ci_low, rel=1e-9)
    assert p > 0.2 and ck["naive_mcnemar_p"] == naive["checkpoints"]["global_step300"]["mcnemar_p"]
    assert rec["clustered"] == {"ood_primary": {"column": "doc", "n_clusters": 50,
                                                "test": "cluster-robust t (CR1, G − 1 df)"}}
    assert not rec["gates"]["gate_1b"]["passed"] and not rec["gates"]["gate_1a"]["passed"]
    assert rec["decision"] == "CONTINUE"
    assert rec["gates"]["gate_1b"]["per_checkpoint"]["global_step300"]["numbers"]["p"] == ck["mcnemar_p"]
    assert rec["gates"]["gate_1b"]["rule"].endswith("[p and CI: cluster-robust t over doc (CR1, G − 1 df), in place "
                                                    "of McNemar and the bootstrap]")
    assert "ood_primary clustered by doc, 50 clusters" in " ".join(out.split())
    ledger = read_ledger(exp)
    assert ledger[-1].mcnemar_p == pytest.approx(p, rel=1e-9)


@pytest.mark.parametrize(("rows", "field", "message"), [
    ([{"prompt": "q0", "answer": "1"}], "line 1: doc", "missing"),
    ([{"prompt": "q0", "answer": "1", "doc": 1.5}], "line 1: doc", "a string or an integer"),
    ([{"prompt": "q0", "answer": "1", "doc": "x"}, {"prompt": "q1", "answer": "1", "doc": "x"}],
     "datasets.ood_primary.cluster", "one cluster"),
])
def test_a_bad_cluster_column_is_refused_naming_the_file_and_field(exp, capsys, rows, field, message):
    import yaml

    (exp / "data" / "ood.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = make_attempt(exp, "a1", None, {"pretrain": "models/tiny", "seed": 1})
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["datasets"]["ood_primary"] = {"path": "data/ood.jsonl", "cluster": "doc"}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    before = _tree(exp)
    assert main(["decide", str(d)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and field in err and message in err
    named = err.split(": ")[1]   # the dataset file, or the spec declaring the column
    assert named.endswith("ood.jsonl" if not field.startswith("datasets") else "attempt.yaml")
    assert _tree(exp) == before


@pytest.mark.parametrize("value", [3, "", ["doc"], True])
def test_a_cluster_field_of_another_type_is_refused(exp, capsys, value):
    import yaml

    d = make_attempt(exp, "a1", None, {"pretrain": "models/tiny", "seed": 1})
    spec = yaml.safe_load((d / "attempt.yaml").read_text())
    spec["datasets"]["ood_primary"] = {"size": 10, "cluster": value}
    (d / "attempt.yaml").write_text(yaml.safe_dump(spec))
    assert main(["decide", str(d)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "attempt.yaml" in err and "datasets.ood_primary.cluster" in err


def _rounded(value):
    """``value`` with every float at 12 significant digits (the last digits of the selection-adjusted
    interval's normal quantiles may differ between CPUs); everything else as it is, keys in order."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return [(k, _rounded(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_an_unclustered_decision_is_what_it_was_before_clusters(exp):
    golden = Path(__file__).parent / "data" / "decide" / "unclustered_decision.json"
    d = clustered_attempt(exp, "a1", None)
    decide(d, sop_path=Path(__file__).parents[1] / "sop" / "sop-v2.1-final.yaml", now=NOW)
    new, old = (d / "decision.json").read_text(), golden.read_text()
    assert _rounded(json.loads(new)) == _rounded(json.loads(old))
    assert len(new) == len(old)   # the same keys, the same numbers of digits: no field added or dropped


def test_the_report_of_a_clustered_decision_says_so_and_gives_the_clustered_power(exp, tmp_path):
    import numpy as np
    import statsmodels.api as sm
    from scipy import stats as sps

    from rlexp.stages.report import write_report

    d = clustered_attempt(exp, "a2", "doc")
    decide(d, now=NOW)
    text = write_report(d, tmp_path / "reports").read_text()
    assert "ood_primary clustered by doc, 50 clusters: p, the 95% CI and the gates use the cluster-robust" in text
    assert "| clustered p | cluster-robust 95% CI pp |" in text
    base, new, docs = clustered_outcomes()
    fit = sm.OLS(np.subtract(new, base).astype(float), np.ones((1000, 1))).fit(
        cov_type="cluster", cov_kwds={"groups": np.unique(docs, return_inverse=True)[1]}, use_t=True)
    se = 100 * float(fit.bse[0])
    mde = (sps.t.ppf(0.975, 49) + sps.t.ppf(0.8, 49)) * se
    gate = sps.nct.sf(max(3 / se, sps.t.ppf(0.975, 49)), 49, 3 / se)
    line = next(x for x in text.splitlines() if x.startswith("- global_step300: n 1000 in 50 clusters"))
    assert f"MDE {mde:.2f} pp (80% power of the cluster-robust t, 49 df" in line
    assert f"passes Gate-1b {gate:.0%} of the time" in line


def test_the_comparison_with_the_parent_on_a_clustered_set_is_clustered_too(exp):
    from rlexp.reporting import compare_with_parent

    parent = clustered_attempt(exp, "a2", "doc")
    decide(parent, now=NOW)
    child = make_attempt(exp, "a3", "a2", {"seed": 2}, decide_steps=[300, 100, 200])
    base, new, docs = clustered_outcomes()
    for ck in ("global_step300", "global_step100", "global_step200"):   # the child loses the parent's gain
        write_records(child, ck, "ood_primary", base)
    vs = compare_with_parent(child)["final"]
    delta, p, ci_low = cr1_reference(new, base, docs)
    assert vs["delta_pp"] == pytest.approx(delta) and vs["mcnemar_p"] == pytest.approx(p, rel=1e-9)
    assert vs["test"].startswith("cluster-robust t (CR1, 50 clusters") and vs["naive_mcnemar_p"] < 0.001


def test_a_clustered_mean_reward_comparison_is_statsmodels_cluster_robust_t():
    import numpy as np
    import statsmodels.api as sm

    from rlexp.protocol.decision import clustered_comparison, mean_reward_comparison

    rng = np.random.default_rng(3)
    docs = np.repeat(np.arange(40), 5)
    base = rng.random(200)
    new = np.clip(base + rng.normal(0.05, 0.2, 40)[docs] + rng.normal(0, 0.05, 200), 0, 1)
    cmp = mean_reward_comparison(list(base), list(new), resamples=200, seed=0, confidence=0.95, method="percentile")
    out = clustered_comparison(cmp, list(base), list(new), list(docs), confidence=0.95)
    fit = sm.OLS(new - base, np.ones((200, 1))).fit(cov_type="cluster", cov_kwds={"groups": docs}, use_t=True)
    assert out.mcnemar_p == pytest.approx(float(fit.pvalues[0]), rel=1e-9)
    assert out.ci_pp == pytest.approx(tuple(100 * fit.conf_int(0.05)[0]), rel=1e-9)
    assert out.se_pp == pytest.approx(100 * float(fit.bse[0]), rel=1e-9)
    assert out.delta_pp == cmp.delta_pp and out.naive_p == cmp.mcnemar_p and out.n_clusters == 40
