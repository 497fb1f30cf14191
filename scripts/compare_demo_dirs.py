"""Compare two demo directories: what must be identical between two runs of the demo, and is not.

    .venv/bin/python scripts/compare_demo_dirs.py FIRST SECOND

Two runs of ``rlexp demo`` (two checkouts, two hash seeds, before and after a refactor) must agree:
every model, adapter, dataset and eval-record file byte for byte (what the provenance hashes), and
every other file once the run's own directory is written as ``<dir>`` and its wall-clock fields are
dropped, except the run records listed in :data:`MAY_DIFFER`. Prints one line per difference and
exits 1 if there is any; ``tests/test_demo.py`` runs the same check on two fast demos.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RUN_RECORDS = {  # where each run records itself: start times, process ids, host, run ids
    "launch/launches.jsonl", "launch/provenance.json", "launch/state.json", "launch/stdout.log",
}
MAY_DIFFER = (
    ("mlflow.db", "MLflow's run ids and times"),
    ("mlartifacts/", "stored under MLflow run ids (the files are copies of the attempt's own)"),
    ("experiments/demo/fanout/", "the launches' submission ids and start/end times"),
    ("/eval/.hash_cache.json", "a cache of directory hashes keyed by file mtimes"),
    ("log.txt", "the demo's console log: durations"),
    ("/guards/g3.json", "G3 judges the run's own wall-clock step times (decided once the run is shorter than its "
                        "smoke window)"),
    *((f"/{name}", "the run's own record: times, pids, host") for name in sorted(RUN_RECORDS)),
)
WITHOUT_TIMES = {  # compared after dropping wall-clock fields
    "metrics.jsonl": {"step_time_s", "time"},
    "decision.json": {"decided_at"},  # at any depth: the SOTA pin it carries has its own
    "sota.json": {"decided_at"},
    "ledger.jsonl": {"decided_at"},
    "argv.json": {"created_at"},
}


def comparable(path: Path, root: Path) -> bytes:
    """The file's content with the run's directory written as <dir>, its wall-clock fields dropped,
    and a report's commit written as <commit>."""
    text = path.read_bytes()
    name = path.name
    if name == "launch.sh":  # its header says when it was written
        text = re.sub(rb"written: \S+", b"written: <time>", text)
    if name.endswith(".md"):  # a report names the commit of the code that wrote it: two checkouts differ there
        text = re.sub(rb"\bgit [0-9a-f]{7,40}\b", b"git <commit>", text)
        # G3's row states the run's own step times (guards/g3.json above)
        text = re.sub(rb"(?m)^\| g3 \|.*$", b"| g3 | <step times> |", text)
    if name in WITHOUT_TIMES:
        drop = WITHOUT_TIMES[name]
        rows = [json.loads(line) for line in text.decode().splitlines() if line.strip()] if name.endswith(
            ".jsonl") else [json.loads(text)]
        text = json.dumps([_without(r, drop) for r in rows], sort_keys=True).encode()
    return text.replace(str(root).encode(), b"<dir>")


def _without(value, drop: set[str]):
    """``value`` with the keys in ``drop`` removed at every depth."""
    if isinstance(value, dict):
        return {k: _without(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_without(v, drop) for v in value]
    return value


def compared_files(root: Path) -> set[str]:
    allowed = [prefix for prefix, _why in MAY_DIFFER]
    return {rel for p in root.rglob("*") if p.is_file()
            for rel in [p.relative_to(root).as_posix()] if not any(a in rel or rel.startswith(a) for a in allowed)}


def is_hashed(rel: str) -> bool:
    """A file whose bytes the provenance hashes: compared with no normalisation at all."""
    return "/models/" in rel or "/checkpoints/" in rel or "/data/" in rel or (rel.endswith(".jsonl") and "/eval/" in rel)


def differences(first: Path, second: Path) -> list[str]:
    files_a, files_b = compared_files(first), compared_files(second)
    out = [f"only in {first}: {rel}" for rel in sorted(files_a - files_b)]
    out += [f"only in {second}: {rel}" for rel in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        a, b = first / rel, second / rel
        same = a.read_bytes() == b.read_bytes() if is_hashed(rel) else comparable(a, first) == comparable(b, second)
        if not same:
            out.append(f"differs: {rel}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    found = differences(Path(argv[0]), Path(argv[1]))
    for line in found:
        print(line)
    compared = len(compared_files(Path(argv[0])))
    print(f"{compared} files compared, {len(found)} differences", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
