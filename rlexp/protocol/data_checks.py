"""The preflight's data family: the datasets' stated sizes against their files, the training pool
disjoint from every eval set by content hash, and the prompt suffix the same on both sides.
"""

from __future__ import annotations

from pathlib import Path

from rlexp.errors import InputError
from rlexp.evaluation.arithmetic_task import problem_hash
from rlexp.experiment.files import iter_jsonl
from rlexp.protocol.verdict import ERROR, WARNING, Verdict, check
from rlexp.spec import EVAL_ROLES, Attempt


def problem_hashes(path: Path) -> set[str]:
    """Content hashes of a dataset, recomputed: sha256(prompt.strip()) of each line. A stated
    ``problem_hash`` must equal it: a problem listed under a false hash would slip past the
    leakage check (the trainer and G0 hash the prompt itself)."""
    hashes: set[str] = set()
    for number, record in iter_jsonl(path):
        value = record.get("problem_hash")
        prompt = record.get("prompt")
        if value is not None and not isinstance(value, str):
            raise InputError(path, f"line {number}: problem_hash", f"must be a string, got {value!r}")
        if not isinstance(prompt, str):
            if value is None:
                raise InputError(path, f"line {number}", "record has neither problem_hash nor a prompt string")
        else:
            computed = problem_hash(prompt)
            if value is not None and value != computed:
                raise InputError(path, f"line {number}: problem_hash",
                                 f"is not sha256(prompt.strip()) = {computed[:12]}...")
            value = computed
        hashes.add(value)
    return hashes


def check_datasets(att: Attempt) -> list[Verdict]:
    out: list[Verdict] = []
    for ref in att.datasets.values():
        if ref.exists and ref.stated_size is not None and ref.stated_size != ref.size:
            out.append(check(
                "data.size", WARNING,
                f"datasets.{ref.role}: {ref.path.name if ref.path else ''} has {ref.size:,} records, spec says "
                f"{ref.stated_size:,} (the file wins)",
                "docs/plan.md#datasets-provenance-and-leakage",
            ))  # fmt: skip
    pool = att.datasets.get("pool")
    eval_sets = [att.datasets[r] for r in EVAL_ROLES if r in att.datasets]
    if pool is None or not eval_sets:
        return out
    unchecked = [r.role for r in eval_sets if not r.exists]
    if not pool.exists:
        unchecked = [r.role for r in eval_sets]
    if unchecked:
        why = "pool file missing" if not pool.exists else "files missing"
        out.append(check(
            "data.overlap_unchecked", WARNING,
            f"pool/eval overlap not checked for {', '.join(unchecked)} ({why}); check before launch",
            "docs/plan.md#datasets-provenance-and-leakage",
        ))  # fmt: skip
    if not pool.exists or pool.path is None:
        return out
    pool_hashes = problem_hashes(pool.path)
    for ref in eval_sets:
        if not ref.exists or ref.path is None:
            continue
        hashes = problem_hashes(ref.path)
        shared = pool_hashes & hashes
        if shared:
            out.append(check(
                "data.overlap", ERROR,
                f"{len(shared):,} of {len(hashes):,} {ref.role} problems are in the training pool "
                f"({pool.path.name}) by content hash",
                "docs/plan.md#datasets-provenance-and-leakage",
            ))  # fmt: skip
    return out


def check_suffix(att: Attempt) -> list[Verdict]:
    pool = att.datasets.get("pool")
    if pool is None:
        return []
    differing = []
    if att.eval.prompt_suffix != pool.prompt_suffix:
        differing.append(f"eval.prompt_suffix {att.eval.prompt_suffix!r}")
    for role in EVAL_ROLES:
        ref = att.datasets.get(role)
        if ref is not None and ref.prompt_suffix != pool.prompt_suffix:
            differing.append(f"{role} {ref.prompt_suffix!r}")
    if not differing:
        return []
    return [check(
        "suffix.mismatch", ERROR,
        f"training pool prompt suffix {pool.prompt_suffix!r} differs from " + ", ".join(differing)
        + ": baseline and trained model would be scored on different prompts",
        "docs/plan.md#prompt-suffix-parity",
    )]  # fmt: skip
