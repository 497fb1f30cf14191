"""The input gate at the roots the issue's battery found: every file a command reads is checked by
that command (dataset rows at plan, record metadata at decide, the SOTA pin, guard verdicts, record
fields), refusals write nothing (launch, ladder, report), network addresses are probed with a short
timeout. Each case: exit 2, one line naming the file (or option) and the field, tree unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest
from input_fixture import build_experiment

from rlexp.cli import main


@pytest.fixture(scope="module")
def base_experiment(tmp_path_factory, tiny_base_model):
    return build_experiment(tmp_path_factory.mktemp("roots"), tiny_base_model)


@pytest.fixture
def exp(base_experiment, tmp_path, monkeypatch):
    copy = tmp_path / "exp"
    shutil.copytree(base_experiment, copy, symlinks=True)
    monkeypatch.chdir(tmp_path)  # a default MLflow store or optuna.db would land here: counted as written
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RLEXP_STUDY_STORAGE", raising=False)
    return copy


def digest(root: Path) -> dict[str, str]:
    """Every entry below ``root``, hidden ones included (a special file by its kind)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            out[rel] = "special"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def refused(argv: list[str], capsys, root: Path, *expected: str) -> str:
    before = digest(root)
    capsys.readouterr()
    start = time.perf_counter()
    code = main(argv)
    err = "".join(line.rsplit("\r", 1)[-1] for line in capsys.readouterr().err.splitlines(keepends=True)
                  if "Loading weights" not in line.rsplit("\r", 1)[-1])
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rlexp: ") and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    assert digest(root) == before, err
    assert time.perf_counter() - start < 30
    return err


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again at once: nothing listens there


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_rows(path: Path, records: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r.pop("prompt"), "line 2: prompt"),
    (lambda r: r.update(prompt=7), "line 2: prompt"),
    (lambda r: r.update(prompt=None), "line 2: prompt"),
    (lambda r: r.update(answer=["1"]), "line 2: answer"),
])
def test_plan_checks_every_dataset_row(exp, capsys, mutate, field):
    data = rows(exp / "data/ood_primary.jsonl")
    mutate(data[1])
    write_rows(exp / "data/ood_primary.jsonl", data)
    (exp / "a2/plan.json").unlink()  # old: "ready: 0 errors" and a plan.json
    refused(["plan", str(exp / "a2")], capsys, exp, f"ood_primary.jsonl: {field}")


def test_plan_refuses_duplicate_rows_and_huge_numbers(exp, capsys):
    data = rows(exp / "data/pool.jsonl")
    write_rows(exp / "data/pool.jsonl", [*data, data[0]])
    refused(["plan", str(exp / "a2")], capsys, exp, "pool.jsonl: line 9: prompt", "duplicate")
    write_rows(exp / "data/pool.jsonl", data)
    with open(exp / "data/pool.jsonl", "a") as fh:
        fh.write('{"prompt": "9+9=", "answer": 1e999}\n')
    refused(["plan", str(exp / "a2")], capsys, exp, "pool.jsonl: line 9: answer", "not a finite number")


@pytest.mark.parametrize("kind", ["fifo", "loop"])
def test_a_dataset_that_is_a_fifo_or_a_symlink_loop_is_refused_at_plan(exp, capsys, kind):
    target = exp / "data/pool.jsonl"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)  # old: plan passed, launch's trainer blocked on it
    else:
        target.symlink_to(target)  # old: RuntimeError traceback
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml: datasets.pool.path",
            "FIFO" if kind == "fifo" else "symlink loop")


@pytest.mark.parametrize(("change", "needle"), [
    ("invalid", "malformed JSON"), ("list", "expected a JSON object"), ("directory", "directory"),
    ("missing", "file not found"), ("model", "model_sha256"), ("max_tokens", "decoding"),
])
def test_decide_reads_the_records_metadata(exp, capsys, change, needle):
    meta_file = exp / "a2/eval/global_step2/ood_primary.meta.json"
    meta = json.loads(meta_file.read_text())
    if change == "invalid":
        meta_file.write_text("{not json")
    elif change == "list":
        meta_file.write_text("[]")
    elif change == "directory":
        meta_file.unlink()
        meta_file.mkdir()
    elif change == "missing":
        meta_file.unlink()
    elif change == "model":
        meta_file.write_text(json.dumps({**meta, "model_sha256": "f" * 64}))
    else:
        meta_file.write_text(json.dumps({**meta, "decoding": {**meta["decoding"], "max_tokens": 999}}))
    refused(["decide", str(exp / "a2")], capsys, exp, "global_step2/ood_primary.meta.json", needle)


def test_sota_pin_attempt_is_a_name_not_a_path(exp, capsys):
    (exp / "sota.json").write_text(json.dumps({"attempt": "../../../etc", "checkpoint": "global_step2",
                                               "path": "x", "decided_at": "2026-01-01T00:00:00Z"}))
    refused(["decide", str(exp / "a2")], capsys, exp, "sota.json: attempt", "no path")


