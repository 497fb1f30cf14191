"""Eval record appends: one fsync per engine chunk (what ``RecordWriter.append_many`` does since
eval writes a chunk's records together) vs one fsync per record (``append`` of each, the baseline).

    .venv/bin/python benchmarks/bench_record_fsync.py [--records 2000] [--chunk 64] [--dir DIR]

Both write the same real-shaped records (make_record of a generated answer) into fresh record files
in ``--dir`` (default: a temporary directory — put it on the disk your experiments live on: fsync
costs what that disk costs), interleaved in rounds so a busy machine slows both alike; the script
checks the two files are byte-identical, then prints the median times and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=64, help="records per engine chunk (the local engine's default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()

    from rlexp.experiment.records import IDENTITY_KEYS, RecordWriter, make_record
    from rlexp.numbers import sha256_text

    problems = [{"problem_hash": sha256_text(f"{i}+{2 * i}="), "answer": str(3 * i), "bucket": "b"}
                for i in range(args.records)]
    records = [make_record(p, f"The sum is \\boxed{{{3 * i + i % 3}}}.", "stop", 40, 12)
               for i, p in enumerate(problems)]
    meta = {k: "bench" for k in IDENTITY_KEYS}

    def per_record(path: Path) -> float:
        writer = RecordWriter.open(path, meta)
        start = time.perf_counter()
        for r in records:
            writer.append(r)
        return time.perf_counter() - start

    def per_chunk(path: Path) -> float:
        writer = RecordWriter.open(path, meta)
        start = time.perf_counter()
        for i in range(0, len(records), args.chunk):
            writer.append_many(records[i : i + args.chunk])
        return time.perf_counter() - start

    times: dict[str, list[float]] = {"per record": [], "per chunk": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for round_ in range(args.rounds):
            for name, run in (("per record", per_record), ("per chunk", per_chunk)):
                path = Path(tmp) / f"{round_}-{name.replace(' ', '_')}" / "ood.jsonl"
                times[name].append(run(path))
            a = (Path(tmp) / f"{round_}-per_record" / "ood.jsonl").read_bytes()
            b = (Path(tmp) / f"{round_}-per_chunk" / "ood.jsonl").read_bytes()
            if a != b:
                print("the two files differ", file=sys.stderr)
                return 1
    base, batched = statistics.median(times["per record"]), statistics.median(times["per chunk"])
    print(f"{args.records} records, chunk {args.chunk}, {args.rounds} rounds (median)")
    print(f"  fsync per record : {base:8.3f} s")
    print(f"  fsync per chunk  : {batched:8.3f} s")
    print(f"  ratio            : {base / batched:8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
