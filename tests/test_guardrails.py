"""Guardrails G0/G1/G2/G4 and the parser audit, on real records of the tiny model."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.experiment.files import read_json, read_jsonl
from rlexp.experiment.records import read_records, record_path, summarize
from rlexp.spec.sop import DEFAULT_SOP, load_sop
from rlexp.stages.guard_audit import audit_draw, audit_verdicts, suspicion_flags
from rlexp.stages.guard_baseline import parser_ceiling, passk_headroom
from rlexp.stages.guard_integrity import pipeline_integrity
from rlexp.stages.guard_parity import prompt_parity


def sop_with(tmp_path, **sections):
    """A copy of the SOP in force with ``guardrails.<gate>`` (or ``parser_audit``) keys replaced."""
    data = yaml.safe_load(DEFAULT_SOP.read_text())
    for name, values in sections.items():
        target = data["parser_audit"] if name == "parser_audit" else data["guardrails"][name]
        target.update(values)
    data["version"] = "test"
    path = tmp_path / "sop-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_sop(path)


def _rec(h, correct=0, method="boxed", finish="stop", output="x", answer="1", gold="2"):
    return {"problem_hash": h, "gold": gold, "output": output, "answer": answer, "parse_method": method,
            "correct": correct, "finish_reason": finish, "prompt_tokens": 1, "completion_tokens": 1, "bucket": "b"}


# --------------------------------------------------------------------------- G0


def test_prompt_parity_core():
    ok = prompt_parity([[1, 2, 3]] * 5, [[1, 2, 3]] * 5, list("abcde"))
    assert ok.passed and ok.numbers == {"samples": 5, "mismatches": 0}
    bad = prompt_parity([[1, 2, 3], [4]], [[1, 2, 9], [4]], ["a", "b"])
    assert not bad.passed and bad.details[0]["first_difference"] == 2


def test_g0_passes_then_fails_on_suffix_and_template(eval_experiment):
    from rlexp.cli import main
    from rlexp.stages.guard_parity import run_g0

    att = eval_experiment()
    verdict = run_g0(att)
    assert verdict.passed and verdict.numbers["samples"] == 5
    assert read_json(att / "guards" / "g0.json")["passed"] is True

    spec = att / "attempt.yaml"
    text = spec.read_text()
    # training (pool) suffix differs from the eval sets' suffix
    spec.write_text(text.replace("pool: {path: data/pool.jsonl}", 'pool: {path: data/pool.jsonl, prompt_suffix: " Think."}'))
    verdict = run_g0(att)
    assert not verdict.passed and verdict.numbers["mismatches"] == 5
    assert any("suffix" in n for n in verdict.notes)
    assert main(["guard", "g0", str(att), "--json"]) == 1

    spec.write_text(text)  # suffix back in parity; now the checkpoint ships another chat template
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(att.parent / "models" / "tiny-base")
    tok.chat_template = tok.chat_template.replace("{{ bos_token }}", "")
    tok.save_pretrained(att / "checkpoints" / "global_step4_hf")
    verdict = run_g0(att)
    assert not verdict.passed and any("chat template" in n for n in verdict.notes)


# --------------------------------------------------------------------------- G1


def test_pipeline_integrity_core():
    a = [_rec("p1", 1, output="A"), _rec("p2", 0, output="B")]
    same = pipeline_integrity(a, [dict(r) for r in a])
    assert same.passed and same.numbers["output_differences"] == 0
    text_only = [_rec("p1", 1, output="A'"), _rec("p2", 0, output="B")]
    assert not pipeline_integrity(a, text_only).passed  # unexplained difference = bug
    named = pipeline_integrity(a, text_only, nondeterminism="vLLM LoRA kernels are not batch-invariant")
    assert named.passed and named.numbers["discordant"] == 0
    flipped = [_rec("p1", 0, output="A'"), _rec("p2", 0, output="B")]
    assert not pipeline_integrity(a, flipped, nondeterminism="batch composition").passed
    with pytest.raises(InputError):
        pipeline_integrity(a, a[:1])


def test_g1_adapter_vs_merged_passes(eval_experiment):
    from rlexp.stages.guard_integrity import run_g1

    att = eval_experiment()
    verdict = run_g1(att, set_role="id")
    assert verdict.passed, verdict.to_dict()
    assert verdict.numbers["problems"] == 6 and verdict.numbers["checkpoint"] == "global_step2"
    assert read_json(att / "guards" / "g1.json")["passed"] is True


def test_g1_catches_an_adapter_applied_twice(eval_experiment, tmp_path):
    """A LoRA-accumulation bug once inflated numbers by 2-7pp: weights that already contain the LoRA
    delta get the adapter applied again. G1 must fail on it."""
    from rlexp.cli import main
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.evaluation.engines.local import LocalEngine, merge_adapter
    from rlexp.experiment.datasets import read_dataset
    from rlexp.stages.eval_records import Target, eval_records

    att = eval_experiment()
    base = att.parent / "models" / "tiny-base"
    adapter = att / "checkpoints" / "global_step2_hf"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged_dir = tmp_path / "merged-once"
    merge_adapter(AutoModelForCausalLM.from_pretrained(base), adapter).save_pretrained(merged_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(merged_dir)
    problems = read_dataset(att.parent / "data" / "ood_primary.jsonl")
    paths = {}
    for label, engine in (("post_hoc", LocalEngine(base, {"global_step2": adapter})),
                          ("in_run_buggy", LocalEngine(merged_dir, {"global_step2": adapter}))):
        out = tmp_path / f"{label}.jsonl"
        eval_records(engine, engine.tokenizer, attempt_dir=att, set_role="ood_primary", problems=problems,
                     dataset_sha256="d", targets=[Target("global_step2", adapter)], base=base,
                     decoding=Decoding.greedy(6), suffix="", records_path=lambda _t, out=out: out)
        paths[label] = out
    a, b = read_records(paths["post_hoc"]), read_records(paths["in_run_buggy"])
    verdict = pipeline_integrity(a, b)
    assert not verdict.passed and verdict.numbers["output_differences"] > 0
    code = main(["guard", "g1", str(att), "--records", str(paths["post_hoc"]), "--records", str(paths["in_run_buggy"])])
    assert code == 1 and read_json(att / "guards" / "g1.json")["passed"] is False


# --------------------------------------------------------------------------- G2


@pytest.mark.parametrize(
    ("boxed", "none", "length", "passed"),
    [(98, 0, 5, True), (97, 0, 0, False), (99, 1, 0, False), (100, 0, 6, False), (100, 0, 0, True)],
)
def test_parser_ceiling_thresholds(boxed, none, length, passed):
    records = [_rec(f"b{i}", method="boxed") for i in range(boxed)]
    records += [_rec(f"n{i}", method="none", answer=None) for i in range(none)]
    records += [_rec(f"l{i}", method="last_number") for i in range(100 - boxed - none)]
    for r in records[:length]:
        r["finish_reason"] = "length"
    verdict = parser_ceiling(records)
    assert verdict.passed is passed
    assert verdict.numbers["boxed_rate"] == pytest.approx(boxed / 100)
    assert verdict.numbers["truncation_rate"] == pytest.approx(length / 100)


def test_parser_ceiling_counts_unparsed_as_a_failure():
    """An answer that is not one number (method "unparsed") is a parse failure like "none"."""
    records = [_rec(f"b{i}", method="boxed") for i in range(99)] + [_rec("u", method="unparsed", answer="3 and 4")]
    verdict = parser_ceiling(records)
    assert verdict.passed is False and verdict.notes == ("fail check failed",)
    assert verdict.numbers["fail_rate"] == pytest.approx(0.01) and verdict.numbers["unparsed_rate"] == pytest.approx(0.01)
    assert parser_ceiling(records[:99] + [_rec("l", method="last_number")]).passed


def test_g2_reads_its_numbers_from_the_sop_file(tmp_path):
    # the same 100 records: 98 boxed passes the SOP in force (boxed >= 98%), fails a copy at 99%
    records = [_rec(f"b{i}", method="boxed") for i in range(98)]
    records += [_rec(f"l{i}", method="last_number") for i in range(2)]
    assert parser_ceiling(records).passed
    stricter = sop_with(tmp_path, g2={"min_boxed": 0.99})
    verdict = parser_ceiling(records, sop=stricter)
    assert not verdict.passed and verdict.notes == ("boxed check failed",)
    assert "boxed >= 99%" in verdict.rule
    assert parser_ceiling(records, stricter.guardrails.g2).passed is False  # the section itself also works


def test_g1_g4_and_audit_read_their_numbers_from_the_sop_file(tmp_path):
    a = [_rec(f"h{i}", correct=i % 2, output=f"o{i}") for i in range(10)]
    flipped = [dict(r, correct=1 - r["correct"], output="changed") if i == 0 else dict(r) for i, r in enumerate(a)]
    assert not pipeline_integrity(a, flipped, nondeterminism="batch composition").passed
    lenient = sop_with(tmp_path, g1={"max_discordant": 1}, g4={"min_pass_at_k": 0.30, "temperature": 0.8},
                       parser_audit={"sample_size": 7})
    assert pipeline_integrity(a, flipped, nondeterminism="batch composition", sop=lenient).passed
    records = [{"problem_hash": f"p{i}", "n": 8, "num_correct": c} for i, c in enumerate([0, 0, 1, 0, 3, 0, 0, 0])]
    assert passk_headroom(records, k=8).passed  # pass@8 = 0.25 >= 15%
    stricter = passk_headroom(records, k=8, sop=lenient)
    assert not stricter.passed and "temperature 0.8" in stricter.rule and ">= 30%" in stricter.rule
    wrong = [_rec(f"w{i:03d}") for i in range(20)]
    assert len(audit_draw(wrong, sop=lenient)) == 7


def test_g2_on_real_baseline_records(eval_experiment):
    from rlexp.cli import main
    from rlexp.stages.guard_baseline import run_g2

    att = eval_experiment()
    verdict = run_g2(att, problems=10)
    records = read_records(record_path(att, "baseline_s0", "ood_primary"))
    assert len(records) == 10  # only the first N, and in the normal record file (eval resumes from it)
    s = summarize(records)
    assert verdict.numbers["problems"] == 10
    assert verdict.numbers["boxed_rate"] == s.parse_rate("boxed")
    fail = s.parse_rate("none") + s.parse_rate("unparsed")
    assert verdict.numbers["fail_rate"] == pytest.approx(fail)
    assert verdict.numbers["truncation_rate"] == s.truncation_rate
    assert verdict.passed is (s.parse_rate("boxed") >= 0.98 and fail == 0 and s.truncation_rate <= 0.05)
    assert main(["guard", "g2", str(att), "--problems", "10"]) == (0 if verdict.passed else 1)


def test_g2_records_at_eval_seed_7_are_resumed_by_eval(eval_experiment):
    """G2 writes Baseline-S0's records for ``rlexp eval`` to resume from; with ``eval.seed: 7`` both must
    record the same decoding (G2 once left the seed out, and eval refused its records)."""
    from rlexp.experiment.records import read_meta
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard_baseline import run_g2

    att = eval_experiment(extra_eval=", seed: 7")
    run_g2(att, problems=4)
    path = record_path(att, "baseline_s0", "ood_primary")
    g2_lines = path.read_bytes().splitlines(keepends=True)
    assert len(g2_lines) == 4 and read_meta(path)["decoding"]["seed"] == 7
    out = evaluate(att, sets=["ood_primary"], show_progress=False)
    baseline = next(f for f in out.files if f.checkpoint == "baseline_s0")
    assert baseline.new_records == 12 - 4  # the four G2 wrote are reused, not redone
    assert path.read_bytes().splitlines(keepends=True)[:4] == g2_lines


def test_g1_and_g4_record_the_eval_seed_too(eval_experiment):
    """Every record file an attempt writes carries its eval settings' seed (G1 and G4 once left it out)."""
    from rlexp.experiment.records import read_meta
    from rlexp.stages.guard_baseline import run_g4
    from rlexp.stages.guard_integrity import run_g1

    att = eval_experiment(extra_eval=", seed: 7")
    run_g1(att, set_role="id", limit=2)
    run_g4(att, k=2, limit=2)
    written = sorted((att / "guards").rglob("*.jsonl"))
    assert {p.name for p in written} >= {"g4_samples.jsonl"} and len(written) >= 3  # two G1 files and G4's
    assert {read_meta(p)["decoding"]["seed"] for p in written} == {7}


