"""The demo's verifiable task: two-operand integer arithmetic with exact answers.

The universe is every ``a + b`` and every ``a - b`` with ``a >= b`` over operands ``0..max_operand``
(15,050 problems for 0–99). The model answers ``\\boxed{N}``; the reward is exact match.

Two distributions over that universe:

- **in-distribution (ID)** — uniform over all problems. The training pool and the ID set come
  from it (and the base model's supervision, :func:`rlexp.models.tiny.sft_tiny_model`).
- **out-of-distribution (OOD)** — only problems that need a *carry* (addition whose units digits
  sum to 10 or more) or a *borrow* (subtraction whose units digit of ``a`` is smaller than that
  of ``b``). A shift of the mix, within the trained operand range: we measured that
  longer operands are unreachable for a tiny model (~4%), so such a set would only ever show
  "no effect". The carry/borrow mix is harder (lower base accuracy) yet learnable.

The five sets of an experiment (the dataset roles of docs/plan.md) are drawn without replacement and are
disjoint by ``problem_hash`` — checked, never assumed: sanity (~18), primary OOD (1,000) and
in-run OOD monitor (~200) from the OOD distribution; the ID set (200) and the training pool from
the ID distribution minus everything already taken. Each draw is a seeded reservoir sample
(Algorithm R) sorted by SHA-256, so a file's order does not depend on the draw order.

Pure module: standard library only. Dataset files are read and written by
:mod:`rlexp.experiment.datasets`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rlexp.errors import InputError
from rlexp.numbers import sha256_text

T = TypeVar("T")

ROLES: tuple[str, ...] = ("pool", "ood_monitor", "ood_primary", "id", "sanity")
BUCKETS: tuple[str, ...] = ("add", "add_carry", "sub", "sub_borrow")


@dataclass(frozen=True)
class Problem:
    """One problem. ``problem_hash`` is ``sha256(prompt.strip())`` (docs/ARCHITECTURE.md)."""

    prompt: str
    answer: str
    bucket: str

    @property
    def problem_hash(self) -> str:
        return problem_hash(self.prompt)

    def target_text(self) -> str:
        """The answer as the model is taught to write it."""
        return f"\\boxed{{{self.answer}}}"

    def to_record(self) -> dict[str, Any]:
        return {
            "problem_hash": self.problem_hash,
            "prompt": self.prompt,
            "answer": self.answer,
            "bucket": self.bucket,
        }


def problem_hash(prompt: str) -> str:
    return sha256_text(prompt.strip())


@dataclass(frozen=True)
class ArithmeticTask:
    """The problem universe and its two distributions."""

    max_operand: int = 99
    prompt_suffix: str = ""  # appended to the prompt when rendered; datasets store the bare prompt

    def settings(self) -> dict[str, Any]:
        return {"name": "arithmetic", "max_operand": self.max_operand, "prompt_suffix": self.prompt_suffix}

    def problems(self) -> Iterator[Problem]:
        """Every problem of the universe, in a fixed order."""
        n = self.max_operand
        for a in range(n + 1):
            for b in range(n + 1):
                carry = (a % 10) + (b % 10) >= 10
                yield Problem(f"What is {a} + {b}?", str(a + b), "add_carry" if carry else "add")
        for a in range(n + 1):
            for b in range(a + 1):
                borrow = (a % 10) < (b % 10)
                yield Problem(f"What is {a} - {b}?", str(a - b), "sub_borrow" if borrow else "sub")

    @staticmethod
    def is_ood(problem: Problem) -> bool:
        return problem.bucket in ("add_carry", "sub_borrow")

    def ood_problems(self) -> list[Problem]:
        return [p for p in self.problems() if self.is_ood(p)]

    def id_problems(self) -> list[Problem]:
        return list(self.problems())

    def sft_problems(self) -> list[Problem]:
        """What the base model is supervised on: the ID distribution (callers exclude eval sets)."""
        return self.id_problems()


# --------------------------------------------------------------------------- sampling


def reservoir_sample(items: Iterable[T], k: int, seed: int | str) -> list[T]:
    """Algorithm R: a uniform sample of ``k`` items from a stream, reproducible from ``seed``.

    Returns fewer than ``k`` only when the stream is shorter. Order is the reservoir's; callers
    sort (by SHA-256) before writing.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    rng = random.Random(seed)
    reservoir: list[T] = []
    for i, item in enumerate(items):
        if i < k:
            reservoir.append(item)
        else:
            j = rng.randrange(i + 1)  # item i replaces a kept one with probability k / (i + 1)
            if j < k:
                reservoir[j] = item
    return reservoir


