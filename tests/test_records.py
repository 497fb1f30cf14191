"""Eval record files: contract fields, resumable appends, refusal to mix settings, summaries."""

from __future__ import annotations

import json

import pytest

from rlexp.errors import InputError
from rlexp.evaluation.answers import PARSER_VERSION
from rlexp.experiment.records import (
    IDENTITY_KEYS,
    RECORD_FIELDS,
    RecordWriter,
    make_record,
    meta_path,
    read_records,
    record_path,
    summarize,
)

PROBLEM = {"problem_hash": "h1", "prompt": "2+2=", "answer": "4", "bucket": "add"}


def _meta(**change):
    meta = {
        "engine": "local",
        "decoding": {"mode": "greedy_pass@1", "temperature": 0.0, "n": 1, "max_tokens": 8, "seed": 0},
        "model_sha256": "m" * 64,
        "adapter_sha256": None,
        "dataset_sha256": "d" * 64,
        "prompt_suffix": "",
        "chat_template_sha256": "t" * 64,
        "grading": "exact",
        "parser_version": PARSER_VERSION,
    }
    meta.update(change)
    return meta


def _rec(h, correct=1, method="boxed", finish="stop", bucket="a"):
    return {"problem_hash": h, "gold": "1", "output": "x", "answer": "1", "parse_method": method,
            "correct": correct, "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": 2, "bucket": bucket}


def test_make_record_has_the_contract_fields():
    record = make_record(PROBLEM, r"so \boxed{4}", "stop", 10, 5)
    assert tuple(record) == RECORD_FIELDS
    assert record["answer"] == "4" and record["parse_method"] == "boxed" and record["correct"] == 1
    wrong = make_record(PROBLEM, "We need 7 seats", "length", 10, 8)
    assert (wrong["answer"], wrong["parse_method"], wrong["correct"], wrong["finish_reason"]) == ("7", "last_number", 0, "length")


def test_paths(tmp_path):
    p = record_path(tmp_path, "global_step10", "ood_primary")
    assert p == tmp_path / "eval" / "global_step10" / "ood_primary.jsonl"
    assert meta_path(p).name == "ood_primary.meta.json"


def test_resume_skips_done_and_repairs_torn_tail(tmp_path):
    path = tmp_path / "r.jsonl"
    w = RecordWriter.open(path, _meta())
    w.append(_rec("h1"))
    w.append(_rec("h2"))
    with open(path, "a") as fh:
        fh.write('{"problem_hash": "h3", "corr')  # a kill in the middle of a line
    again = RecordWriter.open(path, _meta())
    assert set(again.done) == {"h1", "h2"}
    again.append(_rec("h3"))
    assert [r["problem_hash"] for r in read_records(path)] == ["h1", "h2", "h3"]
    with pytest.raises(ValueError):
        again.append(_rec("h3"))


@pytest.mark.parametrize("key", IDENTITY_KEYS)
def test_changed_settings_refuse_to_mix(tmp_path, key):
    path = tmp_path / "r.jsonl"
    RecordWriter.open(path, _meta()).append(_rec("h1"))
    changed = _meta(**{key: "something else"})
    with pytest.raises(InputError) as err:
        RecordWriter.open(path, changed)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_records_of_the_unversioned_parser_are_refused(tmp_path):
    """Records written before the parser carried a version (no parser_version in their metadata)
    were graded by another extractor: a resumed eval must not append to them."""
    path = tmp_path / "r.jsonl"
    RecordWriter.open(path, _meta()).append(_rec("h1"))
    old = json.loads(meta_path(path).read_text())
    del old["parser_version"]
    meta_path(path).write_text(json.dumps(old))
    with pytest.raises(InputError) as err:
        RecordWriter.open(path, _meta())
    message = str(err.value)
    assert "parser_version" in message and "1 (unversioned)" in message and str(meta_path(path)) in message
    assert "\n" not in message


def test_records_without_meta_are_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_rec("h1")) + "\n")
    with pytest.raises(InputError):
        RecordWriter.open(path, _meta())


@pytest.mark.parametrize("bad", ['"1"', "2", "0.5", "NaN", "null"])
def test_bad_correct_values_are_input_errors(tmp_path, bad):
    path = tmp_path / "r.jsonl"
    line = json.dumps(_rec("h1")).replace('"correct": 1', f'"correct": {bad}')
    path.write_text(line + "\n")
    with pytest.raises(InputError):
        read_records(path)


