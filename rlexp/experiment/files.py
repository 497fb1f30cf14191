"""File primitives for the experiment directory: atomic writes, durable appends, strict reads.

Rules every stage follows:
- whole files (plan.json, decision.json, reports) are written atomically: a temp file in the
  same directory, fsync, then ``os.replace`` — a killed process leaves the old file or the new
  one, never half of one;
- record files (JSONL) are appended whole lines at a time, one write and one fsync per batch; a
  failed write (a full disk) truncates the file back to where it was, and a killed run loses at most
  the batch being written, whose torn last line :func:`repair_torn_tail` drops before a resumed run
  appends again;
- reads are strict: any malformed line is an :class:`InputError` naming file and line.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.numbers import finite_number, sha256_text  # noqa: F401  (re-exported)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    _refuse_special_target(path)
    fd, tmp = make_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None  # a full disk names the file
        raise
    return path


# Temporary files and directories are named ``.<final name>.<pid>-<random>[.tmp]`` beside what they
# become, so the next writer in that directory can tell one a killed process left (its pid is gone)
# from one being written now, and remove it: a kill never leaves them behind for good.
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-[a-z0-9_]{8}(?:\.tmp)?")
# what earlier versions named them (no pid; tempfile's 8 random characters): an atomic write's
# ``.<name>.<random>.tmp`` file, a checkpoint's ``.global_stepN[_hf].<random>`` directory; removed once
# they are an hour old
_LEGACY_TEMP_NAME = re.compile(r"\.(?:.+\.[a-z0-9_]{8}\.tmp|global_step\d+(?:_hf)?\.[a-z0-9_]{8})")
LEGACY_TEMP_AGE_S = 3600


def _temp_prefix(final: Path) -> str:
    """The name prefix of a temporary file or directory that becomes ``final`` (see ``_TEMP_NAME``)."""
    return f".{final.name}.{os.getpid()}-"


def make_temp_file(final: str | Path) -> tuple[int, str]:
    """A fresh file beside ``final`` (an open descriptor and its name) to write it in before it is
    renamed over ``final``; what killed writers left in that directory is removed first
    (:func:`clean_stale_temps`)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(final.parent)
    return tempfile.mkstemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent)


