"""Console records wrapped over several lines (issue #30): re-joined, or flagged with their lines;
never a metric lost without a word, never a number read shorter than it was.

The verl records are real: excerpts pasted in public issues (tests/data/console_logs, with their
sources in its README), with the wraps their authors' terminals put in them: inside a key
(``critic`` / ``/rewards/min``) and inside a number (``0.0365777518600225`` / ``45``). The truth a
read is held to is the same text with the wrap removed (the wrap inserts a line break and nothing
else), read as one line. The same real records are then wrapped at every width a terminal could
have, as OpenRLHF's own log lines are (built by its logging format, tests/test_metric_logs.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlexp.trainers.openrlhf.metrics import read_openrlhf_console
from rlexp.trainers.verl.metrics import read_verl_console
from rlexp.training import log_files
from tests.test_metric_logs import cli, openrlhf_lines, status_011

DATA = Path(__file__).parent / "data" / "console_logs"

# file -> (the wraps in it, as the issue has them; the records' steps; the records flagged as cut:
# each excerpt that ends inside an item; lines)
REAL = {
    "verl-7412-head.log": (["critic\n/rewards/min"], [34], [(1, 2)]),
    "verl-316.log": (["prom\npt_length/min"], [5], [(1, 2)]),
    "sglang-verl-106.log": (["c\nritic/returns/min", "response_length/me\nan"], [80, 83], [(2, 3)]),
    "verl-2060.log": ([], [0, 1], [(3, 3)]),
}


def unwrapped(text: str, wraps: list[str]) -> str:
    for wrap in wraps:
        assert text.count(wrap) == 1
        text = text.replace(wrap, wrap.replace("\n", ""))
    return text


def items(record: str) -> dict[str, float]:
    """The oracle: a one-line verl record's complete ``key:value`` items, read with float() (the
    last item of an excerpt that ends inside one is left out: it has no value, or a cut one)."""
    body = record.split(" - ", 1)[1].removesuffix(" -")
    parts = body.split(" - ")
    out = {}
    for part in parts[:-1] if not re.fullmatch(r"[^:]+:-?\d+\.\d+(e-?\d+)?|[^:]+:-?\d+", parts[-1]) else parts:
        key, _, value = part.partition(":")
        out[key] = float(value)
    return out


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_pasted_wraps_lose_no_metric(name):
    wraps, steps, cut = REAL[name]
    text = (DATA / name).read_text()
    read = read_verl_console(text)
    truth = read_verl_console(unwrapped(text, wraps))  # the same records on one line each
    assert [r["global_step"] for r in read.rows] == steps
    assert read.rows == truth.rows  # every metric of the one-line records, same names, same values
    assert read.cut == cut and read.not_understood == []
    assert len(read.rejoined) == len(wraps)
    # and what the one-line records hold is what float() reads from their items (none read short)
    for record, row in zip(
        [line for line in unwrapped(text, wraps).splitlines() if "step:" in line], read.rows, strict=True
    ):
        expected = items(record)
        assert len(expected) >= 3
        for key, value in expected.items():
            assert value in row.values(), (key, value)


def test_the_key_split_in_7412_is_recovered_and_the_excerpt_end_flagged():
    read = read_verl_console((DATA / "verl-7412-head.log").read_text())
    [row] = read.rows
    assert row["critic/rewards/min"] == -1.0 and row["critic/advantages/mean"] == -0.0423407182097435
    assert row["response_length/min"] == 38.0  # the last whole item before the excerpt's end


def test_the_number_split_in_7412_is_read_whole():
    """The tail excerpt starts inside a key: its record head is put back (the head excerpt's own
    ``(TaskRunner pid=222265) step:34``) in front of its first whole item."""
    tail = (DATA / "verl-7412-tail.log").read_text()
    record = "(TaskRunner pid=222265) step:34 - " + tail.split(" - ", 1)[1]
    read = read_verl_console(record)
    [row] = read.rows
    assert row["timing_s/adv"] == float("0.036577751860022545")  # 0.0365777518600225 + 45, not the head
    assert row["timing_s/update_actor"] == 472.1077583655715 and row["step_time_s"] == 1163.9566092677414
    assert read.rejoined == [1] and read.cut == [(1, 2)]  # it ends inside "perf/total_num_t..."


def test_the_cut_number_in_106_is_never_read_as_six():
    read = read_verl_console((DATA / "sglang-verl-106.log").read_text())
    step80 = read.rows[0]
    assert "timing_s/old_log_prob" not in step80  # "6." then the end of the excerpt: not 6.0
    assert step80["timing_s/reward"] == 1.036 and step80["critic/returns/min"] == 0.0
    assert read.rows[1]["response_length"] == 330.437  # response_length/me + an


def _clean_records() -> list[str]:
    """Real records, cut back to their last whole item (the excerpts end inside one)."""
    out = []
    for name, (wraps, _steps, _cut) in REAL.items():
        for line in unwrapped((DATA / name).read_text(), wraps).splitlines():
            if " - " in line and "step:" in line:
                record = line[line.index("step:"):].rsplit(" - ", 1)[0]
                out.append("(TaskRunner pid=1) " + record)
    return out


def hard_wrap(line: str, width: int, *, trim: bool) -> list[str]:
    """A terminal's wrap at ``width`` columns; ``trim``: the paste lost each line's trailing spaces."""
    chunks = [line[i:i + width] for i in range(0, len(line), width)]
    return [c.rstrip() for c in chunks] if trim else chunks


@pytest.mark.parametrize("trim", [False, True])
def test_real_records_wrapped_at_every_width_lose_nothing(trim):
    records = _clean_records()
    assert len(records) == 6
    one_line = read_verl_console("\n".join(records) + "\n")
    assert one_line.cut == [] and len(one_line.rows) == 6
    for width in range(20, 400):
        lines = [w for r in records for w in hard_wrap(r, width, trim=trim)]
        read = read_verl_console("\n".join(lines) + "\n")
        assert read.rows == one_line.rows, width
        assert read.cut == [] and read.not_understood == [], width


def test_a_number_cut_by_a_wrap_whose_rest_is_lost_is_flagged_not_shortened():
    record = _clean_records()[-1]  # verl-2060's step 1 (response_length/mean:288.698)
    head, rest = record.split("response_length/mean:288.", 1)
    whole = read_verl_console(f"{head}response_length/mean:288.\n{rest[:3]}{rest[3:]}\n")
    assert whole.rows[0]["response_length"] == 288.698 and whole.cut == []
    lost = read_verl_console(f"{head}response_length/mean:288.\n\nnext log line\n")  # the rest never pasted
    assert "response_length" not in lost.rows[0]  # not 288.0
    assert lost.cut == [(1, 1)] and lost.rows[0]["reward"] == 0.558  # critic/score/mean, before the cut


def test_a_record_head_cut_by_a_wrap_is_found():
    record = _clean_records()[0]
    at = record.index("step:") + 2
    read = read_verl_console(record[:at] + "\n" + record[at:] + "\n")
    assert read.rows == read_verl_console(record + "\n").rows


def test_a_key_that_wraps_into_step_is_not_a_new_record():
    """``training/global_`` then ``step:34 - ...``: the second line looks like a record of its own."""
    record = _clean_records()[0]
    at = record.index("training/global_step") + len("training/global_")
    read = read_verl_console(record[:at] + "\n" + record[at:] + "\n")
    assert read.rows == read_verl_console(record + "\n").rows and read.cut == []


def test_ingest_prints_the_flagged_lines(capsys):
    rc, out, _ = cli(["ingest", str(DATA / "verl-7412-head.log"), "--trainer", "verl", "--format", "verl-console"],
                     capsys)
    assert rc == 0
    assert "re-joined at lines 1" in out and "records cut and not re-joined" in out and "lines 1-2" in out
    rc, out, _ = cli(["ingest", str(DATA / "verl-7412-head.log"), "--trainer", "verl", "--format", "verl-console",
                      "--json"], capsys)
    assert json.loads(out)["cut"] == [{"first_line": 1, "last_line": 2}]


# --- OpenRLHF -----------------------------------------------------------------------------------


@pytest.mark.parametrize("trim", [False, True])
def test_openrlhf_records_wrapped_at_every_width_lose_nothing(trim):
    lines = openrlhf_lines([(s, status_011(s)) for s in (1, 2, 3)])
    one_line = read_openrlhf_console("\n".join(lines) + "\n", "openrlhf")
    for width in range(20, 300, 7):
        wrapped = [w for line in lines for w in hard_wrap(line, width, trim=trim)]
        read = read_openrlhf_console("\n".join(wrapped) + "\n", "openrlhf")
        assert read.rows == one_line.rows, width
        assert read.cut == [] and read.not_understood == [], width


def test_openrlhf_a_number_cut_and_not_continued_is_flagged_not_shortened(tmp_path):
    """``'reward': 368.`` then the next record: the dict never closes; the pairs before it are read,
    the cut one is left out (not 368.0) and the record's lines are flagged."""
    status = {"policy_loss": 0.01, "kl": 0.002, "reward": 368.902, "return": 0.25}
    first, second = openrlhf_lines([(1, status), (2, status)])
    cut = first[:first.index("368.") + len("368.")]
    read = log_files.read_log(
        (tmp_path / "train.log").write_text(f"{cut}\n{second}\n") and tmp_path / "train.log", "openrlhf")
    assert [r["global_step"] for r in read.rows] == [1, 2]
    assert "reward" not in read.rows[0] and read.rows[0]["policy_loss"] == 0.01
    assert read.rows[1]["reward"] == 368.902
    assert read.cut == [(1, 1)]
    joined = read_openrlhf_console(f"{cut}\n902, 'return': 0.25}}\n{second}\n", "openrlhf")  # the rest pasted below
    assert joined.rows[0]["reward"] == 368.902 and joined.cut == []


@pytest.mark.parametrize("after", ["=" * 40, "-" * 40, "done", "Training Progress: 10%"])
def test_a_line_after_a_whole_record_that_is_not_its_rest_is_left_alone(after):
    record = _clean_records()[-1]
    read = read_verl_console(f"{record}\n{after}\n")
    assert read.rows == read_verl_console(record + "\n").rows and read.rejoined == [] and read.cut == []


def test_a_cut_record_followed_by_the_next_record_is_not_merged_into_it():
    """verl-2060's step 1 ends inside a key ("prompt_length/m"): a record on the next line is its
    own, not the rest of that key."""
    text = (DATA / "verl-2060.log").read_text() + "step:2 - critic/score/mean:0.6\n"
    read = read_verl_console(text)
    assert [r["global_step"] for r in read.rows] == [0, 1, 2] and read.cut == [(3, 3)]
    assert read.rows[2]["reward"] == 0.6 and not any("mstep" in k for k in read.rows[1])