def sorted_by_hash(problems: Iterable[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: p.problem_hash)

def check_disjoint(sets: dict[str, Iterable[str]], files: dict[str, Path] | None = None) -> None:
    """Raise :class:`InputError` if any problem hash appears in two sets (leakage)."""
    owner: dict[str, str] = {}
    for role, hashes in sets.items():
        for h in hashes:
            if h in owner and owner[h] != role:
                where = (files or {}).get(role)
                raise InputError(
                    where, "problem_hash", f"{h[:12]}… is in both '{owner[h]}' and '{role}' (leakage)"
                )
            owner[h] = role

def dataset_filename(role: str, size: int) -> str:
    return f"{role}_{size}.jsonl"

def draw_sets(
    task: ArithmeticTask,
    *,
    seed: int,
    pool_size: int,
    monitor_size: int = 200,
    primary_size: int = 1000,
    id_size: int = 200,
    sanity_size: int = 18,
) -> dict[str, list[Problem]]:
    """The five disjoint sets as problems (see the module docstring for the order of draws)."""
    wanted = {"sanity": sanity_size, "ood_primary": primary_size, "ood_monitor": monitor_size}
    taken: set[str] = set()
    sets: dict[str, list[Problem]] = {}
    ood = task.ood_problems()
    for role, size in wanted.items():
        sets[role] = reservoir_sample((p for p in ood if p.problem_hash not in taken), size, f"{seed}:{role}")
        taken.update(p.problem_hash for p in sets[role])
    universe = task.id_problems()
    for role, size in (("id", id_size), ("pool", pool_size)):
        sets[role] = reservoir_sample(
            (p for p in universe if p.problem_hash not in taken), size, f"{seed}:{role}"
        )
        taken.update(p.problem_hash for p in sets[role])
    for role, size in {**wanted, "id": id_size, "pool": pool_size}.items():
        if len(sets[role]) < size:
            raise InputError(
                None, role, f"asked for {size} problems, the task has only {len(sets[role])} left"
            )
    check_disjoint({role: (p.problem_hash for p in probs) for role, probs in sets.items()})
    return {role: sets[role] for role in ROLES}


def cluster_labels(path: str | Path, column: str, *, declared_in: str | None = None) -> dict[str, str | int]:
    """Each row's cluster, by problem hash: the ``column`` value of every row of the dataset at
    ``path`` (a string or an integer; the hash is the row's ``problem_hash``, else
    ``sha256(prompt.strip())``, as the eval records key them). A row without the column or with
    another type is an :class:`InputError` naming the file, the line and the column (and where the
    column was declared)."""
    from rlexp.experiment.files import iter_jsonl

    path = Path(path)
    where = f" ({declared_in})" if declared_in else ""
    out: dict[str, str | int] = {}
    for number, record in iter_jsonl(path):
        value = record.get(column)
        if column not in record:
            raise InputError(path, f"line {number}: {column}", f"missing: the cluster column{where} must be in "
                                                               "every row")
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InputError(path, f"line {number}: {column}", f"a cluster{where} is a string or an integer, got "
                                                               f"{type(value).__name__ if value is not None else 'null'}")
        key = record.get("problem_hash")
        if not isinstance(key, str):
            prompt = record.get("prompt")
            if not isinstance(prompt, str):
                raise InputError(path, f"line {number}: prompt", "missing: a row's cluster is matched to its "
                                                                 "records by its problem_hash or prompt")
            key = problem_hash(prompt)
        out[key] = value
    if not out:
        raise InputError(path, None, f"no rows: the cluster column{where} has nothing to cluster")
    return out
