"""rlexp's own per-problem record files (``eval/<checkpoint>/<set>.jsonl``) as an item set.

Read by the strict record reader (:func:`rlexp.experiment.records.read_record_lines`). The key and the
fingerprint are both the ``problem_hash``, which is already a hash of the problem's content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.evaluation.harnesses.items import Choice, Item, ItemSet, scalar_fields


def looks_like(first: Any) -> bool:
    return isinstance(first, dict) and "problem_hash" in first and "correct" in first


def read(path: str | Path, choice: Choice, *, intersect: bool) -> ItemSet:
    from rlexp.experiment.records import read_record_lines

    items = {}
    for line in read_record_lines(path):
        output = line.record.get("output")
        items[line.problem_hash] = Item(line.problem_hash, (float(line.correct),), line.problem_hash, None,
                                        scalar_fields(line.record), output if isinstance(output, str) else None)
    from rlexp import __version__

    return ItemSet(str(path), "rlexp", "rlexp", __version__, "", {}, items)
