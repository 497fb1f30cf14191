"""lm-evaluation-harness samples files written by lm-eval itself (tests/data/interop/lm_eval,
made by scripts/make-harness-fixtures: lm-eval's own CLI, a local task, a scripted model).

What rlexp reads equals what lm-eval printed; several filters or metrics exit 2 listing them;
the out-of-order ``--samples`` run (lm-eval logs wrong doc_ids) is caught by the hash check; a
prompt change is refused unless allowed. Some cases edit a copy of a real file (said where)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats as sps

from rlexp.cli import main
from rlexp.evaluation.harnesses import Choice, detect_format, read_items

DATA = Path(__file__).parent / "data" / "interop" / "lm_eval"


def samples(run: str, task: str) -> Path:
    (path,) = (DATA / run).glob(f"samples_{task}_*.jsonl")
    return path


def printed_table(run: str) -> dict[tuple[str, str, str], float]:
    """(task, filter, metric) -> value, parsed from the table lm-eval printed."""
    out = {}
    task = None
    for line in (DATA / run / "printed.txt").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or cells[0] == "Tasks" or set(cells[0]) <= {"-", ":"} and cells[0]:
            continue
        task = cells[0] or task
        out[(task, cells[2], cells[4])] = float(cells[6])
    return out


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def run_json(args: list[str], capsys) -> dict:
    assert main(["compare", *args, "--json", "--resamples", "2000"]) == 0
    return json.loads(capsys.readouterr().out)


def fail(args: list[str], capsys) -> str:
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("run", ["model_a", "model_b"])
@pytest.mark.parametrize(("task", "filt", "metric"), [
    ("addition_gen", "strict-match", "exact_match"), ("addition_gen", "flexible-extract", "exact_match"),
    ("addition_mc", "none", "acc"), ("addition_mc", "none", "acc_norm"),
])
def test_accuracy_equals_what_lm_eval_printed(run, task, filt, metric):
    path = samples(run, task)
    assert detect_format(path) == "lm-eval"
    items = read_items(path, choice=Choice(filter=filt, metric=metric))
    accuracy = sum(i.mean for i in items.items.values()) / len(items.items)
    assert len(items.items) == 30 and items.task == task and items.harness_version == "0.4.13"
    assert round(accuracy, 4) == printed_table(run)[(task, filt, metric)]
    (results_path,) = (DATA / run).glob("results_*.json")
    assert accuracy == pytest.approx(json.loads(results_path.read_text())["results"][task][f"{metric},{filt}"])


def test_the_filters_disagree_and_both_are_offered(capsys):
    table = printed_table("model_a")
    assert table[("addition_gen", "strict-match", "exact_match")] != table[("addition_gen", "flexible-extract", "exact_match")]
    base, new = str(samples("model_a", "addition_gen")), str(samples("model_b", "addition_gen"))
    err = fail([base, new], capsys)
    assert "several filters: flexible-extract, strict-match; choose one with --filter" in err
    err = fail([str(samples("model_a", "addition_mc")), str(samples("model_b", "addition_mc"))], capsys)
    assert "several metrics: acc, acc_norm; choose one with --metric" in err


@pytest.mark.parametrize("filt", ["strict-match", "flexible-extract"])
def test_binary_comparison_counts_match_the_files(filt, capsys):
    base, new = samples("model_a", "addition_gen"), samples("model_b", "addition_gen")
    yb = {r["doc_id"]: r["exact_match"] for r in lines(base) if r["filter"] == filt}
    yn = {r["doc_id"]: r["exact_match"] for r in lines(new) if r["filter"] == filt}
    b = sum(1 for k in yb if yb[k] == 1 and yn[k] == 0)
    c = sum(1 for k in yb if yb[k] == 0 and yn[k] == 1)
    out = run_json([str(base), str(new), "--filter", filt], capsys)
    assert (out["mode"], out["n"], out["b"], out["c"]) == ("binary", 30, b, c)
    assert out["mcnemar_p"] == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0)
    assert out["sources"]["new"]["chosen"] == {"filter": filt, "metric": "exact_match"}
    assert out["sources"]["new"]["format"] == "lm-eval" and out["sources"]["new"]["harness_version"] == "0.4.13"


def test_out_of_order_samples_caught_by_the_hash_check(capsys):
    """lm-eval was given --samples '{"addition_gen": [7, 3, 5]}': it evaluates documents 3, 5, 7
    in dataset order but logs them under the doc_ids 7, 3, 5."""
    bad = samples("out_of_order", "addition_gen")
    logged = {r["doc_id"]: r["doc"] for r in lines(bad) if r["filter"] == "strict-match"}
    truth = {r["doc_id"]: r["doc"] for r in lines(samples("model_a", "addition_gen")) if r["filter"] == "strict-match"}
    assert logged[7] == truth[3] and logged[3] == truth[5] and logged[5] == truth[7]  # the harness bug itself
    base = str(samples("model_a", "addition_gen"))
    err = fail([base, str(bad), "--filter", "strict-match", "--intersect"], capsys)
    assert "addition_gen:" in err and "content differs from the baseline" in err and str(bad) in err


def test_prompt_change_refused_unless_allowed(capsys):
    base, new = str(samples("model_a", "addition_gen")), str(samples("new_prompt", "addition_gen"))
    err = fail([base, new, "--filter", "strict-match"], capsys)
    assert "30 of 30 items were asked with a different prompt" in err and "--allow-prompt-change" in err
    out = run_json([base, new, "--filter", "strict-match", "--allow-prompt-change"], capsys)
    assert out["prompt_changed"] == 30 and out["n"] == 30


def test_duplicate_doc_in_an_appended_file(tmp_path, capsys):
    """lm-eval appends to samples_<task>_<date>.jsonl: a copy of a real file with three of its
    strict-match lines appended again, as a second run into the same file leaves them."""
    src = samples("model_b", "addition_gen")
    again = [x for x in src.read_text().splitlines() if json.loads(x)["filter"] == "strict-match"][:3]
    doubled = tmp_path / src.name
    doubled.write_text(src.read_text() + "\n".join(again) + "\n")
    base = str(samples("model_a", "addition_gen"))
    err = fail([base, str(doubled), "--filter", "strict-match"], capsys)
    assert "addition_gen:0" in err and "duplicate doc_id" in err
    out = run_json([base, str(doubled), "--filter", "strict-match", "--intersect"], capsys)
    assert out["n"] == 27 and out["dropped_base_only"] == 3
    assert sum("duplicate doc_id" in d["reason"] for d in out["dropped"]) == 3


def edited(tmp_path: Path, run: str, edit) -> Path:
    """A copy of a real samples file with the strict-match line of doc 4 edited."""
    src = samples(run, "addition_gen")
    out = []
    for r in lines(src):
        if r["doc_id"] == 4 and r["filter"] == "strict-match":
            edit(r)
        out.append(json.dumps(r))
    path = tmp_path / src.name
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda r: r.update(exact_match=["52", "51"]), "not a per-item score"),   # what f1/mcc/bleu store
    (lambda r: r.update(exact_match=None), "no score (None)"),                # what --predict_only writes
    (lambda r: r.update(exact_match=float("nan")), "unscored (NaN)"),
])
def test_unusable_values_exit_2_or_dropped(tmp_path, capsys, edit, needle):
    base = str(samples("model_a", "addition_gen"))
    path = edited(tmp_path, "model_b", edit)
    err = fail([base, str(path), "--filter", "strict-match"], capsys)
    assert "addition_gen:4" in err and needle in err and "--intersect" in err
    out = run_json([base, str(path), "--filter", "strict-match", "--intersect"], capsys)
    assert out["n"] == 29
    assert [d["key"] for d in out["dropped"]] == ["addition_gen:4", "addition_gen:4"]  # unusable, then unpaired


def test_missing_hashes_refused(tmp_path, capsys):
    path = edited(tmp_path, "model_b", lambda r: r.pop("doc_hash"))
    err = fail([str(samples("model_a", "addition_gen")), str(path), "--filter", "strict-match"], capsys)
    assert "doc_hash" in err and "no content hashes" in err


def test_task_from_the_file_name_or_the_option(tmp_path, capsys):
    renamed = tmp_path / "gen.jsonl"
    renamed.write_text(samples("model_b", "addition_gen").read_text())
    base = str(samples("model_a", "addition_gen"))
    err = fail([base, str(renamed), "--filter", "strict-match"], capsys)
    assert "--task" in err
    out = run_json([base, str(renamed), "--filter", "strict-match", "--task", "addition_gen"], capsys)
    assert out["n"] == 30 and out["sources"]["new"]["harness_version"] is None  # no results file beside it


def test_format_option_overrides_detection(capsys):
    path = str(samples("model_a", "addition_gen"))
    err = fail([path, path, "--format", "inspect"], capsys)
    assert "not a JSON Inspect log" in err or "not an Inspect log" in err
    err = fail([path, path, "--format", "lmeval"], capsys)
    assert "--format" in err and "lm-eval" in err
