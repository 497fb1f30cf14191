"""The experiment directory's file primitives: atomic writes, durable appends, strict reads."""

import json

import pytest

from rlexp.errors import InputError
from rlexp.experiment.files import (
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


def test_libyaml_and_the_pure_python_loader_agree():
    """rlexp reads YAML with libyaml (faster) and refuses what the pure-Python strict loader refuses:
    on 1,000 fuzzed documents (the input-gate fuzzer's grammar, and mutations of the example specs
    and the SOP) both return the same value or both refuse, but for escapes of lone surrogates
    ("\\ud800"), which only libyaml refuses (no such string can be written as UTF-8 later)."""
    import random
    import sys
    from pathlib import Path

    import yaml

    from rlexp.experiment import files

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))
    from fuzz_gate import grammar_document, mutate

    loaders = files._strict_loaders(yaml)
    if "c" not in loaders:
        pytest.skip("PyYAML without libyaml")

    def outcome(text: str, which: str):
        try:
            if which == "c":
                source = text.encode()
                files._refuse_aliases_and_depth(yaml, source, loaders["c"])
                return "value", repr(loaders["c"](source).get_single_data_and_dispose())
            return "value", repr(loaders["python"](text).get_single_data_and_dispose())
        except yaml.YAMLError:
            return "refused", None

    seeds = [p.read_bytes() for p in (root / "experiments/seed-a30/a30/attempt.yaml",
                                      root / "experiments/seed-a30/a29b/attempt.yaml", root / "sop/sop-v2.1-final.yaml")]
    rng = random.Random(0)
    compared = surrogates = 0
    for i in range(1000):
        data = grammar_document(rng, "yaml") if i % 2 else mutate(rng, rng.choice(seeds), "a/attempt.yaml",
                                                                    rng.choice(["bytes", "type", "key", "bound"]))
        try:
            text = data.decode("utf-8")
            text.encode("utf-8")
        except UnicodeError:
            continue
        python, c = outcome(text, "python"), outcome(text, "c")
        if python != c and c[0] == "refused" and any(0xD800 <= ord(ch) <= 0xDFFF for ch in (python[1] or "")
                                                     .encode().decode("unicode_escape", "ignore")):
            surrogates += 1
            continue
        assert python == c, text[:300]
        compared += 1
    assert compared > 600 and surrogates < compared / 20
