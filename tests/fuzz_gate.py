"""A grammar and mutation fuzzer of the input gate, shared by tests/test_input_fuzz.py (a fixed-seed
slice) and scripts/fuzz_input_gate.py (10,000 inputs and more).

Inputs come from each format's grammar (JSON, JSONL, YAML values with numbers at and past every bound,
odd strings, deep nesting, YAML aliases/tags/duplicate keys) and from mutations of the valid files of
the experiment of tests/input_fixture.py: a value of another type or at a bound spliced in at a key
path, a key dropped or added, bytes inserted/flipped/truncated, a size over the reader's limit (the
limit lowered for the case), and the file replaced by a special file (FIFO, symlink loop, directory,
dangling symlink, a device). Each input is run

- by the reader of its format, in-process (``reader`` cases): it returns or raises one-line
  :class:`~rlexp.errors.InputError`; anything else is a traceback;
- by a verb that reads the file (``verb`` cases, through :func:`rlexp.cli.main` on a private copy of
  the experiment): exit 0; exit 1 only as a verdict (never the unreadable-input path); or exit 2 with
  one line and the tree (hidden files included) unchanged;
- as the value of a numeric or path option (``option`` cases), under the same contract.

Every case runs under a time bound (SIGALRM); a case past it is a hang. A failing case is shrunk
(chunks of the mutated bytes removed while it still fails) and kept with its reproducer.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------------------ grammar

EDGE_INT_TEXT = ["0", "-1", "1", "2", "7", "100", "2147483647", "2147483648", "4294967295", "4294967296",
                 "9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775809",
                 "1000000000000", "9" * 4300, "9" * 4301, "-" + "9" * 5000, "1" * 20000]
EDGE_FLOAT_TEXT = ["0.0", "-0.0", "0.5", "1.5", "1e-320", "1e308", "-1e308", "1.7976931348623157e308",
                   "1e999", "-1e999", "1e-99999", "NaN", "Infinity", "-Infinity", "1.0e+30", "3.0e-5"]
EDGE_STRINGS = ["", " ", "x", "\\u0000", "\\ud800", "\\udfff\\ud800", "é", "\\u202e", "../../../etc",
                "/etc/passwd", "global_step2", "baseline_s0", "null", "true", "1", "a\\nb", "\\t", "C", "I",
                "stop", "length", "boxed", "x" * 5000]
ODD_BYTES = [b"\xff", b"\x00", b"\xc0\xaf", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r", b"\r\n", b"\x1b[2J", b"\xe2\x80\xa8",
             b"\"", b"{", b"]", b"\n\n", b"\t", b"'", b"#", b"&a ", b"*a", b"!!python/object:os.system ", b"---\n"]


def json_value(rng: random.Random, depth: int = 0) -> str:
    """JSON text of one value drawn from the grammar (numbers at bounds written raw: 1e999, 4301 digits)."""
    roll = rng.random()
    if depth > 3 or roll < 0.55:
        kind = rng.choice(["int", "int", "float", "str", "str", "bool", "null"])
        if kind == "int":
            return rng.choice(EDGE_INT_TEXT) if rng.random() < 0.7 else str(rng.randint(-10**6, 10**6))
        if kind == "float":
            return rng.choice(EDGE_FLOAT_TEXT)
        if kind == "str":
            return '"' + rng.choice(EDGE_STRINGS) + '"'
        return rng.choice(["true", "false"]) if kind == "bool" else "null"
    if roll < 0.75:
        return "[" + ", ".join(json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    if roll < 0.95:
        keys = [rng.choice(["a", "id", "seed", "global_step", "prompt", "answer", "correct", "x" * 300, ""])
                for _ in range(rng.randint(0, 3))]
        return "{" + ", ".join(f'"{k}": {json_value(rng, depth + 1)}' for k in dict.fromkeys(keys)) + "}"
    n = rng.choice([65, 200, 3000, 100_000])
    return "[" * n + "]" * n


def yaml_value(rng: random.Random) -> str:
    """A YAML scalar or flow value, with YAML's own traps (aliases, tags, .inf, 1_000, octal)."""
    return rng.choice([json_value(rng), json_value(rng), ".inf", "-.inf", ".nan", "0x7fffffffffffffff", "0o777",
                       "1_000_000", "2001-12-14", "!!binary aGVsbG8=", "!!python/object/apply:os.system [ls]",
                       "&a [1, *a]", "*undefined", "|\n  block\n", "? [1]\n: 2", "'quoted'", "~", "=", "<<: {a: 1}"])


