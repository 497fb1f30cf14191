"""The input gate's fuzz run: N inputs (default 10,000) from each format's grammar and from mutations of
the valid files of a small experiment, over every reader, the verbs that read each file, and the
numeric and path options; prints the tally (inputs, refusals, tracebacks, hangs, writes on refusal),
the wall time and the coverage (files x readers/verbs, options). The engine is tests/fuzz_gate.py.

    python scripts/fuzz_input_gate.py [--inputs 10000] [--seed 0] [--verb-share 0.25] [--option-share 0.1]

Exit 0 when no input broke the contract, else 1 (the failures are listed, each shrunk).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verb-share", type=float, default=0.25)
    parser.add_argument("--option-share", type=float, default=0.1)
    parser.add_argument("--no-shrink", action="store_true")
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("RLEXP_STUDY_STORAGE", None)
    import fuzz_gate

    from rlexp.models.tiny import build_tiny_model

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.chdir(tmp)  # a default store (mlflow.db, optuna.db) of a refused case would land here, not in the repo
        base = fuzz_gate.build_base(tmp / "base", build_tiny_model(tmp / "tiny" / "tiny-base", seed=0))
        fuzzer = fuzz_gate.Fuzzer(base, tmp / "scratch", seed=args.seed, verb_share=args.verb_share,
                                  option_share=args.option_share, shrink=not args.no_shrink)
        every = max(1, args.inputs // 20)

        def progress(done: int, tally) -> None:
            if done % every == 0:
                counts = tally.counts()
                print(f"{done}/{args.inputs} inputs, {time.perf_counter() - start:.0f} s: {dict(counts)}",
                      file=sys.stderr, flush=True)

        tally = fuzzer.run_many(args.inputs, progress)
    for line in fuzz_gate.report_lines(tally, time.perf_counter() - start):
        print(line)
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
