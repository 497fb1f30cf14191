"""Run N parallel `rlexp report` on one attempt, R rounds, each round on a fresh MLflow store (the
race is on the first logging of an attempt's params); print the crashes.

    python scripts/parallel_report.py [--parallel 12] [--rounds 10]

Exit 0 when every report of every round exited 0 with no traceback, else 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from input_fixture import build_experiment

    from rlexp.models.tiny import build_tiny_model

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MLFLOW_TRACKING_URI", None)
    crashes = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        exp = build_experiment(tmp, build_tiny_model(tmp / "tiny" / "tiny-base", seed=0))
        for round_no in range(args.rounds):
            uri = f"sqlite:///{tmp / f'mlflow-{round_no}.db'}"
            procs = [subprocess.Popen([sys.executable, "-m", "rlexp.cli", "report", str(exp / "a2"), "--reports-dir",
                                       str(tmp / f"reports-{round_no}-{i}"), "--tracking-uri", uri],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
                     for i in range(args.parallel)]
            for proc in procs:
                _, err = proc.communicate()
                if proc.returncode != 0 or "Traceback" in err:
                    crashes += 1
                    lines = err.strip().splitlines()
                    cause = [line for line in lines if "Error" in line][-1:] or lines[-1:]
                    print(f"round {round_no}: exit {proc.returncode}: {cause[0][:300] if cause else ''}")
                    if os.environ.get("SHOW_TRACEBACK"):
                        print(err[-4000:])
            print(f"round {round_no + 1}/{args.rounds}: {args.parallel} reports, crashes so far {crashes}", flush=True)
    print(f"parallel report: {args.rounds} rounds x {args.parallel} reports, {crashes} crashes, "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
