"""`rlexp compare` names the real cause: a Git LFS pointer, an Inspect prompt edit, an lm-eval samples
file that holds fewer documents than its results file reports. Each case edits a copy of a file a
harness wrote itself (tests/data/interop, made by scripts/make-harness-fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rlexp.cli import main
from rlexp.evaluation.harnesses import Choice, read_items

DATA = Path(__file__).parent / "data" / "interop"
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 48213\n".format("0" * 64)


def run(args, capsys):
    rc = main(["compare", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_lfs_pointer_named_with_the_fix(tmp_path, capsys):
    pointer = tmp_path / "samples_addition_mc_2026-11-26T04-51-33.490648.jsonl"
    pointer.write_text(POINTER)
    rc, out, err = run([str(pointer), str(DATA / "inspect" / "model_a.json")], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "Git LFS pointer of a 48213-byte file" in err and "git lfs pull" in err
    rc, _, err = run([str(pointer), str(pointer), "--format", "lm-eval"], capsys)  # a named format too
    assert rc == 2 and "Git LFS pointer" in err


def edited_inspect(tmp_path, edit) -> Path:
    doc = json.loads((DATA / "inspect" / "model_a.json").read_text())
    edit(doc["samples"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


def test_inspect_prompt_edit_is_a_prompt_change(tmp_path, capsys):
    def reword(samples):
        for s in samples:
            if s["id"] == "q00":
                s["input"] = s["input"].replace("Reply with the number.", "Answer with a number only.")

    base = DATA / "inspect" / "model_a.json"
    edited = edited_inspect(tmp_path, reword)
    rc, _, err = run([str(base), str(edited), "--scorer", "match"], capsys)
    assert rc == 2 and "different prompt" in err and "--allow-prompt-change" in err and "doc_ids" not in err
    rc, out, _ = run([str(base), str(edited), "--scorer", "match", "--allow-prompt-change", "--json"], capsys)
    assert rc == 0 and json.loads(out)["prompt_changed"] == 1
    rc, out, _ = run([str(base), str(edited), "--scorer", "match", "--allow-prompt-change", "--intersect",
                      "--json"], capsys)
    assert rc == 0 and json.loads(out)["prompt_changed"] == 1


def test_inspect_target_change_is_content(tmp_path, capsys):
    def retarget(samples):
        for s in samples:
            if s["id"] == "q00":
                s["target"] = "11"

    edited = edited_inspect(tmp_path, retarget)
    rc, _, err = run([str(DATA / "inspect" / "model_a.json"), str(edited), "--scorer", "match",
                      "--allow-prompt-change"], capsys)
    assert rc == 2 and "content differs" in err and "the target differs" in err and "lm-eval" not in err


def cut_copy(tmp_path: Path, run_name: str, keep: int) -> Path:
    """A copy of a real lm-eval run with its samples file cut to its first ``keep`` documents."""
    src = DATA / "lm_eval" / run_name
    dst = tmp_path / run_name
    dst.mkdir()
    for f in src.glob("results_*.json"):
        shutil.copy(f, dst / f.name)
    (samples,) = src.glob("samples_addition_mc_*.jsonl")
    lines = samples.read_text().splitlines()[:keep]
    (dst / samples.name).write_text("\n".join(lines) + "\n")
    return dst / samples.name


def test_lm_eval_samples_subset_of_its_results_is_flagged(tmp_path, capsys):
    results = json.loads(next((DATA / "lm_eval" / "model_a").glob("results_*.json")).read_text())
    reported = results["n-samples"]["addition_mc"]["effective"]  # what lm-eval itself wrote: 30
    a, b = cut_copy(tmp_path, "model_a", 3), cut_copy(tmp_path, "model_b", 3)
    items = read_items(a, choice=Choice(metric="acc"))
    assert len(items.items) == 3
    assert any(f"holds 3 of the {reported} documents" in note for note in items.notes)
    rc, out, _ = run([str(a), str(b), "--metric", "acc"], capsys)
    assert rc == 0 and f"3 of the {reported} documents" in out
    full = next((DATA / "lm_eval" / "model_a").glob("samples_addition_mc_*.jsonl"))
    assert read_items(full, choice=Choice(metric="acc")).notes == []  # the whole file: nothing to flag