def test_changed_decoding_is_refused_naming_the_setting(eval_experiment):
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard_baseline import run_g2

    att = eval_experiment()
    run_g2(att, problems=2)
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text().replace("engine: local,", "engine: local, seed: 7,"))
    with pytest.raises(InputError, match=r"decoding\.seed: changed since these records were written \(0 → 7\)"):
        evaluate(att, sets=["ood_primary"], show_progress=False)


# --------------------------------------------------------------------------- G4


def _chen_pass_at_k(n, c, k):
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_passk_headroom_numbers():
    records = [{"problem_hash": f"p{i}", "n": 8, "num_correct": c} for i, c in enumerate([0, 0, 1, 0, 3, 0, 0, 0])]
    verdict = passk_headroom(records, k=8)
    expected = sum(_chen_pass_at_k(8, r["num_correct"], 8) for r in records) / 8
    assert verdict.numbers["pass_at_8"] == pytest.approx(expected) == pytest.approx(0.25)
    assert verdict.passed
    records16 = [{"problem_hash": f"p{i}", "n": 16, "num_correct": c} for i, c in enumerate([1, 0, 0, 0, 0, 0, 0, 0])]
    v16 = passk_headroom(records16, k=8)
    assert v16.numbers["pass_at_8"] == pytest.approx(_chen_pass_at_k(16, 1, 8) / 8)  # 0.0625
    assert not v16.passed
    with pytest.raises(InputError):
        passk_headroom([{"problem_hash": "x", "n": 4, "num_correct": 1}], k=8)