def grammar_document(rng: random.Random, fmt: str) -> bytes:
    """A whole document of ``fmt`` from the grammar alone."""
    if fmt == "jsonl":
        return "".join(json_value(rng) + "\n" for _ in range(rng.randint(0, 4))).encode()
    if fmt == "yaml":
        lines = [f"{rng.choice(['id', 'parent', 'recipe', 'change', 'x', 'datasets', 'eval', 'a'])}: {yaml_value(rng)}"
                 for _ in range(rng.randint(0, 4))]
        return ("\n".join(lines) + "\n").encode()
    return json_value(rng).encode()


# ------------------------------------------------------------------------------------ mutations

MUTATIONS = ["swap_type", "bound", "drop_key", "add_key", "insert_bytes", "flip_byte", "truncate", "duplicate_line",
             "empty", "nest", "grammar", "size", "special"]
SPECIALS = ["fifo", "loop", "directory", "dangling", "device"]
_PLACEHOLDER = "\u0000FUZZ\u0000"


def fmt_of(rel: str) -> str:
    if rel.endswith(".jsonl"):
        return "jsonl"
    if rel.endswith((".yaml", ".yml")):
        return "yaml"
    if rel.endswith(".eval"):
        return "zip"
    return "json"


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _numeric_edge(rng: random.Random, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return rng.choice(EDGE_INT_TEXT + EDGE_FLOAT_TEXT)
    return rng.choice([repr(value + 1), repr(value - 1), repr(-value), repr(value * 10**6), "0", "-1",
                       repr(float(value)), str(int(value)) + "0" * 4300, "1e999", "NaN", repr(2**63), repr(2**64)])


def _splice(doc: Any, path: tuple, raw: str, fmt: str) -> str:
    text = json.dumps(_set(doc, path, _PLACEHOLDER), ensure_ascii=False)
    return text.replace(json.dumps(_PLACEHOLDER, ensure_ascii=False), raw)


def mutate(rng: random.Random, data: bytes, rel: str, kind: str) -> bytes:
    """``data`` (a valid file named ``rel``) after one mutation of ``kind`` (the content kinds only)."""
    fmt = fmt_of(rel)
    at = rng.randint(0, len(data))
    if kind == "insert_bytes":
        return data[:at] + rng.choice(ODD_BYTES) * rng.choice([1, 1, 2, 50]) + data[at:]
    if kind == "flip_byte" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ rng.choice([0x80, 0xFF, 0x20, 0x01])]) + data[at + 1:]
    if kind == "truncate":
        return data[:at]
    if kind == "duplicate_line":
        lines = data.splitlines(keepends=True) or [b""]
        i = rng.randrange(len(lines))
        return b"".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if kind == "empty":
        return rng.choice([b"", b"\n", b"   \n", b"\xef\xbb\xbf", b"null", b"[]", b"{}", b"0"])
    if kind == "grammar" or fmt == "zip":
        return grammar_document(rng, "json" if fmt == "zip" else fmt)
    # structural mutations of a parsed document (a JSONL file: one of its lines)
    text = data.decode("utf-8", "replace")
    lines = text.splitlines() or ["{}"]
    index = rng.randrange(len(lines)) if fmt == "jsonl" else 0
    source = lines[index] if fmt == "jsonl" else text
    try:
        if fmt == "yaml":
            import yaml

            doc = yaml.safe_load(source)
        else:
            doc = json.loads(source)
    except Exception:  # noqa: BLE001 - a file already mutated into something unparsable: add bytes instead
        return data + rng.choice(ODD_BYTES)
    path = rng.choice(_paths(doc))
    if kind == "nest":
        n = rng.choice([65, 300, 5000, 200_000])
        raw = "[" * n + "]" * n
    elif kind == "bound":
        current: Any = doc
        for key in path:
            current = current[key]
        raw = _numeric_edge(rng, current)
    elif kind == "drop_key" and len(path) >= 1:
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        raw = None
    elif kind == "add_key" and isinstance(doc, dict):
        doc[rng.choice(["unknown", "x" * 200, "seed", "__proto__", "id"])] = _PLACEHOLDER
        path, raw = (), None
        text_out = json.dumps(doc, ensure_ascii=False).replace(json.dumps(_PLACEHOLDER), json_value(rng))
        return _rejoin(lines, index, text_out, fmt)
    else:  # swap_type (and the fallbacks)
        raw = yaml_value(rng) if fmt == "yaml" and rng.random() < 0.3 else json_value(rng)
    out = json.dumps(doc, ensure_ascii=False) if raw is None else _splice(doc, path, raw, fmt)
    return _rejoin(lines, index, out, fmt)


def _rejoin(lines: list[str], index: int, new: str, fmt: str) -> bytes:
    if fmt == "jsonl":
        lines = [*lines[:index], new, *lines[index + 1:]]
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    return (new + "\n").encode("utf-8", "surrogatepass")