def test_bools_are_accepted_and_duplicates_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_rec("h1", correct=True)) + "\n" + json.dumps(_rec("h2", correct=False)) + "\n")
    assert len(read_records(path)) == 2
    path.write_text(json.dumps(_rec("h1")) + "\n" + json.dumps(_rec("h1")) + "\n")
    with pytest.raises(InputError, match="duplicate"):
        read_records(path)


def test_summary_numbers():
    records = [
        _rec("a", 1, "boxed", "stop", "x"),
        _rec("b", 0, "boxed", "length", "x"),
        _rec("c", 1, "last_number", "stop", "y"),
        _rec("d", 0, "none", "length", "y"),
        _rec("e", 1, "boxed", "stop", "y"),
    ]
    s = summarize(records)
    assert (s.n, s.correct) == (5, 3)
    assert s.accuracy == pytest.approx(0.6)
    assert s.parse_methods == {"boxed": 3, "last_number": 1, "none": 1}
    assert s.parse_rate("boxed") == pytest.approx(0.6)
    assert s.truncation_rate == pytest.approx(0.4)
    assert (s.per_bucket["x"].n, s.per_bucket["x"].accuracy) == (2, 0.5)
    assert s.per_bucket["y"].accuracy == pytest.approx(2 / 3)
    assert json.loads(json.dumps(s.to_dict()))["per_bucket"]["y"]["correct"] == 2


def test_one_strict_reader_names_file_and_line(tmp_path):
    from rlexp.experiment.records import iter_records, read_record_lines

    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_rec("h1", correct=True)) + "\n" + json.dumps(_rec("h2", correct=0)) + "\n")
    lines = read_record_lines(path)
    assert [(x.line, x.problem_hash, x.correct) for x in lines] == [(1, "h1", 1), (2, "h2", 0)]
    path.write_text(json.dumps(_rec("h1")) + "\n" + json.dumps(_rec("h2")) + "\n" + json.dumps(_rec("h1")) + "\n")
    with pytest.raises(InputError) as err:
        list(iter_records(path))
    assert err.value.field == "line 3: problem_hash" and "first at line 1" in err.value.message
    path.write_text(json.dumps(_rec("   ")) + "\n")
    with pytest.raises(InputError) as err:
        read_records(path)
    assert err.value.field == "line 1: problem_hash"
    path.write_text(json.dumps(_rec("h1")) + "\n" + '{"problem_hash": "h2", "cor')
    with pytest.raises(InputError, match="truncated") as err:
        read_records(path)
    assert err.value.field == "line 2"
    path.write_text("\n")
    with pytest.raises(InputError, match="empty record file"):
        read_records(path)
    assert read_records(path, allow_empty=True) == []


def test_eval_accuracies_reads_strictly_and_skips_paired_and_empty(tmp_path):
    from rlexp.experiment.records import checkpoint_step, eval_accuracies

    att = tmp_path / "a1"
    for name, values in (("global_step2", [1, 0, True, False]), ("baseline_s0", [0, 0])):
        path = record_path(att, name, "id")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(_rec(f"h{i}", correct=v)) + "\n" for i, v in enumerate(values)))
    record_path(att, "global_step4", "id").parent.mkdir(parents=True)
    record_path(att, "global_step4", "id").write_text("")
    paired = att / "eval" / "paired" / "x.jsonl"
    paired.parent.mkdir(parents=True)
    paired.write_text('{"not": "a record"}\n')
    assert eval_accuracies(att) == {("baseline_s0", "id"): {"acc": 0.0, "n": 2.0},
                                    ("global_step2", "id"): {"acc": 0.5, "n": 4.0}}
    bad = record_path(att, "global_step2", "id")
    bad.write_text(json.dumps(_rec("h1")) + "\n" + json.dumps(_rec("h1")) + "\n")
    with pytest.raises(InputError, match="duplicate") as err:
        eval_accuracies(att)
    assert err.value.field == "line 2: problem_hash"
    assert checkpoint_step("global_step200") == 200 and checkpoint_step("baseline_s0") is None
    assert checkpoint_step("global_step2_hf") is None
