"""Numeric options and SOP numbers are bounded where they are declared: NaN, inf, negative or
huge values are a one-line refusal (exit 2) before the command runs, never a traceback or a spin."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlexp.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("argv", "option"), [
    (["compare", "a", "b", "--seed", "-1"], "--seed"),
    (["compare", "a", "b", "--confidence", "nan"], "--confidence"),
    (["sop", "calibrate", "--effect-pp", "nan"], "--effect-pp"),
    (["sop", "calibrate", "--discordance", "nan"], "--discordance"),
    (["sop", "calibrate", "--correlation", "nan"], "--correlation"),
    (["sop", "calibrate", "--seed", str(2**64)], "--seed"),
    (["demo", "--seed", str(2**64)], "--seed"),
    (["demo", "--seed", "-1"], "--seed"),
    (["launch", "x", "--poll-s", "nan"], "--poll-s"),
    (["launch", "x", "--poll-s", "-1"], "--poll-s"),
    (["launch", "x", "--poll-s", "inf"], "--poll-s"),
    (["guard", "audit", "x", "--seed", "-1"], "--seed"),
])
def test_numeric_options_are_bounded(tmp_path, capsys, monkeypatch, argv, option):
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == [] and time.perf_counter() - start < 5


@pytest.mark.parametrize(("line", "value", "field", "needle"), [
    ("  resamples:", "1000000000000", "bootstrap.resamples", "at most 1000000"),
    ("  seed:", "-1", "bootstrap.seed", "from 0 to 4294967295"),
    ("  seed:", "9" * 5000, "", "number too large"),
])
def test_sop_numbers_are_bounded(tmp_path, capsys, line, value, field, needle):
    lines = (REPO / "sop" / "sop-v2.1-final.yaml").read_text().splitlines()
    index = next(i for i, text in enumerate(lines) if text.startswith(line))
    lines[index] = f"{line} {value}"
    sop = tmp_path / "sop.yaml"
    sop.write_text("\n".join(lines) + "\n")
    assert main(["sop", "show", "--sop", str(sop)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{sop}: {field}" in err and needle in err, err
