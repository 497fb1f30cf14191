"""The answer extractor and math-verify grading on a real model's chains of thought.

tests/data/smollm2/gsm_outputs.jsonl holds 21 greedy outputs of SmolLM2-135M-Instruct on
GSM-Symbolic problems (how they were made: the README beside it). The reference is a person's
reading of each output's final statement (``stated_answer``), not this code.
"""

from __future__ import annotations

import json
from pathlib import Path

ROWS = [json.loads(line) for line in
        (Path(__file__).parent / "data" / "smollm2" / "gsm_outputs.jsonl").read_text().splitlines()]


def test_the_stated_answer_is_extracted_from_every_finished_chain():
    from rlexp.evaluation.answers import extract_answer

    finished = [r for r in ROWS if r["finish_reason"] == "stop"]
    assert len(finished) == 18
    for row in finished:
        answer, method = extract_answer(row["output"])
        assert answer == row["stated_answer"], (row["seed"], answer, row["stated_answer"])
        assert method == "last_number"  # the model states its answer in prose; it never boxes


def test_math_verify_grades_each_finished_chain_by_its_stated_answer():
    from rlexp.evaluation.answers import grade_output

    for row in ROWS:
        if row["finish_reason"] != "stop":
            continue
        expected = float(row["stated_answer"]) == float(row["gold"])
        assert grade_output(row["output"], row["gold"], "math_verify")[2] is expected, row["seed"]
        assert grade_output(row["output"], row["gold"], "exact")[2] is expected, row["seed"]


def test_truncation_is_the_finish_reason_not_the_text():
    """A cut output is known by its finish reason and its full budget; its text can still end in a
    number (row 9 ends "12. Now," and 12 is the gold), which is why G2 counts truncation from
    ``finish_reason`` and the record keeps it."""
    from rlexp.evaluation.answers import extract_answer
    from rlexp.experiment.records import make_record

    cut = [r for r in ROWS if r["finish_reason"] == "length"]
    assert [r["seed"] for r in cut] == [1, 9, 17] and all(r["completion_tokens"] == 256 for r in cut)
    assert all(r["stated_answer"] is None for r in cut)
    row9 = next(r for r in cut if r["seed"] == 9)
    assert extract_answer(row9["output"])[0] == row9["gold"] == "12"
    record = make_record({"problem_hash": "h", "answer": row9["gold"]}, row9["output"], row9["finish_reason"],
                         100, row9["completion_tokens"], "math_verify")
    assert record["finish_reason"] == "length" and record["completion_tokens"] == 256
