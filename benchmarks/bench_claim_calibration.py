"""The claim rule (STOP-1) calibrated: `rlexp sop calibrate-claim` at more simulated studies.

Simulates the whole claim rule (Gate-1b on the best of K = 3 checkpoints of a first seed, a second
seed, Gate-2 over both) at true effects 0, +1, +2, +3 and +5pp, ρ = 0.3 / 0.6 / 0.9, under the model
of `rlexp sop calibrate` (N = 1000, 12% discordance), for the SOP given and, on the same studies, for
Gate-2 on the raw and on the selection-adjusted Δ at the threshold each needs to hold the bound
below. Prints the markdown table of sop/README.md ("The claim rule, calibrated") and the time taken.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_claim_calibration.py [--sims 4000] [--seed 0] [--sop FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from rlexp.protocol.calibrate import CalibrationSettings, ClaimTargets, calibrate_claim
from rlexp.spec.sop import load_sop


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sop", default=None)
    parser.add_argument("--max-rate-below", type=float, default=ClaimTargets.max_rate_below)
    parser.add_argument("--min-rate-at", type=float, default=ClaimTargets.min_rate_at)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    result = calibrate_claim(load_sop(args.sop), CalibrationSettings(sims=args.sims, seed=args.seed),
                             ClaimTargets(max_rate_below=args.max_rate_below, min_rate_at=args.min_rate_at))
    took = time.perf_counter() - start
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.markdown())
    print(f"{took:.0f} s")


if __name__ == "__main__":
    main()