@pytest.mark.parametrize(("field", "value"), [("finish_reason", 3), ("parse_method", "bogus"), ("output", None)])
def test_record_fields_are_checked_by_every_reader(exp, capsys, field, value):
    path = exp / "a2/eval/baseline_s0/ood_primary.jsonl"
    data = rows(path)
    data[0][field] = value
    write_rows(path, data)
    refused(["guard", "g2", str(exp / "a2")], capsys, exp, f"ood_primary.jsonl: line 1: {field}")
    refused(["decide", str(exp / "a2")], capsys, exp, f"ood_primary.jsonl: line 1: {field}")


def test_report_refuses_a_guard_file_that_is_not_a_verdict(exp, capsys):
    (exp / "a2/guards/g4.json").write_text("[1, 2]")  # old: accepted, the report went on without it
    refused(["report", str(exp / "a2"), "--tracking-uri", "off", "--reports-dir", str(exp / "reports")],
            capsys, exp, "guards/g4.json", "not a guard verdict")


@pytest.mark.parametrize("uri", ["foo://bar", "http://127.0.0.1:{port}", "postgresql://u:pw@127.0.0.1:{port}/db",
                                 "http://[::1"])
def test_report_refuses_a_bad_or_dead_tracking_store_before_writing(exp, capsys, uri):
    uri = uri.format(port=dead_port())
    err = refused(["report", str(exp / "a2"), "--reports-dir", str(exp / "reports"), "--tracking-uri", uri],
                  capsys, exp.parent, "--tracking-uri")
    assert "pw" not in err  # the password is not echoed


def test_launch_refuses_a_dead_ray_address_before_plan_json(exp, capsys):
    (exp / "a2/plan.json").unlink()
    refused(["launch", str(exp / "a2"), "--ray-address", f"http://127.0.0.1:{dead_port()}", "--tracking-uri", "off"],
            capsys, exp.parent, "--ray-address", "unreachable")


def test_launch_refuses_an_unknown_tracking_scheme_before_writing(exp, capsys):
    (exp / "a2/plan.json").unlink()
    refused(["launch", str(exp / "a2"), "--tracking-uri", "foo://bar"], capsys, exp.parent, "--tracking-uri")


LADDER = "root: a1\nvariables: {eps_clip: [0.1, 0.3]}\nseeds: [42, 43]\nrungs: 3\n"


@pytest.mark.parametrize(("change", "needle"), [
    ("seed=7", "seeds are replications"),                       # old: a rung was written
    ("eps_clip=0.2", "changes no training variable"),  # the parent's own value
    ("eps_clip=" + "1" * 5000, "number too large"),             # old: ValueError traceback
    ("eps_clip=" + "[" * 100 + "]" * 100, "nested deeper"),
    ("nonsense_key=1", "--change"),
])
def test_ladder_change_refusals_write_nothing(exp, capsys, change, needle):
    (exp / "ladder.yaml").write_text(LADDER)
    refused(["ladder", "propose", str(exp), "--change", change], capsys, exp.parent, needle)
    assert not list(exp.parent.rglob("optuna.db"))


def test_compare_input_that_is_a_fifo_does_not_hang(exp, capsys):
    fifo = exp / "pipe.jsonl"
    os.mkfifo(fifo)
    refused(["compare", str(fifo), str(exp / "a2/eval/global_step2/ood_primary.jsonl")], capsys, exp, "FIFO")


@pytest.mark.parametrize(("change", "field"), [
    ({"final": -1}, "final"),                                 # old: blamed eval/global_step-1/ood_primary.jsonl
    ({"best_by_monitor": 10**30}, "best_by_monitor"),
    ({"mid": 99}, "mid"),                                     # not among the listed checkpoints
    ({"checkpoints": ["global_step2", "global_step2"]}, "checkpoints"),
    ({"checkpoints": ["global_step../x"]}, "checkpoints"),
])
def test_a_bad_selection_is_blamed_on_selection_json(exp, capsys, change, field):
    path = exp / "a2/eval/selection.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    refused(["decide", str(exp / "a2")], capsys, exp, f"selection.json: {field}")


@pytest.mark.parametrize(("doc", "field"), [
    ({"git": {"sha": 100, "dirty": False}}, "git.sha"),   # found by the fuzzer: a TypeError in report
    ({"git": "abc"}, "git"),
    ({"datasets": {"pool": {"sha256": ["x"]}}}, "datasets.pool.sha256"),
    ({"datasets": {"pool": 5}}, "datasets.pool"),
])
def test_provenance_nested_fields_are_typed(exp, capsys, doc, field):
    (exp / "a2/launch/provenance.json").write_text(json.dumps(doc))
    refused(["report", str(exp / "a2"), "--tracking-uri", "off", "--reports-dir", str(exp / "reports")],
            capsys, exp, f"provenance.json: {field}")
