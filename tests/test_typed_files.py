"""What the stages write as objects is read back as those objects (rlexp.experiment.results and
rlexp.experiment.verdicts): each reader on a file a stage really wrote gives the object back, the
object's to_dict() is the file, and from_dict(to_dict(x)) == x. The decision's round trip is in
test_decide (it needs that file's fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlexp.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def test_a_guard_verdict_reads_back_as_the_verdict_written(tmp_path):
    from rlexp.experiment.verdicts import read_verdict, write_verdict
    from rlexp.protocol.verdict import Verdict
    from rlexp.stages.guard_baseline import parser_ceiling

    records = [{"problem_hash": f"p{i}", "output": f"\\boxed{{{i}}}", "answer": str(i), "parse_method": "boxed",
                "correct": i % 2, "finish_reason": "stop", "completion_tokens": 3} for i in range(10)]
    verdict = parser_ceiling(records)
    path = write_verdict(tmp_path, verdict)
    assert read_verdict(tmp_path, "g2") == verdict
    assert read_verdict(tmp_path, "g2").to_dict() == json.loads(path.read_text())
    assert read_verdict(tmp_path, "g4") is None
    # details written from tuples (the early-stop rule's smoothed curve) come back as tuples
    curve = Verdict("early_stop", False, "r", {"best_step": 4}, ("why",), ((2, 0.5), (4, None)))
    assert Verdict.from_dict(curve.to_dict()) == curve
    path.write_text(json.dumps({**verdict.to_dict(), "passed": "yes"}))
    with pytest.raises(InputError, match=r"g2\.json: passed: must be true, false or null"):
        read_verdict(tmp_path, "g2")


def test_the_selection_reads_back_as_the_one_registered(eval_experiment):
    from rlexp.experiment.results import read_selection
    from rlexp.protocol.gates import RegisteredSelection
    from rlexp.spec import load_attempt
    from rlexp.stages.evaluate import select_checkpoints

    att = eval_experiment(steps=(2, 4, 6), mid=2)
    assert read_selection(att) is None
    payload = select_checkpoints(load_attempt(att))
    written = json.loads((att / "eval" / "selection.json").read_text())
    assert written == payload
    read = read_selection(att)
    assert read is not None and read.to_dict() == written
    # monitor_acc rises with the step (the fixture), so the best by monitor is the last step
    assert (read.final, read.mid, read.best_by_monitor) == (6, 2, 6)
    assert read.checkpoints == ("global_step6", "global_step2") and read.saved_steps == (2, 4, 6)
    assert RegisteredSelection.from_dict(read.to_dict()) == read
    assert [(c.name, c.role) for c in read.selected()] == [("global_step6", "final+best_by_monitor"),
                                                           ("global_step2", "mid")]
    extra = RegisteredSelection.from_dict({**written, "checkpoints": [*written["checkpoints"], "global_step4"]})
    assert [(c.step, c.role) for c in extra.selected()][-1] == (4, "pre-registered")
    (att / "eval" / "selection.json").write_text(json.dumps({**written, "checkpoints": ["global_step06"]}))
    with pytest.raises(InputError, match="checkpoints: must be a list of 'global_step{N}' names"):
        read_selection(att)


def test_the_plan_reads_back_as_the_plan_written(tmp_path):
    from rlexp.experiment.results import read_plan
    from rlexp.protocol.plan import PlanResult
    from rlexp.stages.plan import plan

    exp = tmp_path / "seed-a30"
    shutil.copytree(REPO / "experiments" / "seed-a30", exp)
    planned = plan(exp / "a30")
    read = read_plan(exp / "a30")
    assert read == planned
    assert read.to_dict() == json.loads((exp / "a30" / "plan.json").read_text())
    assert PlanResult.from_dict(planned.to_dict(), planned.path) == planned
    assert read.global_steps_total == read.to_dict()["steps"]["global_steps_total"] > 0
    assert [c.to_dict() for c in read.checks] == read.to_dict()["checks"]
    broken = read.to_dict()
    broken["checks"] = [{**broken["checks"][0], "severity": "fatal"}] if broken["checks"] else [{"name": 1}]
    (exp / "a30" / "plan.json").write_text(json.dumps(broken))
    with pytest.raises(InputError, match=r"plan\.json: checks\[0\]\.(severity|name): must be"):
        read_plan(exp / "a30")
