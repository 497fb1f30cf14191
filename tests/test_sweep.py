"""`rlexp sweep models`: spec checks, ranking and selection, resumability, the truncation check, MLflow.

Expected values come from hand computation over the datasets (which problems a scripted candidate
answers, and how), from scipy's binomial test (McNemar exact p) and from torch (parameter counts),
never from the code under test. The slow test at the end builds real tiny models of different
strength by supervising them to different target accuracies.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from rlexp.evaluation.answers import extract_answer

# --------------------------------------------------------------------------- a scripted engine

PROBLEM = re.compile(r"What is (\d+) ([+-]) (\d+)\?")


def _skill(problem_hash: str) -> int:
    """0..9 from the problem's hash: a candidate of skill k answers the problems with value < k."""
    return int(problem_hash, 16) % 10


class ScriptedEngine:
    """Answers like a model of known skill: right on the problems whose hash value is below
    ``skill``, off by one elsewhere; boxed or as a plain last number. Outputs are cut at
    ``max_tokens`` characters (the tiny tokenizer is one token per character) and then finish
    with ``length``: the engine's own finish reason, as the real engines report it."""

    name = "scripted"

    def __init__(self, skill: int, boxed: bool, tokenizer, calls: list):
        self.skill, self.boxed, self.tokenizer, self.calls = skill, boxed, tokenizer, calls

    def generate(self, requests, decoding, progress=None):
        from hashlib import sha256

        from rlexp.evaluation.engines.base import Result, Sample

        self.calls.append(len(requests))
        out = []
        for request in requests:
            a, op, b = PROBLEM.search(request.prompt).groups()
            prompt = f"What is {a} {op} {b}?"
            value = int(a) + int(b) if op == "+" else int(a) - int(b)
            if _skill(sha256(prompt.encode()).hexdigest()) >= self.skill:
                value += 1
            text = f"\\boxed{{{value}}}" if self.boxed else f"so it is {value}"
            finish = "stop"
            if len(text) > decoding.max_tokens:
                text, finish = text[: decoding.max_tokens], "length"
            out.append(Result(request, (Sample(text, finish, 10, len(text)),)))
        if progress:
            progress(len(requests))
        return out

    def describe(self):
        return {"name": self.name, "skill": self.skill, "boxed": self.boxed}

    def close(self):
        pass


SKILLS = {"weak": (3, True), "mid": (6, True), "plain": (6, False), "strong": (9, True)}


def scripted_factory(calls: list, built: list):
    from transformers import AutoTokenizer

    def factory(spec, base, targets):
        name = Path(base).name
        built.append(name)
        skill, boxed = SKILLS[name]
        return ScriptedEngine(skill, boxed, AutoTokenizer.from_pretrained(base), calls), \
            AutoTokenizer.from_pretrained(base)

    return factory


# --------------------------------------------------------------------------- an experiment with a sweep


@pytest.fixture
def sweep_experiment(tmp_path, tiny_base_model):
    """experiments/exp with the task's datasets (operands 0..19), four copies of the tiny model as
    candidates, and a writer of sweeps/s1/sweep.yaml."""
    from rlexp.evaluation.arithmetic_task import ArithmeticTask
    from rlexp.experiment.datasets import build_task_datasets

    exp = tmp_path / "exp"
    files = build_task_datasets(exp / "data", seed=0, pool_size=10, monitor_size=10, primary_size=60, id_size=20,
                                sanity_size=6, task=ArithmeticTask(max_operand=19))
    for name in SKILLS:
        shutil.copytree(tiny_base_model, exp / "models" / name)

    def write(text: str | None = None, **overrides) -> Path:
        spec = {
            "candidates": [{"name": n, "model": f"models/{n}"} for n in SKILLS],
            "datasets": {r: {"path": f"data/{Path(files[r].path).name}"} for r in ("ood_primary", "id", "sanity")},
            "eval": {"engine": "local", "max_tokens": 16, "batch_size": 16},
            "stages": {"stage2": {"finalists": 2}},
            "criteria": {"band": [0.45, 0.75]},
            "truncation_check": {"max_tokens": [9, 16], "subset": 40},
        }
        spec.update(overrides)
        path = exp / "sweeps" / "s1" / "sweep.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        import yaml

        path.write_text(text if text is not None else yaml.safe_dump(spec, sort_keys=False))
        return path

    return exp, files, write


