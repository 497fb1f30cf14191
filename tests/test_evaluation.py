"""`rlexp eval`: K=3 + baselines x sets through one pipeline; resumable, also after SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.experiment.files import read_json
from rlexp.experiment.records import read_meta, read_records, record_path, summarize

SIZES = {"pool": 8, "ood_primary": 12, "id": 6, "sanity": 3}


def _run(att, **kw):
    from rlexp.stages.evaluate import evaluate

    return evaluate(att, show_progress=False, **kw)


def _snapshot(att: Path) -> dict[str, bytes]:
    root = att / "eval"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


def test_eval_covers_k3_and_baselines_on_every_set(eval_experiment):
    att = eval_experiment(steps=(2, 4, 6), mid=2)
    out = _run(att)
    selection = read_json(att / "eval" / "selection.json")
    # monitor_acc rises with the step, so best-by-monitor is the final step: K collapses to 2 distinct
    assert selection["final"] == 6 and selection["mid"] == 2
    assert selection["checkpoints"] == ["global_step6", "global_step2"]
    names = {f.checkpoint for f in out.files}
    assert names == {"baseline_s0", "global_step6", "global_step2"}
    assert {f.set_role for f in out.files} == {"ood_primary", "id", "sanity"}
    for f in out.files:
        records = read_records(f.path)
        assert len(records) == SIZES[f.set_role] == f.new_records
        assert f.summary == summarize(records)
        meta = read_meta(f.path)
        assert meta["engine"] == "local" and meta["decoding"]["mode"] == "greedy_pass@1"
        assert (meta["adapter_sha256"] is None) == (f.checkpoint == "baseline_s0")
    # paired records for baseline x checkpoint x set, one line per problem
    assert len(out.paired) == 2 * 3
    for p in out.paired:
        rows = [json.loads(line) for line in p.read_text().splitlines()]
        assert len(rows) == SIZES[p.stem.split("__")[-1]]
        assert set(rows[0]) == {"problem_hash", "y_baseline", "y_new", "output_baseline", "output_new"}
    # a rerun does nothing new
    assert all(f.new_records == 0 for f in _run(att).files)


def test_baseline_records_equal_direct_generation(eval_experiment):
    """The pipeline adds nothing: baseline_s0 outputs are what generate() gives on the base model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.generation import generate, render_prompt
    from rlexp.experiment.datasets import read_dataset

    att = eval_experiment(suffix=" Answer:")
    _run(att, checkpoints=["baseline_s0"], sets=["id"])
    base = att.parent / "models" / "tiny-base"
    tok, model = AutoTokenizer.from_pretrained(base), AutoModelForCausalLM.from_pretrained(base)
    problems = read_dataset(att.parent / "data" / "id.jsonl")
    direct = generate(model, tok, [render_prompt(tok, p["prompt"], " Answer:") for p in problems], max_new_tokens=6)
    records = {r["problem_hash"]: r for r in read_records(record_path(att, "baseline_s0", "id"))}
    assert [records[p["problem_hash"]]["output"] for p in problems] == [d[0].text for d in direct]
    assert [records[p["problem_hash"]]["completion_tokens"] for p in problems] == [d[0].completion_tokens for d in direct]


def test_narrowing_and_preregistration(eval_experiment):
    att = eval_experiment(steps=(2, 4, 6), mid=2)
    out = _run(att, checkpoints=["global_step2"], sets=["sanity"])
    assert [(f.checkpoint, f.set_role) for f in out.files] == [("global_step2", "sanity")]
    with pytest.raises(InputError, match="pre-registered"):
        _run(att, checkpoints=["global_step4"])  # saved, but neither final, mid nor best
    with pytest.raises(InputError):
        _run(att, sets=["train"])


def test_changed_suffix_refuses_to_mix(eval_experiment):
    att = eval_experiment()
    _run(att, checkpoints=["baseline_s0"], sets=["sanity"])
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text().replace('prompt_suffix: ""', 'prompt_suffix: " Think."'))
    with pytest.raises(InputError, match="prompt_suffix"):
        _run(att, checkpoints=["baseline_s0"], sets=["sanity"])


