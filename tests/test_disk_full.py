"""A full disk is an ordinary error: ``rlexp eval``, ``decide`` and ``report`` run on a small tmpfs
(mounted here; the tests are skipped where mounting is not allowed) at several free sizes must exit
non-zero in one line (no traceback), leave no torn file (every JSONL ends in a whole line and reads
strictly, every JSON file parses), and — once space returns — the rerun must succeed and end where a
run that never failed ends (the same records, the same decision, a usable MLflow store).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rlexp.experiment.files import iter_jsonl, read_json  # noqa: E402
from rlexp.experiment.records import read_records  # noqa: E402

FREE_KB = (8, 16, 24, 32)  # the first file, then mid-records of the first and of the second file  # what is left on the disk when the command starts


@pytest.fixture
def small_disk(tmp_path):
    """``mount(path, size_kb)`` mounts a tmpfs of that size on ``path`` (``grow`` resizes it); every
    mount is undone at the end."""
    mounted: list[Path] = []

    class Disk:
        def mount(self, path: Path, size_kb: int) -> Path:
            path.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:100]}")
            mounted.append(path)
            return path

        def grow(self, path: Path, size_kb: int = 65536) -> None:
            subprocess.run(["mount", "-o", f"remount,size={size_kb}k", str(path)], check=True, timeout=30)

        def used_kb(self, path: Path) -> int:
            st = os.statvfs(path)
            return (st.f_blocks - st.f_bfree) * st.f_frsize // 1024

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield Disk()
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], timeout=30)


def _fill_to(disk, path: Path, free_kb: int) -> None:
    """Leave about ``free_kb`` free on the tmpfs at ``path`` (the rest taken by a filler file)."""
    disk.grow(path, disk.used_kb(path) + free_kb + 4)  # one page of slack for the filler's own block


def assert_nothing_torn(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        if path.suffix == ".jsonl":
            data = path.read_bytes()
            assert not data or data.endswith(b"\n"), f"torn last line in {path}"
            list(iter_jsonl(path))
        elif path.suffix == ".json" and not path.name.startswith("."):
            read_json(path)


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    from rlexp.cli import main

    code = main(argv)
    err = capsys.readouterr().err  # a progress bar aside, the error lines rlexp printed
    return code, "\n".join(line for line in err.splitlines() if line.strip() and "Loading weights" not in line)


def _records(att: Path) -> dict[str, list[tuple[str, int]]]:
    return {str(p.relative_to(att)): sorted((r["problem_hash"], r["correct"]) for r in read_records(p))
            for p in sorted((att / "eval").glob("*/*.jsonl")) if p.parent.name != "paired"}


@pytest.mark.slow
@pytest.mark.parametrize("free_kb", FREE_KB)
def test_eval_on_a_full_disk_fails_in_one_line_and_the_rerun_completes(eval_experiment, small_disk, free_kb,
                                                                        capsys, tmp_path):
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 40, "id": 4, "sanity": 2}, steps=(2,), mid=2)
    reference = tmp_path / "reference"
    shutil.copytree(att.parent, reference, symlinks=True)
    code, _ = _run(capsys, ["eval", str(reference / "a1")])
    assert code == 0
    expected = _records(reference / "a1")

    eval_dir = small_disk.mount(att / "eval", 256)
    _fill_to(small_disk, eval_dir, free_kb)
    code, err = _run(capsys, ["eval", str(att)])
    assert code != 0 and "Traceback" not in err and err.startswith("rlexp: ") and err.count("\n") == 0, err
    assert_nothing_torn(att)
    small_disk.grow(eval_dir)
    code, err = _run(capsys, ["eval", str(att)])
    assert code == 0, err
    assert _records(att) == expected
    assert_nothing_torn(att)


def test_a_line_torn_by_a_kill_is_dropped_by_every_writer_before_any_strict_read(tmp_path):
    """What a SIGKILL mid-append leaves (a last line without its newline) never blocks a rerun: the
    record writer, the episode resume (drop_records, which reads before the writer opens) and the
    judge's cache each drop it."""
    from rlexp.environments.judge import Judge
    from rlexp.experiment.records import IDENTITY_KEYS, RecordWriter, drop_records

    meta = {k: "x" for k in IDENTITY_KEYS}
    path = tmp_path / "eval" / "s0" / "ood.jsonl"
    writer = RecordWriter.open(path, meta)
    writer.append_many([{"problem_hash": "a", "correct": 1}, {"problem_hash": "b", "correct": 0, "reward_error": {}}])
    with open(path, "ab") as fh:
        fh.write(b'{"problem_hash": "c", "corr')
    assert drop_records(path, lambda r: "reward_error" in r) == 1
    assert RecordWriter.open(path, meta).done.keys() == {"a"}
    with open(path, "ab") as fh:
        fh.write(b'{"problem_hash": "c", "corr')
    again = RecordWriter.open(path, meta)
    assert again.done.keys() == {"a"} and path.read_bytes().endswith(b"\n")
    cache = tmp_path / "judge_cache.jsonl"
    cache.write_bytes(b'{"key": "k1", "model": "j", "score": 1.0}\n{"key": "k2", "mo')
    assert Judge("http://127.0.0.1:9", "j", cache_path=cache).cache == {"k1": 1.0}