def make_temp_dir(final: str | Path) -> Path:
    """A fresh directory beside ``final`` to write it in before :func:`replace_dir`; what killed
    writers left in that directory is removed first (:func:`clean_stale_temps`)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(final.parent)
    return Path(tempfile.mkdtemp(prefix=_temp_prefix(final), dir=final.parent))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def clean_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the temporary files and directories in ``directory`` whose writer is dead (its pid in
    the name no longer runs; an unnamed one of an earlier version once it is an hour old). Returns
    what was removed."""
    import shutil
    import time

    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        match = _TEMP_NAME.fullmatch(entry.name)
        if match:
            stale = not _pid_alive(int(match["pid"]))
        else:
            if not _LEGACY_TEMP_NAME.fullmatch(entry.name):
                continue
            try:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > LEGACY_TEMP_AGE_S
            except OSError:
                continue
        if not stale:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _refuse_special_target(path: Path) -> None:
    """An atomic write renames a new file over ``path``: where ``path`` is a device, a FIFO or a socket
    (``--paired-out /dev/null``), that would replace the node itself (run as root: the system's
    ``/dev/null`` becomes a file). Refused; a symlink is replaced as a link, never followed."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        raise InputError(_short(str(path)), None, "is a directory, expected a file path to write")
    for test, kind in _SPECIAL:
        if test(mode):
            raise InputError(_short(str(path)), None, f"is {kind}: rlexp writes regular files only")


def to_json(obj: Any) -> str:
    """Canonical JSON for files we write: sorted keys off (keep author order), no NaN."""
    return json.dumps(obj, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, to_json(obj))


# Limits of the input gate: what a file rlexp reads may hold. Each refusal names its limit.
MAX_DOCUMENT_BYTES = 64 << 20   # a JSON or YAML document (plan, state, spec, verdicts...)
MAX_JSONL_BYTES = 2 << 30       # a JSONL file (datasets, records, metrics)
MAX_LOG_BYTES = 256 << 20       # a training log `rlexp ingest` / `import --logs` reads (or a TensorBoard run's events)
MAX_LOG_LINES = 4_000_000       # ... and its lines: with the bytes, what bounds a read's time and memory
MAX_DEPTH = 64                  # nesting of lists and mappings in any document or line
MAX_INT_DIGITS = 4300           # an integer's digits (Python's own int-string limit: past it int() fails)
MAX_MEMBER_BYTES = MAX_DOCUMENT_BYTES  # one archive member, counted as it is decompressed


def check_path(path: str | Path) -> Path:
    """A path rlexp is about to read: no NUL byte (the OS cannot name it)."""
    if "\0" in str(path):
        raise InputError(repr(str(path)), None, "a NUL byte in the path")
    if len(os.fsencode(str(path))) > 4096 or any(len(os.fsencode(p)) > 255 for p in Path(path).parts):
        raise InputError(_short(str(path)), None, "a path too long for the file system (a name over 255 bytes, "
                                                  "or over 4096 in all)")
    return Path(path)


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same resolved path (through symlinks, ``..``)
    or, both existing, the same inode (a hard link, a bind mount)."""
    a, b = Path(a), Path(b)
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):  # a symlink loop: it cannot be a file we read
        return False
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_output_onto_inputs(out: str | Path, inputs: Iterable[str | Path], option: str) -> Path:
    """``out`` unless it names one of ``inputs`` (by path, symlink or hard link): writing there
    would destroy an input. Checked before anything is read or written."""
    out = check_path(out)
    try:
        _refuse_special_target(Path(os.path.realpath(out)) if os.path.islink(out) else out)
    except InputError as exc:
        raise InputError(exc.file, option, exc.message) from None
    for source in inputs:
        if same_file(out, source):
            raise InputError(_short(str(out)), option, f"is an input file of this command ({_short(str(source))}); "
                             "writing there would overwrite it: name another file")
    if out.is_dir():
        raise InputError(_short(str(out)), option, "is a directory, expected a file path")
    return out


def check_output_dir(path: str | Path, option: str) -> Path:
    """``path``, a directory rlexp will write into (created if missing), if it can be one: it and
    its nearest existing ancestor are directories (not a file, a device, a FIFO or a symlink loop)."""
    path = check_path(path)
    if not str(path).strip():
        raise InputError(None, option, "an empty path")
    probe = path
    while True:
        try:
            info = os.stat(probe)
        except FileNotFoundError:
            if os.path.islink(probe):
                raise InputError(_short(str(probe)), option, "a dangling symlink: cannot be a directory") from None
            if probe.parent == probe:
                break
            probe = probe.parent
            continue
        except OSError as exc:
            reason = "a symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise InputError(_short(str(probe)), option, f"cannot be a directory: {reason}") from None
        if not stat.S_ISDIR(info.st_mode):
            raise InputError(_short(str(probe)), option, "is not a directory: reports cannot be written there")
        break
    return path


def check_store_file(path: str | Path, option: str) -> Path:
    """``path``, a database file rlexp will open or create (a SQLite store): a regular file if it
    exists, in a directory that exists. A missing directory is refused, as MLflow and SQLAlchemy
    refuse it, rather than made: a mistyped store path would otherwise start a new, empty store
    beside the real one and every later comparison would miss the runs."""
    path = check_path(path)
    if os.path.lexists(path):
        try:
            check_regular_file(path)
        except InputError as exc:
            raise InputError(exc.file, option, f"{exc.message}: not a database file") from None
    check_output_dir(path.parent, option)
    if not path.parent.is_dir():
        raise InputError(_short(str(path.parent)), option, "no such directory for the store's database file "
                                                           "(create it first, or check the path)")
    return path


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_regular_file(path: str | Path) -> Path:
    """``path`` if it names a regular file (through symlinks); a missing file, a directory, a symlink
    loop, a FIFO, a device or a socket is :class:`InputError` — before anything opens it (opening a
    FIFO blocks until a writer comes; reading a device never ends)."""
    path = check_path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(path, None, "a symlink loop, expected a file") from None
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(path, None, "is a directory, expected a file")
    for test, kind in _SPECIAL:
        if test(info.st_mode):
            raise InputError(path, None, f"is {kind}, expected a regular file")
    return path


