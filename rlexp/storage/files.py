"""File primitives for the experiment directory: atomic writes, durable appends, strict reads.

Rules every stage follows:
- whole files (plan.json, decision.json, reports) are written atomically: a temp file in the
  same directory, fsync, then ``os.replace`` — a killed process leaves the old file or the new
  one, never half of one;
- record files (JSONL) are appended one complete line at a time with flush + fsync, so a killed
  run loses at most the line being written; :func:`repair_torn_tail` drops such a torn line
  before a resumed run appends again;
- reads are strict: any malformed line is an :class:`InputError` naming file and line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlexp.core.numbers import finite_number, sha256_text  # noqa: F401  (re-exported)
from rlexp.errors import InputError


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def to_json(obj: Any) -> str:
    """Canonical JSON for files we write: sorted keys off (keep author order), no NaN."""
    return json.dumps(obj, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, to_json(obj))


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    except ValueError as exc:
        raise InputError(path, None, str(exc)) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not allowed")


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete JSON line durably (flush + fsync)."""
    line = json.dumps(record, allow_nan=False, ensure_ascii=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def append_jsonl_many(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Append several lines with one fsync; each line is still complete or absent after a kill
    at any point except the very last partial write, which :func:`repair_torn_tail` removes."""
    lines = [json.dumps(r, allow_nan=False, ensure_ascii=False) + "\n" for r in records]
    if not lines:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(lines))
        fh.flush()
        os.fsync(fh.fileno())


def repair_torn_tail(path: str | Path) -> int:
    """Drop a last line that was cut by a kill (no trailing newline). Returns bytes removed.

    Only for files this program appends to itself, before resuming; input files given by a
    user are read with :func:`read_jsonl`, which reports a truncated line as an error.
    """
    path = Path(path)
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    cut = data.rfind(b"\n") + 1  # 0 when the only line is torn
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return len(data) - cut


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line_number, record) strictly: bad JSON, non-objects, NaN and a truncated last
    line are :class:`InputError` naming the file and line. Blank lines are skipped."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    with open(path, encoding="utf-8") as fh:
        data = fh.read()
    if data and not data.endswith("\n"):
        last_no = data.count("\n") + 1
        try:
            json.loads(data[data.rfind("\n") + 1 :], parse_constant=_reject_constant)
        except ValueError:
            raise InputError(path, f"line {last_no}", "truncated last line (no newline, not valid JSON)") from None
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        yield number, parse_jsonl_line(path, number, line)


def parse_jsonl_line(path: str | Path, number: int, line: str) -> dict[str, Any]:
    """One complete JSONL line, strictly: bad JSON, NaN/Infinity and a non-object are
    :class:`InputError` naming ``path`` and line ``number``."""
    try:
        record = json.loads(line, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {number}", f"malformed JSON: {exc.msg}") from None
    except ValueError as exc:
        raise InputError(path, f"line {number}", str(exc)) from None
    if not isinstance(record, dict):
        raise InputError(path, f"line {number}", "expected a JSON object")
    return record


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [record for _, record in iter_jsonl(path)]


def load_yaml(path: str | Path) -> Any:
    """Read YAML with the safe loader; syntax errors name the file and line."""
    import yaml  # pyyaml is light (~20 ms) but only the commands that read YAML need it

    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(path, where, f"malformed YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"malformed YAML: {exc}") from None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_dir(path: str | Path, *, exclude: tuple[str, ...] = ()) -> str:
    """Digest of a directory tree: relative paths and file contents, in sorted order. Files
    named in ``exclude`` are left out (a metadata file that records this very digest)."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in exclude):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(sha256_file(file).encode() + b"\n")
    return digest.hexdigest()


def replace_dir(tmp: str | Path, final: str | Path) -> None:
    """Make the fully written directory ``tmp`` appear as ``final``: renames are atomic, and an old
    ``final`` is moved aside before and removed after, so a kill never leaves half of either."""
    import shutil

    tmp, final = Path(tmp), Path(final)
    if final.exists():
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)




