"""Reading trainers' metric logs from their text (pure: the caller reads the file).

Every reader returns a :class:`LogRead`: the steps read (canonical names, see
:mod:`rlexp.training.metric_names`), split into runs where step numbers restart, the line
numbers of the lines that looked like metrics but could not be read (never dropped silently), the
values that were not numbers (counted by name) and the steps with a NaN or an infinity (kept as
float NaN/inf, and flagged). The shared machinery (:class:`LogRead`, :class:`StepRows`,
:func:`metrics_of`, Python dict reprs read whole or pair by pair, wrapped records re-joined) and the
formats no one trainer owns:

- ``jsonl``: one JSON object per line with ``global_step`` or ``step``.
- ``trainer-state``: TRL's (transformers') ``trainer_state.json``, its ``log_history`` entries.

- ``tensorboard``: an event directory (read by rlexp.training.log_files).

A trainer's own formats (OpenRLHF's console, verl's console and file logger) are read in its
package (its rules' ``log_readers``, its ``metrics`` module): :func:`formats` and :func:`read_text`
take them from the registered trainers.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlexp.training.metric_names import STEP_KEYS, canonical_row, is_monitor_key, number

# the formats every trainer's logs may come in; a trainer's own formats come after the console's
COMMON_FORMATS = ("jsonl", "trainer-state", "tensorboard")
MAX_JOIN = 256  # lines a wrapped record may span (a 6,000-character verl record at 24 columns)
# Bounds that keep a read linear in the file's size whatever it holds (a real record is a few KB):
MAX_LINE_CHARS = 1 << 20    # a longer line is not read (not understood): no pattern runs over it
MAX_RECORD_CHARS = 1 << 20  # a record re-joined past this is cut there (flagged)
MAX_BAR_CHARS = 1 << 16     # a tqdm bar segment longer than this is not a bar


@dataclass
class Run:
    first_line: int
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        return [r["global_step"] for r in self.rows]


@dataclass
class LogRead:
    """What one read of one file gave, and what it could not read."""

    format: str
    trainer: str
    lines: int = 0
    runs: list[Run] = field(default_factory=list)
    not_understood: list[int] = field(default_factory=list)  # line numbers (entry numbers: trainer-state)
    rejoined: list[int] = field(default_factory=list)        # first lines of records wrapped over several lines
    abridged: list[int] = field(default_factory=list)        # lines read pair by pair (cut or "…")
    # records cut (by a wrap or a paste) that could not be re-joined: (first line, last line); the
    # item cut in two is left out, never read as a shorter key or number
    cut: list[tuple[int, int]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)    # values that are not numbers, by name
    nonfinite: list[tuple[int, str]] = field(default_factory=list)  # (step, name) kept as NaN/inf
    steps_counted: bool = False  # steps numbered by rlexp (tqdm postfixes), not by the trainer

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for run in self.runs for row in run.rows]

    def drop(self, name: str) -> None:
        self.dropped[name] = self.dropped.get(name, 0) + 1


# --- values -------------------------------------------------------------------------------------

# a logged value read as a number: rlexp.training.metric_names owns it (imported above)


def step_of(value: Any) -> int | None:
    n = number(value)
    if n is None or not math.isfinite(n) or n != int(n) or n < 0:
        return None
    return int(n)


def metrics_of(raw: Mapping[str, Any], trainer: str, read: LogRead, step: int) -> dict[str, float]:
    """A raw mapping's metrics under canonical names; non-numbers counted, NaN/inf kept and flagged."""
    out: dict[str, float] = {}
    for name, value in canonical_row({k: v for k, v in raw.items() if k not in STEP_KEYS}, trainer).items():
        if isinstance(value, dict | list):  # generated samples and the like: not metrics
            continue
        n = number(value)
        if n is None:
            read.drop(name)
            continue
        if not math.isfinite(n):
            read.nonfinite.append((step, name))
        if name.startswith(("eval/", "eval_")):  # in-run eval: eval_<set>_pass1 is also monitor_acc
            if is_monitor_key(name) and math.isfinite(n):
                out["monitor_acc"] = n if n <= 1.0 else n / 100.0
            name = name.replace("/", "_")
        out[name] = n
    return out