def test_a_failed_append_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """The writer's own guarantee, without a small disk: the write fails half-way (ENOSPC after
    some bytes), the file is truncated back to its last whole line and the error names it."""
    import errno

    from rlexp.experiment import files

    path = tmp_path / "r.jsonl"
    files.append_jsonl_many(path, [{"a": 1}])
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def short_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", short_then_full)
    with pytest.raises(OSError) as info:
        files.append_jsonl_many(path, [{"b": 2}, {"c": 3}])
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert path.read_bytes() == before and len(calls) == 2


def _onto_small_disk(small_disk, exp: Path, where: Path, free_kb: int) -> Path:
    """A copy of the experiment on a tmpfs with ``free_kb`` left (the model stays where it is, linked)."""
    root = small_disk.mount(where, 16384)
    copy = root / "exp"
    shutil.copytree(exp, copy, symlinks=True, ignore=shutil.ignore_patterns("models"))
    (copy / "models").symlink_to(exp / "models")
    _fill_to(small_disk, root, free_kb)
    return copy


def _decision(att: Path) -> dict:
    record = read_json(att / "decision.json")
    return {k: v for k, v in record.items() if k != "decided_at"}


@pytest.mark.slow
def test_decide_on_a_full_disk_exits_non_zero_and_the_rerun_decides(eval_experiment, small_disk, capsys, tmp_path):
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 40, "id": 4, "sanity": 2}, steps=(2,), mid=2)
    code, err = _run(capsys, ["eval", str(att)])
    assert code == 0, err
    reference = tmp_path / "reference"
    shutil.copytree(att.parent, reference, symlinks=True)
    code, err = _run(capsys, ["decide", str(reference / "a1")])
    expected = _decision(reference / "a1")
    for i, free_kb in enumerate((4, 8)):  # the paired records, then the ledger or decision.json (12 kB: all fit)
        copy = _onto_small_disk(small_disk, att.parent, tmp_path / f"small{i}", free_kb)
        code, err = _run(capsys, ["decide", str(copy / "a1")])
        assert code != 0 and "Traceback" not in err and err.startswith("rlexp: ") and "\n" not in err, (free_kb, err)
        assert_nothing_torn(copy)
        small_disk.grow(tmp_path / f"small{i}")
        code, err = _run(capsys, ["decide", str(copy / "a1")])
        assert code in (0, 1) and "Traceback" not in err, err
        assert _decision(copy / "a1") == expected
        assert_nothing_torn(copy)


def test_output_to_a_full_disk_is_a_failed_write(small_disk, tmp_path):
    """`rlexp ... > file` on a full disk: exit 1 in one line on stderr, not an exit 0 or a traceback
    from the interpreter's last flush."""
    import sys

    root = small_disk.mount(tmp_path / "full", 4)
    (root / "filler").write_bytes(b"\0" * 4096)
    for argv in (["sop", "show"], ["sop", "show", "--json"], ["sop", "--help"]):
        with open(root / "out", "wb") as out:
            done = subprocess.run([sys.executable, "-m", "rlexp", *argv], stdout=out, stderr=subprocess.PIPE,
                                  text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
        assert done.returncode == 1 and "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.stderr.startswith("rlexp: ") and done.stderr.count("\n") == 1 and "No space" in done.stderr


@pytest.mark.slow
def test_report_on_a_full_disk_fails_in_one_line_and_the_store_works_once_space_returns(
        eval_experiment, small_disk, capsys, tmp_path):
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 12, "id": 4, "sanity": 2}, steps=(2,), mid=2)
    code, err = _run(capsys, ["eval", str(att)])
    assert code == 0, err
    _run(capsys, ["decide", str(att)])
    from rlexp.tracking.store import ensure_store

    # the report itself; the store being created (about 1 MB); a run being logged into an existing store
    for i, (free_kb, store_exists) in enumerate(((8, False), (256, False), (96, True))):
        root = small_disk.mount(tmp_path / f"small{i}", 2048)
        store = f"sqlite:///{root / 'mlflow.db'}"
        if store_exists:
            ensure_store(store)
        _fill_to(small_disk, root, free_kb)
        argv = ["report", str(att), "--reports-dir", str(root / "reports"), "--tracking-uri", store]
        code, err = _run(capsys, argv)
        assert code != 0 and "Traceback" not in err and err.startswith("rlexp: ") and "\n" not in err, (free_kb, err)
        assert_nothing_torn(root)
        assert not list(root.glob(".mlflow.db.*"))  # the store's temporary file is gone with the failure
        small_disk.grow(root)
        code, err = _run(capsys, argv)
        assert code == 0, (free_kb, err)
        from mlflow.tracking import MlflowClient

        runs = [r for e in MlflowClient(store).search_experiments()
                for r in MlflowClient(store).search_runs([e.experiment_id])]
        assert len(runs) == 1 and runs[0].data.tags.get("rlexp.attempt_id") == "a1"
