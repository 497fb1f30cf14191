"""`rlexp compare` from 10^4 to 10^6 items: how its time grows, and the power figures against the previous
algorithm measured in the same run.

Two rlexp record files of N problems (accuracy 45% → 48%, 12% discordance, the SOP's shape) are written to a
temporary directory and compared with ``rlexp compare BASE NEW --json`` in a fresh process, as a user runs it
(reading, pairing, McNemar, the bootstrap, the power figures). Beside each N, the Gate-1b power figures
(``rlexp.stages.compare._gate_power``, the part that grew as N^1.5) are computed twice in this process: by
the library (critical counts and tails carried from one discordant count to the next) and by the previous
algorithm, written out below as it was (each critical count summed afresh from k = m; each tail summed
outward from its largest term), which is the baseline of the ratio. The previous algorithm runs up to
``--baseline-max`` items (it took about 8 minutes at 10^6 items).

Run: .venv/bin/python benchmarks/bench_compare_scale.py [--sizes 10000,100000,1000000] [--baseline-max 200000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlexp.stats import _gate_power as library

ROOT = Path(__file__).resolve().parents[1]


# ---- the previous algorithm (the baseline), as it stood before the carried counts -----------------------

def _previous_critical_wins(m: int, max_p: float, cache: dict) -> int:
    if (m, max_p) in cache:
        return cache[(m, max_p)]
    c_test, term, tail = m + 1, 0.0, 0.0
    for k in range(m, (m - 1) // 2, -1):
        if term < 1e-250:
            term = math.exp(library._log_pmf(k, m, 0.5))
        tail += term
        if 2.0 * tail >= max_p - library.EPS:
            break
        c_test = k
        term *= k / (m - k + 1)
    cache[(m, max_p)] = c_test
    return c_test


def previous_pass_probability(delta_pp: float, n: int, d: float, min_delta_pp: float, max_p: float,
                              cache: dict) -> float:
    sd = math.sqrt(n * d * (1.0 - d))
    win = (d + delta_pp / 100.0) / (2.0 * d)
    log_p, log_q, odds = math.log(win), math.log1p(-win), win / (1.0 - win)
    total = 0.0
    for m in range(max(1, math.floor(n * d - 9 * sd)), min(n, math.ceil(n * d + 9 * sd)) + 1):
        pm = math.exp(library._log_pmf(m, n, d))
        if pm < library._NEGLIGIBLE:
            continue
        c = max(_previous_critical_wins(m, max_p, cache), math.ceil((m + n * min_delta_pp / 100.0) / 2.0 - library.EPS))
        total += pm * library._upper_tail(c, m, win, log_p, log_q, odds)
    return min(1.0, total)


# ---- the run --------------------------------------------------------------------------------------------

def write_records(path: Path, outcomes: list[int], tag: str) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i, correct in enumerate(outcomes):
            f.write(json.dumps({"problem_hash": f"{i:016x}", "correct": correct, "set": tag}) + "\n")


def make_pair(n: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    base, new = [], []
    for _ in range(n):
        u = rng.random()
        if u < 0.045:  # the new model loses: b
            base.append(1), new.append(0)
        elif u < 0.12:  # the new model wins: c (b + c = 12%, c - b = 3pp)
            base.append(0), new.append(1)
        else:
            same = int(rng.random() < 0.45)
            base.append(same), new.append(same)
    return base, new


def time_cli(base: Path, new: Path) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlexp", "compare", str(base), str(new), "--json"],
                          capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def time_power(n: int, d: float, previous: bool) -> tuple[float, float]:
    library._thresholds.cache_clear()
    library._mcnemar_critical_wins.cache_clear()
    start = time.perf_counter()
    if previous:
        cache: dict = {}
        value = previous_pass_probability(3.0, n, d, 3.0, 0.05, cache)
        value += previous_pass_probability(3.5, n, d, 3.0, 0.05, cache)
    else:
        value = library.gate_1b_pass_probability(3.0, n, d) + library.gate_1b_pass_probability(3.5, n, d)
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--baseline-max", type=int, default=200_000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            base, new = make_pair(n, seed=n)
            bp, np_ = Path(tmp) / f"base{n}.jsonl", Path(tmp) / f"new{n}.jsonl"
            write_records(bp, base, "base")
            write_records(np_, new, "new")
            wall, out = time_cli(bp, np_)
            d = out["discordance"]
            t_new, v_new = time_power(n, d, previous=False)
            row = {"n": n, "compare_s": wall, "power_s": t_new, "power_value": v_new}
            if n <= args.baseline_max:
                t_old, v_old = time_power(n, d, previous=True)
                row.update(previous_power_s=t_old, previous_value=v_old, ratio=t_old / t_new)
            rows.append(row)
            print(json.dumps(row), flush=True)
    first, last = rows[0], rows[-1]
    if last["n"] > first["n"]:
        growth = math.log(last["compare_s"] / first["compare_s"]) / math.log(last["n"] / first["n"])
        print(f"rlexp compare: {first['compare_s']:.2f} s at {first['n']:,} items, {last['compare_s']:.2f} s at "
              f"{last['n']:,} (time ∝ N^{growth:.2f})")
    for row in rows:
        if "ratio" in row:
            print(f"  N={row['n']:,}: two Gate-1b pass probabilities {row['power_s']:.3f} s vs {row['previous_power_s']:.2f} s "
                  f"previously ({row['ratio']:.0f}x), values differ by {abs(row['power_value'] - row['previous_value']):.1e}")


if __name__ == "__main__":
    main()