def read_bytes(path: str | Path, *, limit: int | None = None) -> bytes:
    """The bytes of a regular file, at most ``limit`` (default :data:`MAX_DOCUMENT_BYTES`): see
    :func:`check_regular_file`; the file is opened non-blocking and checked again once open, so a
    FIFO swapped in between cannot block the read."""
    limit = MAX_DOCUMENT_BYTES if limit is None else limit
    path = check_regular_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InputError(path, None, "is not a regular file")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(path, None, f"larger than the limit of {limit} bytes")
    return data


def decode_utf8(path: str | Path, data: bytes) -> str:
    """``data`` as UTF-8 text; bad bytes are :class:`InputError` naming the line and byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(path, f"line {line}", f"not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x})") from None


def read_text(path: str | Path, *, limit: int | None = None) -> str:
    """The whole text of a file rlexp reads, strictly: a missing file, a directory, a special file
    (FIFO, device, socket, symlink loop), a file over ``limit`` bytes (default
    :data:`MAX_DOCUMENT_BYTES`) and bytes that are not UTF-8 are :class:`InputError` naming the file."""
    path = check_path(path)
    return decode_utf8(path, read_bytes(path, limit=limit))


def check_depth(value: Any, path: str | Path, field: str | None = None, *, limit: int = MAX_DEPTH) -> Any:
    """``value`` unchanged if its lists and mappings nest at most ``limit`` deep (iteratively:
    a deep value must not itself cause a RecursionError here)."""
    if type(value) is dict and limit >= 1 and _flat_mapping(value, path, field):
        return value  # a record line of scalars (most of them): the walk below would find the same
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                raise InputError(path, field, f"nested deeper than the limit of {limit} levels")
            if isinstance(item, dict):
                for key in item:
                    if isinstance(key, str):
                        _check_surrogates(key, path, field)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif isinstance(item, str):
            _check_surrogates(item, path, field)
    return value


def _flat_mapping(value: dict, path: str | Path, field: str | None) -> bool:
    """True if ``value`` holds no list or mapping, its strings checked for lone surrogates as
    :func:`check_depth` checks them; False (nothing checked) where it nests."""
    for item in value.values():
        if isinstance(item, dict | list):
            return False
    for key, item in value.items():
        if isinstance(key, str) and not key.isascii():
            _check_surrogates(key, path, field)
        if isinstance(item, str) and not item.isascii():
            _check_surrogates(item, path, field)
    return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_surrogates(text: str, path: str | Path, field: str | None) -> None:
    """A JSON ``\\ud800`` escape decodes to a lone surrogate: no UTF-8 encodes it, so writing it
    anywhere later would fail; refused where it is read."""
    if not text.isascii() and (match := _SURROGATE.search(text)):
        raise InputError(path, field, f"a lone surrogate (U+{ord(match.group()):04X}) in a string: not valid Unicode text")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"number too large (more than {MAX_INT_DIGITS} digits)")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"number too large ({_short(text, 24)} is not a finite number)")
    return value


def _loads(text: str, *, allow_nan: bool = False) -> Any:
    """JSON with every integer under :data:`MAX_INT_DIGITS` digits and (unless ``allow_nan``, for
    harness logs whose metrics may be NaN) every number finite."""
    try:
        return (_LENIENT_DECODER if allow_nan else _STRICT_DECODER).decode(text)
    except RecursionError:
        raise ValueError(f"nested deeper than the limit of {MAX_DEPTH} levels") from None


def loads_text(path: str | Path, text: str, field: str | None = None, *, allow_nan: bool = False) -> Any:
    """One JSON document from ``text`` (read from ``path``), strictly: malformed JSON, NaN/Infinity,
    numbers too large and nesting deeper than :data:`MAX_DEPTH` are :class:`InputError` naming
    ``path`` and the line (or ``field``)."""
    try:
        return check_depth(_loads(text, allow_nan=allow_nan), path, field)
    except json.JSONDecodeError as exc:
        raise InputError(path, field or f"line {exc.lineno}", f"malformed JSON: {exc.msg}") from None
    except ValueError as exc:
        raise InputError(path, _where_bad_number(text, field), str(exc)) from None


_BAD_NUMBER = re.compile(rf"\d{{{MAX_INT_DIGITS + 1}}}|\d[eE]\+?\d{{3,}}|\bNaN\b|-?\bInfinity\b")
_KEY_BEFORE = re.compile(r'"((?:[^"\\]|\\.){0,200})"\s*:\s*[-+]?$')


def _where_bad_number(text: str, field: str | None) -> str | None:
    """``line N: key`` of the first number JSON refused (too many digits, not finite), the key
    when the number is an object's value; ``field`` (the line of a JSONL file) replaces the line."""
    match = _BAD_NUMBER.search(text)
    if not match:
        return field
    start = match.start()
    while start and (text[start - 1].isdigit() or text[start - 1] in ".-+"):
        start -= 1
    line = field or f"line {text.count(chr(10), 0, start) + 1}"
    key = _KEY_BEFORE.search(text[max(0, start - 400):start])
    return f"{line}: {key.group(1)}" if key else line


