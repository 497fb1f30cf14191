"""Dataset files: the JSONL an experiment's sets live in, their strict reader and writer.

One problem a line: ``{"problem_hash", "prompt", "answer", "bucket"}``, with ``problem_hash`` equal
to ``sha256(prompt.strip())`` (checked on every read). :func:`build_task_datasets` writes the demo
task's five disjoint sets and a ``datasets.json`` manifest that lets a rerun reuse them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rlexp.errors import InputError
from rlexp.evaluation.arithmetic_task import (
    ROLES,
    ArithmeticTask,
    Problem,
    check_disjoint,
    dataset_filename,
    draw_sets,
    problem_hash,
    sorted_by_hash,
)
from rlexp.experiment.files import atomic_write_json, atomic_write_text, iter_jsonl, read_json, sha256_file


class DatasetFile(NamedTuple):
    """A written dataset: ``(path, sha256, size)``."""

    path: Path
    sha256: str
    size: int


def write_dataset(path: str | Path, problems: Sequence[Problem]) -> DatasetFile:
    """Write problems as dataset JSONL (atomic, sorted by problem hash); return its SHA-256."""
    import json

    ordered = sorted_by_hash(problems)
    text = "".join(json.dumps(p.to_record(), ensure_ascii=False) + "\n" for p in ordered)
    path = atomic_write_text(path, text)
    return DatasetFile(path, sha256_file(path), len(ordered))


def read_dataset(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a dataset JSONL: each line has a string ``prompt`` and ``answer`` and a
    ``problem_hash`` equal to ``sha256(prompt.strip())``; hashes are unique within the file."""
    path = Path(path)
    records: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, record in iter_jsonl(path):
        for key in ("prompt", "answer"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise InputError(path, f"line {number}: {key}", "missing or not a non-empty string")
        expected = problem_hash(record["prompt"])
        if record.get("problem_hash") != expected:
            raise InputError(path, f"line {number}: problem_hash", "is not sha256(prompt.strip())")
        if expected in seen:
            raise InputError(path, f"line {number}: problem_hash", f"duplicate of line {seen[expected]}")
        seen[expected] = number
        records.append(record)
    return records


def check_dataset_rows(path: str | Path, *, prompt_key: str = "prompt", answer_key: str = "answer",
                       display: str | Path | None = None) -> int:
    """Every row of a dataset file a run will read, checked at ``plan`` (before ``launch`` writes or
    starts anything): an object whose ``prompt_key`` is a non-empty string and whose ``answer_key``
    is a non-empty string or a finite number, prompts unique, and a ``problem_hash``, where a row has
    one, equal to ``sha256(prompt.strip())``. Returns the row count; an :class:`InputError` names the
    file, the line and the field."""
    path = Path(path)
    seen: dict[str, int] = {}
    rows = 0
    for number, record in iter_jsonl(path):
        prompt = record.get(prompt_key)
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(path, f"line {number}: {prompt_key}", f"missing or not a non-empty string "
                                                                   f"(got {_kind(record, prompt_key)})")
        answer = record.get(answer_key)
        if not (isinstance(answer, str) and answer.strip()) and (isinstance(answer, bool)
                                                                 or not isinstance(answer, int | float)):
            raise InputError(path, f"line {number}: {answer_key}", f"missing or not a non-empty string "
                                                                   f"(got {_kind(record, answer_key)})")
        digest = problem_hash(prompt)
        if "problem_hash" in record and record["problem_hash"] != digest:
            raise InputError(path, f"line {number}: problem_hash", "is not sha256(prompt.strip())")
        if digest in seen:
            raise InputError(path, f"line {number}: {prompt_key}", f"duplicate of the prompt of line {seen[digest]}")
        seen[digest] = number
        rows += 1
    return rows


def _kind(record: dict[str, Any], key: str) -> str:
    if key not in record:
        return "missing"
    value = record[key]
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", list: "a list",
             dict: "an object", str: "an empty string"}
    return names.get(type(value), type(value).__name__)


def check_dataset_files(files: dict[str, str | Path]) -> dict[str, list[dict[str, Any]]]:
    """Read every dataset file of an experiment and check they are pairwise disjoint by hash."""
    records = {role: read_dataset(path) for role, path in files.items()}
    check_disjoint(
        {role: (r["problem_hash"] for r in recs) for role, recs in records.items()},
        {role: Path(p) for role, p in files.items()},
    )
    return records