# --- wrapped records ----------------------------------------------------------------------------

# the head of a number a wrap cut: Python's repr never ends a number with ".", "e", "e-" or a sign,
# and numpy's or torch's wrapper is closed ("368." is the start of 368.902, not 368.0)
_CUT_NUMBER = re.compile(r"[-+]?(?:\d+\.|\d+(?:\.\d+)?[eE][-+]?|[-+.])")
_CUT_WRAPPER = re.compile(r"(?:np\.\w+|tensor)\([^)]*")


def looks_cut(value: str) -> bool:
    """A value that is the head of a number cut by a wrap (see :data:`_CUT_NUMBER`)."""
    value = value.strip()
    return bool(_CUT_NUMBER.fullmatch(value) or _CUT_WRAPPER.fullmatch(value))


def join_wrapped(head: str, tail: str, separator: str) -> str:
    """Two physical lines of one record: a terminal's wrap inserts no character, so a line break
    inside a key or a number joins with nothing between; at the record's own ``separator`` (verl's
    ``" - "``) the space a paste trimmed is put back."""
    head, tail = head.rstrip(), tail.strip()
    mark = separator.strip()
    if head.endswith(" " + mark) or tail.startswith(mark + " ") or tail == mark:
        return head + " " + tail
    return head + tail


# --- runs ---------------------------------------------------------------------------------------

class StepRows:
    """Rows in file order, split into runs where the step number goes back (or repeats, for
    trainers that never log a step twice)."""

    def __init__(self, read: LogRead):
        self.read = read
        self.last: int | None = None

    def add(self, step: int, metrics: dict[str, float], line: int, *, repeat_restarts: bool) -> None:
        runs = self.read.runs
        restart = self.last is not None and (step < self.last or (repeat_restarts and step == self.last))
        if not runs or restart:
            runs.append(Run(first_line=line))
        run = runs[-1]
        if run.rows and run.rows[-1]["global_step"] == step:
            run.rows[-1].update(metrics)
        else:
            run.rows.append({"global_step": step, **metrics})
        self.last = step

    def join(self, step: int, metrics: dict[str, float], line: int) -> None:
        """An eval line: joins its step's row in the current run (the row keeps its own time)."""
        run = self.read.runs[-1] if self.read.runs else None
        row = next((r for r in reversed(run.rows) if r["global_step"] == step), None) if run else None
        if row is None:
            self.add(step, metrics, line, repeat_restarts=False)
            return
        stamp = row.get("time")
        row.update(metrics)
        if stamp is not None:
            row["time"] = stamp


# --- Python dict reprs (as trainers print their metrics) -------------------------------------------

_PAIR = re.compile(r"""['"]([^'"]+)['"]\s*:\s*(tensor\([^()]*\)|np\.\w+\([^()]*\)|[^,{}\s]+)""")
_TENSOR = re.compile(r"tensor\(\s*([^,()]+)[^()]*\)")
_NONFINITE = re.compile(r"(?<![\w'\"])(nan|inf|-inf|NaN|Infinity|-Infinity)(?![\w'\"])")


def brace_balance(text: str) -> int:
    return text.count("{") - text.count("}")


def dict_of(payload: str) -> tuple[dict[str, Any] | None, bool]:
    """A Python dict repr -> (dict, whole); an abridged or cut one read pair by pair (whole=False).
    A pair the payload ends in (no ``,`` or ``}`` after its value) may be cut: it is left out, so
    ``'reward': 368.`` is never read as 368.0 (see :func:`dict_pairs`)."""
    raw, whole, _ = dict_pairs(payload)
    return raw, whole


def dict_pairs(payload: str) -> tuple[dict[str, Any] | None, bool, bool]:
    """:func:`dict_of`, and whether a pair at the end was left out as cut."""
    text = _TENSOR.sub(lambda m: m.group(1).strip(), payload.strip())
    text = _NONFINITE.sub(lambda m: repr(m.group(1)), text)
    try:
        raw = ast.literal_eval(text)
        if isinstance(raw, dict):
            return raw, True, False
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    pairs: dict[str, Any] = {}
    cut = False
    for m in _PAIR.finditer(payload):
        after = payload[m.end():].lstrip()
        if not after or (after[0] not in ",}" and not after.startswith(("…", "..."))) or looks_cut(m.group(2)):
            cut = True  # the value runs to the end of what was pasted: perhaps the head of a longer one
            continue
        pairs[m.group(1)] = m.group(2)
    return (pairs or None), False, cut


