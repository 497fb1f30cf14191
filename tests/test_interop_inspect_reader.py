"""Where inspect_ai is installed (the optional extra ``rlexp[inspect]``, which scripts/setup installs, so CI
runs this), its ``read_eval_log`` and rlexp's own archive reader give the same items."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.evaluation.harnesses import Choice, inspect_log, read_items

DATA = Path(__file__).parent / "data" / "interop" / "inspect"


@pytest.mark.parametrize(("log", "choice"), [("model_a.eval", Choice(scorer="match")),
                                             ("epochs_b.eval", Choice()), ("errored.eval", Choice())])
def test_inspect_ai_reader_and_ours_agree(log, choice, monkeypatch):
    pytest.importorskip("inspect_ai")
    pytest.importorskip("zstandard")
    theirs = read_items(DATA / log, choice=choice, intersect=True)
    monkeypatch.setattr(inspect_log, "use_inspect_ai", lambda: False)
    ours = read_items(DATA / log, choice=choice, intersect=True)
    assert theirs.items == ours.items and theirs.dropped == ours.dropped
    assert theirs.harness_version == ours.harness_version