def loads_line(line: bytes) -> Any:
    """One JSON line of a file that is being appended to, leniently: None when it is not
    UTF-8, not JSON, not finite or too deep (for readers that skip such lines by design)."""
    try:
        return check_depth(_loads(line.decode("utf-8")), "")
    except (ValueError, InputError):
        return None


def read_json(path: str | Path) -> Any:
    path = Path(path)
    return loads_text(path, read_text(path))


def read_json_object(path: str | Path) -> dict[str, Any]:
    """A JSON document whose top-level value must be an object."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(path, None, f"expected a JSON object, got {_json_type(data)}")
    return data


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not allowed")


# What json.loads(text, **hooks) builds on every call, built once: a record file of 10^6 lines paid a
# second for the decoders alone.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float)
_LENIENT_DECODER = json.JSONDecoder(parse_int=_parse_int)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete JSON line durably (see :func:`append_jsonl_many`)."""
    append_jsonl_many(path, (record,))


def append_jsonl_many(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Append whole JSON lines with one write and one fsync. A write that fails (a full disk, a
    quota) truncates the file back to where it was, so a failed append leaves no partial line; a kill
    mid-write can still leave one, which :func:`repair_torn_tail` drops before the next append. The
    error names the file."""
    data = "".join(json.dumps(r, allow_nan=False, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if not data:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # shrinking needs no space
                os.ftruncate(fd, start)
                os.fsync(fd)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)


def repair_torn_tail(path: str | Path) -> int:
    """Drop a last line that was cut by a kill (no trailing newline). Returns bytes removed.

    Only for files this program appends to itself, before resuming; input files given by a
    user are read with :func:`read_jsonl`, which reports a truncated line as an error.
    """
    path = check_path(path)
    if path.is_dir():
        raise InputError(path, None, "is a directory, expected a file")
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
    """Yield (line_number, record) strictly: bad JSON, non-objects, NaN, non-UTF-8 bytes, deep
    nesting and a truncated last line are :class:`InputError` naming the file and line. Blank
    lines are skipped."""
    path = Path(path)
    data = read_text(path, limit=MAX_JSONL_BYTES)
    if data and not data.endswith("\n"):
        last_no = data.count("\n") + 1
        try:
            _loads(data[data.rfind("\n") + 1 :])
        except ValueError:
            raise InputError(path, f"line {last_no}", "truncated last line (no newline, not valid JSON)") from None
    for number, line in enumerate(data.split("\n"), start=1):
        if not line.strip():
            continue
        yield number, parse_jsonl_line(path, number, line)


def parse_jsonl_line(path: str | Path, number: int, line: str) -> dict[str, Any]:
    """One complete JSONL line, strictly: bad JSON, NaN/Infinity and a non-object are
    :class:`InputError` naming ``path`` and line ``number``."""
    record = loads_text(path, line, f"line {number}")
    if not isinstance(record, dict):
        raise InputError(path, f"line {number}", f"expected a JSON object, got {_json_type(record)}")
    return record  # loads_text checked its depth


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [record for _, record in iter_jsonl(path)]


def load_yaml(path: str | Path) -> Any:
    """Read YAML with a safe loader that also refuses aliases (``*name``: a few hundred bytes of
    nested aliases expand to billions of nodes), duplicate keys (the last would silently win)
    and nesting deeper than :data:`MAX_DEPTH`; every error names the file and line."""

    path = Path(path)
    return loads_yaml(path, read_text(path))


def loads_yaml(path: str | Path | None, text: str, field: str | None = None) -> Any:
    """YAML ``text`` (read from ``path``, or given as an option's value named ``field``) with the
    strict loader of :func:`load_yaml`; every error is an :class:`InputError`."""
    import yaml

    try:
        return check_depth(_load_strict(yaml, text), path or "", field)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark and field is None else field
        raise InputError(path, where, f"malformed YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(path, field, f"malformed YAML: {exc}") from None
    except RecursionError:
        raise InputError(path, field, f"nested deeper than the limit of {MAX_DEPTH} levels") from None


def _load_strict(yaml: Any, text: str) -> Any:
    """The one document of ``text``, parsed by libyaml where PyYAML has it (a few times faster than
    the pure-Python parser: ``rlexp plan`` reads three YAML files before it prints) and by the
    pure-Python loader otherwise; both refuse the same things."""
    loaders = _strict_loaders(yaml)
    if "c" in loaders:
        try:
            source = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: libyaml takes bytes, the pure-Python reader refuses it
            source = None
        if source is not None:
            _refuse_aliases_and_depth(yaml, source, loaders["c"])
            return loaders["c"](source).get_single_data_and_dispose()
    return loaders["python"](text).get_single_data_and_dispose()


def _refuse_aliases_and_depth(yaml: Any, source: bytes, loader: Any) -> None:
    """What the pure-Python loader refuses while it composes, checked on libyaml's events (its
    composer is C code): an alias, and a node nested deeper than :data:`MAX_DEPTH`."""
    depth = 0
    events = yaml.parse(source, Loader=loader)
    while True:
        try:
            event = next(events, None)
        except yaml.MarkedYAMLError as exc:  # libyaml's own nesting limit (1,000), met while it scans ahead
            if "nesting depth" not in str(exc.problem):
                raise
            raise yaml.composer.ComposerError(None, None, f"nested deeper than the limit of {MAX_DEPTH} levels",
                                              exc.problem_mark) from None
        if event is None:
            return
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed",
                                              event.start_mark)
        if isinstance(event, yaml.NodeEvent) and depth + 1 > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than the limit of {MAX_DEPTH} levels",
                                              event.start_mark)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


_LOADERS: dict[str, Any] = {}


def _strict_loaders(yaml: Any) -> dict[str, Any]:
    """yaml.SafeLoader (``"python"``) and, where PyYAML was built with libyaml, yaml.CSafeLoader
    (``"c"``), each without duplicate keys or integers too long to convert (built once); the
    Python one also refuses aliases and deep nesting while it composes."""
    if _LOADERS:
        return _LOADERS

    class StrictConstruction:
        def get_single_data_and_dispose(self) -> Any:
            try:
                return self.get_single_data()
            finally:
                self.dispose()

        def construct_yaml_int(self, node: Any) -> Any:
            digits = sum(ch.isalnum() for ch in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"number too large (more than {MAX_INT_DIGITS} digits)", node.start_mark)
            return super().construct_yaml_int(node)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    class StrictLoader(StrictConstruction, yaml.SafeLoader):
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed",
                                                  event.start_mark)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than the limit of {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    _LOADERS["python"] = StrictLoader
    if getattr(yaml, "CSafeLoader", None) is not None:
        class StrictCLoader(StrictConstruction, yaml.CSafeLoader):
            pass

        StrictCLoader.add_constructor("tag:yaml.org,2002:int", StrictCLoader.construct_yaml_int)
        _LOADERS["c"] = StrictCLoader
    return _LOADERS


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




