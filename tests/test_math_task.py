"""The real math task: GSM-Symbolic problems from reasoning-gym's generators, CHAMP as the sanity set.

References are the packages' own: reasoning-gym's list of usable templates and each generator's own
chain of thought (its ``#### N`` line) for the gold answer; CHAMP's file through its own loader for
which answers are one formula; math-verify grading the generators' human-style chains of thought.
"""

from __future__ import annotations

import json
import re
from random import Random

import pytest

from rlexp.evaluation.math_task import MathTaskSizes

SIZES = MathTaskSizes(pool=40, ood_monitor=10, ood_primary=30, id=10, sanity=8)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from rlexp.experiment.datasets import build_math_datasets

    out = tmp_path_factory.mktemp("math") / "data"
    return out, build_math_datasets(out, seed=3, sizes=SIZES)


def test_sets_have_their_sizes_and_are_disjoint_by_hash(built):
    from rlexp.experiment.datasets import check_dataset_files, read_dataset

    _, files = built
    assert {role: f.size for role, f in files.items()} == {"pool": 40, "ood_monitor": 10, "ood_primary": 30,
                                                           "id": 10, "sanity": 8}
    records = check_dataset_files({role: f.path for role, f in files.items()})  # raises on leakage
    hashes = [r["problem_hash"] for rows in records.values() for r in rows]
    assert len(hashes) == len(set(hashes)) == 98
    prompts = [r["prompt"] for rows in records.values() for r in rows]
    assert len(set(prompts)) == 98
    assert all(len(read_dataset(f.path)) == f.size for f in files.values())


def test_primary_set_is_drawn_from_held_out_templates_only(built):
    from reasoning_gym.arithmetic.gsm_symbolic.gsm_symbolic import tasks_ok

    from rlexp.experiment.datasets import read_dataset

    out, files = built
    manifest = json.loads((out / "datasets.json").read_text())
    held, kept = set(manifest["split"]["templates_held_out"]), set(manifest["split"]["templates_in_distribution"])
    assert held | kept == set(tasks_ok) and not held & kept and len(held) == SIZES.held_out
    template = {role: {int(r["bucket"].removeprefix("gsm")) for r in read_dataset(f.path)}
                for role, f in files.items() if role != "sanity"}
    assert template["ood_primary"] <= held and len(template["ood_primary"]) == min(30, len(held))
    for role in ("pool", "ood_monitor", "id"):
        assert template[role] <= kept, role
    assert manifest["task"]["versions"]["reasoning-gym"] == "0.1.25"


def test_gold_is_the_generators_own_final_line(built):
    """Every primary problem's answer is the ``#### N`` that ends the chain of thought the same
    generator writes for the same draw (problem k: held-out template k mod 21, its own seed)."""
    from reasoning_gym.arithmetic.gsm_symbolic import generators_00_49, generators_50_99

    from rlexp.experiment.datasets import read_dataset

    out, files = built
    held = json.loads((out / "datasets.json").read_text())["split"]["templates_held_out"]
    answers = {r["prompt"]: r["answer"] for r in read_dataset(files["ood_primary"].path)}
    for k in range(SIZES.ood_primary):
        template = held[k % len(held)]
        module = generators_00_49 if template < 50 else generators_50_99
        example = getattr(module, f"generate_{template}")(Random(f"3:ood_primary:{k}:0"), 1.0)
        final = re.search(r"####\s*(\S+)\s*$", example["metadata"]["answer_cot"]).group(1)
        # the chain writes 168.0 where the answer field says 168: equal as numbers
        assert float(answers.pop(example["question"].strip())) == float(final.replace(",", "")), (k, template)
    assert not answers


def test_same_seed_same_bytes_other_seed_other_problems(built, tmp_path):
    from rlexp.experiment.datasets import build_math_datasets

    _, files = built
    again = build_math_datasets(tmp_path / "again", seed=3, sizes=SIZES)
    assert {r: f.sha256 for r, f in again.items()} == {r: f.sha256 for r, f in files.items()}
    other = build_math_datasets(tmp_path / "other", seed=4, sizes=SIZES)
    assert other["ood_primary"].sha256 != files["ood_primary"].sha256


def test_eval_sets_do_not_depend_on_the_pool_size(built, tmp_path):
    import dataclasses

    from rlexp.experiment.datasets import build_math_datasets

    _, files = built
    bigger = build_math_datasets(tmp_path / "bigger", seed=3, sizes=dataclasses.replace(SIZES, pool=60))
    for role in ("ood_primary", "ood_monitor", "id", "sanity"):
        assert bigger[role].sha256 == files[role].sha256, role


def test_champ_sanity_keeps_one_formula_answers_only():
    """CHAMP's own file: a prose answer is out, a formula in; the sanity set is CHAMP problems."""
    from rlexp.evaluation.math_task import champ_eligible
    from rlexp.experiment.datasets import _math_verify_parses, champ_rows

    rows = champ_rows()
    assert len(rows) == 270
    by_id = {r[0]: r for r in rows}
    assert by_id["P_Combinatorics_2"][3] == "C(10, 5), or equivalently 252"
    eligible = {p.answer for p in champ_eligible([by_id["P_Combinatorics_2"], by_id["P_Combinatorics_6"],
                                                  by_id["P_Combinatorics_1"]], _math_verify_parses)}
    assert eligible == {"2^(n-1)", "239"}
    assert all(p.bucket.startswith("champ:") for p in champ_eligible(rows, _math_verify_parses))


def test_sanity_rows_are_champ_problems(built):
    from rlexp.experiment.datasets import champ_rows, read_dataset

    _, files = built
    texts = {r[2].strip(): r[3].strip() for r in champ_rows()}
    for row in read_dataset(files["sanity"].path):
        assert texts[row["prompt"]] == row["answer"]


def test_math_verify_grades_the_generators_chains_of_thought():
    """The GSM8K-style chains of thought the generators write, their ``#### N`` line turned into a
    final statement, are graded correct by math-verify and by the exact extractor; a chain whose
    stated answer is off by one is graded wrong by both."""
    from rlexp.evaluation.answers import grade_output
    from rlexp.evaluation.math_task import gsm_generators

    generators = gsm_generators()
    for template in list(generators)[:40]:
        example = generators[template](Random(template), 1.0)
        cot = example["metadata"]["answer_cot"]
        gold = example["answer"]
        stated = re.sub(r"####\s*(\S+)\s*$", lambda m: f"The answer is {m.group(1)}.", cot)
        assert grade_output(stated, gold, "math_verify")[2], (template, stated[-80:], gold)
        assert grade_output(stated, gold, "exact")[2], (template, stated[-80:], gold)
        if re.fullmatch(r"-?\d+", gold):
            wrong = re.sub(r"####\s*(\S+)\s*$", f"The answer is {int(gold) + 1}.", cot)
            assert not grade_output(wrong, gold, "math_verify")[2] and not grade_output(wrong, gold, "exact")[2]
