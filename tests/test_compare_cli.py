"""`rlexp compare`: the canonical paired report, its JSON contract, and one-line errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats as sps

from rlexp.cli import main


def write(path: Path, ys: list, prefix: str = "h", extra: str = "") -> Path:
    path.write_text("".join(json.dumps({"problem_hash": f"{prefix}{i}", "correct": y}) + "\n"
                            for i, y in enumerate(ys)) + extra)
    return path


def seed_pair(tmp_path: Path) -> tuple[Path, Path]:
    # Baseline-S0 738/1000 vs Baseline-SOTA 734/1000 of the example attempts: b=61, c=57
    base = [1] * 677 + [1] * 61 + [0] * 57 + [0] * 205
    new = [1] * 677 + [0] * 61 + [1] * 57 + [0] * 205
    return write(tmp_path / "s0.jsonl", base), write(tmp_path / "sota.jsonl", new)


def test_json_contract_and_seed_values(tmp_path, capsys):
    base, new = seed_pair(tmp_path)
    assert main(["compare", str(base), str(new), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("n", "acc_base", "acc_new", "delta_pp", "b", "c", "mcnemar_p", "ci_pp"):
        assert key in out
    assert (out["n"], out["b"], out["c"]) == (1000, 61, 57)
    assert out["acc_base"] == pytest.approx(0.738) and out["acc_new"] == pytest.approx(0.734)
    assert out["delta_pp"] == pytest.approx(-0.4)
    assert out["mcnemar_p"] == pytest.approx(sps.binomtest(61, 118, 0.5).pvalue)
    lo, hi = out["ci_pp"]
    assert lo == pytest.approx(-2.5, abs=0.15) and hi == pytest.approx(1.7, abs=0.15)
    assert out["dropped_base_only"] == out["dropped_new_only"] == 0


def test_seed_option_changes_only_the_bootstrap(tmp_path, capsys):
    base, new = seed_pair(tmp_path)
    runs = []
    for seed in ("1", "1", "2"):
        assert main(["compare", str(base), str(new), "--json", "--seed", seed, "--resamples", "2000"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0] == runs[1]
    assert runs[0]["mcnemar_p"] == runs[2]["mcnemar_p"] and runs[0]["seed"] != runs[2]["seed"]


def test_human_table(tmp_path, capsys):
    base, new = seed_pair(tmp_path)
    assert main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "0.7826" in out and "-0.40 pp" in out


def test_intersect_reports_dropped_and_writes_paired_records(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", [1, 0, 1, 1])
    new = write(tmp_path / "n.jsonl", [1, 1, 0], extra=json.dumps({"problem_hash": "zz", "correct": 1}) + "\n")
    out_path = tmp_path / "out" / "paired.jsonl"
    assert main(["compare", str(base), str(new), "--json"]) == 2
    assert "--intersect" in capsys.readouterr().err
    assert main(["compare", str(base), str(new), "--json", "--intersect", "--paired-out", str(out_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 3 and out["dropped_base_only"] == 1 and out["dropped_new_only"] == 1
    assert (out["b"], out["c"]) == (1, 1)
    lines = [json.loads(x) for x in out_path.read_text().splitlines()]
    assert [x["problem_hash"] for x in lines] == ["h0", "h1", "h2"]
    assert lines[1] == {"problem_hash": "h1", "y_baseline": 0, "y_new": 1, "output_baseline": None,
                        "output_new": None}


@pytest.mark.parametrize(("new_text", "needle"), [
    ("", "empty"),
    ('{"problem_hash": "h0", "correct": 1}\n{"problem_hash": "h0", "correct": 0}\n', "duplicate"),
    ('{"problem_hash": "h0", "correct": "yes"}\n', "correct"),
    ('{"problem_hash": "h0", "correct": 1}\n{"problem_hash": "h1", "cor', "truncated"),
    ('{"problem_hash": "h0", "correct": 1}\nnot json\n', "malformed"),
    ('{"problem_hash": "h0", "correct": 0.5}\n', "correct"),
])
def test_bad_inputs_exit_2_one_line_nothing_written(tmp_path, capsys, new_text, needle):
    base = write(tmp_path / "b.jsonl", [1, 0])
    new = tmp_path / "n.jsonl"
    new.write_text(new_text)
    out_path = tmp_path / "paired.jsonl"
    assert main(["compare", str(base), str(new), "--paired-out", str(out_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("rlexp: ") and needle in captured.err
    assert str(new) in captured.err
    assert not out_path.exists()


def test_missing_file_and_bad_method(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", [1, 0])
    assert main(["compare", str(base), str(tmp_path / "nope.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["compare", str(base), str(base), "--method", "studentized"]) == 2
    assert "--method" in capsys.readouterr().err


def test_bca_option(tmp_path, capsys):
    base, new = seed_pair(tmp_path)
    assert main(["compare", str(base), str(new), "--json", "--method", "bca"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ci_method"] == "bca" and out["ci_pp"][0] < out["delta_pp"] < out["ci_pp"][1]


def test_basic_option_is_the_reverse_percentile_interval(tmp_path, capsys):
    base, new = seed_pair(tmp_path)
    runs = {}
    for method in ("percentile", "basic"):
        assert main(["compare", str(base), str(new), "--json", "--method", method, "--seed", "4"]) == 0
        runs[method] = json.loads(capsys.readouterr().out)
    pct, basic, delta = runs["percentile"]["ci_pp"], runs["basic"]["ci_pp"], runs["basic"]["delta_pp"]
    assert runs["basic"]["ci_method"] == "basic"
    # same seed, same resamples: (2 delta - q_high, 2 delta - q_low)
    assert basic == pytest.approx([2 * delta - pct[1], 2 * delta - pct[0]], abs=1e-9)


def test_bca_with_few_discordant_pairs_warns(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", [1] * 40 + [1] * 3 + [0] * 7 + [0] * 50)
    new = write(tmp_path / "n.jsonl", [1] * 40 + [0] * 3 + [1] * 7 + [0] * 50)
    assert main(["compare", str(base), str(new), "--json", "--method", "bca"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["b"], out["c"]) == (3, 7) and "only 10 discordant pairs" in out["warnings"][0]
    assert main(["compare", str(base), str(new), "--json"]) == 0
    assert "warnings" not in json.loads(capsys.readouterr().out)
    assert main(["compare", str(base), str(new), "--method", "bca"]) == 0
    assert "warning: BCa interval with only 10 discordant pairs" in capsys.readouterr().out


def test_gate_pass_power_beside_the_test_power(tmp_path, capsys):
    base, new = seed_pair(tmp_path)  # N=1000, b+c = 118
    assert main(["compare", str(base), str(new), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the test's power at +3pp is ~78%, the chance that a true +3pp passes Gate-1b only ~52%
    assert out["power_at_3pp"] == pytest.approx(0.78, abs=0.02)
    assert out["gate_1b_pass_power_at_3pp"] == pytest.approx(0.52, abs=0.015)
    assert out["gate_1b_effect_80_pp"] == pytest.approx(3.87, abs=0.03)
    # the best of K=3 checkpoints (what a decision on K gets) passes about 70-82% of the time by correlation
    best = out["gate_1b_best_of_k_at_3pp"]
    assert best["k"] == 3 and best["correlations"] == [0.3, 0.6, 0.9]
    assert 0.67 < best["rates"][2] < best["rates"][1] < best["rates"][0] < 0.85
    assert main(["compare", str(base), str(new)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "one checkpoint" in text and "best of 3" in text and "(exact McNemar" in text


@pytest.mark.parametrize("how", ["same", "dotted", "symlink", "hardlink", "new-file"])
def test_paired_out_onto_an_input_is_refused_and_the_input_kept(tmp_path, capsys, how):
    base = write(tmp_path / "b.jsonl", [1, 0, 1, 1])
    new = write(tmp_path / "n.jsonl", [1, 1, 0, 1])
    target = new if how != "new-file" else base
    out = {"same": target, "dotted": tmp_path / "sub" / ".." / target.name,
           "symlink": tmp_path / "link.jsonl", "hardlink": tmp_path / "hard.jsonl",
           "new-file": tmp_path / "b.jsonl"}[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        out.symlink_to(target)
    if how == "hardlink":
        out.hardlink_to(target)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main(["compare", str(base), str(new), "--paired-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--paired-out" in err and "input file" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "sub"])  # no temp file left


@pytest.mark.parametrize("kind", ["fifo", "device", "link-to-device"])
def test_paired_out_onto_a_special_file_is_refused_and_the_node_kept(tmp_path, capsys, kind):
    """An atomic write renames over its target: onto /dev/null or /dev/zero, run as root, it would
    replace the system's device node with a file (the fuzzer found it)."""
    import os
    import stat

    base = write(tmp_path / "b.jsonl", [1, 0, 1, 1])
    new = write(tmp_path / "n.jsonl", [1, 1, 0, 1])
    node = tmp_path / "node"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        try:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # a private /dev/zero
        except PermissionError:
            pytest.skip("mknod needs root")
    out = node
    if kind == "link-to-device":
        out = tmp_path / "link"
        out.symlink_to(node)
    assert main(["compare", str(base), str(new), "--paired-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--paired-out" in err and ("FIFO" in err or "character device" in err), err
    mode = os.lstat(node).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["b.jsonl", "n.jsonl", "node"]
                                                                + (["link"] if kind == "link-to-device" else []))
