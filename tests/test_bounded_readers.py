"""The bounded readers of rlexp.experiment.files and the harness readers built on them: special files
refused before opening, integers past Python's int-string limit and non-finite numbers refused as
"number too large" with file and field, lone surrogates, long values cut in the one-line message,
and ``.eval`` archive members bounded by what they decompress to."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.experiment import files as F


def refusal(fn, *args) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    line = info.value.one_line()
    assert "\n" not in line
    return line


def test_special_files_are_refused_before_opening(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    start = time.perf_counter()
    assert "FIFO" in refusal(F.read_json, fifo)  # old: open() blocked until a writer came
    assert "symlink loop" in refusal(F.load_yaml, loop)
    assert "character device" in refusal(F.read_text, "/dev/zero")
    assert "directory" in refusal(F.read_jsonl, tmp_path)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(("text", "where"), [
    ('{"a": 1,\n "seed": ' + "9" * 5000 + "}", "line 2: seed"),
    ('{"a": -' + "9" * 4301 + "}", "line 1: a"),
    ('{"x": [1, 2e999]}', "line 1"),
])
def test_json_numbers_too_large_name_file_and_field(tmp_path, text, where):
    path = tmp_path / "doc.json"
    path.write_text(text)
    line = refusal(F.read_json, path)
    assert line.startswith(f"{path}: {where}") and "number too large" in line
    assert "set_int_max_str_digits" not in line


def test_jsonl_and_yaml_numbers_too_large(tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"a": 1}\n{"b": ' + "1" * 4400 + "}\n")
    assert refusal(F.read_jsonl, jsonl).startswith(f"{jsonl}: line 2: b: number too large")
    yml = tmp_path / "a.yaml"
    yml.write_text("a: 1\nbootstrap: {seed: " + "7" * 4400 + "}\n")
    assert "line 2" in refusal(F.load_yaml, yml) and "number too large" in refusal(F.load_yaml, yml)
    yml.write_text("a: 0x1F\nb: -12\nc: 1_000\n")  # ordinary YAML integers still load
    assert F.load_yaml(yml) == {"a": 31, "b": -12, "c": 1000}
    assert F.read_json(_write(tmp_path / "ok.json", '{"n": ' + "9" * 4300 + "}"))["n"] > 0


def test_lone_surrogate_refused(tmp_path):
    path = _write(tmp_path / "d.jsonl", '{"prompt": "a\\ud800b"}\n')
    assert "lone surrogate" in refusal(F.read_jsonl, path)


def test_one_line_message_cuts_long_values():
    line = InputError("f.json", "x", "value " + "v" * 50_000_000).one_line()
    assert len(line) < 1000 and "chars]" in line and line.startswith("f.json: x: value vvv")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _eval_log(path: Path, header: bytes | None = None, *, method: int = zipfile.ZIP_DEFLATED,
              samples: list[bytes] = ()) -> Path:
    header = header if header is not None else json.dumps(
        {"eval": {"task": "t"}, "status": "success", "version": 2}).encode()
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        archive.writestr("header.json", header)
        for i, sample in enumerate(samples):
            archive.writestr(f"samples/{i}.json", sample)
    return path


@pytest.mark.parametrize("case", ["bomb", "list-header", "bad-utf8", "deep", "sample-list", "epoch-x",
                                  "epoch-inf", "eval-string", "error-int", "scores-list", "method-99",
                                  "encrypted", "damaged"])
def test_inspect_eval_archive_damage_is_one_line(tmp_path, capsys, case):
    sample = {"id": 1, "epoch": 1, "input": "q", "target": "a", "scores": {"s": {"value": "C"}}}
    path = tmp_path / "log.eval"
    if case == "bomb":  # a few KB that inflate to 100 MB: refused as it is decompressed
        _eval_log(path, b'{"eval": {"task": "t"}, "status": "success", "version": 2, "x": "' + b" " * (100 << 20) + b'"}')
        assert path.stat().st_size < 1 << 20
    elif case == "list-header":
        _eval_log(path, b"[1, 2]")
    elif case == "bad-utf8":
        _eval_log(path, b'{"eval": "\xff"}')
    elif case == "deep":
        _eval_log(path, b"[" * 100_000 + b"]" * 100_000)
    else:
        bad = dict(sample)
        if case == "sample-list":
            bad = [1]
        elif case == "epoch-x":
            bad["epoch"] = "x"
        elif case == "epoch-inf":
            bad["epoch"] = 10**30
        elif case == "error-int":
            bad["error"] = 5
        elif case == "scores-list":
            bad["scores"] = ["s"]
        header = b'{"eval": "t", "status": "success", "version": 2}' if case == "eval-string" else None
        _eval_log(path, header, samples=[json.dumps(bad).encode()])
        if case in ("method-99", "encrypted", "damaged"):
            data = bytearray(path.read_bytes())
            local = data.find(b"PK\x03\x04", 1)  # the sample member's local header
            central = data.find(b"PK\x01\x02")
            central = data.find(b"PK\x01\x02", central + 1)
            if case == "method-99":
                data[local + 8:local + 10] = data[central + 10:central + 12] = (99).to_bytes(2, "little")
            elif case == "encrypted":
                data[local + 6] |= 1
                data[central + 8] |= 1
            else:
                data[local + 30 + len("samples/0.json") + 1] ^= 0xFF
            path.write_bytes(bytes(data))
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["compare", str(path), str(path), "--format", "inspect", "--paired-out", str(tmp_path / "p.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"rlexp: {path}"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_lm_eval_every_line_is_read_strictly(tmp_path, capsys):
    line = {"doc_id": 0, "filter": "none", "metrics": ["acc"], "doc_hash": "d", "prompt_hash": "p",
            "target_hash": "t", "filtered_resps": ["x"], "acc": 1}
    name = "samples_task_2026-01-01T00-00-00.000000.jsonl"
    for second, needle in ((b'{"doc_id": 1, "x": ' + b"9" * 5000 + b"}", "number too large"),
                           (b'{"doc_id": 1, "x": "\xff"}', "not UTF-8"),
                           (b"[" * 5000 + b"]" * 5000, "nested deeper"),
                           (json.dumps({**line, "doc_id": 1, "filter": 3}).encode(), "filter"),
                           (json.dumps({**line, "doc_id": 1, "metrics": {"a": 1}}).encode(), "metrics")):
        path = tmp_path / name
        path.write_bytes(json.dumps(line).encode() + b"\n" + second + b"\n")
        assert main(["compare", str(path), str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}: line 2" in err and needle in err, err


def test_the_next_writer_removes_what_a_killed_writer_left(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    paired = tmp_path / "paired"
    paired.mkdir()
    left_file = paired / f".a__b__ood_primary.jsonl.{dead}-k3x9_q7a.tmp"
    left_file.write_text("half")
    left_dir = paired / f".global_step16_hf.{dead}-a8b2c4d6"
    left_dir.mkdir()
    (left_dir / "adapter.bin").write_bytes(b"x")
    legacy = paired / ".global_step8_hf.abcd1234"  # an earlier version's name: removed once an hour old
    legacy.mkdir()
    os.utime(legacy, (time.time() - 7200, time.time() - 7200))
    live = paired / f".other.jsonl.{os.getpid()}-zz000000.tmp"  # a writer that still runs: kept
    live.write_text("in progress")
    young_legacy = paired / ".c.json.efgh5678.tmp"  # an hour not yet passed: kept
    young_legacy.write_text("maybe in progress")
    user_file = paired / ".env.backup01"  # not a name rlexp gives a temporary: never removed
    user_file.write_text("keep")
    os.utime(user_file, (time.time() - 7200, time.time() - 7200))
    F.atomic_write_json(paired / "x.json", {"a": 1})
    assert sorted(p.name for p in paired.iterdir()) == sorted([live.name, young_legacy.name, user_file.name,
                                                               "x.json"])
    made = F.make_temp_dir(paired / "global_step2_hf")
    assert made.name.startswith(f".global_step2_hf.{os.getpid()}-") and made.is_dir()
