"""lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<date>.jsonl``.

One line per (document, filter) with ``doc_id, doc, target, filter, metrics`` (the metric names),
``doc_hash, prompt_hash, target_hash`` (SHA-256 of the doc JSON, of the first request's prompt and
of ``str(target)``) and one key per metric. Items are keyed ``<task>:<doc_id>`` within the chosen
filter; the fingerprint is doc_hash + target_hash (doc_hash alone is not a key: the same document
has the same hash in two tasks), and the prompt hash is kept for the between-run check. The task
comes from the file name (lines do not carry it) unless ``--task`` names it. The harness version
is read from the ``results_<date>.json`` written beside the samples file, when it is there.
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
from rlexp.experiment.files import MAX_JSONL_BYTES, loads_text, read_text

FILE_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
REQUIRED = ("doc_id", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash")


def looks_like(first: Any) -> bool:
    return isinstance(first, dict) and "doc_id" in first and "filtered_resps" in first


def read_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every line, strictly (NaN allowed: a metric may be NaN); a truncated last line is an error."""
    text = read_text(path, limit=MAX_JSONL_BYTES)
    out = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = loads_text(path, line, f"line {number}", allow_nan=True)
        except InputError as exc:
            if number == len(lines) and not text.endswith("\n") and exc.message.startswith("malformed JSON"):
                raise InputError(path, f"line {number}", "truncated last line") from None
            raise
        if not isinstance(record, dict):
            raise InputError(path, f"line {number}", "expected a JSON object")
        out.append((number, record))
    if not out:
        raise InputError(path, None, "empty samples file")
    return out


def _results_beside(path: Path) -> tuple[Any, str] | None:
    """The ``results_<date>.json`` written with a samples file, parsed, and its name; None when it
    is not there or not JSON (it only adds what a samples file does not say)."""
    match = FILE_NAME.match(path.name)
    if not match:
        return None
    results = path.with_name(f"results_{match['date']}.json")
    try:
        return json.loads(results.read_text(encoding="utf-8")), results.name
    except (OSError, ValueError, RecursionError):
        return None


def harness_version(path: Path) -> str | None:
    found = _results_beside(path)
    if found is None:
        return None
    data = found[0]
    version = data.get("lm_eval_version") if isinstance(data, dict) else None
    return str(version) if version is not None else None


def documents_reported(path: Path, task: str) -> tuple[int, str] | None:
    """(documents, results file name): what the ``results_<date>.json`` beside the samples file says
    the task was run on (``n-samples.<task>.effective``, lm-eval 0.4.2+), or None when it does not say."""
    found = _results_beside(path)
    if found is None:
        return None
    data, name = found
    counts = data.get("n-samples") if isinstance(data, dict) else None
    entry = counts.get(task) if isinstance(counts, dict) else None
    value = entry.get("effective") if isinstance(entry, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, name
    return None


def read(path: str | Path, choice: Choice, *, intersect: bool) -> ItemSet:
    path = Path(path)
    lines = read_lines(path)
    for number, record in lines:
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            why = ("this lm-eval version logs no content hashes, so pairing cannot be checked"
                   if missing[0].endswith("_hash") else "not an lm-eval samples line")
            raise InputError(path, f"line {number}: {missing[0]}", f"missing ({why})")
        for key, kinds, what in (("doc_id", (int, str), "an integer or a string"), ("filter", str, "a string"),
                                 ("metrics", list, "a list of metric names"), ("doc_hash", str, "a string"),
                                 ("prompt_hash", str, "a string"), ("target_hash", str, "a string")):
            if not isinstance(record[key], kinds) or isinstance(record[key], bool):
                raise InputError(path, f"line {number}: {key}", f"must be {what}, got {type(record[key]).__name__}")
        if not all(isinstance(m, str) for m in record["metrics"]):
            raise InputError(path, f"line {number}: metrics", "must be a list of metric names (strings)")
    match = FILE_NAME.match(path.name)
    if choice.task is not None:
        task = choice.task
    elif match:
        task = match["task"]
    else:
        raise InputError(path, "task", "lm-eval samples lines do not name their task and the file name is not "
                         "samples_<task>_<date>.jsonl; name it with --task")
    filt = choose(path, "filter", (r["filter"] for _, r in lines), choice.filter)
    chosen_lines = [(n, r) for n, r in lines if r["filter"] == filt]
    metric_names = {m for _, r in chosen_lines for m in r["metrics"]}
    metric = choose(path, "metric", metric_names, choice.metric)
    problems = Problems(path, intersect=intersect)
    tally = ScoreTally()
    items: dict[str, Item] = {}
    first_line: dict[str, int] = {}
    for number, record in chosen_lines:
        key = f"{task}:{record['doc_id']}"
        where = f"{key} (line {number})"
        if key in first_line:
            problems.flag(key, where=where, reason=f"duplicate doc_id under filter {filt!r} (first at line {first_line[key]}; "
                          "an appended samples file from two runs?)")
            items.pop(key, None)
            continue
        first_line[key] = number
        if metric not in record["metrics"] or metric not in record:
            problems.flag(key, where=where, reason=f"no value for metric {metric!r}")
            continue
        try:
            score = to_score(record[metric], tally)
        except Unscored as exc:
            problems.flag(key, where=where, reason=f"metric {metric!r}: {exc} (a --predict_only run?)")
            continue
        except NotAScore as exc:
            problems.flag(key, where=where, reason=f"metric {metric!r} is {exc}")
            continue
        output = _first_response(record.get("filtered_resps"))
        items[key] = Item(key, (score,), fingerprint(record["doc_hash"], record["target_hash"]),
                          str(record["prompt_hash"]), scalar_fields(record.get("doc")), output)
    if not items:
        raise InputError(path, None, f"no usable item under filter {filt!r}, metric {metric!r}")
    notes = []
    reported = documents_reported(path, task)
    if reported is not None and len(first_line) < reported[0]:
        notes.append(f"a subset: this samples file holds {len(first_line)} of the {reported[0]} documents its "
                     f"{reported[1]} reports for {task} (cut, or copied in part?); only these are compared")
    return ItemSet(str(path), "lm-eval", "lm-evaluation-harness", harness_version(path), task,
                   {"filter": filt, "metric": metric}, items, problems.dropped, notes, tally.no_answer)


def _first_response(value: Any) -> str | None:
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else None
