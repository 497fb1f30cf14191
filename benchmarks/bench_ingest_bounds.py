"""`rlexp ingest`'s readers on hostile inputs at size N and 2N: the time ratio shows a read linear
in its input (about 2), where a quadratic pattern would show about 4. Both sizes are read in the same
run; each case is its own file, read as `rlexp ingest` reads it (``read_log``).

    .venv/bin/python benchmarks/bench_ingest_bounds.py [--scale 1.0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name -> (file name, trainer, format, text of size ~n)
CASES = {
    "eval heads on one line": ("train.log", "openrlhf", None,
                               lambda n: "Evaluation completed " * (n // 21) + "\nGlobal step 1: {'a': 1}\n"),
    "tqdm bar postfix": ("train.log", "openrlhf", None, lambda n: "Train epoch [1/1]: 100%" + "[a," * (n // 3) + "\n"),
    "verl record wrapped at 40 columns": (
        "verl.log", "verl", None,
        lambda n: "step:1 - " + "\n".join(("- k:0.1" * (n // 7))[i:i + 40] for i in range(0, n, 40)) + "\n"),
    "dict never closed": ("train.log", "openrlhf", None,
                          lambda n: "Global step 1: {" + "\n".join(["'a': 1, " * 100] * (n // 800)) + "\n"),
    "tiny verl records": ("verl.log", "verl", None,
                          lambda n: "".join(f"step:{i} - a:1\n" for i in range(n // 14))),
}


def timed(path: Path, trainer: str, fmt: str | None) -> float:
    from rlexp.training.log_files import read_log

    start = time.perf_counter()
    read_log(path, trainer, fmt)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="N = 400 KB × scale")
    args = parser.parse_args()
    n = int(400_000 * args.scale)
    print(f"{'case':36} {'N s':>8} {'2N s':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (file_name, trainer, fmt, make) in CASES.items():
            times = []
            for size in (n, 2 * n):
                path = Path(tmp) / f"{size}-{file_name}"
                path.write_text(make(size))
                times.append(min(timed(path, trainer, fmt) for _ in range(3)))
            print(f"{name:36} {times[0]:8.3f} {times[1]:8.3f} {times[1] / max(times[0], 1e-9):6.2f}")


if __name__ == "__main__":
    main()
