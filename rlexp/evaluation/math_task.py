"""The real math task: grade-school word problems from GSM-Symbolic templates, CHAMP as the sanity set.

reasoning-gym ships GSM-Symbolic's templates as generators (``arithmetic/gsm_symbolic``): each is one
GSM8K test problem rebuilt with its names and numbers drawn from a ``random.Random``, and returns a
fresh question, its numeric answer and a GSM8K-style chain of thought. reasoning-gym marks 85 of the
100 usable (``tasks_ok``); only those are drawn.

The split is by **template**, so the primary set measures transfer to problems whose structure the
training never saw: a seeded shuffle of the usable templates holds ``held_out`` of them out for the
primary set (``ood_primary``); the training pool, the in-run monitor and the ID set are drawn from
the others. Every problem of every set is drawn with its own seed (``random.Random`` of a string
naming the seed, the set and the index: stable across Python runs and hash seeds), and a problem
whose text is already in an earlier set is skipped, so the sets are disjoint by content hash, as
every rlexp dataset is (``rlexp.evaluation.arithmetic_task.check_disjoint``).

The sanity set is CHAMP (competition problems, many with symbolic answers such as ``2^(n-1)``):
hard for any small model, reported and never decided on (sop/README.md), graded by math-verify.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlexp.evaluation.arithmetic_task import Problem, problem_hash

GSM_ROLES_IN_DISTRIBUTION = ("pool", "ood_monitor", "id")  # drawn from the templates not held out
# the order the sets are drawn in: evaluation sets first, so they do not depend on the pool's size
GSM_DRAW_ORDER = ("ood_primary", "ood_monitor", "id", "pool")
# the instruction the demo puts after every problem (the spec's prompt_suffix): the format both the
# extractor's boxed tier and math-verify read, and a request for brevity. Measured on SmolLM2 with a
# 128-token budget (20 primary problems, greedy): "Please reason step by step, and put your final
# answer within \boxed{}." finished 1 chain in 40; this suffix finishes 14 in 20.
MATH_PROMPT_SUFFIX = "\nAnswer in at most three short sentences, and put your final answer within \\boxed{}."

Generator = Callable[[random.Random, float], dict[str, Any]]


def gsm_generators() -> dict[int, Generator]:
    """reasoning-gym's usable GSM-Symbolic generators, by template number (its ``tasks_ok``)."""
    from reasoning_gym.arithmetic.gsm_symbolic import generators_00_49, generators_50_99
    from reasoning_gym.arithmetic.gsm_symbolic.gsm_symbolic import tasks_ok

    found: dict[int, Generator] = {}
    for module in (generators_00_49, generators_50_99):
        for name in dir(module):
            if name.startswith("generate_"):
                found[int(name.removeprefix("generate_"))] = getattr(module, name)
    return {n: found[n] for n in sorted(tasks_ok)}


