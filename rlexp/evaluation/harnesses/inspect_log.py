"""Inspect AI evaluation logs: ``.json`` logs, and ``.eval`` logs (a ZIP archive).

The maintainers call the ``inspect_ai.log`` read functions the stable interface, not the file
format, so a ``.eval`` log is read with ``inspect_ai.log.read_eval_log`` when inspect_ai is
installed (the optional extra ``rlexp[inspect]``), after rlexp's own bounded read of the archive
has passed it (inspect_ai bounds no member's size, depth or encoding, and what it raises on a damaged
log is one line here); its members are zstd-compressed since 0.3.206,
which Python 3.11's ``zipfile`` cannot read, so without inspect_ai the archive is read here, its
zstd members with the ``zstandard`` package (refused with that advice when it is missing). ``.json`` logs are plain JSON and
need nothing.

Per sample: ``id`` (int or str; ids Inspect assigned itself are positions in the dataset),
``epoch``, ``input``, ``target``, ``scores{scorer: {value, ...}}``, ``metadata``, ``error``. Items
are keyed ``<task>:<id>``; several epochs give several scores for one item. The prompt hash is a
hash of the input (message roles and contents only: message ids are random per run); the
fingerprint one of the target for an explicit string id (an edited prompt is then a prompt
change), of input and target for an int id (it may be a position Inspect assigned).
A log whose status is not ``success`` is partial.
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.harnesses.items import (
    Choice,
    Item,
    ItemSet,
    NotAScore,
    Problems,
    ScoreTally,
    Unscored,
    choose,
    fingerprint,
    scalar_fields,
    to_score,
)
from rlexp.experiment.files import MAX_JSONL_BYTES

ZIP_MAGIC = b"PK\x03\x04"
ZSTD = 93  # the ZIP compression method number of zstandard


def looks_like_json_log(data: Any) -> bool:
    return isinstance(data, dict) and "eval" in data and "status" in data and "version" in data


def load(path: Path) -> dict[str, Any]:
    """The log as plain JSON-like data (header fields plus ``samples``)."""
    from rlexp.experiment.files import check_regular_file, loads_text, read_text

    check_regular_file(path)  # a FIFO would block the open below
    with open(path, "rb") as fh:
        zipped = fh.read(4) == ZIP_MAGIC
    if not zipped:
        text = read_text(path, limit=MAX_JSONL_BYTES)
        try:
            data = loads_text(path, text, allow_nan=True)
        except InputError as exc:
            raise InputError(path, exc.field, f"not a JSON Inspect log: {exc.message}") from None
        if not looks_like_json_log(data):
            raise InputError(path, None, "not an Inspect log (no eval/status/version)")
        return data
    # rlexp's own bounded read always runs: a damaged archive, a bomb, a deep or non-UTF-8 member is
    # one line from it before inspect_ai (which bounds none of these) opens the file
    ours = _load_zip_without_inspect(path)
    if not use_inspect_ai():
        return ours
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path), resolve_attachments=True)
        return json.loads(log.model_dump_json())
    except Exception as exc:  # whatever inspect_ai raises on a log it cannot read is one line
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise InputError(path, None, f"inspect_ai cannot read this log ({type(exc).__name__}: {reason})") from None


def use_inspect_ai() -> bool:
    import importlib.util

    return importlib.util.find_spec("inspect_ai") is not None


def _load_zip_without_inspect(path: Path) -> dict[str, Any]:
    """Read ``header.json`` and ``samples/*.json`` from the archive; zstd members (Inspect
    0.3.206+) are decompressed with ``zstandard`` when it is installed. Each member is bounded by
    :data:`~rlexp.experiment.files.MAX_MEMBER_BYTES` as it is decompressed (not by what its header
    declares), all members together by ``MAX_JSONL_BYTES``; a damaged stream, an unknown compression
    method or an encrypted member is :class:`InputError` naming the member."""
    from rlexp.experiment.files import MAX_MEMBER_BYTES, decode_utf8, loads_text

    total = 0
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
            members = {info.filename: info for info in archive.infolist()}
            if "header.json" not in members:
                raise InputError(path, "header.json", "missing: not an Inspect .eval log, or one whose run never "
                                 "finished writing it")

            def member(name: str) -> Any:
                nonlocal total
                info = members[name]
                where = f"{path}: {name}"
                if info.flag_bits & 0x1:
                    raise InputError(path, name, "an encrypted member: not an Inspect log")
                try:
                    if info.compress_type == ZSTD:
                        data = _zstd_member(path, raw, info)
                    else:
                        with archive.open(info) as fh:
                            data = fh.read(MAX_MEMBER_BYTES + 1)
                except InputError:
                    raise
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, ValueError,
                        NotImplementedError, struct.error) as exc:
                    raise InputError(path, name, f"cannot decompress this member: {exc}") from None
                if len(data) > MAX_MEMBER_BYTES:
                    raise InputError(path, name, f"decompresses to more than the limit of {MAX_MEMBER_BYTES} bytes")
                total += len(data)
                if total > MAX_JSONL_BYTES:
                    raise InputError(path, name, f"the members decompress to more than {MAX_JSONL_BYTES} bytes")
                value = loads_text(where, decode_utf8(where, data), allow_nan=True)
                if not isinstance(value, dict):
                    raise InputError(path, name, f"expected a JSON object, got {type(value).__name__}")
                return value

            data = member("header.json")
            data["samples"] = [member(n) for n in sorted(members) if n.startswith("samples/") and n.endswith(".json")]
            return data
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise InputError(path, None, f"not a readable .eval archive: {exc}") from None


def _zstd_member(path: Path, raw: Any, info: zipfile.ZipInfo) -> bytes:
    from rlexp.experiment.files import MAX_MEMBER_BYTES

    try:
        import zstandard
    except ImportError:
        raise InputError(path, info.filename, "zstd-compressed (Inspect 0.3.206+), which Python's zipfile cannot "
                         "read: install the optional extra rlexp[inspect] (inspect_ai, or zstandard), or convert "
                         "the log with `inspect log convert --to json`") from None
    raw.seek(info.header_offset)
    local = raw.read(30)
    if local[:4] != ZIP_MAGIC:
        raise InputError(path, info.filename, "corrupt local header")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    raw.seek(info.header_offset + 30 + name_len + extra_len)
    compressed = raw.read(info.compress_size)
    try:
        with zstandard.ZstdDecompressor().stream_reader(compressed) as reader:
            data = reader.read(MAX_MEMBER_BYTES + 1)
    except zstandard.ZstdError as exc:
        raise InputError(path, info.filename, f"damaged zstd stream: {exc}") from None
    if len(data) > MAX_MEMBER_BYTES:
        return data  # the caller names the limit
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise InputError(path, info.filename, "zstd member fails its size or CRC check")
    return data


def _resolve(value: Any, attachments: dict[str, str]) -> Any:
    """Replace ``attachment://<hash>`` references (long contents are stored once) by the content."""
    if isinstance(value, str) and value.startswith("attachment://"):
        return attachments.get(value.removeprefix("attachment://"), value)
    if isinstance(value, list):
        return [_resolve(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, attachments) for k, v in value.items()}
    return value


def _content_of(input_value: Any) -> Any:
    """The input without per-run noise: a string, or (role, content) per message."""
    if isinstance(input_value, list):
        return [[m.get("role"), m.get("content")] if isinstance(m, dict) else m for m in input_value]
    return input_value


def harness_version(data: dict[str, Any]) -> str | None:
    packages = (data.get("eval") or {}).get("packages") or {}
    version = packages.get("inspect_ai")
    return str(version) if version is not None else None


def read(path: str | Path, choice: Choice, *, intersect: bool) -> ItemSet:
    path = Path(path)
    data = load(path)
    if not isinstance(data.get("eval") or {}, dict):
        raise InputError(path, "eval", f"must be an object, got {type(data['eval']).__name__}")
    task = str((data.get("eval") or {}).get("task") or "")
    if not task:
        raise InputError(path, "eval.task", "missing")
    if choice.task is not None and choice.task != task:
        raise InputError(path, "task", f"--task {choice.task!r} is not in this log; it has: {task}")
    problems = Problems(path, intersect=intersect)
    notes = []
    status = data.get("status")
    if status != "success":
        problems.flag("(log)", f"the log's status is {status!r}, not 'success': a partial log")
        notes.append(f"partial log (status {status!r}): only the samples it holds are used")
    samples = data.get("samples")
    if not isinstance(samples, list) or not samples:
        raise InputError(path, "samples", "no samples in this log (written with --no-log-samples?)")
    for number, sample in enumerate(samples):
        _check_sample(path, number, sample)
    scorer_names = {name for s in samples for name in (s.get("scores") or {})}
    scorer = choose(path, "scorer", scorer_names, choice.scorer)
    tally = ScoreTally()
    scores: dict[str, list[tuple[int, float]]] = {}
    info: dict[str, tuple[str, dict[str, Any], str | None, str]] = {}
    seen: set[tuple[str, int]] = set()
    bad: set[str] = set()
    for sample in samples:
        key = f"{task}:{sample.get('id')}"
        epoch = int(sample.get("epoch") or 1)
        where = f"{key} epoch {epoch}"
        if (key, epoch) in seen:
            problems.flag(key, where=where, reason="duplicate (id, epoch)")
            bad.add(key)
            continue
        seen.add((key, epoch))
        attachments = sample.get("attachments") or {}
        if sample.get("error"):
            error = sample["error"]
            message = (str(error.get("message", "error")) if isinstance(error, dict) else error).splitlines()[0][:80]
            problems.flag(key, where=where, reason=f"errored sample ({message})")
            bad.add(key)
            continue
        score = (sample.get("scores") or {}).get(scorer)
        if score is None:
            problems.flag(key, where=where, reason=f"not scored by {scorer!r}")
            bad.add(key)
            continue
        value = score.get("value") if isinstance(score, dict) else None
        if isinstance(value, dict):
            value = _dict_value(path, where, value, choice.metric)
        try:
            number = to_score(value, tally)
        except (Unscored, NotAScore) as exc:
            problems.flag(key, where=where, reason=f"scorer {scorer!r}: {exc}")
            bad.add(key)
            continue
        # an explicit (string) id names the item: its target pairs it and its input is the prompt (an edit
        # is a prompt change); an int id may be a position Inspect assigned, so the input pairs it too
        target = _resolve(sample.get("target"), attachments)
        prompt = fingerprint(_content_of(_resolve(sample.get("input"), attachments)))
        content = fingerprint(target) if isinstance(sample.get("id"), str) else fingerprint(prompt, target)
        previous = info.get(key)
        if previous is not None and (previous[0], previous[3]) != (content, prompt):
            raise InputError(path, where, "the same id has a different input or target in another epoch")
        output = ((sample.get("output") or {}).get("completion")) if isinstance(sample.get("output"), dict) else None
        info[key] = (content, scalar_fields(sample.get("metadata")), output if isinstance(output, str) else None,
                     prompt)
        scores.setdefault(key, []).append((epoch, number))
    items = {}
    for key, values in scores.items():
        if key in bad:  # an item with one unusable epoch is dropped whole: its mean would be biased
            continue
        content, fields, output, prompt = info[key]
        items[key] = Item(key, tuple(v for _, v in sorted(values)), content, prompt, fields, output)
    if not items:
        raise InputError(path, None, f"no usable sample for scorer {scorer!r}")
    chosen: dict[str, str | None] = {"scorer": scorer}
    if choice.metric is not None:
        chosen["metric"] = choice.metric
    return ItemSet(str(path), "inspect", "inspect_ai", harness_version(data), task, chosen, items,
                   problems.dropped, notes, tally.no_answer)


def _check_sample(path: Path, number: int, sample: Any) -> None:
    """The fields of a sample this reader uses, of the types Inspect writes."""
    where = f"samples[{number}]"
    if not isinstance(sample, dict):
        raise InputError(path, where, f"must be an object, got {type(sample).__name__}")
    checks = (("id", (int, str), "an integer or a string"), ("epoch", int, "an integer from 1"),
              ("scores", dict, "an object {scorer: score}"), ("error", (dict, str), "an object or a string"),
              ("attachments", dict, "an object"), ("metadata", dict, "an object"))
    for key, kinds, what in checks:
        value = sample.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise InputError(path, f"{where}.{key}", f"must be {what}, got {type(value).__name__}")
    epoch = sample.get("epoch")
    if epoch is not None and not 1 <= epoch <= 1_000_000:
        raise InputError(path, f"{where}.epoch", f"must be an integer from 1 to 1000000, got {str(epoch)[:20]}")


def _dict_value(path: Path, where: str, value: dict[str, Any], key: str | None) -> Any:
    """A scorer that returns a dict of values: the caller names the entry with --metric."""
    return value[choose(path, "metric", value.keys(), key)]