def test_eval_refuses_records_of_another_parser_version(eval_experiment, capsys):
    """`rlexp eval` on records graded by another answer-parser version: one line naming the
    metadata file and the field, exit 2, nothing appended."""
    from rlexp.cli import main
    from rlexp.evaluation.answers import PARSER_VERSION

    att = eval_experiment()
    _run(att, checkpoints=["baseline_s0"], sets=["sanity"])
    records = record_path(att, "baseline_s0", "sanity")
    meta_file = records.with_name("sanity.meta.json")
    meta = json.loads(meta_file.read_text())
    assert meta["parser_version"] == PARSER_VERSION
    meta["parser_version"] = "1"
    meta_file.write_text(json.dumps(meta))
    records.write_text(records.read_text().splitlines(keepends=True)[0])  # one problem left to do
    before = records.read_bytes()
    capsys.readouterr()
    assert main(["eval", str(att), "--set", "sanity"]) == 2
    # the engine is loaded before the record files are opened: its progress bars may precede the line
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("rlexp:")]
    assert len(lines) == 1
    assert f"{meta_file}: parser_version:" in lines[0] and "version 1" in lines[0]
    assert records.read_bytes() == before


def test_baseline_sota_is_evaluated_when_pinned(eval_experiment):
    att = eval_experiment()
    sota = att / "checkpoints" / "global_step2_hf"
    (att.parent / "sota.json").write_text(json.dumps(
        {"attempt": "a0", "checkpoint": "global_step2", "path": str(sota), "decided_at": "2026-01-01T00:00:00Z"}))
    out = _run(att, sets=["sanity"])
    names = [f.checkpoint for f in out.files]
    assert names[:2] == ["baseline_s0", "baseline_sota"]
    sota_records = read_records(record_path(att, "baseline_sota", "sanity"))
    step2_records = read_records(record_path(att, "global_step2", "sanity"))
    assert [r["output"] for r in sota_records] == [r["output"] for r in step2_records]  # same adapter
    assert any("baseline_s0__baseline_sota__sanity" in str(p) for p in out.paired)


def test_missing_models_are_input_errors(eval_experiment):
    from rlexp.cli import main

    att = eval_experiment()
    (att.parent / "sota.json").write_text(json.dumps(
        {"attempt": "a0", "checkpoint": "global_step9", "path": "a0/checkpoints/global_step9_hf",
         "decided_at": "2026-01-01T00:00:00Z"}))
    with pytest.raises(InputError, match="pinned checkpoint"):
        _run(att)
    (att.parent / "sota.json").unlink()
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text().replace("models/tiny-base", "models/missing"))
    assert main(["eval", str(att), "--json"]) == 2
    assert not (att / "eval" / "baseline_s0").exists()  # nothing half-written


