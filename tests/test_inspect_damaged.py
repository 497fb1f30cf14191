"""Damaged Inspect ``.eval`` logs through ``rlexp compare``, on both readers: rlexp's own archive reader and,
where inspect_ai is installed (what an Inspect user has; CI installs the ``inspect`` extra), inspect_ai's
``read_eval_log`` behind rlexp's bounded read. Every damaged file is one line naming it and exit 2 — never a
traceback, never minutes of decompression. Before the bounded read ran first, 15 such files ended in
tracebacks from inspect_ai's reader.

The damage is done to a real log: ``model_a.eval``, written by inspect_ai 0.3.x (tests/data/interop/inspect,
see its README), rebuilt with its members deflated and then one thing broken.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path

import pytest

from rlexp.cli import main
from rlexp.evaluation.harnesses import inspect_log

DATA = Path(__file__).parent / "data" / "interop" / "inspect"
pytest.importorskip("zstandard")  # the committed logs' members are zstd


def members_of(log: Path) -> dict[str, bytes]:
    """Every member of a real log, decompressed (the zstd members through rlexp's reader's own helper)."""
    out = {}
    with zipfile.ZipFile(log) as archive, open(log, "rb") as raw:
        for info in archive.infolist():
            if info.compress_type == inspect_log.ZSTD:
                out[info.filename] = inspect_log._zstd_member(log, raw, info)
            else:
                out[info.filename] = archive.read(info)
    return out


def archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, data in members.items():
            out.writestr(name, data)
    return buffer.getvalue()


def with_member(name: str, data: bytes):
    return lambda members: archive({**members, name: data})


def _flip_compressed_bytes(members: dict[str, bytes]) -> bytes:
    data = bytearray(archive(members))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        info = z.getinfo("header.json")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 8, start + 40):  # inside header.json's deflate stream
        data[i] ^= 0x5A
    return bytes(data)


def _encrypted_flag(members: dict[str, bytes]) -> bytes:
    data = bytearray(archive(members))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        infos = z.infolist()
    for info in infos:  # the "encrypted" bit in the local header and the central directory entry
        data[info.header_offset + 6] |= 0x1
    central = data.rfind(b"PK\x01\x02")
    while central != -1:
        data[central + 8] |= 0x1
        central = data.rfind(b"PK\x01\x02", 0, central)
    return bytes(data)


def _without(name: str):
    return lambda members: archive({k: v for k, v in members.items() if k != name})


def _bomb(members: dict[str, bytes]) -> bytes:
    return archive({**members, "header.json": b" " * (300 * 2**20)})  # 300 MiB of spaces, ~300 KB deflated


DAMAGE = {
    "truncated in the middle": lambda m: archive(m)[: len(archive(m)) // 2],
    "central directory cut off": lambda m: archive(m)[:-22],
    "corrupt deflate stream": _flip_compressed_bytes,
    "ZIP magic then garbage": lambda m: b"PK\x03\x04" + b"\x00garbage" * 100,
    "no members at all": lambda m: archive({}),
    "header.json missing": _without("header.json"),
    "header.json not JSON": with_member("header.json", b'{"eval": {"task": '),
    "header.json a JSON list": with_member("header.json", b"[1, 2, 3]"),
    "header.json nested 100k deep": with_member("header.json", b"[" * 100_000 + b"]" * 100_000),
    "header.json not UTF-8": with_member("header.json", b'{"eval": "\xff\xfe"}'),
    "header.json of the wrong shape": with_member("header.json", b'{"eval": 5, "status": [], "version": "x"}'),
    "a deflate bomb": _bomb,
    "a sample that is not JSON": with_member("samples/q00_epoch_1.json", b"\x00\x01 not json"),
    "a sample of the wrong shape": with_member("samples/q00_epoch_1.json", b'{"id": [], "epoch": "one"}'),
    "members flagged as encrypted": _encrypted_flag,
}


@pytest.fixture(scope="module")
def real_members() -> dict[str, bytes]:
    return members_of(DATA / "model_a.eval")


READERS = ["rlexp", "inspect_ai"]


def use_reader(reader: str, monkeypatch) -> None:
    if reader == "inspect_ai":
        pytest.importorskip("inspect_ai")
    else:
        monkeypatch.setattr(inspect_log, "use_inspect_ai", lambda: False)


@pytest.mark.parametrize("reader", READERS)
def test_the_rebuilt_log_still_reads(reader, real_members, tmp_path, monkeypatch, capsys):
    """The control: the same members deflated instead of zstd-compressed read as the original does."""
    use_reader(reader, monkeypatch)
    rebuilt = tmp_path / "rebuilt.eval"
    rebuilt.write_bytes(archive(real_members))
    assert main(["compare", str(rebuilt), str(DATA / "model_a.eval"), "--scorer", "match", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 20 and out["delta_pp"] == 0.0


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_log_is_one_line(reader, damage, real_members, tmp_path, monkeypatch, capsys):
    use_reader(reader, monkeypatch)
    bad = tmp_path / "damaged.eval"
    bad.write_bytes(DAMAGE[damage](real_members))
    capsys.readouterr()
    start = time.perf_counter()
    code = main(["compare", str(bad), str(DATA / "model_a.eval"), "--scorer", "match"])
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rlexp: ") and "damaged.eval" in err, err
    assert "Traceback" not in err
    assert elapsed < 30, f"{damage}: {elapsed:.1f} s"


@pytest.mark.parametrize("reader", READERS)
def test_a_member_named_outside_the_archive_is_never_written(reader, real_members, tmp_path, monkeypatch, capsys):
    """A member named ``../../escaped.json`` (path traversal): reading extracts nothing, so nothing lands
    outside; the log reads, or is refused in one line — never a traceback."""
    use_reader(reader, monkeypatch)
    work = tmp_path / "deep" / "er"
    work.mkdir(parents=True)
    bad = work / "traversal.eval"
    bad.write_bytes(archive({**real_members, "../../escaped.json": b'{"x": 1}'}))
    code = main(["compare", str(bad), str(DATA / "model_a.eval"), "--scorer", "match"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, err
    assert code == 0 or err.count("\n") == 1
    assert not (tmp_path / "escaped.json").exists()
