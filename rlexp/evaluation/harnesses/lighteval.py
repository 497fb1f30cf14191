"""lighteval details: ``details_<task>|<fewshot>_<timestamp>.parquet``.

lighteval 0.11+ writes struct columns ``doc{query, choices, gold_index, id, task_name,
specific, ...}``, ``model_response{text[], logprobs[], ...}`` and ``metric{<name>: value}``. A
task whose metrics need several sampling methods (loglikelihood and generation) gets one row per
document and method, each row holding only its own metrics (the others are null): the rows of the
chosen metric are those where it is not null. Items are keyed ``<task>:<doc.id>`` (``doc.id`` is
the document's position in the evaluation split, assigned by lighteval).

What tells the document from the prompt template: in lighteval 0.13 the task's prompt function
builds the whole ``Doc`` from a dataset row, so ``query`` and ``choices`` are the document as
that template formatted it; the details carry no hash of the dataset row (the per-sample hash
lighteval computes, ``Hash.example``, is of ``query`` and is not written to the details), and
``specific`` is whatever the prompt function chose to put there. Only ``original_query`` ("the
query before any preprocessing", set by a prompt function that stores it) is the document's own
text. So: where a row sets ``original_query``, the content fingerprint is a hash of it and
``gold_index``, and the prompt hash one of ``query``, ``instruction`` and ``choices`` (a template
change is then a prompt change, which ``--allow-prompt-change`` lets through, counted);
otherwise the fingerprint is a hash of query, choices and gold_index, no prompt hash, and any
edit of the template is a content difference that ``rlexp compare`` refuses, saying why. lighteval records no version of itself in its outputs
(``config_general.lighteval_sha`` is "?" for an installed package), so the harness version is
reported only when a results file beside the details names one. Older versions wrote flat columns and no id: such a file cannot be
paired safely and is refused. Sampled metrics (several samples per document) are already
fractions, so they arrive as partial credit. Read with pandas + pyarrow.
"""

from __future__ import annotations

import json
import re
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

PARQUET_MAGIC = b"PAR1"
FILE_NAME = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-:_]+)\.parquet$")


