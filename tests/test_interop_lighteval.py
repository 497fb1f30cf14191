"""lighteval details written by lighteval itself (tests/data/interop/lighteval, made by
scripts/make-harness-fixtures: ``lighteval custom`` with a scripted model and a local task).

What rlexp reads equals what lighteval printed; the two metrics of the task need --metric; a
document whose content changed between runs is refused; duplicates exit 2 or are dropped.
The last two edit a copy of a real file (pyarrow, same schema)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats as sps

from rlexp.adapters.harnesses import Choice, detect_format, read_items
from rlexp.cli import main

DATA = Path(__file__).parent / "data" / "interop" / "lighteval"


def details(run: str) -> Path:
    (path,) = (DATA / run).glob("details_*.parquet")
    return path


def printed(run: str) -> dict[str, float]:
    """metric -> value for the task row of the table lighteval printed."""
    out, task = {}, None
    for line in (DATA / run / "printed.txt").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] in ("Task",) or cells[0].startswith("-"):
            continue
        task = cells[0] or task
        if task == "addition_lv:0":
            out[cells[2]] = float(cells[3])
    return out


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def run_json(args: list[str], capsys) -> dict:
    assert main(["compare", *args, "--json", "--resamples", "2000"]) == 0
    return json.loads(capsys.readouterr().out)


def fail(args: list[str], capsys) -> str:
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize("run", ["model_a", "model_b"])
@pytest.mark.parametrize("metric", ["acc", "em"])
def test_accuracy_equals_what_lighteval_printed(run, metric):
    path = details(run)
    assert detect_format(path) == "lighteval"
    items = read_items(path, choice=Choice(metric=metric))
    accuracy = sum(i.mean for i in items.items.values()) / len(items.items)
    assert len(items.items) == 30 and items.task == "addition_lv|0"
    assert round(accuracy, 4) == printed(run)[metric]
    (results,) = (DATA / run).glob("results_*.json")
    assert accuracy == pytest.approx(json.loads(results.read_text())["results"]["addition_lv|0"][metric])


def test_two_metrics_need_a_choice(capsys):
    err = fail([str(details("model_a")), str(details("model_b"))], capsys)
    assert "several metrics: acc, em; choose one with --metric" in err


@pytest.mark.parametrize("metric", ["acc", "em"])
def test_binary_comparison_counts_match_the_files(metric, capsys):
    def scores(run):
        return {r["doc"]["id"]: r["metric"][metric] for r in rows(details(run)) if r["metric"][metric] is not None}

    yb, yn = scores("model_a"), scores("model_b")
    b = sum(1 for k in yb if yb[k] == 1 and yn[k] == 0)
    c = sum(1 for k in yb if yb[k] == 0 and yn[k] == 1)
    out = run_json([str(details("model_a")), str(details("model_b")), "--metric", metric], capsys)
    assert (out["mode"], out["n"], out["b"], out["c"]) == ("binary", 30, b, c)
    assert out["mcnemar_p"] == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue)
    assert out["sources"]["new"]["format"] == "lighteval" and out["sources"]["new"]["chosen"] == {"metric": metric}


def rewrite(src: Path, dst: Path, edit) -> Path:
    table = pq.read_table(src)
    dst.mkdir(parents=True, exist_ok=True)
    out = dst / src.name
    pq.write_table(pa.Table.from_pylist(edit(table.to_pylist()), schema=table.schema), out)
    return out


def test_changed_document_is_refused(tmp_path, capsys):
    def change_gold(rs):
        for r in rs:
            if r["doc"]["id"] == "5":
                r["doc"]["gold_index"] = (r["doc"]["gold_index"] + 1) % 4
        return rs

    path = rewrite(details("model_b"), tmp_path, change_gold)
    err = fail([str(details("model_a")), str(path), "--metric", "acc", "--intersect"], capsys)
    assert "addition_lv|0:5" in err and "content differs from the baseline" in err


def test_duplicate_rows_exit_2_or_dropped(tmp_path, capsys):
    path = rewrite(details("model_b"), tmp_path, lambda rs: rs + [r for r in rs if r["doc"]["id"] in ("3", "4")])
    err = fail([str(details("model_a")), str(path), "--metric", "em"], capsys)
    assert "duplicate doc.id" in err
    out = run_json([str(details("model_a")), str(path), "--metric", "em", "--intersect"], capsys)
    assert out["n"] == 28 and out["dropped_base_only"] == 2