def test_g4_samples_the_baseline_wrong_problems(eval_experiment):
    from rlexp.stages.guard_baseline import run_g4

    att = eval_experiment()
    verdict = run_g4(att, k=2, limit=4)
    samples = read_records(att / "guards" / "g4_samples.jsonl")
    greedy = {r["problem_hash"]: r for r in read_records(record_path(att, "baseline_s0", "ood_primary"))}
    assert len(samples) == min(4, sum(1 for r in greedy.values() if not r["correct"]))
    assert all(not greedy[r["problem_hash"]]["correct"] for r in samples)
    assert all(r["n"] == 2 and len(r["samples"]) == 2 for r in samples)
    expected = sum(_chen_pass_at_k(2, r["num_correct"], 2) for r in samples) / len(samples)
    assert verdict.numbers["pass_at_2"] == pytest.approx(expected)
    meta = read_json(att / "guards" / "g4_samples.meta.json")
    assert meta["decoding"]["temperature"] == 0.6 and meta["decoding"]["mode"] == "sampling_pass@k"


# --------------------------------------------------------------------------- parser audit


def test_suspicion_flags_on_the_seed_patterns():
    bold = _rec("a", output="The answer is **12**, assuming 7 seats", answer="7", method="last_number", gold="12")
    assert "fallback_after_bold_answer" in suspicion_flags(bold)
    assert "trailing_number_in_prose" in suspicion_flags(bold)
    assert "gold_appears_in_output" in suspicion_flags(bold)
    base = _rec("b", output="written in base 7", answer="7", method="last_number", gold="21")
    assert suspicion_flags(base) == ["trailing_number_in_prose"]
    clean = _rec("c", output=r"\boxed{5}", answer="5", method="boxed", gold="6")
    assert suspicion_flags(clean) == []
    assert "truncated" in suspicion_flags(_rec("d", finish="length", output="so far", answer=None, method="none"))
    unparsed = _rec("e", output=r"\boxed{3 \text{ and } 4}", answer=r"3 \text{ and } 4", method="unparsed", gold="34")
    assert suspicion_flags(unparsed) == ["answer_not_one_number"]