def _problems(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _expected(problems, skill, boxed, max_tokens=16):
    """Hand computation of what a scripted candidate scores: correct, boxed, truncated counts."""
    correct = boxed_n = truncated = 0
    for p in problems:
        a, op, b = PROBLEM.search(p["prompt"]).groups()
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        right = _skill(p["problem_hash"]) < skill
        text = f"\\boxed{{{value if right else value + 1}}}" if boxed else f"so it is {value if right else value + 1}"
        cut = len(text) > max_tokens
        truncated += cut
        if not cut:
            correct += right
            boxed_n += boxed
    return correct, boxed_n, truncated


# --------------------------------------------------------------------------- the sweep, scripted


def test_sweep_ranks_selects_resumes_and_checks_truncation(sweep_experiment, monkeypatch):
    from rlexp.stages.sweep import sweep_models

    exp, files, write = sweep_experiment
    spec_path = write()
    primary = _problems(files["ood_primary"].path)
    n = len(primary)
    acc = {name: _expected(primary, *SKILLS[name])[0] / n for name in SKILLS}
    # the setup the assertions rely on: distinct strengths, exactly mid and plain inside the band
    assert acc["weak"] < 0.45 <= acc["mid"] == acc["plain"] <= 0.75 < acc["strong"], acc

    calls, built = [], []
    result = sweep_models(spec_path, tracking_uri="off", engine_factory=scripted_factory(calls, built))
    ranking = result.ranking
    rows = {r["name"]: r for r in ranking["candidates"]}
    # ranked by measured accuracy (mid and plain tie: by name)
    assert [r["name"] for r in ranking["candidates"]] == ["strong", "mid", "plain", "weak"]
    for name, (skill, boxed) in SKILLS.items():
        correct, boxed_n, _ = _expected(primary, skill, boxed)
        assert rows[name]["primary"]["n"] == n
        assert rows[name]["primary"]["correct"] == correct
        assert rows[name]["primary"]["boxed"] == boxed_n
    assert rows["plain"]["primary"]["last_number"] == n and rows["plain"]["primary"]["boxed"] == 0
    assert [r["in_band"] for r in ranking["candidates"]] == [False, True, True, False]
    # finalists: the two inside the band; the boxed one wins on format
    assert ranking["finalists"] == ["mid", "plain"]
    assert ranking["selection"]["candidate"] == "mid"
    assert "inside the headroom band 45–75%" in ranking["selection"]["reason"]
    assert set(rows["mid"]["stage2"]) == {"id", "sanity"} and not rows["weak"]["stage2"]
    id_set = _problems(files["id"].path)
    assert rows["mid"]["stage2"]["id"]["correct"] == _expected(id_set, 6, True)[0]

    # truncation check on the selected candidate: 9 characters cut every answer of three or more digits
    check = ranking["truncation_check"]
    subset = primary[:40]
    short_ok = {p["problem_hash"] for p in subset if _expected([p], 6, True, max_tokens=9)[0]}
    long_ok = {p["problem_hash"] for p in subset if _expected([p], 6, True, max_tokens=16)[0]}
    b, c = len(short_ok - long_ok), len(long_ok - short_ok)
    assert (check["comparison"]["b"], check["comparison"]["c"]) == (b, c) and c > 0
    assert check["comparison"]["n"] == 40
    from scipy.stats import binomtest

    assert check["comparison"]["mcnemar_p"] == pytest.approx(binomtest(min(b, c), b + c, 0.5).pvalue, rel=1e-9)
    delta_pp = 100 * (c - b) / 40
    low, high = check["comparison"]["ci_pp"]
    assert check["comparison"]["delta_pp"] == pytest.approx(delta_pp)
    assert low < delta_pp < high
    se_pp = 100 * (((b + c) / 40 - ((c - b) / 40) ** 2) / 40) ** 0.5
    assert high - low == pytest.approx(2 * 1.96 * se_pp, rel=0.3)  # a bootstrap CI is about the normal one
    assert check["arms"]["9"]["truncated"] == _expected(subset, 6, True, max_tokens=9)[2]
    assert check["arms"]["16"]["source"] == "stage records"  # max_tokens 16 is the sweep's: reused
    assert check["arms"]["9"]["truncation_rate"] > check["arms"]["16"]["truncation_rate"] == 0.0

    report = result.report_path.read_text()
    assert report.startswith("# Sweep s1") and report.splitlines()[2].startswith("**Selected: mid**")
    assert json.loads(result.ranking_path.read_text()) == ranking

    # engines: one per candidate for stage 1, one per finalist for stage 2, one for max_tokens 9
    assert built == ["weak", "mid", "plain", "strong", "mid", "plain", "mid"]
    assert sum(calls) == 4 * n + 2 * (20 + 6) + 40

    # rerun: nothing is evaluated again, no engine is even built, no record file is touched
    sweep_dir = exp / "sweeps" / "s1"
    records = sorted(p for p in sweep_dir.rglob("*.jsonl") if "result" not in p.parts)
    stamps = {p: p.stat().st_mtime_ns for p in records}
    calls.clear(), built.clear()
    again = sweep_models(spec_path, tracking_uri="off", engine_factory=scripted_factory(calls, built))
    assert built == [] and calls == []
    assert {p: p.stat().st_mtime_ns for p in records} == stamps
    assert again.ranking["selection"] == ranking["selection"]

    # a sweep killed in the middle of a candidate: 25 records on disk and a torn last line
    plain = sweep_dir / "eval" / "plain" / "ood_primary.jsonl"
    lines = plain.read_text().splitlines(keepends=True)
    plain.write_text("".join(lines[:25]) + lines[25][:30])
    shutil.rmtree(sweep_dir / "result")
    untouched = {p: p.stat().st_mtime_ns for p in records if p != plain}
    calls.clear(), built.clear()
    resumed = sweep_models(spec_path, tracking_uri="off", engine_factory=scripted_factory(calls, built))
    assert built == ["plain"] and sum(calls) == n - 25
    assert {p: p.stat().st_mtime_ns for p in records if p != plain} == untouched
    assert resumed.ranking["candidates"] == ranking["candidates"]
    assert len(plain.read_text().splitlines()) == n


def test_size_breaks_a_tie_and_no_band_picks_the_closest(sweep_experiment):
    from rlexp.stages.sweep import sweep_models

    exp, files, write = sweep_experiment
    candidates = [{"name": "mid", "model": "models/mid", "params": 2_000_000},
                  {"name": "strong", "model": "models/strong", "params": 9_000_000}]
    # mid and a copy of mid's skill under another name: same accuracy and format, the smaller wins
    shutil.copytree(exp / "models" / "mid", exp / "models" / "mid2")
    SKILLS["mid2"] = SKILLS["mid"]
    try:
        spec_path = write(candidates=[*candidates, {"name": "mid2", "model": "models/mid2", "params": 1_000_000}],
                          truncation_check=None, stages={"stage2": {"finalists": 3, "sets": ["sanity"]}})
        result = sweep_models(spec_path, tracking_uri="off", engine_factory=scripted_factory([], []))
        assert result.selected == "mid2"
        assert "smallest (1M)" in result.ranking["selection"]["reason"]
        assert result.ranking["truncation_check"] is None
        # a band no candidate reaches: the closest is chosen, and the reason says so
        spec_path = write(candidates=candidates, truncation_check=None, criteria={"band": [0.97, 0.99]})
        result = sweep_models(spec_path, tracking_uri="off", engine_factory=scripted_factory([], []))
        assert result.selected == "strong"
        assert "no finalist is inside the headroom band 97–99%" in result.ranking["selection"]["reason"]
    finally:
        SKILLS.pop("mid2")


def test_sweep_is_logged_to_mlflow_as_parent_and_children(sweep_experiment, tmp_path):
    from mlflow.tracking import MlflowClient

    from rlexp.stages.sweep import sweep_models

    exp, files, write = sweep_experiment
    spec_path = write(truncation_check=None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = sweep_models(spec_path, tracking_uri=uri, engine_factory=scripted_factory([], []))
    again = sweep_models(spec_path, tracking_uri=uri, engine_factory=scripted_factory([], []))
    assert again.mlflow["parent_run_id"] == result.mlflow["parent_run_id"]  # found again, not duplicated
    client = MlflowClient(uri)
    parent = client.get_run(result.mlflow["parent_run_id"])
    runs = client.search_runs([parent.info.experiment_id])
    assert len(runs) == 1 + len(SKILLS)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["mlflow.runName"] for r in children) == sorted(SKILLS)
    primary = _problems(files["ood_primary"].path)
    for run in children:
        name = run.data.tags["mlflow.runName"]
        assert run.data.metrics["stage1/ood_primary/acc"] == pytest.approx(_expected(primary, *SKILLS[name])[0]
                                                                           / len(primary))
        assert run.data.tags["rlexp.sweep_selected"] == ("true" if name == "mid" else "false")
    assert parent.data.tags["mlflow.note.content"].startswith("**Selected: mid**")
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "sweep")}
    assert artifacts == {"sweep/ranking.json", "sweep/report.md"}