def build_task_datasets(
    out_dir: str | Path,
    *,
    seed: int = 0,
    pool_size: int = 3200,
    monitor_size: int = 200,
    primary_size: int = 1000,
    id_size: int = 200,
    sanity_size: int = 18,
    task: ArithmeticTask | None = None,
) -> dict[str, DatasetFile]:
    """Write the five dataset files to ``out_dir`` and ``datasets.json`` (settings + SHA-256s).

    Returns role -> ``DatasetFile(path, sha256, size)``. Reuses existing files when the manifest's
    settings match and every file still has its recorded SHA-256.
    """
    task = task or ArithmeticTask()
    out = Path(out_dir)
    sizes = {
        "pool": pool_size,
        "ood_monitor": monitor_size,
        "ood_primary": primary_size,
        "id": id_size,
        "sanity": sanity_size,
    }
    settings = {"task": task.settings(), "seed": seed, "sizes": sizes}
    manifest_path = out / "datasets.json"
    if manifest_path.exists():
        cached = _cached(manifest_path, settings)
        if cached is not None:
            return cached
    sets = draw_sets(
        task,
        seed=seed,
        pool_size=pool_size,
        monitor_size=monitor_size,
        primary_size=primary_size,
        id_size=id_size,
        sanity_size=sanity_size,
    )
    written = {role: write_dataset(out / dataset_filename(role, sizes[role]), sets[role]) for role in ROLES}
    atomic_write_json(
        manifest_path,
        {
            **settings,
            "files": {
                role: {"path": f.path.name, "sha256": f.sha256, "size": f.size} for role, f in written.items()
            },
        },
    )
    return written


def _cached(manifest_path: Path, settings: dict[str, Any]) -> dict[str, DatasetFile] | None:
    manifest = read_json(manifest_path)
    if not isinstance(manifest, dict) or {k: manifest.get(k) for k in settings} != settings:
        return None
    result: dict[str, DatasetFile] = {}
    for role in ROLES:
        entry = (manifest.get("files") or {}).get(role)
        if not isinstance(entry, dict):
            return None
        path = manifest_path.parent / str(entry.get("path"))
        if not path.exists() or sha256_file(path) != entry.get("sha256"):
            return None
        result[role] = DatasetFile(path, entry["sha256"], int(entry["size"]))
    return result


def build_math_datasets(out_dir: str | Path, *, seed: int = 0, sizes: Any) -> dict[str, DatasetFile]:
    """The real math task's five files (:mod:`rlexp.evaluation.math_task`: GSM-Symbolic word problems split
    by template, CHAMP as the sanity set) and ``datasets.json``, reused as :func:`build_task_datasets`
    reuses its files. ``sizes``: a :class:`rlexp.evaluation.math_task.MathTaskSizes`. The manifest records
    the generators' and CHAMP's package versions and the templates on each side of the split."""
    import dataclasses
    from importlib import metadata

    from rlexp.evaluation.math_task import champ_eligible, draw_math_sets

    out = Path(out_dir)
    versions = {name: metadata.version(name) for name in ("reasoning-gym", "champ-dataset")}
    settings = {"task": {"name": "gsm-symbolic+champ", "versions": versions}, "seed": seed,
                "sizes": dataclasses.asdict(sizes)}
    manifest_path = out / "datasets.json"
    if manifest_path.exists():
        cached = _cached(manifest_path, settings)
        if cached is not None:
            return cached
    sets, split = draw_math_sets(sizes, seed=seed, champ=champ_eligible(champ_rows(), _math_verify_parses))
    written = {role: write_dataset(out / dataset_filename(role, len(sets[role])), sets[role]) for role in ROLES}
    check_dataset_files({role: f.path for role, f in written.items()})
    atomic_write_json(manifest_path, {
        **settings,
        "split": split,
        "files": {role: {"path": f.path.name, "sha256": f.sha256, "size": f.size} for role, f in written.items()},
    })
    return written


def champ_rows() -> list[tuple[str, str, str, str]]:
    """CHAMP's 270 problems as ``(identifier, category, text, answer)``, read from the
    ``champ-dataset`` package's own file through its loader."""
    import champ_dataset

    dataset = champ_dataset.load("v0")
    return [(p.identifier, p.category, p.text, p.answer) for p in dataset.problems.values()]


def _math_verify_parses(answer: str) -> bool:
    from math_verify import parse

    try:
        return len(parse(f"${answer}$")) > 0
    except Exception:
        return False


def eval_hashes(files: dict[str, DatasetFile]) -> frozenset[str]:
    """Hashes of every evaluation set (all roles but the pool): what SFT must never see."""
    hashes: set[str] = set()
    for role, f in files.items():
        if role != "pool":
            hashes.update(r["problem_hash"] for r in read_dataset(f.path))
    return frozenset(hashes)