def test_cli_eval_json_and_bad_input(eval_experiment, capsys):
    from rlexp.cli import main

    att = eval_experiment()
    assert main(["eval", str(att), "--set", "sanity", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {f["set"] for f in payload["files"]} == {"sanity"}
    assert main(["eval", str(att / "nope")]) == 2
    assert "rlexp:" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume_equals_uninterrupted(eval_experiment, tmp_path):
    att = eval_experiment(batch_size=2)
    reference = tmp_path / "reference"
    import shutil

    shutil.copytree(att.parent, reference)
    _run(reference / "a1")
    expected = _snapshot(reference / "a1")
    total_lines = sum(b.count(b"\n") for k, b in expected.items() if not k.startswith("paired"))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "rlexp.cli", "eval", str(att), "--json"]
    rng = random.Random(4)
    kills = 0
    for _ in range(3):
        target = rng.randrange(1, total_lines)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while proc.poll() is None:
                done = sum(p.read_bytes().count(b"\n") for p in (att / "eval").rglob("*.jsonl")
                           if "paired" not in p.parts) if (att / "eval").exists() else 0
                if done >= target:
                    os.kill(proc.pid, signal.SIGKILL)
                    kills += 1
                    break
                time.sleep(0.005)
        finally:
            proc.wait()
    assert kills >= 2  # the process really died mid-run
    finished = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert _snapshot(att) == expected  # identical records: no duplicates, no loss, same order


def test_a_second_concurrent_eval_is_refused(eval_experiment):
    from rlexp.stages.eval_records import eval_lock

    att = eval_experiment()
    with eval_lock(att), pytest.raises(InputError, match="another rlexp eval"):
        _run(att, sets=["sanity"])
    assert _run(att, sets=["sanity"]).files  # the lock is gone with its holder


class _ClosingFake:
    """An engine that answers \\boxed{0} and records close(); ``fail`` raises on generate."""

    name = "fake"
    preferred_chunk = 64

    def __init__(self, fail=False):
        self.fail, self.closed, self.calls = fail, 0, 0

    def generate(self, requests, decoding, progress=None):
        from rlexp.evaluation.engines.base import Result, Sample

        self.calls += 1
        if self.fail:
            raise RuntimeError("engine blew up")
        if progress:
            progress(len(requests))
        return [Result(r, (Sample("\\boxed{0}", "stop", 3, 2),)) for r in requests]

    def describe(self):
        return {"name": self.name}

    def close(self):
        self.closed += 1


@pytest.mark.parametrize("fail", [False, True])
def test_run_eval_closes_the_engine_it_built(eval_experiment, monkeypatch, fail):
    from transformers import AutoTokenizer

    import rlexp.stages.evaluate as evaluation

    att = eval_experiment()
    tok = AutoTokenizer.from_pretrained(att.parent / "models" / "tiny-base")
    fake = _ClosingFake(fail=fail)
    monkeypatch.setattr(evaluation, "build_engine", lambda *a, **k: (fake, tok))
    if fail:
        with pytest.raises(RuntimeError, match="blew up"):
            _run(att, sets=["sanity"])
    else:
        _run(att, sets=["sanity"])
    assert fake.calls >= 1 and fake.closed == 1


def test_run_eval_leaves_a_handed_in_engine_open(eval_experiment):
    from transformers import AutoTokenizer

    att = eval_experiment()
    fake = _ClosingFake()
    fake.tokenizer = AutoTokenizer.from_pretrained(att.parent / "models" / "tiny-base")
    _run(att, sets=["sanity"], engine=fake)
    assert fake.calls >= 1 and fake.closed == 0  # the caller owns it


class _HalfFake(_ClosingFake):
    """Answers every request with one half written as a LaTeX fraction."""

    def generate(self, requests, decoding, progress=None):
        from rlexp.evaluation.engines.base import Result, Sample

        self.calls += 1
        return [Result(r, (Sample("so it is \\boxed{\\frac{1}{2}}", "stop", 3, 9),)) for r in requests]


def test_math_verify_grading_is_used_when_the_spec_chooses_it(eval_experiment):
    """``\\boxed{\\frac{1}{2}}`` against gold ``0.5``: correct under math_verify (eval.answer_mode),
    wrong under exact (the id set's own answer_mode) — the same outputs, two gradings."""
    import yaml
    from transformers import AutoTokenizer

    att = eval_experiment(extra_eval=", answer_mode: math_verify")
    spec = yaml.safe_load((att / "attempt.yaml").read_text())
    spec["datasets"]["id"]["answer_mode"] = "exact"
    (att / "attempt.yaml").write_text(yaml.safe_dump(spec))
    for role in ("sanity", "id"):
        data = att.parent / "data" / f"{role}.jsonl"
        rows = [{**json.loads(line), "answer": "0.5"} for line in data.read_text().splitlines()]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fake = _HalfFake()
    fake.tokenizer = AutoTokenizer.from_pretrained(att.parent / "models" / "tiny-base")
    out = _run(att, sets=["sanity", "id"], engine=fake)
    graded = {(f.checkpoint, f.set_role): read_records(f.path) for f in out.files}
    assert {c for c, _ in graded} >= {"baseline_s0", "global_step4"}
    for (checkpoint, role), records in graded.items():
        mode, correct = ("math_verify", 1) if role == "sanity" else ("exact", 0)
        assert len(records) == SIZES[role]
        assert all(r["correct"] == correct and r["answer"] == "1/2" for r in records), (checkpoint, role)
        assert read_meta(record_path(att, checkpoint, role))["grading"] == mode


def test_openai_engine_with_an_unset_key_variable_is_an_input_error(eval_experiment, monkeypatch, capsys):
    from rlexp.cli import main

    att = eval_experiment()
    spec = (att / "attempt.yaml").read_text()
    spec = "\n".join('eval: {engine: openai, base_url: "http://127.0.0.1:9", model: m, '
                     'api_key_env: RLEXP_UNSET_KEY_VAR, max_tokens: 4}' if line.startswith("eval:") else line
                     for line in spec.splitlines()) + "\n"
    (att / "attempt.yaml").write_text(spec)
    monkeypatch.delenv("RLEXP_UNSET_KEY_VAR", raising=False)
    assert main(["eval", str(att), "--set", "sanity"]) == 2
    assert "RLEXP_UNSET_KEY_VAR" in capsys.readouterr().err