# --------------------------------------------------------------------------- bad specs


BAD_SPECS = [
    ({"surprise": 1}, "surprise", "unknown key"),
    ({"criteria": {"band": [60, 70]}}, "criteria.band[0]", "60% is 0.6"),
    ({"criteria": {"band": [0.7, 0.6]}}, "criteria.band", "low must be below high"),
    ({"criteria": {}}, "criteria.band", "required"),
    ({"candidates": [{"name": "a", "model": "models/mid"}, {"name": "a", "model": "models/weak"}]},
     "candidates[1].name", "names two candidates"),
    ({"candidates": [{"name": "x", "model": "models/nope"}]}, "candidates[0].model", "not a local model directory"),
    ({"candidates": [{"name": "x", "model": "models/mid", "size": 3}]}, "candidates[0].size", "unknown key"),
    ({"datasets": {"pool": {"path": "data/x.jsonl"}}}, "datasets.pool", "a sweep evaluates"),
    ({"datasets": {"ood_primary": {"path": "data/x.jsonl", "cluster": "doc"}}}, "datasets.ood_primary.cluster",
     "a sweep ranks candidates on independent problems"),
    ({"eval": {"max_tokens": 0}}, "eval.max_tokens", "must be > 0"),
    ({"eval": {"engin": "local"}}, "eval.engin", "did you mean 'engine'"),
    ({"stages": {"stage2": {"finalists": 9}}}, "stages.stage2.finalists", "between 1 and 4"),
    ({"truncation_check": {"max_tokens": [16, 16]}}, "truncation_check.max_tokens", "must differ"),
    ({"truncation_check": {"max_tokens": [8, 16], "candidate": "mdi"}}, "truncation_check.candidate",
     "did you mean 'mid'"),
]


