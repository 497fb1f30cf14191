"""The demo task: exact answers, the OOD shift, disjoint sets, reservoir sampling, file hashes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from rlexp.errors import InputError
from rlexp.evaluation.arithmetic_task import ROLES, ArithmeticTask, Problem, check_disjoint, reservoir_sample
from rlexp.experiment.datasets import build_task_datasets, check_dataset_files, read_dataset


def test_every_answer_is_the_arithmetic_result():
    # The answer is recomputed here from the prompt text with Python's own parser, not the task code.
    problems = list(ArithmeticTask(max_operand=30).problems())
    assert len(problems) == 31 * 31 + 31 * 32 // 2  # all a+b, and a-b with a >= b
    for p in problems:
        expression = p.prompt.removeprefix("What is ").removesuffix("?")
        a, op, b = expression.split()
        assert p.answer == str(int(a) + int(b) if op == "+" else int(a) - int(b))
        assert int(p.answer) >= 0
        assert p.target_text() == "\\boxed{" + p.answer + "}"


def test_ood_buckets_are_carry_and_borrow_problems():
    task = ArithmeticTask()
    assert ArithmeticTask.is_ood(Problem("What is 17 + 25?", "42", "add_carry"))
    by_prompt = {p.prompt: p for p in task.problems()}
    assert by_prompt["What is 17 + 25?"].bucket == "add_carry"  # 7 + 5 >= 10
    assert by_prompt["What is 12 + 25?"].bucket == "add"
    assert by_prompt["What is 52 - 17?"].bucket == "sub_borrow"  # 2 < 7
    assert by_prompt["What is 57 - 12?"].bucket == "sub"
    ood = task.ood_problems()
    # 4500 of 10,000 additions carry in the units digit; borrows: sum over a of #{b <= a: b%10 > a%10}
    borrows = sum(1 for a in range(100) for b in range(a + 1) if b % 10 > a % 10)
    assert len(ood) == 4500 + borrows


def test_problem_hash_is_sha256_of_stripped_prompt():
    p = Problem("What is 1 + 2?", "3", "add")
    assert p.problem_hash == hashlib.sha256(b"What is 1 + 2?").hexdigest()
    assert Problem("  What is 1 + 2? \n", "3", "add").problem_hash == p.problem_hash


def test_reservoir_sample_is_uniform_and_seeded():
    items = list(range(50))
    assert reservoir_sample(items, 10, 7) == reservoir_sample(iter(items), 10, 7)  # streams work
    assert reservoir_sample(items, 10, 7) != reservoir_sample(items, 10, 8)
    assert sorted(reservoir_sample(items, 100, 1)) == items  # shorter stream: everything
    assert reservoir_sample(items, 0, 1) == []
    # Uniformity: each item's inclusion frequency ≈ k/n = 0.2 over many seeds (binomial 3-sigma band).
    counts = Counter()
    trials = 2000
    for seed in range(trials):
        counts.update(reservoir_sample(items, 10, seed))
    sigma = (trials * 0.2 * 0.8) ** 0.5
    assert all(abs(counts[i] - trials * 0.2) < 4 * sigma for i in items)


def test_datasets_are_disjoint_sorted_and_hashed(tmp_path):
    files = build_task_datasets(
        tmp_path, seed=3, pool_size=500, monitor_size=50, primary_size=100, id_size=40
    )
    assert list(files) == list(ROLES)
    assert {r: f.size for r, f in files.items()} == {
        "pool": 500,
        "ood_monitor": 50,
        "ood_primary": 100,
        "id": 40,
        "sanity": 18,
    }
    hashes = {}
    for role, f in files.items():
        data = f.path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == f.sha256
        records = [json.loads(line) for line in data.decode().splitlines()]
        assert len(records) == f.size
        keys = [r["problem_hash"] for r in records]
        assert keys == sorted(keys)  # sorted by SHA-256
        for r in records:
            assert r["problem_hash"] == hashlib.sha256(r["prompt"].strip().encode()).hexdigest()
        hashes[role] = set(keys)
        if role in ("ood_monitor", "ood_primary", "sanity"):
            assert {r["bucket"] for r in records} <= {"add_carry", "sub_borrow"}
    roles = list(hashes)
    for i, a in enumerate(roles):
        for b in roles[i + 1 :]:
            assert not hashes[a] & hashes[b], (a, b)
    # The ID distribution keeps every bucket (it is the whole universe).
    assert {r["bucket"] for r in read_dataset(files["pool"].path)} == {
        "add",
        "add_carry",
        "sub",
        "sub_borrow",
    }
    manifest = json.loads((tmp_path / "datasets.json").read_text())
    assert manifest["files"]["pool"]["sha256"] == files["pool"].sha256


def test_datasets_are_reproducible_and_reused(tmp_path):
    a = build_task_datasets(tmp_path / "a", seed=5, pool_size=200, primary_size=100)
    b = build_task_datasets(tmp_path / "b", seed=5, pool_size=200, primary_size=100)
    c = build_task_datasets(tmp_path / "c", seed=6, pool_size=200, primary_size=100)
    assert [f.sha256 for f in a.values()] == [f.sha256 for f in b.values()]
    assert a["pool"].sha256 != c["pool"].sha256
    mtime = a["pool"].path.stat().st_mtime_ns
    again = build_task_datasets(tmp_path / "a", seed=5, pool_size=200, primary_size=100)
    assert again == a and a["pool"].path.stat().st_mtime_ns == mtime  # reused, not rewritten


def test_leakage_between_files_is_an_input_error(tmp_path):
    files = build_task_datasets(tmp_path, seed=1, pool_size=100, primary_size=100)
    paths = {r: f.path for r, f in files.items()}
    check_dataset_files(paths)  # clean
    leaked = read_dataset(paths["ood_primary"])[0]
    with open(paths["pool"], "a") as fh:
        fh.write(json.dumps(leaked) + "\n")
    with pytest.raises(InputError) as err:
        check_dataset_files(paths)
    assert "leakage" in str(err.value) and "pool" in str(err.value)
    with pytest.raises(InputError):
        check_disjoint({"a": ["x", "y"], "b": ["z", "x"]})


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"prompt": "What is 1 + 1?", "answer": "2", "problem_hash": "00"}', "problem_hash"),
        ('{"prompt": "What is 1 + 1?", "answer": 2}', "answer"),
        ('{"answer": "2"}', "prompt"),
        ("not json", "line 1"),
    ],
)
def test_bad_dataset_lines_are_input_errors(tmp_path, line, field):
    path = tmp_path / "d.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError) as err:
        read_dataset(path)
    assert field in str(err.value) and str(path) in str(err.value)


def test_too_large_a_request_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="pool"):
        build_task_datasets(tmp_path, seed=0, pool_size=20_000)