def physical_lines(text: str) -> list[str]:
    return text.split("\n")


# --- JSON lines ---------------------------------------------------------------------------------

def json_lines(text: str, read: LogRead) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of ``text`` that is JSON; blank lines are skipped,
    the others counted in ``read.lines`` and, when not JSON, in ``read.not_understood``."""
    for number_, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        read.lines = number_
        if len(line) > MAX_LINE_CHARS:
            read.not_understood.append(number_)
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            read.not_understood.append(number_)
            continue
        yield number_, value


def read_jsonl(text: str, trainer: str) -> LogRead:
    """One JSON object per line with ``global_step`` or ``step`` (the seed's training_metrics.jsonl,
    rlexp's metrics.jsonl, a trainer's JSONL)."""
    read = LogRead("jsonl", trainer)
    steps = StepRows(read)
    for number_, raw in json_lines(text, read):
        step = None
        if isinstance(raw, dict):
            step = next((step_of(raw[k]) for k in STEP_KEYS if k in raw), None)
        if step is None:
            read.not_understood.append(number_)
            continue
        steps.add(step, metrics_of(raw, trainer, read, step), number_, repeat_restarts=False)
    return read


# --- transformers' trainer_state.json (TRL's, any HF Trainer's) ---------------------------------------------------------------------

def read_trainer_state(text: str, trainer: str) -> LogRead:
    """transformers' ``trainer_state.json`` (what TRL leaves in every checkpoint): each
    ``log_history`` entry with a ``step`` is a row (a step's train, eval and final-summary entries
    merge); an entry without one is not understood, reported by its line in the file."""
    read = LogRead("trainer-state", trainer)
    read.lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    doc = json.loads(text)  # the caller turns a JSON error into an InputError
    if not isinstance(doc, dict) or not isinstance(doc.get("log_history"), list):
        raise ValueError('expected an object with a "log_history" list')
    positions = _entry_lines(text)
    steps = StepRows(read)
    for index, entry in enumerate(doc["log_history"]):
        line = positions[index] if index < len(positions) else index + 1
        step = step_of(entry.get("step")) if isinstance(entry, dict) else None
        if step is None:
            read.not_understood.append(line)
            continue
        raw = {k: v for k, v in entry.items() if k != "epoch"}
        steps.add(step, metrics_of(raw, trainer, read, step), line, repeat_restarts=False)
    return read


def _entry_lines(text: str) -> list[int]:
    """The line on which each element of ``log_history`` starts."""
    start = text.find('"log_history"')
    if start < 0:
        return []
    pos = text.find("[", start)
    decoder = json.JSONDecoder()
    out: list[int] = []
    pos += 1
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        out.append(text.count("\n", 0, pos) + 1)
        try:
            _, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
    return out


# --- any format by name -------------------------------------------------------------------------

def trainer_readers() -> dict[str, Callable[[str, str], LogRead]]:
    """The formats the trainers read their own way (their rules' ``log_readers``), by name."""
    from rlexp.trainers import names, rules

    out: dict[str, Callable[[str, str], LogRead]] = {}
    for name in names():
        out.update(rules(name).log_readers())
    return out


def formats() -> tuple[str, ...]:
    """Every format ``rlexp ingest`` reads."""
    return (*trainer_readers(), *COMMON_FORMATS)


def read_text(text: str, fmt: str, trainer: str) -> LogRead:
    readers: dict[str, Callable[[str, str], LogRead]] = {
        "jsonl": read_jsonl, "trainer-state": read_trainer_state, **trainer_readers()}
    if fmt not in readers:
        raise ValueError(f"unknown format {fmt!r}")
    return readers[fmt](text, trainer)


def rows_from(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]