@pytest.mark.parametrize(("override", "field", "message"), BAD_SPECS, ids=[b[1] for b in BAD_SPECS])
def test_bad_spec_is_one_line_exit_2_and_writes_nothing(sweep_experiment, capsys, override, field, message):
    from rlexp.cli import main

    exp, _, write = sweep_experiment
    spec_path = write(**override)
    before = sorted(p.relative_to(exp) for p in exp.rglob("*"))
    code = main(["sweep", "models", str(spec_path.parent)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"rlexp: {spec_path}: {field}: "), err
    assert message in err
    assert sorted(p.relative_to(exp) for p in exp.rglob("*")) == before


def test_yaml_alias_and_missing_spec_are_refused(sweep_experiment, capsys, tmp_path):
    from rlexp.cli import main

    exp, _, write = sweep_experiment
    spec_path = write("base: &b {engine: local}\neval: *b\n")
    assert main(["sweep", "models", str(spec_path)]) == 2
    assert "alias" in capsys.readouterr().err
    assert main(["sweep", "models", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "file not found" in err


# --------------------------------------------------------------------------- pure rules


def test_selection_rules_by_hand():
    from rlexp.spec.sweep import Criteria, SetStats, band_distance_pp, finalist_order, select

    crit = Criteria((0.60, 0.70), format_tolerance_pp=2.0)
    assert band_distance_pp(0.55, crit.band) == pytest.approx(5.0)
    assert band_distance_pp(0.60, crit.band) == 0.0 and band_distance_pp(0.70, crit.band) == 0.0
    assert band_distance_pp(0.72, crit.band) == pytest.approx(2.0)
    # n=100: (correct, boxed, last_number, failed, truncated)
    stats = {
        "a": SetStats(100, 65, 95, 3, 2, 0),  # in band, boxed 95%
        "b": SetStats(100, 62, 94, 4, 2, 1),  # in band, boxed 94%: within 2 pp of a
        "c": SetStats(100, 68, 80, 10, 10, 5),  # in band, poor format
        "d": SetStats(100, 72, 99, 1, 0, 0),  # 2 pp above the band
        "e": SetStats(100, 40, 99, 1, 0, 0),  # 20 pp below
    }
    params = {"a": 7_000_000_000, "b": 1_500_000_000, "c": 500_000_000, "d": 1_000_000, "e": None}
    assert finalist_order(stats, params, crit) == ["a", "b", "c", "d", "e"]
    chosen = select(["a", "b", "c", "d"], stats, params, {}, crit, "ood_primary")
    assert chosen.candidate == "b"  # a and b format-equivalent; b is smaller; c's format is 15 pp worse
    assert chosen.format_equivalent == ("a", "b") and chosen.in_band == ("a", "b", "c")
    strict = select(["a", "b", "c"], stats, params, {}, Criteria((0.60, 0.70), format_tolerance_pp=0.5),
                    "ood_primary")
    assert strict.candidate == "a"  # 1 pp apart is no longer a tie at 0.5 pp
    # stage 2 drops a finalist below the sanity bar; the next one in band is chosen
    sanity = {"b": {"sanity": SetStats(18, 5, 18, 0, 0, 0)}, "a": {"sanity": SetStats(18, 12, 18, 0, 0, 0)}}
    gated = select(["a", "b"], stats, params, sanity, Criteria((0.60, 0.70), 2.0, min_sanity_acc=0.5),
                   "ood_primary")
    assert gated.candidate == "a" and "b" in gated.dropped
    outside = select(["d", "e"], stats, params, {}, crit, "ood_primary")
    assert outside.candidate == "d" and "2.0 pp above" in outside.reason


def test_set_stats_counts_methods_and_finish_reasons():
    from rlexp.spec.sweep import set_stats

    outputs = ["\\boxed{12}", "the answer is 7", "\\boxed{1", "", "\\boxed{3}"]
    finish = ["stop", "stop", "length", "stop", "stop"]
    records = []
    for text, reason, gold in zip(outputs, finish, ["12", "7", "13", "4", "4"], strict=True):
        answer, method = extract_answer(text)
        records.append({"parse_method": method, "finish_reason": reason, "correct": int(answer == gold)})
    s = set_stats(records)
    assert (s.n, s.correct, s.boxed, s.last_number, s.failed, s.truncated) == (5, 2, 2, 1, 2, 1)
    assert s.truncation_rate == pytest.approx(0.2) and s.fail_rate == pytest.approx(0.4)


def test_parameter_count_from_safetensors_matches_torch(tiny_base_model):
    from transformers import AutoModelForCausalLM

    from rlexp.stages.sweep import count_parameters

    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    assert count_parameters(Path(tiny_base_model)) == sum(p.numel() for p in model.parameters())
    assert count_parameters("org/some-hub-model") is None


# --------------------------------------------------------------------------- real tiny models of different strength


@pytest.mark.slow
def test_sweep_over_tiny_models_supervised_to_different_accuracies(tmp_path, tiny_base_model):
    """The demo task (operands 0..19): three tiny models supervised to increasing target
    accuracies, saved along one supervised run (continuing a supervised model with a fresh
    optimizer was measured to stall instead), swept with the real local engine."""
    import torch
    from scipy.stats import binomtest
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.arithmetic_task import ArithmeticTask, Problem
    from rlexp.experiment.datasets import build_task_datasets, eval_hashes
    from rlexp.models.tiny import greedy_accuracy, sft_tiny_model
    from rlexp.stages.sweep import sweep_models

    torch.set_num_threads(1)
    task = ArithmeticTask(max_operand=19)
    exp = tmp_path / "exp"
    files = build_task_datasets(exp / "data", seed=0, pool_size=10, monitor_size=10, primary_size=100, id_size=40,
                                sanity_size=10, task=task)
    names = ["m1", "m2", "m3"]
    # one supervised run to 30%, saving the model on the way when it first reaches 2% and 15%
    sft_tiny_model(tiny_base_model, task, exp / "models" / "m3", steps=600, seed=0, batch_size=64,
                   target_acc=0.3, eval_every=20, dev_size=60, exclude_hashes=eval_hashes(files),
                   snapshots={0.02: exp / "models" / "m1", 0.15: exp / "models" / "m2"})

    # the reference: each model's greedy accuracy on the primary set, measured outside the sweep
    primary = [Problem(p["prompt"], p["answer"], p["bucket"]) for p in _problems(files["ood_primary"].path)]
    reference = {}
    for name in names:
        model = AutoModelForCausalLM.from_pretrained(exp / "models" / name)
        reference[name] = greedy_accuracy(model, AutoTokenizer.from_pretrained(exp / "models" / name), primary, "",
                                          max_new_tokens=16)
    ordered = sorted(names, key=lambda n: -reference[n])
    gaps = [reference[a] - reference[b] for a, b in zip(ordered, ordered[1:], strict=False)]
    assert min(gaps) >= 0.04, f"the supervised models are not of different strength: {reference}"
    middle = ordered[1]
    half = min(gaps) / 2
    band = [round(reference[middle] - half, 4), round(reference[middle] + half, 4)]

    import yaml

    spec = {"candidates": [{"name": n, "model": f"models/{n}"} for n in names],
            "datasets": {r: {"path": f"data/{Path(files[r].path).name}"} for r in ("ood_primary", "id", "sanity")},
            "eval": {"engine": "local", "max_tokens": 16, "batch_size": 50},
            "stages": {"stage2": {"finalists": 2}},
            "criteria": {"band": band},
            "truncation_check": {"max_tokens": [9, 16], "subset": 60}}
    spec_path = exp / "sweeps" / "s1" / "sweep.yaml"
    spec_path.parent.mkdir(parents=True)
    spec_path.write_text(yaml.safe_dump(spec))
    ranking = sweep_models(spec_path, tracking_uri="off").ranking

    assert [r["name"] for r in ranking["candidates"]] == ordered
    for row in ranking["candidates"]:
        assert row["primary"]["acc"] == pytest.approx(reference[row["name"]])
        assert row["primary"]["n"] == 100
    assert ranking["selection"]["candidate"] == middle
    assert [r["in_band"] for r in ranking["candidates"]] == [False, True, False]

    check = ranking["truncation_check"]
    assert check["candidate"] == middle
    short = {r["problem_hash"]: r["correct"] for r in map(json.loads, Path(check["arms"]["9"]["records"])
                                                          .read_text().splitlines())}
    long_all = {r["problem_hash"]: r["correct"] for r in map(json.loads, Path(check["arms"]["16"]["records"])
                                                             .read_text().splitlines())}
    long = {h: long_all[h] for h in short}
    b = sum(short[h] and not long[h] for h in short)
    c = sum(long[h] and not short[h] for h in short)
    cmp = check["comparison"]
    assert (cmp["n"], cmp["b"], cmp["c"]) == (60, b, c)
    assert cmp["mcnemar_p"] == pytest.approx(binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0)
    assert cmp["ci_pp"][0] <= cmp["delta_pp"] <= cmp["ci_pp"][1]
    # two-digit answers need 10 characters: at 9 they are cut, and the engine says so
    assert check["arms"]["9"]["truncation_rate"] > 0.5 > check["arms"]["16"]["truncation_rate"]


def test_cli_runs_the_real_local_engine_on_base_models(sweep_experiment, capsys):
    """The command line end to end with the local engine on two untrained base models (no adapter)."""
    from rlexp.cli import main

    exp, files, write = sweep_experiment
    spec_path = write(candidates=[{"name": "weak", "model": "models/weak"}, {"name": "mid", "model": "models/mid"}],
                      stages={"stage1": {"limit": 12}, "stage2": {"finalists": 1, "sets": ["sanity"]}},
                      truncation_check={"max_tokens": [4, 16], "subset": 6})
    assert main(["sweep", "models", str(spec_path.parent), "--tracking-uri", "off", "--json"]) == 0
    ranking = json.loads(capsys.readouterr().out)
    rows = ranking["candidates"]
    assert [r["primary"]["n"] for r in rows] == [12, 12]
    records = exp / "sweeps" / "s1" / "eval" / "weak" / "ood_primary.jsonl"
    meta = json.loads(records.with_name("ood_primary.meta.json").read_text())
    assert meta["engine"] == "local" and meta["adapter_path"] is None and meta["checkpoint"] == "weak"
    assert len(records.read_text().splitlines()) == 12
    # the untrained models are byte-identical copies: the same outputs, so the same numbers
    assert rows[0]["primary"] == rows[1]["primary"]
    assert ranking["truncation_check"]["arms"]["4"]["truncation_rate"] == 1.0  # 4 tokens: always cut
    assert main(["sweep", "models", str(spec_path), "--tracking-uri", "off"]) == 0
    out = capsys.readouterr().out
    assert "selected:" in out and "truncation check" in out


def test_changed_settings_are_refused_not_mixed(sweep_experiment):
    from rlexp.errors import InputError
    from rlexp.stages.sweep import sweep_models

    exp, _, write = sweep_experiment
    base = {"candidates": [{"name": "mid", "model": "models/mid"}], "truncation_check": None,
            "stages": {"stage1": {"limit": 10}, "stage2": {"finalists": 1, "sets": ["sanity"]}}}
    sweep_models(write(**base), tracking_uri="off", engine_factory=scripted_factory([], []))
    ranking = (exp / "sweeps" / "s1" / "result" / "ranking.json").read_bytes()
    with pytest.raises(InputError, match=r"decoding\.max_tokens: changed since these records were written \(16 → 12\)"):
        sweep_models(write(**base, eval={"engine": "local", "max_tokens": 12}), tracking_uri="off",
                     engine_factory=scripted_factory([], []))
    assert (exp / "sweeps" / "s1" / "result" / "ranking.json").read_bytes() == ranking  # the old result stands


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_continues_without_redoing_records(sweep_experiment):
    """`rlexp sweep models` in a child process, SIGKILLed while the second candidate's records are
    being written; the rerun loads only that candidate and evaluates only its missing problems."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from rlexp.stages.eval_records import build_engine
    from rlexp.stages.sweep import sweep_models

    exp, _, write = sweep_experiment
    spec_path = write(candidates=[{"name": "weak", "model": "models/weak"}, {"name": "mid", "model": "models/mid"}],
                      eval={"engine": "local", "max_tokens": 16, "batch_size": 2},
                      stages={"stage1": {"limit": 40}, "stage2": {"sets": []}}, truncation_check=None)
    second = exp / "sweeps" / "s1" / "eval" / "mid" / "ood_primary.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-m", "rlexp.cli", "sweep", "models", str(spec_path), "--tracking-uri",
                              "off"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (second.exists() and second.read_bytes().count(b"\n") >= 4):
            assert child.poll() is None and time.monotonic() < deadline, "the sweep ended before it was killed"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    done = second.read_bytes().count(b"\n")  # complete lines (a torn last one is dropped on resume)
    assert 4 <= done < 40
    first = exp / "sweeps" / "s1" / "eval" / "weak" / "ood_primary.jsonl"
    assert len(first.read_text().splitlines()) == 40
    stamp = first.stat().st_mtime_ns

    built, calls = [], []

    def counting(spec, base, targets):
        engine, tokenizer = build_engine(spec, base, targets)
        built.append(Path(base).name)
        generate = engine.generate

        def counted(requests, decoding, progress=None):
            calls.append(len(requests))
            return generate(requests, decoding, progress)

        engine.generate = counted
        return engine, tokenizer

    result = sweep_models(spec_path, tracking_uri="off", engine_factory=counting)
    assert built == ["mid"] and sum(calls) == 40 - done
    assert first.stat().st_mtime_ns == stamp
    assert [r["primary"]["n"] for r in result.ranking["candidates"]] == [40, 40]
    assert len({json.loads(line)["problem_hash"] for line in second.read_text().splitlines()}) == 40