def test_audit_draw_and_verdicts():
    records = [_rec(f"h{i:03d}", correct=int(i % 3 == 0)) for i in range(120)]
    items = audit_draw(records, seed=1)
    assert len(items) == load_sop().parser_audit.sample_size == 50
    assert all(int(it["problem_hash"][1:]) % 3 != 0 for it in items)  # incorrect ones only
    assert len({it["problem_hash"] for it in items}) == 50
    assert items == audit_draw(list(reversed(records)), seed=1)  # independent of file order
    for it in items:
        it["verdict"] = "ok"
    for it in items[:2]:
        it["verdict"] = "misparse"
    passed = audit_verdicts(items, 0.05)
    assert passed.passed and passed.numbers["mis_parse_rate"] == pytest.approx(0.04)
    items[2]["verdict"] = "misparse"
    failed = audit_verdicts(items, 0.05)
    assert not failed.passed and failed.numbers["mis_parse_rate"] == pytest.approx(0.06)
    items[3]["verdict"] = "maybe"
    with pytest.raises(InputError, match="line 4: verdict"):
        audit_verdicts(items, 0.05)


def test_audit_cli_round_trip(eval_experiment):
    from rlexp.cli import main
    from rlexp.stages.evaluate import evaluate

    att = eval_experiment()
    evaluate(att, sets=["ood_primary"], show_progress=False)
    assert main(["guard", "audit", str(att), "--draw", "--n", "5"]) == 0
    review = att / "guards" / "parser_audit_review.jsonl"
    items = read_jsonl(review)
    assert len(items) == 5 and all(it["verdict"] is None for it in items)
    assert items[0]["checkpoint"] == "global_step4"  # best-by-monitor from selection.json
    for i, it in enumerate(items):
        it["verdict"] = "misparse" if i == 0 else "ok"
    review.write_text("".join(json.dumps(it) + "\n" for it in items))
    assert main(["guard", "audit", str(att), "--verdicts", str(review)]) == 1  # 1/5 = 20% > 5%
    verdict = read_json(att / "guards" / "parser_audit.json")
    assert verdict["numbers"]["mis_parse_rate"] == pytest.approx(0.2) and verdict["passed"] is False
    assert main(["guard", "audit", str(att)]) == 2  # neither --draw nor --verdicts


def test_one_verdict_schema_for_every_guard(tmp_path):
    from rlexp.experiment.verdicts import write_verdict
    from rlexp.protocol.verdict import Verdict
    from rlexp.training import monitor

    keys = ["name", "passed", "rule", "numbers", "notes", "details"]
    pending = Verdict("g5", None, "at step 10: ...", notes=("step 10 not logged yet",))
    assert pending.status == "PENDING" and Verdict("g0", True, "r").status == "PASS"
    assert Verdict("g0", False, "r").status == "FAIL"
    write_verdict(tmp_path, pending)
    assert read_json(tmp_path / "guards" / "g5.json") == {
        "name": "g5", "passed": None, "rule": "at step 10: ...", "numbers": {},
        "notes": ["step 10 not logged yet"], "details": []}
    g3 = monitor.g3_smoke([{"global_step": s, "step_time_s": 1.0} for s in range(1, 11)])
    assert isinstance(g3, Verdict) and list(g3.to_dict()) == keys
    audit = audit_verdicts([{"verdict": "ok"}], 0.05)
    assert list(audit.to_dict()) == keys and audit.numbers["mis_parse_rate"] == 0.0
