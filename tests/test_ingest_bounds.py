"""`rlexp ingest` on hostile inputs (issue #35): each is refused in one line naming the file and the
limit, or read in time linear in its size, with what could not be read reported.

The limits are stated (rlexp.experiment.files: ``MAX_LOG_BYTES``, ``MAX_LOG_LINES``; the readers'
``MAX_LINE_CHARS``, ``MAX_RECORD_CHARS``); each input below is sized so that a reader that is not
linear on it (a lazy pattern retried from each of 45,000 starts, a record re-joined by copying)
would take minutes, and the bound each test asserts is a few seconds.
"""

from __future__ import annotations

import time

import pytest

from rlexp.experiment import files
from tests.test_metric_logs import cli

SECONDS = 15.0  # each case below reads in well under a second here; quadratic ones took minutes

HOSTILE = {
    # (file name, trainer, format): text
    "a line of 5 MB": ("verl.log", "verl", None, "step:1 - a:" + "9" * 5_000_000 + "\nstep:2 - a:1\n"),
    "a dict line of 5 MB": ("train.log", "openrlhf", None,
                            "Global step 1: {'a': " + "9" * 5_000_000 + "}\nGlobal step 2: {'a': 1}\n"),
    "10^6 tiny lines": ("verl.log", "verl", None, "x\n" * 1_000_000 + "step:1 - a:1\n"),
    "10^6 tiny lines of JSON": ("m.jsonl", "local", "jsonl", "{}\n" * 1_000_000 + '{"step": 1, "a": 1}\n'),
    "a JSON line nested 10^5 deep": ("m.jsonl", "local", "jsonl", "[" * 100_000 + '\n{"step": 1, "a": 1}\n'),
    "45,000 eval heads on one line": ("train.log", "openrlhf", None,
                                      "Evaluation completed " * 45_000 + "\nGlobal step 1: {'a': 1}\n"),
    "a tqdm bar of 60 KB": ("train.log", "openrlhf", None, "Train epoch [1/1]: 100%" + "[a," * 20_000 + "\n"),
    "a record wrapped over 250 lines of 400 KB": (
        "verl.log", "verl", None, "step:1 - a:1 - b:" + "\n".join(["2" * 400_000] * 250) + "\nstep:2 - a:1\n"),
    "a dict never closed over 250 lines": (
        "train.log", "openrlhf", None, "Global step 1: {" + "\n".join(["'a" * 200_000] * 250)
        + "\nGlobal step 2: {'a': 1}\n"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input_is_read_in_bounded_time_or_refused_in_one_line(tmp_path, capsys, case):
    name, trainer, fmt, text = HOSTILE[case]
    path = tmp_path / name
    path.write_text(text)
    args = ["ingest", str(path), "--trainer", trainer] + (["--format", fmt] if fmt else [])
    start = time.perf_counter()
    rc, out, err = cli(args, capsys)
    elapsed = time.perf_counter() - start
    assert elapsed < SECONDS, (case, elapsed)
    assert "Traceback" not in err
    if rc == 2:
        assert err.count("\n") <= 1 and str(path) in err, err
    else:
        assert rc == 0 and "read" in out


def test_a_hostile_line_is_reported_not_skipped(tmp_path, capsys):
    path = tmp_path / "verl.log"
    path.write_text("step:1 - a:1\nstep:2 - a:" + "9" * 2_000_000 + "\nstep:3 - a:1\n")
    rc, out, _ = cli(["ingest", str(path), "--trainer", "verl"], capsys)
    assert rc == 0 and "read 2 steps" in out and "1 line not understood: 2" in out


def test_a_trainer_state_nested_too_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": ' + "[" * 1_000_000)
    rc, _, err = cli(["ingest", str(path), "--trainer", "trl"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "nested too deep" in err


@pytest.mark.parametrize(("limit", "value", "text", "said"), [
    ("MAX_LOG_BYTES", 1000, "step:1 - a:1\n" * 100, "over the limit of 1,000 for a log"),
    ("MAX_LOG_LINES", 50, "step:1 - a:1\n" * 100, "100 lines: over the limit of 50 for a log"),
])
def test_a_log_over_the_stated_limits_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch, limit, value,
                                                                   text, said):
    monkeypatch.setattr(files, limit, value)
    path = tmp_path / "verl.log"
    path.write_text(text)
    rc, out, err = cli(["ingest", str(path), "--trainer", "verl"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and said in err and str(path) in err
    monkeypatch.setattr(files, limit, value * 10)
    assert cli(["ingest", str(path), "--trainer", "verl"], capsys)[0] == 0  # under the limit: read


def test_tensorboard_event_files_over_the_limit_are_refused_before_they_are_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(files, "MAX_LOG_BYTES", 1000)
    run = tmp_path / "tb" / "run"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(b"\0" * 2000)  # not even an event file: never opened
    rc, _, err = cli(["ingest", str(tmp_path / "tb"), "--trainer", "openrlhf"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "2,000 bytes of event files: over the limit of 1,000" in err