def _plain(value: Any) -> Any:
    """numpy arrays and scalars from pyarrow → lists and Python numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_rows(path: Path) -> list[dict[str, Any]]:
    from rlexp.experiment.files import MAX_JSONL_BYTES, check_regular_file

    path = check_regular_file(path)  # a FIFO or a device would block or never end
    if path.stat().st_size > MAX_JSONL_BYTES:
        raise InputError(path, None, f"larger than the limit of {MAX_JSONL_BYTES} bytes")
    import pandas as pd
    import pyarrow.parquet as pq

    try:  # the footer states what the columns decompress to: bounded before anything is decoded
        metadata = pq.ParquetFile(path).metadata
        decoded = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(path, None, f"unreadable parquet: {str(exc).splitlines()[0]}") from None
    if decoded > MAX_JSONL_BYTES:
        raise InputError(path, None, f"its columns decompress to {decoded} bytes, over the limit of "
                                     f"{MAX_JSONL_BYTES}")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(path, None, f"unreadable parquet: {str(exc).splitlines()[0]}") from None
    missing = [c for c in ("doc", "metric") if c not in frame.columns]
    if missing:
        raise InputError(path, missing[0], "missing column: an older lighteval details file (flat columns, no "
                         "document id) cannot be paired safely")
    return [_plain(row) for row in frame.to_dict(orient="records")]


def harness_version(path: Path) -> str | None:
    """The lighteval version named by the run's ``results_<timestamp>.json``, looked for beside the
    details file and where lighteval writes it (``<out>/results/<model>/`` for details in
    ``<out>/details/<model>/<timestamp>/``). lighteval 0.13 names none (``lighteval_sha`` is "?")."""
    match = FILE_NAME.match(path.name)
    if not match:
        return None
    name = f"results_{match['date']}.json"
    candidates = [path.with_name(name)]
    if len(path.parents) >= 4:
        candidates.append(path.parents[3] / "results" / path.parents[1].name / name)
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        general = data.get("config_general") if isinstance(data, dict) else None
        version = general.get("lighteval_version") if isinstance(general, dict) else None
        if version:
            return str(version)
    return None


def _hashes(doc: dict[str, Any]) -> tuple[str, str | None]:
    """(content fingerprint, prompt hash) of a details row's doc (see the module's docstring)."""
    original = doc.get("original_query")
    if isinstance(original, str) and original.strip():
        return (fingerprint("original_query", original, doc.get("gold_index")),
                fingerprint(doc.get("query"), doc.get("instruction"), doc.get("choices")))
    return fingerprint(doc.get("query"), doc.get("choices"), doc.get("gold_index")), None


def content_cause(base: Item, new: Item) -> str:
    """Why one ``doc.id`` holds different content in two runs, as precisely as the details allow."""
    b, n = base.fields, new.fields
    b_orig, n_orig = (isinstance(f.get("original_query"), str) and bool(f["original_query"].strip()) for f in (b, n))
    if b_orig != n_orig:
        return ("one run's details set doc.original_query and the other's do not, so there is no document text to "
                "pair the two by; rerun the one without it with a prompt function that sets it")
    if b_orig:
        return "doc.original_query or gold_index differs: another document under this position in the split"
    if b.get("gold_index") == n.get("gold_index") and b.get("query") != n.get("query"):
        # the details hold the document only as the prompt function formatted it (query), doc.id is a
        # position in the split and no hash of the dataset row is written: nothing else to pair by
        return ("the query differs with the same gold_index: a prompt-template change or another document, which "
                "lighteval's details cannot tell apart, so --allow-prompt-change cannot pair them; set "
                "Doc.original_query to the document's own text in both runs (rlexp then pairs by it), or rerun "
                "both with one prompt")
    return "lighteval's ids are positions in the split: a reordered or edited dataset renumbers them"


def read(path: str | Path, choice: Choice, *, intersect: bool) -> ItemSet:
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise InputError(path, None, "no rows")
    tasks = {str((r.get("doc") or {}).get("task_name") or "") for r in rows} - {""}
    if not tasks:
        match = FILE_NAME.match(path.name)
        tasks = {match["task"]} if match else set()
    task = choose(path, "task", tasks, choice.task)
    metric_names = {m for r in rows for m in (r.get("metric") or {})}
    metric = choose(path, "metric", metric_names, choice.metric)
    problems = Problems(path, intersect=intersect)
    tally = ScoreTally()
    items: dict[str, Item] = {}
    first_row: dict[str, int] = {}
    for number, row in enumerate(rows):
        doc = row.get("doc") or {}
        if str(doc.get("task_name") or task) != task:
            continue
        doc_id = doc.get("id")
        if doc_id in (None, ""):
            raise InputError(path, f"row {number}: doc.id", "empty: this file has no document ids to pair on")
        key = f"{task}:{doc_id}"
        where = f"{key} (row {number})"
        metrics = row.get("metric") or {}
        if metrics.get(metric) is None:  # a row of another sampling method (or metric)
            continue
        if key in first_row:
            problems.flag(key, where=where, reason=f"duplicate doc.id (first at row {first_row[key]})")
            items.pop(key, None)
            continue
        first_row[key] = number
        try:
            score = to_score(metrics[metric], tally)
        except (Unscored, NotAScore) as exc:
            problems.flag(key, where=where, reason=f"metric {metric!r}: {exc}")
            continue
        texts = (row.get("model_response") or {}).get("text")
        output = texts[0] if isinstance(texts, list) and texts and isinstance(texts[0], str) else None
        fields = {**scalar_fields(doc.get("specific")), **scalar_fields(doc)}
        items[key] = Item(key, (score,), *_hashes(doc), fields, output)
    if not items:
        raise InputError(path, None, f"no usable row for task {task!r}, metric {metric!r}")
    return ItemSet(str(path), "lighteval", "lighteval", harness_version(path), task, {"metric": metric}, items,
                   problems.dropped, [], tally.no_answer)
