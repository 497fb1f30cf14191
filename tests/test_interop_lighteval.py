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

from rlexp.cli import main
from rlexp.evaluation.harnesses import Choice, detect_format, read_items

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


def _retemplate(rs):
    """The same documents under another prompt template (what an edited prompt function writes)."""
    for r in rs:
        r["doc"]["query"] = r["doc"]["query"].replace("Question: ", "Q: ").replace("\nAnswer:", "\nA:")
    return rs


def rewrite_with_text(src: Path, dst: Path, edit) -> Path:
    """:func:`rewrite`, the doc's ``original_query`` typed as text (lighteval's files of a task that
    never sets it type that column null)."""
    table = pq.read_table(src)
    doc = table.schema.field("doc").type
    fields = [pa.field(f.name, pa.string()) if f.name == "original_query" else f for f in doc]
    schema = table.schema.set(table.schema.get_field_index("doc"), pa.field("doc", pa.struct(fields)))
    dst.mkdir(parents=True, exist_ok=True)
    out = dst / src.name
    pq.write_table(pa.Table.from_pylist(edit(table.to_pylist()), schema=schema), out)
    return out


def _with_original_query(rs):
    """A prompt function that also stores the document's own text (lighteval's Doc.original_query)."""
    for r in rs:
        question = r["doc"]["query"].split(": ", 1)[1].rsplit("\n", 1)[0]  # "What is 54 + 34?"
        r["doc"]["original_query"] = question
    return rs


def test_prompt_change_without_original_query_is_refused_saying_why(tmp_path, capsys):
    new = rewrite(details("model_b"), tmp_path, _retemplate)
    for extra in ([], ["--allow-prompt-change"], ["--allow-prompt-change", "--intersect"]):
        err = fail([str(details("model_a")), str(new), "--metric", "acc", *extra], capsys)
        assert "a prompt-template change or another document" in err
        assert "--allow-prompt-change cannot pair them" in err and "Doc.original_query" in err
    # a gold answer that moved is a different document, named as such (not a prompt change)
    err = fail([str(details("model_a")), str(rewrite(details("model_b"), tmp_path / "gold", lambda rs: [
        {**r, "doc": {**r["doc"], "gold_index": (r["doc"]["gold_index"] + 1) % 4}} for r in rs])), "--metric", "acc"],
        capsys)
    assert "positions in the split" in err and "prompt-template" not in err


def test_prompt_change_with_original_query_pairs_and_is_counted(tmp_path, capsys):
    base = rewrite_with_text(details("model_a"), tmp_path / "a", _with_original_query)
    new = rewrite_with_text(details("model_b"), tmp_path / "b", lambda rs: _retemplate(_with_original_query(rs)))
    assert rows(new)[0]["doc"]["original_query"].startswith("What is ")
    err = fail([str(base), str(new), "--metric", "acc"], capsys)
    assert "30 of 30 items were asked with a different prompt" in err and "--allow-prompt-change" in err
    out = run_json([str(base), str(new), "--metric", "acc", "--allow-prompt-change"], capsys)
    assert out["n"] == 30 and out["prompt_changed"] == 30
    # the scores are the runs' own: Δ is what lighteval printed for each model (0.6667 - 0.5333)
    assert out["delta_pp"] == pytest.approx(100 * (printed("model_b")["acc"] - printed("model_a")["acc"]), abs=0.01)
    # same template on both sides: no prompt change, and the same figures as the files unedited
    same = rewrite_with_text(details("model_b"), tmp_path / "b2", _with_original_query)
    out2 = run_json([str(base), str(same), "--metric", "acc"], capsys)
    assert out2["prompt_changed"] == 0 and out2["b"] == out["b"] and out2["c"] == out["c"]


def test_original_query_on_one_side_only_is_named(tmp_path, capsys):
    new = rewrite_with_text(details("model_b"), tmp_path, _with_original_query)
    err = fail([str(details("model_a")), str(new), "--metric", "acc", "--allow-prompt-change"], capsys)
    assert "one run's details set doc.original_query and the other's do not" in err


def test_a_parquet_whose_columns_decompress_past_the_limit_is_refused_before_decoding(tmp_path, monkeypatch):
    """The bound applies to what the columns decompress to (the footer says), not to the file's size:
    a small file of a highly compressible column is refused without decoding it."""
    import os

    from rlexp.errors import InputError
    from rlexp.evaluation.harnesses.lighteval import read_rows
    from rlexp.experiment import files

    path = tmp_path / "details_bomb|0_2026-01-01T00-00-00.parquet"
    pq.write_table(pa.table({"doc": ["x" * 100_000] * 50, "metric": [{"acc": 1.0}] * 50}), path,
                   compression="zstd")
    meta = pq.ParquetFile(path).metadata
    decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    size = path.stat().st_size
    assert decoded > 100 * size  # the premise: a small file of large columns
    monkeypatch.setattr(files, "MAX_JSONL_BYTES", size + 1)  # the file itself passes the size check
    with pytest.raises(InputError) as err:
        read_rows(path)
    assert "decompress" in err.value.one_line() and str(decoded) in err.value.one_line()
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as err:
        read_rows(fifo)  # refused before opening: it would block
    assert "FIFO" in err.value.one_line()
