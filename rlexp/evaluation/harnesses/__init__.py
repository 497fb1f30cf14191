"""Readers of other harnesses' per-sample results, for ``rlexp compare``.

:func:`read_items` reads one file into an :class:`~rlexp.evaluation.harnesses.items.ItemSet`; the format is
detected from the content (a ZIP archive is an Inspect ``.eval`` log, a parquet file lighteval
details, a JSON document with ``eval``/``status``/``version`` an Inspect ``.json`` log, JSONL
lines with ``doc_id``/``filtered_resps`` lm-eval samples, lines with ``problem_hash``/``correct``
rlexp records) and can be forced with ``fmt``. One module per format.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlexp.errors import InputError
from rlexp.evaluation.harnesses.items import Choice, Item, ItemSet

FORMATS = ("rlexp", "lm-eval", "inspect", "lighteval")

__all__ = ["FORMATS", "Choice", "Item", "ItemSet", "detect_format", "read_items"]


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its content; an InputError when it is none of :data:`FORMATS`."""
    from rlexp.evaluation.harnesses import inspect_log, lighteval, lm_eval, records
    from rlexp.experiment.files import check_regular_file, read_text

    path = check_regular_file(path)  # a FIFO or a device would block or never end
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == inspect_log.ZIP_MAGIC:
        return "inspect"
    if head == lighteval.PARQUET_MAGIC:
        return "lighteval"
    with open(path, "rb") as fh:
        raw_line = fh.readline(1 << 20)
    try:
        first_line = raw_line.decode("utf-8")
    except UnicodeDecodeError as exc:  # the text formats are UTF-8: say so, not "format not recognised"
        raise InputError(path, "line 1", f"not UTF-8 text (byte {exc.start}: {raw_line[exc.start]:#04x})") from None
    try:
        first = json.loads(first_line)
    except (ValueError, RecursionError):  # deep nesting: the strict reader names it
        first = None
    if inspect_log.looks_like_json_log(first):
        return "inspect"
    if lm_eval.looks_like(first):
        return "lm-eval"
    if records.looks_like(first) or (first is None and not first_line.strip()):
        return "rlexp"  # an empty file is the record reader's to refuse, with its own message
    if first is None and first_line.strip() == "{":
        try:
            data = json.loads(read_text(path))
        except (ValueError, RecursionError, InputError):  # the strict reader names what is wrong
            data = None
        if inspect_log.looks_like_json_log(data):
            return "inspect"
    if isinstance(first, dict):
        return "rlexp"  # JSONL of unknown records: the record reader names the missing field
    raise InputError(path, None, f"format not recognised; name it with --format ({', '.join(FORMATS)})")


def read_items(path: str | Path, fmt: str | None = None, choice: Choice | None = None, *,
               intersect: bool = False) -> ItemSet:
    """Read one per-sample results file (see the module docstring)."""
    from rlexp.evaluation.harnesses import inspect_log, lighteval, lm_eval, records
    from rlexp.experiment.lfs import refuse_lfs_pointer

    choice = choice or Choice()
    refuse_lfs_pointer(path)  # what a clone without `git lfs pull` holds: say so, not "format not recognised"
    if fmt is None:
        fmt = detect_format(path)
    readers = {"rlexp": records.read, "lm-eval": lm_eval.read, "inspect": inspect_log.read,
               "lighteval": lighteval.read}
    if fmt not in readers:
        raise InputError(None, "--format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return readers[fmt](path, choice, intersect=intersect)
