"""Validate before the first write: a command refusing its input (exit 2, one line) leaves every file
of the experiment as it was — no eval lock file, no model-hash cache, no record metadata.

The input-gate tests compare the tree without the lock and the hash cache; here nothing is left out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from input_fixture import build_experiment

from rlexp.cli import main


@pytest.fixture(scope="module")
def base_experiment(tmp_path_factory, tiny_base_model):
    return build_experiment(tmp_path_factory.mktemp("first-write"), tiny_base_model)


@pytest.fixture
def exp(base_experiment, tmp_path):
    copy = tmp_path / "exp"
    shutil.copytree(base_experiment, copy, symlinks=True)
    return copy


def every_file(root: Path) -> dict[str, str]:
    """Every path below ``root`` (hidden files included) with its SHA-256; directories as "dir"."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def refuses_and_writes_nothing(argv: list[str], capsys, root: Path, expected: str) -> None:
    before = every_file(root)
    capsys.readouterr()
    code = main(argv)
    err = "".join(line.rsplit("\r", 1)[-1] for line in capsys.readouterr().err.splitlines(keepends=True)
                  if "Loading weights" not in line.rsplit("\r", 1)[-1])  # transformers' loading bar
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rlexp: ") and expected in err, err
    after = every_file(root)
    assert sorted(set(after) - set(before)) == [] and sorted(set(before) - set(after)) == []
    assert [k for k in before if before[k] != after[k]] == []


def test_guard_g2_refuses_a_bad_record_line_before_writing_lock_or_hash_cache(exp, capsys):
    records = exp / "a2" / "eval" / "baseline_s0" / "ood_primary.jsonl"
    lines = records.read_text().splitlines()
    lines[1] = '{"problem_hash": '  # a damaged middle line (not a torn tail: that one is dropped)
    records.write_text("\n".join(lines) + "\n")
    (exp / "a2" / "eval" / ".hash_cache.json").unlink(missing_ok=True)  # g2 would write it first, before
    refuses_and_writes_nothing(["guard", "g2", str(exp / "a2")], capsys, exp, "ood_primary.jsonl: line 2")
    assert not (exp / "a2" / "eval" / ".lock").exists()


def test_guard_g2_refuses_records_of_another_dataset_before_any_write(exp, capsys):
    meta = exp / "a2" / "eval" / "baseline_s0" / "ood_primary.meta.json"
    doc = json.loads(meta.read_text())
    doc["dataset_sha256"] = "0" * 64
    meta.write_text(json.dumps(doc))
    (exp / "a2" / "eval" / ".hash_cache.json").unlink(missing_ok=True)
    refuses_and_writes_nothing(["guard", "g2", str(exp / "a2")], capsys, exp, "dataset_sha256: changed since")


def test_eval_refuses_records_without_metadata_before_any_write(eval_experiment, capsys):
    # the id set's records of global_step2 lack their .meta.json: `rlexp eval` used to create its lock
    # file, hash the model into the cache and evaluate ood_primary (records, metadata) before refusing
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 3, "id": 2, "sanity": 1}, steps=(2,), mid=2)
    stray = att / "eval" / "global_step2" / "id.jsonl"
    stray.parent.mkdir(parents=True)
    stray.write_text(json.dumps({"problem_hash": "ab" * 32, "correct": 1}) + "\n")
    refuses_and_writes_nothing(["eval", str(att)], capsys, att.parent, "records without their metadata file")


# (file damaged, text written there, argv): each verb's own input, refused before the verb's first write
# (plan.json; the reports and mlflow.db, placed inside the experiment so that they would show)
OTHER_VERBS = [
    ("a2/attempt.yaml", "id: a2\nparent: a1\nchange: {eps_clip: 0.1}\nrecipe: {eps_clip: wide}\n",
     ["plan", "{a2}"], "eps_clip"),
    ("a2/launch/state.json", '{"state": 7}', ["status", "{exp}"], "state.json"),
    ("a2/metrics.jsonl", '{"global_step": 1, "reward": "high"}\n',
     ["report", "{a2}", "--reports-dir", "{exp}/reports", "--tracking-uri", "sqlite:///{exp}/mlflow.db"],
     "metrics.jsonl: line 1"),
    (None, None, ["compare", "{a2}/eval/global_step1/id.jsonl", "{exp}/data/pool.jsonl"], "pool.jsonl"),
    (None, None, ["sop", "show", "--sop", "{a2}/plan.json"], "plan.json"),
]


@pytest.mark.parametrize(("rel", "text", "argv", "expected"), OTHER_VERBS, ids=[v[2][0] for v in OTHER_VERBS])
def test_other_commands_refuse_before_any_write(exp, capsys, rel, text, argv, expected):
    if rel:
        (exp / rel).write_text(text)
    argv = [a.format(exp=exp, a2=exp / "a2") for a in argv]
    refuses_and_writes_nothing(argv, capsys, exp, expected)
    assert not (exp / "reports").exists() and not (exp / "mlflow.db").exists()


def test_demo_refuses_a_directory_that_is_a_file_before_any_write(tmp_path, capsys):
    target = tmp_path / "not-a-dir"
    target.write_text("x\n")
    refuses_and_writes_nothing(["demo", "--fast", "--dir", str(target)], capsys, tmp_path, "not-a-dir")