def make_special(path: Path, kind: str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(path.name + ".missing")
    else:
        make_device(path)


def make_device(path: Path) -> None:
    """A private character device reading like /dev/zero (never the system's own node: a writer that
    wrongly replaced it, run as root, would replace /dev/zero for the whole machine); where mknod is
    not permitted, a link to /dev/zero, which such a user cannot replace."""
    import stat as stat_module

    try:
        os.mknod(path, stat_module.S_IFCHR | 0o666, os.makedev(1, 5))
    except (PermissionError, OSError):
        if os.geteuid() == 0:
            raise
        path.symlink_to("/dev/zero")


# ------------------------------------------------------------------------------------- the cases


@dataclass
class Case:
    level: str                  # reader | verb | option
    target: str                 # the file (relative to the experiment) or the option
    verb: str                   # the reader or the verb
    kind: str                   # the mutation
    data: bytes | None = None   # the mutated bytes (None: a special file, or an option case)
    special: str | None = None
    argv_value: str | None = None
    limit: int | None = None    # a lowered size limit for the case ("size")


@dataclass
class Outcome:
    case: Case
    status: str                 # ok | verdict | refusal | traceback | hang | write | multiline | exit1-unreadable | bad-exit
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[tuple[Outcome, bytes | None]] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def counts(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    def summary(self) -> dict[str, Any]:
        c = self.counts()
        return {"inputs": len(self.outcomes), "accepted (exit 0)": c["ok"], "verdicts (exit 1)": c["verdict"],
                "refusals (exit 2, one line)": c["refusal"], "tracebacks": c["traceback"], "hangs": c["hang"],
                "writes on refusal": c["write"], "multi-line refusals": c["multiline"],
                "exit 1 for unreadable input": c["exit1-unreadable"], "other exit codes": c["bad-exit"]}

    def coverage(self) -> dict[str, Counter]:
        table: dict[str, Counter] = {}
        for o in self.outcomes:
            if o.case.level != "option":
                table.setdefault(o.case.target, Counter())[o.case.verb] += 1
        return table

    def option_coverage(self) -> Counter:
        return Counter(f"{o.case.verb} {o.case.target}" for o in self.outcomes if o.case.level == "option")

    @property
    def bad(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status not in ("ok", "verdict", "refusal")]


class Hang(BaseException):
    """Raised by the alarm: the case ran past its time bound."""


@contextlib.contextmanager
def time_bound(seconds: float):
    def on_alarm(signum, frame):  # noqa: ARG001
        raise Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def lowered_limits(limit: int | None):
    """The readers' size limits lowered for one case (a "size" mutation: a file just over them)."""
    if limit is None:
        yield
        return
    from rlexp.experiment import files

    saved = (files.MAX_DOCUMENT_BYTES, files.MAX_JSONL_BYTES, files.MAX_MEMBER_BYTES)
    files.MAX_DOCUMENT_BYTES = files.MAX_JSONL_BYTES = files.MAX_MEMBER_BYTES = limit
    try:
        yield
    finally:
        files.MAX_DOCUMENT_BYTES, files.MAX_JSONL_BYTES, files.MAX_MEMBER_BYTES = saved


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry below ``root``, hidden ones included; links by target, special files by kind
    (a link to the shared model is not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "special"
    return out


# ------------------------------------------------------------------------------------- readers


def readers(exp: Path) -> dict[str, tuple[list[str], Callable[[Path], Any]]]:
    """Reader name -> (the experiment files it reads, how to read one)."""
    from rlexp.evaluation.harnesses import read_items
    from rlexp.experiment import files
    from rlexp.experiment.datasets import check_dataset_rows, read_dataset
    from rlexp.experiment.layout import AttemptDir
    from rlexp.experiment.ledger import read_ledger, read_sota
    from rlexp.experiment.paired import read_paired_records
    from rlexp.experiment.records import read_meta, read_records
    from rlexp.spec import load_attempt
    from rlexp.spec.sop import load_sop
    from rlexp.stages.ladder import load_ladder
    from rlexp.training.metrics_file import read_metrics

    a2 = AttemptDir(exp / "a2")
    return {
        "load_attempt": (["a1/attempt.yaml", "a2/attempt.yaml"], lambda p: load_attempt(p.parent)),
        "load_yaml": (["a1/attempt.yaml", "a2/attempt.yaml", "ladder.yaml", "sop.yaml"], files.load_yaml),
        "load_sop": (["sop.yaml"], load_sop),
        "load_ladder": (["ladder.yaml"], lambda p: load_ladder(exp)),
        "read_json": (JSON_FILES, files.read_json),
        "read_jsonl": (JSONL_FILES, files.read_jsonl),
        "read_dataset": (DATASETS, read_dataset),
        "check_dataset_rows": (DATASETS, check_dataset_rows),
        "read_records": (RECORDS, read_records),
        "read_meta": (METAS, lambda p: read_meta(p.with_name(p.name.replace(".meta.json", ".jsonl")))),
        "read_paired_records": (["a2/eval/paired/baseline_s0__global_step2__ood_primary.jsonl"], read_paired_records),
        "read_metrics": (["a2/metrics.jsonl"], read_metrics),
        "read_sota": (["sota.json"], lambda p: read_sota(exp)),
        "read_ledger": (["ledger.jsonl"], lambda p: read_ledger(exp)),
        "attempt files": (["a2/launch/state.json", "a2/launch/argv.json", "a2/launch/provenance.json",
                           "a2/eval/selection.json", "a2/decision.json", "a2/plan.json"],
                          lambda p: (a2.launch.read_state(), a2.launch.read_argv(), a2.launch.read_provenance(), a2.evals.read_selection(),
                                     a2.read_decision(), a2.read_plan())),
        "read_items": ([*RECORDS, *HARNESS_FILES], lambda p: read_items(p)),
    }


DATASETS = ["data/pool.jsonl", "data/ood_primary.jsonl", "data/id.jsonl", "data/ood_monitor.jsonl", "data/sanity.jsonl"]
RECORDS = ["a2/eval/baseline_s0/ood_primary.jsonl", "a2/eval/global_step2/ood_primary.jsonl",
           "a2/eval/global_step1/ood_primary.jsonl", "a2/eval/baseline_s0/id.jsonl", "a2/eval/global_step2/id.jsonl"]
METAS = ["a2/eval/baseline_s0/ood_primary.meta.json", "a2/eval/global_step2/ood_primary.meta.json"]
HARNESS_FILES = ["harness/samples_addition_2026-01-01T00-00-00.000000.jsonl", "harness/log.json", "harness/log.eval"]
JSON_FILES = ["a2/plan.json", "a2/decision.json", "a2/launch/state.json", "a2/launch/provenance.json",
              "a2/launch/argv.json", "a2/eval/selection.json", "a2/guards/parser_audit.json", "a2/guards/g2.json",
              "sota.json", *METAS]
JSONL_FILES = ["a2/metrics.jsonl", "a2/launch/launches.jsonl", "ledger.jsonl", *DATASETS, *RECORDS,
               "a2/eval/paired/baseline_s0__global_step2__ood_primary.jsonl"]

# ------------------------------------------------------------------------------------- verbs

# The files each verb reads (a mutation goes to one of them).
VERB_READS: dict[str, list[str]] = {
    "plan": ["a1/attempt.yaml", "a2/attempt.yaml", *DATASETS],
    "launch --dry-run": ["a1/attempt.yaml", "a2/attempt.yaml", "a2/plan.json", "a2/launch/state.json", *DATASETS],
    "status": ["a1/attempt.yaml", "a2/attempt.yaml", "a2/launch/state.json", "a2/decision.json", "a2/metrics.jsonl",
               "ledger.jsonl"],
    "compare": ["a2/eval/baseline_s0/ood_primary.jsonl", "a2/eval/global_step2/ood_primary.jsonl"],
    "compare lm-eval": [HARNESS_FILES[0]],
    "compare inspect": [HARNESS_FILES[1], HARNESS_FILES[2]],
    "decide": ["a1/attempt.yaml", "a2/attempt.yaml", "a2/eval/selection.json", *RECORDS, *METAS, "a2/metrics.jsonl",
               "a2/guards/parser_audit.json", "a2/guards/g2.json", "ledger.jsonl", "sota.json", "data/pool.jsonl"],
    "report": ["a1/attempt.yaml", "a2/attempt.yaml", "a2/plan.json", "a2/metrics.jsonl", "a2/launch/state.json",
               "a2/launch/provenance.json", "a2/launch/argv.json", "a2/eval/selection.json", "a2/decision.json",
               "a2/guards/g2.json", "a2/guards/parser_audit.json", "a2/eval/global_step1/id.jsonl", *METAS],
    "ladder propose": ["ladder.yaml", "a1/attempt.yaml", "a2/attempt.yaml", "sota.json", "ledger.jsonl"],
    "sop show": ["sop.yaml"],
    "guard g0": ["a1/attempt.yaml", "a2/attempt.yaml", "data/pool.jsonl"],
    "guard g2": ["a1/attempt.yaml", "a2/attempt.yaml", "data/ood_primary.jsonl", "a2/eval/baseline_s0/ood_primary.jsonl",
                 "a2/eval/baseline_s0/ood_primary.meta.json"],
}
# How often each verb is drawn (the model-loading guards less: seconds each).
VERB_WEIGHTS = {"plan": 10, "launch --dry-run": 6, "status": 8, "compare": 8, "compare lm-eval": 5,
                "compare inspect": 5, "decide": 12, "report": 4, "ladder propose": 6, "sop show": 5,
                "guard g0": 1, "guard g2": 1}


def verb_argv(verb: str, work: Path) -> list[str]:
    exp = work / "exp"
    a2 = str(exp / "a2")
    return {
        "plan": ["plan", a2],
        "launch --dry-run": ["launch", a2, "--dry-run", "--tracking-uri", "off"],
        "status": ["status", str(exp)],
        "compare": ["compare", f"{a2}/eval/baseline_s0/ood_primary.jsonl", f"{a2}/eval/global_step2/ood_primary.jsonl",
                    "--resamples", "200", "--json"],
        "compare lm-eval": ["compare", str(exp / HARNESS_FILES[0]), str(exp / HARNESS_FILES[0]), "--resamples", "200"],
        "compare inspect": ["compare", str(exp / HARNESS_FILES[1]), str(exp / HARNESS_FILES[2]), "--resamples", "200"],
        "decide": ["decide", a2],
        "report": ["report", a2, "--reports-dir", str(work / "reports"), "--tracking-uri",
                   f"sqlite:///{work.parent / 'mlflow.db'}"],
        "ladder propose": ["ladder", "propose", str(exp), "--storage", f"sqlite:///{work.parent / 'optuna.db'}"],
        "sop show": ["sop", "show", "--sop", str(exp / "sop.yaml")],
        "guard g0": ["guard", "g0", a2, "--samples", "1"],
        "guard g2": ["guard", "g2", a2],
    }[verb]


# (verb, option, base argv builder, values): each value replaces the option's
NUMERIC_VALUES = ["nan", "inf", "-inf", "-1", "0", "1", "1e999", str(2**31), str(2**32), str(2**64), "9" * 5000,
                  "", "abc", "0x10", "1_000", "1.5", "-0", " 7", "\u0663"]


def path_values(work: Path) -> list[str]:
    specials = work / "specials"
    return [str(specials / "fifo"), str(specials / "loop"), str(specials / "dir"), str(specials / "missing"),
            str(specials / "dangling"), str(specials / "zero"), str(specials / "zero-link"), "", "x" * 5000, "a\0b", str(work / "exp" / "a2"),
            str(work / "exp" / "a2" / "eval" / "global_step2" / "ood_primary.jsonl"), "..", "-"]


def option_cases(work: Path) -> list[tuple[str, str, Callable[[str], list[str]], list[str]]]:
    exp = work / "exp"
    a2 = str(exp / "a2")
    base_rec = f"{a2}/eval/baseline_s0/ood_primary.jsonl"
    new_rec = f"{a2}/eval/global_step2/ood_primary.jsonl"
    paths = path_values(work)
    dead = f"http://127.0.0.1:{_dead_port()}"
    uris = ["foo://bar", dead, "postgresql://u:pw@127.0.0.1:1/db", "http://[::1", "sqlite:///" + str(work / "specials" / "dir"),
            "", "off", "file:" + str(work / "specials" / "fifo")]
    return [
        ("compare", "--seed", lambda v: ["compare", base_rec, new_rec, "--resamples", "200", "--seed", v], NUMERIC_VALUES),
        ("compare", "--resamples", lambda v: ["compare", base_rec, new_rec, "--resamples", v], NUMERIC_VALUES),
        ("compare", "--confidence", lambda v: ["compare", base_rec, new_rec, "--resamples", "200", "--confidence", v],
         NUMERIC_VALUES + ["0.95", "0.5", "0.999", "1"]),
        ("compare", "--paired-out", lambda v: ["compare", base_rec, new_rec, "--resamples", "200", "--paired-out", v],
         [*paths, base_rec, new_rec, str(Path(new_rec).parent / ".." / "global_step2" / "ood_primary.jsonl")]),
        ("compare", "FILES", lambda v: ["compare", base_rec, v, "--resamples", "200"], paths),
        ("plan", "ATTEMPT", lambda v: ["plan", v], paths),
        ("decide", "--sop", lambda v: ["decide", a2, "--sop", v], paths),
        ("status", "EXPERIMENT", lambda v: ["status", v], paths),
        ("launch", "--poll-s", lambda v: ["launch", a2, "--dry-run", "--tracking-uri", "off", "--poll-s", v],
         NUMERIC_VALUES),
        ("launch", "--tracking-uri", lambda v: ["launch", a2, "--dry-run", "--tracking-uri", v], uris),
        ("report", "--tracking-uri", lambda v: ["report", a2, "--reports-dir", str(work / "reports"), "--tracking-uri", v],
         uris),
        ("report", "--reports-dir", lambda v: ["report", a2, "--tracking-uri", "off", "--reports-dir", v], paths),
        ("sop calibrate", "--effect-pp", lambda v: ["sop", "calibrate", "--effect-pp", v, "--sims", "100", "--n", "50",
                                                     "--correlation", "0.3"], [v for v in NUMERIC_VALUES if v not in ("0", "1", "-0", "1.5", "-1")]),
        ("sop calibrate", "--seed", lambda v: ["sop", "calibrate", "--seed", v, "--sims", "x"], NUMERIC_VALUES),
        ("sop calibrate", "--discordance", lambda v: ["sop", "calibrate", "--discordance", v, "--sims", "x"], NUMERIC_VALUES),
        ("demo", "--seed", lambda v: ["demo", str(work / "demo"), "--seed", v],
         ["nan", "-1", str(2**32), str(2**64), "9" * 5000, "", "abc", "1e999"]),
        ("guard audit", "--seed", lambda v: ["guard", "audit", a2, "--draw", "--seed", v, "--n", "x"], NUMERIC_VALUES),
        ("ladder propose", "--change", lambda v: ["ladder", "propose", str(exp), "--storage",
                                                  f"sqlite:///{work.parent / 'optuna.db'}", "--change", v],
         ["seed=7", "eps_clip=" + "1" * 5000, "eps_clip=" + "[" * 200 + "]" * 200, "eps_clip=&a [*a]", "=1", "x",
          "eps_clip=nan", "eps_clip=.inf", "eps_clip=-1", "nonsense=1", "eps_clip=0.2", "eps_clip=!!python/object:os.system"]),
        ("ladder propose", "--storage", lambda v: ["ladder", "propose", str(exp), "--storage", v],
         ["foo://bar", "postgresql://u:pw@127.0.0.1:1/db", "mysql://127.0.0.1:1/x", "sqlite:///" + str(work / "specials" / "dir"), ""]),
    ]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------- the base


LADDER_YAML = "root: a1\nvariables: {eps_clip: [0.1, 0.3]}\nseeds: [42, 43]\nrungs: 3\n"


def build_base(root: Path, tiny_base_model: Path) -> Path:
    """The experiment of tests/input_fixture.py plus what it lacks for the fuzzer: a SOTA pin, a ladder
    spec, a SOP copy, the paired records, and an lm-eval samples file and Inspect logs (JSON, .eval)."""
    import zipfile

    from input_fixture import build_experiment

    exp = build_experiment(root, tiny_base_model)
    repo = Path(__file__).resolve().parents[1]
    shutil.copy(repo / "sop" / "sop-v2.1-final.yaml", exp / "sop.yaml")
    (exp / "ladder.yaml").write_text(LADDER_YAML)
    (exp / "sota.json").write_text(json.dumps({"attempt": "a2", "checkpoint": "global_step2",
                                               "path": "a2/checkpoints/global_step2_hf",
                                               "decided_at": "2026-01-01T00:00:00Z"}))
    harness = exp / "harness"
    harness.mkdir()
    lines = [{"doc_id": i, "filter": "none", "metrics": ["exact_match"], "doc_hash": f"d{i}", "prompt_hash": f"p{i}",
              "target_hash": f"t{i}", "filtered_resps": [str(i)], "exact_match": i % 2, "doc": {"level": i % 3}}
             for i in range(6)]
    (exp / HARNESS_FILES[0]).write_text("".join(json.dumps(x) + "\n" for x in lines))
    samples = [{"id": i, "epoch": 1, "input": f"q{i}", "target": str(i), "scores": {"match": {"value": "CI"[i % 2]}},
                "metadata": {"level": i % 3}, "output": {"completion": str(i)}} for i in range(6)]
    header = {"eval": {"task": "addition", "packages": {"inspect_ai": "0.3.200"}}, "status": "success", "version": 2}
    (exp / HARNESS_FILES[1]).write_text(json.dumps({**header, "samples": samples}))
    with zipfile.ZipFile(exp / HARNESS_FILES[2], "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", json.dumps(header))
        for sample in samples:
            archive.writestr(f"samples/{sample['id']}_epoch_1.json", json.dumps(sample))
    return exp


# ------------------------------------------------------------------------------------- running


class Fuzzer:
    """Draws and runs cases over ``base`` (from :func:`build_base`) in ``scratch``."""

    def __init__(self, base: Path, scratch: Path, seed: int = 0, *, verb_share: float = 0.25,
                 option_share: float = 0.1, reader_bound_s: float = 10.0, verb_bound_s: float = 60.0,
                 shrink: bool = True):
        self.base, self.scratch = base, scratch
        self.rng = random.Random(seed)
        self.verb_share, self.option_share = verb_share, option_share
        self.reader_bound_s, self.verb_bound_s = reader_bound_s, verb_bound_s
        self.shrink = shrink
        self.tally = Tally()
        self.reader_copy = scratch / "reader" / "exp"
        shutil.copytree(base, self.reader_copy, symlinks=True, ignore=shutil.ignore_patterns("models"))
        (self.reader_copy / "models").symlink_to(base / "models")
        self.readers = readers(self.reader_copy)
        self.originals = {rel: (self.reader_copy / rel).read_bytes() for rel in self._all_files()}

    def _all_files(self) -> list[str]:
        names = {rel for files, _ in self.readers.values() for rel in files}
        names |= {rel for files in VERB_READS.values() for rel in files}
        return sorted(names)

    # -- drawing
    def draw(self) -> Case:
        rng = self.rng
        roll = rng.random()
        if roll < self.option_share:
            return Case("option", "", "", "option")
        kind = rng.choice(MUTATIONS)
        if roll < self.option_share + self.verb_share:
            verb = rng.choices(list(VERB_WEIGHTS), weights=list(VERB_WEIGHTS.values()))[0]
            target = rng.choice(VERB_READS[verb])
            level = "verb"
        else:
            reader = rng.choice(list(self.readers))
            target = rng.choice(self.readers[reader][0])
            verb, level = reader, "reader"
        case = Case(level, target, verb, kind)
        original = self.originals[target]
        if kind == "special":
            case.special = rng.choice(SPECIALS)
        elif kind == "size":
            case.limit = max(64, len(original) // 2)
            case.data = original + b" " * (len(original) + 64) if not target.endswith(".eval") else original
        else:
            case.data = mutate(rng, original, target, kind)
        return case

    # -- running
    def run(self, case: Case) -> Outcome:
        if case.level == "reader":
            outcome = self._run_reader(case)
        elif case.level == "verb":
            outcome = self._run_verb(case)
        else:
            outcome = self._run_option(case)
        self.tally.add(outcome)
        if outcome.status not in ("ok", "verdict", "refusal"):
            shrunk = self._shrink(case, outcome) if self.shrink and case.data is not None else case.data
            self.tally.failures.append((outcome, shrunk))
        return outcome

    def _place(self, root: Path, case: Case) -> None:
        path = root / case.target
        if case.special:
            make_special(path, case.special)
        else:
            if path.is_symlink() or (path.exists() and not path.is_file()):
                make_special(path, "dangling")
                path.unlink()
            path.write_bytes(case.data or b"")

    def _restore(self, root: Path, rel: str) -> None:
        path = root / rel
        if path.is_symlink() or path.exists():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        path.write_bytes(self.originals[rel])

    def _run_reader(self, case: Case) -> Outcome:
        from rlexp.errors import InputError

        _, read = self.readers[case.verb]
        path = self.reader_copy / case.target
        self._place(self.reader_copy, case)
        start = time.perf_counter()
        try:
            with lowered_limits(case.limit), time_bound(self.reader_bound_s):
                read(path)
            status, detail = "ok", ""
        except InputError as exc:
            line = exc.one_line()
            status, detail = ("refusal", line) if "\n" not in line and len(line) < 2000 else ("multiline", line[:300])
        except Hang:
            status, detail = "hang", f"past {self.reader_bound_s:g} s"
        except (Exception, RecursionError) as exc:  # noqa: BLE001 - the contract: InputError or nothing
            status, detail = "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            self._restore(self.reader_copy, case.target)
        return Outcome(case, status, detail, time.perf_counter() - start)

    def _fresh_work(self) -> Path:
        work = self.scratch / "case"
        if work.exists():
            _force_rmtree(work)
        work.mkdir(parents=True)
        shutil.copytree(self.base, work / "exp", symlinks=True, ignore=shutil.ignore_patterns("models"))
        (work / "exp" / "models").symlink_to(self.base / "models")
        specials = work / "specials"
        specials.mkdir()
        os.mkfifo(specials / "fifo")
        (specials / "loop").symlink_to("loop")
        (specials / "dir").mkdir()
        (specials / "dangling").symlink_to("nowhere")
        make_device(specials / "zero")
        (specials / "zero-link").symlink_to("zero")
        return work

    def _main(self, argv: list[str], work: Path, allow_verdict: bool = True) -> tuple[str, str]:
        from rlexp.cli import main

        before = tree_digest(work)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_bound(self.verb_bound_s):
                code = main(argv)
        except Hang:
            return "hang", f"past {self.verb_bound_s:g} s: rlexp {' '.join(argv)[:200]}"
        except (Exception, SystemExit, RecursionError) as exc:  # noqa: BLE001 - main must not raise
            return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
        message = err.getvalue()
        if "Traceback (most recent call last)" in message + out.getvalue():
            return "traceback", message[-300:]
        if code == 0:
            return "ok", ""
        if code == 1:
            if "rerun the command once fixed" in message:  # the OSError path: unreadable input is not a verdict
                return "exit1-unreadable", message.strip()[:300]
            return "verdict", message.strip()[:200]
        if code != 2:
            return "bad-exit", f"exit {code}: {message.strip()[:200]}"
        shown = [line.rsplit("\r", 1)[-1] for line in message.split("\n")]
        lines = [line for line in shown if line.strip() and not _library_log(line)]
        if len(lines) != 1 or not lines[0].startswith("rlexp: "):
            return "multiline", message[:300]
        after = tree_digest(work)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            return "write", f"{lines[0][:200]} | wrote {changed[:3]}"
        return "refusal", lines[0][:300]

    def _run_verb(self, case: Case) -> Outcome:
        work = self._fresh_work()
        self._place(work / "exp", case)
        start = time.perf_counter()
        with lowered_limits(case.limit):
            status, detail = self._main(verb_argv(case.verb, work), work)
        return Outcome(case, status, detail, time.perf_counter() - start)

    def _run_option(self, case: Case) -> Outcome:
        work = self._fresh_work()
        verb, option, build, values = self.rng.choice(option_cases(work))
        value = self.rng.choice(values)
        case.verb, case.target, case.argv_value = verb, option, value
        argv = build(value)
        start = time.perf_counter()
        status, detail = self._main(argv, work)
        return Outcome(case, status, detail, time.perf_counter() - start)

    def _shrink(self, case: Case, outcome: Outcome, budget: int = 60) -> bytes | None:
        """Chunks of the mutated bytes removed while the case still fails the same way."""
        data = case.data or b""
        chunk = max(1, len(data) // 2)
        tries = 0
        while chunk >= 1 and tries < budget:
            i, progressed = 0, False
            while i < len(data) and tries < budget:
                candidate = data[:i] + data[i + chunk:]
                trial = Case(case.level, case.target, case.verb, case.kind, candidate, None, None, case.limit)
                tries += 1
                again = (self._run_reader(trial) if trial.level == "reader" else self._run_verb(trial))
                if again.status == outcome.status:
                    data, progressed = candidate, True
                else:
                    i += chunk
            if not progressed:
                chunk //= 2
        return data

    def run_many(self, n: int, progress: Callable[[int, Tally], None] | None = None) -> Tally:
        for i in range(n):
            self.run(self.draw())
            if progress is not None:
                progress(i + 1, self.tally)
        return self.tally


def _library_log(line: str) -> bool:
    """Progress bars and log lines that libraries (transformers, MLflow, alembic) print to stderr."""
    return ("Loading weights" in line or " INFO " in line or " WARNING " in line or line.startswith("INFO ")
            or "it/s]" in line or "%|" in line)


def _force_rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # a FIFO or an odd entry that rmtree left: unlink one by one
        for dirpath, _, filenames in os.walk(path, topdown=False):
            for name in filenames:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dirpath, name))
        shutil.rmtree(path, ignore_errors=True)


def report_lines(tally: Tally, seconds: float) -> list[str]:
    out = [f"fuzz: {json.dumps(tally.summary())}", f"wall time: {seconds:.0f} s"]
    out.append("coverage (file x reader/verb: inputs):")
    for target, verbs in sorted(tally.coverage().items()):
        out.append(f"  {target}: " + ", ".join(f"{v} {n}" for v, n in sorted(verbs.items())))
    out.append("options (verb option: inputs): " + ", ".join(f"{k} {n}" for k, n in sorted(tally.option_coverage().items())))
    kinds = Counter(o.case.kind if o.case.kind != "special" else f"special:{o.case.special}" for o in tally.outcomes)
    out.append("mutation kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for outcome, shrunk in tally.failures[:30]:
        c = outcome.case
        out.append(f"FAIL {outcome.status}: {c.level} {c.verb} {c.target} {c.kind} {c.special or ''} "
                   f"{c.argv_value[:60] if c.argv_value else ''}: {outcome.detail[:300]}")
        if shrunk is not None:
            out.append(f"  shrunk input ({len(shrunk)} bytes): {shrunk[:200]!r}")
    return out
