"""The experiment directory's file primitives: atomic writes, durable appends, strict reads."""

import json

import pytest

from rlexp.errors import InputError
from rlexp.storage.files import (
    append_jsonl,
    atomic_write_json,
    load_yaml,
    read_json,
    read_jsonl,
    repair_torn_tail,
    sha256_file,
)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "plan.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert read_json(target) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_atomic_write_refuses_nan_and_keeps_old_file(tmp_path):
    target = tmp_path / "x.json"
    atomic_write_json(target, {"ok": True})
    with pytest.raises(ValueError):
        atomic_write_json(target, {"bad": float("nan")})
    assert read_json(target) == {"ok": True}
    assert len(list(tmp_path.iterdir())) == 1


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(InputError) as info:
        read_jsonl(path)
    assert "r.jsonl" in str(info.value) and "line 2" in str(info.value)


def test_read_jsonl_rejects_nan_and_truncated_tail(tmp_path):
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"a": NaN}\n')
    with pytest.raises(InputError, match="line 1"):
        read_jsonl(nan)
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"a": 1}\n{"a": 2')
    with pytest.raises(InputError, match="truncated"):
        read_jsonl(torn)


def test_repair_torn_tail_then_append(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"global_step": 1})
    with open(path, "a") as fh:
        fh.write('{"global_step": 2, "rew')
    assert repair_torn_tail(path) > 0
    append_jsonl(path, {"global_step": 2})
    assert [r["global_step"] for r in read_jsonl(path)] == [1, 2]


def test_load_yaml_errors_name_line(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("id: a1\nrecipe: {eps_clip: [0.1\n")
    with pytest.raises(InputError) as info:
        load_yaml(path)
    assert "a.yaml" in str(info.value) and "line" in str(info.value)


def test_load_yaml_is_safe(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("x: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(InputError):
        load_yaml(path)


def test_sha256_file_matches_hashlib(tmp_path):
    import hashlib

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"q": "1+1"}) + "\n")
    assert sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()
