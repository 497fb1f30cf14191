"""Property-based fuzzing of the input gate: mutate any file of a real experiment, run any verb.

Whatever the mutation (bytes inserted or flipped, truncation, a value of the wrong type, deep
nesting), ``plan``, ``status``, ``compare``, ``decide``, ``report``, ``guard g0`` and ``guard g2``
end with exit 0, 1 or 2 — never a traceback — and an exit 2 is one line on stderr with every file
of the experiment unchanged. Fixed seed (``derandomize``) and a fixed example count, so CI runs the
same inputs every time; `FUZZ_EXAMPLES` raises the count for a longer local run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from input_fixture import build_experiment

from rlexp.cli import main

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))  # tests/fuzz_gate.py covers more below

# Every kind of file the verbs read (the tiny model's files are not rlexp's input format).
FILES = [
    "a1/attempt.yaml", "a2/attempt.yaml", "a2/plan.json", "a2/metrics.jsonl", "a2/decision.json",
    "a2/launch/state.json", "a2/launch/provenance.json", "a2/launch/argv.json", "a2/launch/launches.jsonl",
    "a2/eval/selection.json", "a2/eval/baseline_s0/ood_primary.jsonl", "a2/eval/baseline_s0/ood_primary.meta.json",
    "a2/eval/baseline_s0/id.jsonl", "a2/eval/global_step2/ood_primary.jsonl", "a2/eval/global_step1/id.jsonl",
    "a2/eval/paired/baseline_s0__global_step2__ood_primary.jsonl", "a2/guards/parser_audit.json",
    "a2/guards/g2.json", "ledger.jsonl", "data/pool.jsonl", "data/ood_primary.jsonl", "data/id.jsonl",
]
VERBS = ["plan", "status", "compare", "decide", "report", "g0", "g2"]
SPECS = ["a1/attempt.yaml", "a2/attempt.yaml"]
# The files each verb reads: most mutations go to one of them, so that most examples test a refusal.
READS = {
    "plan": [*SPECS, "data/pool.jsonl", "data/ood_primary.jsonl", "data/id.jsonl"],
    "status": [*SPECS, "a2/launch/state.json", "a2/decision.json", "a2/metrics.jsonl"],
    "compare": ["a2/eval/baseline_s0/ood_primary.jsonl", "a2/eval/global_step2/ood_primary.jsonl"],
    "decide": [*SPECS, "a2/eval/selection.json", "a2/eval/baseline_s0/id.jsonl", "a2/eval/global_step2/ood_primary.jsonl",
               "a2/metrics.jsonl", "a2/guards/parser_audit.json", "ledger.jsonl", "data/pool.jsonl"],
    "report": [*SPECS, "a2/plan.json", "a2/metrics.jsonl", "a2/launch/state.json", "a2/launch/provenance.json",
               "a2/launch/argv.json", "a2/eval/selection.json", "a2/decision.json", "a2/guards/g2.json",
               "a2/eval/global_step1/id.jsonl"],
    "g0": [*SPECS, "data/pool.jsonl"],
    "g2": [*SPECS, "data/ood_primary.jsonl", "a2/eval/baseline_s0/ood_primary.jsonl",
           "a2/eval/baseline_s0/ood_primary.meta.json"],
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@st.composite
def cases(draw):
    """(verb, file, kind, parameters): a verb, and how one file of the experiment is damaged (a file
    the verb reads, three times in four)."""
    verb = draw(st.sampled_from(VERBS))
    rel = draw(st.sampled_from(READS[verb] if draw(st.integers(0, 3)) else FILES))
    kind = draw(st.sampled_from(["insert_bytes", "flip_byte", "truncate", "replace_document", "replace_value",
                                 "replace_line", "nest", "empty", "directory"]))
    return verb, rel, kind, {
        "position": draw(st.floats(0, 1)),
        "bytes": draw(st.binary(min_size=1, max_size=6)),
        "value": draw(json_values),
        "key": draw(st.integers(0, 50)),
        "depth": draw(st.sampled_from([65, 200, 3000, 100_000])),
    }


def apply(root: Path, rel: str, kind: str, p: dict) -> None:
    path = root / rel
    data = path.read_bytes()
    at = int(p["position"] * len(data))
    if kind == "insert_bytes":
        data = data[:at] + p["bytes"] + data[at:]
    elif kind == "flip_byte" and data:
        at = min(at, len(data) - 1)
        data = data[:at] + bytes([data[at] ^ p["bytes"][0] or 0xFF]) + data[at + 1:]
    elif kind == "truncate":
        data = data[:at]
    elif kind == "replace_document":
        data = json.dumps(p["value"]).encode()
    elif kind in ("replace_value", "replace_line"):
        lines = data.decode().splitlines()
        index = p["key"] % len(lines) if lines else 0
        if not lines:
            lines = ["{}"]
        if rel.endswith(".jsonl") and kind == "replace_line":
            lines[index] = json.dumps(p["value"])
        elif rel.endswith(".yaml"):
            key = lines[index].split(":", 1)[0]
            lines[index] = f"{key}: {json.dumps(p['value'])}"
        else:
            doc = json.loads(lines[index] if rel.endswith(".jsonl") else data)
            if isinstance(doc, dict) and doc:
                doc[sorted(doc)[p["key"] % len(doc)]] = p["value"]
            text = json.dumps(doc)
            if rel.endswith(".jsonl"):
                lines[index] = text
            else:
                lines = [text]
        data = ("\n".join(lines) + "\n").encode()
    elif kind == "nest":
        depth = p["depth"]
        inner = "[" * depth + "]" * depth
        data = (f"intent: {inner}\n".encode() if rel.endswith(".yaml") else
                f'{{"global_step": 1, "x": {inner}}}\n'.encode() if rel.endswith(".jsonl") else
                f'{{"x": {inner}}}'.encode())
        if rel.endswith(".yaml"):
            data = path.read_bytes() + data
    elif kind == "empty":
        data = b""
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        return
    path.write_bytes(data)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file of the case (the model-hash cache included: a refusal writes nothing) but the
    shared model's."""
    out = {}
    for path in sorted(root.rglob("*")):
        if "models" in path.relative_to(root).parts[1:2]:
            continue
        rel = path.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def argv_for(verb: str, work: Path) -> list[str]:
    exp, a2 = work / "exp", str(work / "exp" / "a2")
    return {
        "plan": ["plan", a2],
        "status": ["status", str(exp)],
        "compare": ["compare", f"{a2}/eval/baseline_s0/ood_primary.jsonl", f"{a2}/eval/global_step2/ood_primary.jsonl",
                    "--resamples", "200"],
        "decide": ["decide", a2],
        # one MLflow store for all examples (creating its tables takes seconds): beside the case, not in it
        "report": ["report", a2, "--reports-dir", str(work / "reports"),
                   "--tracking-uri", f"sqlite:///{work.parent / 'mlflow.db'}"],
        "g0": ["guard", "g0", a2],
        "g2": ["guard", "g2", a2],
    }[verb]


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_base_model):
    return build_experiment(tmp_path_factory.mktemp("fuzz-base"), tiny_base_model)