def split_templates(templates: Iterable[int], held_out: int, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(in_distribution, held_out)`` template numbers: a seeded shuffle, the first ``held_out`` out."""
    ordered = sorted(templates)
    if not 0 < held_out < len(ordered):
        raise ValueError(f"held_out must be between 1 and {len(ordered) - 1}, got {held_out}")
    shuffled = list(ordered)
    random.Random(f"gsm-symbolic-split:{seed}").shuffle(shuffled)
    return tuple(sorted(shuffled[held_out:])), tuple(sorted(shuffled[:held_out]))


def gsm_problem(generators: dict[int, Generator], template: int, rng: random.Random) -> Problem:
    """One problem of ``template``; the bucket names the template (``gsm17``)."""
    example = generators[template](rng, 1.0)
    question = str(example["question"]).strip()
    return Problem(prompt=question, answer=str(example["answer"]).strip(), bucket=f"gsm{template:02d}")


def draw_gsm(generators: dict[int, Generator], templates: Sequence[int], size: int, *, seed: int, role: str,
             taken: set[str]) -> list[Problem]:
    """``size`` problems of ``templates``, none whose hash is in ``taken`` (which grows by them).

    Problem ``k`` takes template ``templates[k % len]`` (every template in equal share, in order) and
    ``random.Random(f"{seed}:{role}:{k}:{attempt}")``: a repeat of an earlier problem's text is drawn
    again with the next ``attempt``; a template that yields only repeats is an error, not a loop."""
    out: list[Problem] = []
    for k in range(size):
        template = templates[k % len(templates)]
        for attempt in range(100):
            problem = gsm_problem(generators, template, random.Random(f"{seed}:{role}:{k}:{attempt}"))
            if problem.problem_hash not in taken:
                break
        else:
            raise ValueError(f"template {template} gave 100 repeats in a row for {role} problem {k}")
        taken.add(problem.problem_hash)
        out.append(problem)
    return out


@dataclass(frozen=True)
class MathTaskSizes:
    pool: int
    ood_monitor: int
    ood_primary: int
    id: int
    sanity: int
    held_out: int = 21  # of the 85 usable templates, a quarter for the primary set


def draw_math_sets(sizes: MathTaskSizes, *, seed: int, champ: Sequence[Problem],
                   generators: dict[int, Generator] | None = None) -> tuple[dict[str, list[Problem]], dict[str, Any]]:
    """The five sets (role -> problems) and their settings (templates of each side). ``champ``: the
    CHAMP problems eligible for the sanity set (:func:`champ_eligible`), sampled with ``seed``."""
    generators = generators if generators is not None else gsm_generators()
    in_dist, held = split_templates(generators, sizes.held_out, seed)
    taken: set[str] = set()
    sets: dict[str, list[Problem]] = {}
    for role in GSM_DRAW_ORDER:
        templates = held if role == "ood_primary" else in_dist
        sets[role] = draw_gsm(generators, templates, getattr(sizes, role), seed=seed, role=role, taken=taken)
    eligible = sorted((p for p in champ if p.problem_hash not in taken), key=lambda p: p.problem_hash)
    if sizes.sanity > len(eligible):
        raise ValueError(f"sanity size {sizes.sanity} is more than the {len(eligible)} eligible CHAMP problems")
    sets["sanity"] = random.Random(f"champ:{seed}").sample(eligible, sizes.sanity)
    settings = {"templates_in_distribution": list(in_dist), "templates_held_out": list(held)}
    return sets, settings


# a CHAMP answer that is one formula: digits, variables, operators, brackets and a few function names
FORMULA = re.compile(r"[0-9A-Za-z_+\-*/^().!=<> ]+")
FORMULA_WORDS = frozenset({"floor", "ceil", "sqrt", "log", "ln", "pi"})


def champ_eligible(rows: Iterable[tuple[str, str, str, str]],
                   parses: Callable[[str], bool]) -> list[Problem]:
    """CHAMP problems ``(identifier, category, text, answer)`` as :class:`Problem`, keeping those whose
    reference answer is one formula (:data:`FORMULA`, no words but :data:`FORMULA_WORDS`) that
    math-verify reads (``parses``): answers written as prose (``C(10, 5), or equivalently 252``,
    ``3 is the only possible value``) could never be graded. The bucket is the category."""
    out = []
    for _identifier, category, text, answer in rows:  # rows are keyed by problem_hash, as every set
        answer = answer.strip()
        words = set(re.findall(r"[A-Za-z]{2,}", answer))
        if not text.strip() or not answer or not FORMULA.fullmatch(answer) or words - FORMULA_WORDS \
                or not parses(answer):
            continue
        out.append(Problem(prompt=text.strip(), answer=answer, bucket=f"champ:{category}"))
    return out


def hashes_of(sets: dict[str, Sequence[Problem]]) -> dict[str, list[str]]:
    return {role: [problem_hash(p.prompt) for p in problems] for role, problems in sets.items()}
