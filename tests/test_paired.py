"""Paired records: joining by problem_hash, refusing bad input, the paired-record file format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.experiment.paired import (
    PAIRED_KEYS,
    load_outcomes,
    pair_files,
    read_paired_records,
    write_paired_records,
)


def write(path: Path, rows: list[dict] | str) -> Path:
    path.write_text(rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows))
    return path


def recs(pairs: list[tuple[str, object]], output: bool = True) -> list[dict]:
    return [{"problem_hash": h, "correct": y, **({"output": f"out-{h}-{y}"} if output else {})} for h, y in pairs]


def test_join_is_by_hash_not_by_line_order(tmp_path):
    base = write(tmp_path / "b.jsonl", recs([("h1", 1), ("h2", 0), ("h3", 1)]))
    new = write(tmp_path / "n.jsonl", recs([("h3", 0), ("h1", 1), ("h2", True)]))
    ps = pair_files(base, new)
    assert [r.problem_hash for r in ps.records] == ["h1", "h2", "h3"]
    assert ps.y_baseline == [1, 0, 1]
    assert ps.y_new == [1, 1, 0]
    assert ps.records[1].output_new == "out-h2-True"
    assert ps.dropped == 0


def test_mismatched_sets_refused_unless_intersect(tmp_path):
    base = write(tmp_path / "b.jsonl", recs([("h1", 1), ("h2", 0), ("h3", 1)]))
    new = write(tmp_path / "n.jsonl", recs([("h1", 1), ("h2", 1), ("h4", 1), ("h5", 0)]))
    with pytest.raises(InputError) as err:
        pair_files(base, new)
    msg = err.value.one_line()
    assert "n.jsonl" in msg and "problem_hash" in msg and "1 only in the baseline, 2 only in the new" in msg
    assert "\n" not in msg
    ps = pair_files(base, new, intersect=True)
    assert [r.problem_hash for r in ps.records] == ["h1", "h2"]
    assert ps.dropped_base_only == ("h3",)
    assert ps.dropped_new_only == ("h4", "h5")


def test_disjoint_sets_fail_even_with_intersect(tmp_path):
    base = write(tmp_path / "b.jsonl", recs([("h1", 1)]))
    new = write(tmp_path / "n.jsonl", recs([("h2", 1)]))
    with pytest.raises(InputError, match="no problem in common"):
        pair_files(base, new, intersect=True)


@pytest.mark.parametrize("bad", [2, -1, 0.5, 1.0, "1", None, [1]])
def test_non_binary_correct_is_input_error(tmp_path, bad):
    path = write(tmp_path / "r.jsonl", recs([("h1", 1), ("h2", bad)]))
    with pytest.raises(InputError) as err:
        load_outcomes(path)
    assert err.value.field == "line 2: correct"


def test_missing_correct_and_bad_hash(tmp_path):
    with pytest.raises(InputError, match="correct"):
        load_outcomes(write(tmp_path / "a.jsonl", [{"problem_hash": "h1"}]))
    for bad in ("", 7, None):
        with pytest.raises(InputError) as err:
            load_outcomes(write(tmp_path / "b.jsonl", [{"problem_hash": bad, "correct": 1}]))
        assert err.value.field == "line 1: problem_hash"


def test_duplicate_hash_is_input_error(tmp_path):
    path = write(tmp_path / "r.jsonl", recs([("h1", 1), ("h2", 0), ("h1", 0)]))
    with pytest.raises(InputError) as err:
        load_outcomes(path)
    assert err.value.field == "line 3: problem_hash"
    assert "first at line 1" in err.value.message


def test_empty_truncated_nan_and_missing_files(tmp_path):
    with pytest.raises(InputError, match="empty"):
        load_outcomes(write(tmp_path / "e.jsonl", ""))
    with pytest.raises(InputError, match="empty"):
        load_outcomes(write(tmp_path / "blank.jsonl", "\n\n"))
    torn = '{"problem_hash": "h1", "correct": 1}\n{"problem_hash": "h2", "corr'
    with pytest.raises(InputError) as err:
        load_outcomes(write(tmp_path / "t.jsonl", torn))
    assert err.value.field == "line 2" and "truncated" in err.value.message
    with pytest.raises(InputError, match="non-finite"):
        load_outcomes(write(tmp_path / "nan.jsonl", '{"problem_hash": "h1", "correct": NaN}\n'))
    with pytest.raises(InputError, match="not found"):
        load_outcomes(tmp_path / "absent.jsonl")


def test_paired_records_round_trip_in_sop_format(tmp_path):
    base = write(tmp_path / "b.jsonl", recs([("h1", 1), ("h2", 0)]))
    new = write(tmp_path / "n.jsonl", recs([("h1", 0), ("h2", 1)], output=False))
    ps = pair_files(base, new)
    out = write_paired_records(tmp_path / "paired" / "p.jsonl", ps.records)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0] == {"problem_hash": "h1", "y_baseline": 1, "y_new": 0, "output_baseline": "out-h1-1",
                        "output_new": None}
    assert all(tuple(line) == PAIRED_KEYS for line in lines)
    assert tuple(read_paired_records(out)) == ps.records


def test_read_paired_records_is_strict(tmp_path):
    good = {"problem_hash": "h1", "y_baseline": 1, "y_new": 0, "output_baseline": None, "output_new": "x"}
    with pytest.raises(InputError, match="missing key"):
        read_paired_records(write(tmp_path / "a.jsonl", [{k: v for k, v in good.items() if k != "y_new"}]))
    with pytest.raises(InputError) as err:
        read_paired_records(write(tmp_path / "b.jsonl", [{**good, "y_new": 3}]))
    assert err.value.field == "line 1: y_new"
    with pytest.raises(InputError, match="duplicate"):
        read_paired_records(write(tmp_path / "c.jsonl", [good, good]))


def test_write_pairs_for_attempt_is_the_one_writer(tmp_path):
    from rlexp.experiment.paired import paired_path, write_pairs_for_attempt
    from rlexp.experiment.records import record_path

    att = tmp_path / "a1"
    for name in ("baseline_s0", "baseline_sota", "global_step2"):
        for role in ("id", "sanity"):
            if name == "global_step2" and role == "sanity":
                continue  # a missing file: that pair is skipped
            path = record_path(att, name, role)
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path, recs([("h1", 1), ("h2", int(name == "global_step2"))]))
    written = write_pairs_for_attempt(att, ["baseline_s0", "baseline_sota"], ["global_step2"], ["id", "sanity"],
                                      baseline_vs_baseline=True)
    assert [p.name for p in written] == [
        "baseline_s0__global_step2__id.jsonl", "baseline_sota__global_step2__id.jsonl",
        "baseline_s0__baseline_sota__id.jsonl", "baseline_s0__baseline_sota__sanity.jsonl"]
    assert written[0] == paired_path(att, "baseline_s0", "global_step2", "id")
    assert [(r.y_baseline, r.y_new) for r in read_paired_records(written[0])] == [(1, 1), (0, 1)]
    # pairs joined beforehand are written as given (only those), without reading any record file again
    joined = {("baseline_s0", "global_step2", "id"): pair_files(record_path(att, "baseline_s0", "id"),
                                                                 record_path(att, "baseline_s0", "id"))}
    record_path(att, "baseline_s0", "id").write_text("not json\n")
    record_path(att, "baseline_sota", "id").write_text("not json\n")
    out = write_pairs_for_attempt(att, ["baseline_s0", "baseline_sota"], ["global_step2"], ["id", "sanity"],
                                  joined=joined)
    assert out == [paired_path(att, "baseline_s0", "global_step2", "id")]
    assert [(r.y_baseline, r.y_new) for r in read_paired_records(out[0])] == [(1, 1), (0, 0)]