TRIED: list[tuple[str, str, str, int, float]] = []


def test_every_mutation_of_every_file_under_every_verb(base, tmp_path_factory):
    work_root = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=cases())
    def run(case):
        verb, rel, kind, params = case
        work = work_root / "case"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        shutil.copytree(base, work / "exp", ignore=shutil.ignore_patterns("models"))
        (work / "exp" / "models").symlink_to(base / "models")
        apply(work / "exp", rel, kind, params)
        before = tree_digest(work)
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv_for(verb, work))  # any exception here fails the test with its traceback
        message = err.getvalue()
        TRIED.append((rel, kind, verb, code, time.perf_counter() - start))
        assert code in (0, 1, 2), (rel, kind, verb, code, message)
        assert "Traceback" not in message and "Traceback" not in out.getvalue()
        if code == 2:
            shown = [line.rsplit("\r", 1)[-1] for line in message.split("\n")]  # a progress bar redraws after \r
            lines = [line for line in shown if not _is_library_log(line)]
            assert len(lines) == 1 and lines[0].startswith("rlexp: "), (rel, kind, verb, message)
            assert tree_digest(work) == before, (rel, kind, verb, message)

    run()
    codes = {c: sum(1 for t in TRIED if t[3] == c) for c in (0, 1, 2)}
    seconds = {v: round(sum(t[4] for t in TRIED if t[2] == v), 1) for v in VERBS}
    print(f"\nfuzz: {len(TRIED)} inputs tried over {len({t[0] for t in TRIED})} files, "
          f"{len({t[1] for t in TRIED})} mutation kinds, {len({t[2] for t in TRIED})} verbs; exit codes {codes}; seconds per verb {seconds}")
    assert len({t[2] for t in TRIED}) == len(VERBS) and codes[2] > 0


def _is_library_log(line: str) -> bool:
    """Progress bars and log lines that libraries (transformers, MLflow) print to stderr."""
    return "Loading weights" in line or " INFO " in line or " WARNING " in line or not line.strip()


# --------------------------------------------------------------------------------------------------
# The grammar and mutation fuzzer (tests/fuzz_gate.py) over every reader, the verbs and the options:
# a fixed-seed slice here; scripts/fuzz_input_gate.py runs 10,000 inputs and more.

GATE_INPUTS = int(os.environ.get("FUZZ_GATE_INPUTS", "400"))


@pytest.fixture(scope="module")
def gate_base(tmp_path_factory, tiny_base_model):
    from fuzz_gate import build_base

    return build_base(tmp_path_factory.mktemp("fuzz-gate-base"), tiny_base_model)


def test_grammar_and_mutation_fuzzer_slice(gate_base, tmp_path, monkeypatch):
    from fuzz_gate import Fuzzer, report_lines

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RLEXP_STUDY_STORAGE", raising=False)
    start = time.perf_counter()
    fuzzer = Fuzzer(gate_base, tmp_path / "scratch", seed=20261126, verb_share=0.15, option_share=0.08,
                    reader_bound_s=10, verb_bound_s=60, shrink=True)
    tally = fuzzer.run_many(GATE_INPUTS)
    lines = report_lines(tally, time.perf_counter() - start)
    print("\n" + "\n".join(lines))
    assert not tally.bad, "\n".join(line for line in lines if line.startswith(("FAIL", "  shrunk")))
    counts = tally.counts()
    assert counts["refusal"] > GATE_INPUTS // 3 and counts["ok"] > 0  # both sides of the gate are reached
    levels = {o.case.level for o in tally.outcomes}
    assert levels == {"reader", "verb", "option"}
    assert len(tally.coverage()) >= 25  # files reached by readers or verbs
