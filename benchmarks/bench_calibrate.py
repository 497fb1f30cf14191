"""`rlexp sop calibrate`: time per simulated study, the previous implementation vs the current one.

Previous (the baseline, reproduced here): every study drawn problem by problem (N x K x 2 normal
draws through the Gaussian copula, ``rlexp.protocol.calibrate.simulate_counts_per_problem``) and every
comparison whose delta could pass a gate bootstrapped with fresh draws (2,000 resamples, as the
old default). Current: ``rlexp.protocol.calibrate.calibrate`` (the flip patterns drawn as multinomial
counts, the SOP's seeded interval computed once per distinct (b, c)). Both at N=1000, K=3, one
correlation (0.6), both scenarios; the previous one on fewer studies, since it is slow. Prints the
per-study times and their ratio, measured in the same run.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_calibrate.py [--old-sims 1000] [--new-sims 100000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlexp.protocol import calibrate as cal
from rlexp.protocol.gates import EPS
from rlexp.spec.sop import load_sop


def previous_bootstrap_low(b, c, n, resamples, confidence, rng):
    """The previous implementation's CI low bound: fresh bootstrap draws per comparison."""
    m_total = b + c
    p_win = np.divide(c, m_total, out=np.zeros(len(c)), where=m_total > 0)
    m = rng.binomial(n, (m_total / n)[None, :], size=(resamples, len(b)))
    wins = rng.binomial(m, p_win[None, :])
    return 100.0 * np.quantile(2 * wins - m, (1 - confidence) / 2, axis=0) / n


def previous_calibrate(sop, settings, sims, chunk=250, resamples=2000):
    """The previous pipeline's work for both scenarios: per-problem draws, per-comparison bootstrap."""
    rng = np.random.default_rng(settings.seed)
    passes = []
    for effect in (0.0, settings.effect_pp):
        done = 0
        while done < sims:
            size = min(chunk, sims - done)
            sim = cal.simulate_counts_per_problem(settings, effect, 0.6, rng, size)
            b, c = sim["b"][:, 0, :], sim["c"][:, 0, :]
            delta = 100.0 * (c - b) / settings.n
            p = cal.mcnemar_exact_vec(b, c)
            ci_low = np.full(delta.shape, -np.inf)
            need = delta >= sop.gate_1a.min_delta_pp - EPS
            if need.any():
                ci_low[need] = previous_bootstrap_low(b[need], c[need], settings.n, resamples,
                                                      sop.bootstrap.confidence, rng)
            passes.append(cal.gate_passes(delta, p, ci_low, sop.gate_1b, ci_is_alternative=False).mean())
            done += size
    return float(np.mean(passes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-sims", type=int, default=1000)
    parser.add_argument("--new-sims", type=int, default=100_000)
    args = parser.parse_args()
    sop = load_sop()
    cal.mcnemar_exact_vec(np.array([1]), np.array([2]))  # warm-up: scipy's import is not part of either
    settings = cal.CalibrationSettings(correlations=(0.6,))

    def timed(fn):
        """(wall seconds, CPU seconds of this process, result): the CPU time is the steadier figure on a
        shared machine."""
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        return time.perf_counter() - wall, time.process_time() - cpu, out

    old_wall, old_cpu, _ = timed(lambda: previous_calibrate(sop, settings, args.old_sims))
    small_wall, small_cpu, small = timed(
        lambda: cal.calibrate(sop, cal.CalibrationSettings(sims=args.old_sims, correlations=(0.6,))))
    new_wall, new_cpu, result = timed(
        lambda: cal.calibrate(sop, cal.CalibrationSettings(sims=args.new_sims, correlations=(0.6,))))
    per = {"old": (old_wall / (2 * args.old_sims), old_cpu / (2 * args.old_sims)),
           "small": (small_wall / (2 * args.old_sims), small_cpu / (2 * args.old_sims)),
           "new": (new_wall / (2 * args.new_sims), new_cpu / (2 * args.new_sims))}

    print(f"sop calibrate, N=1000, K=3, rho=0.6, two scenarios ({small.distinct_intervals} / "
          f"{result.distinct_intervals} distinct intervals computed); per study, wall / CPU")
    rows = (("previous", args.old_sims, "old"), ("current", args.old_sims, "small"), ("current", args.new_sims, "new"))
    for label, sims, key in rows:
        wall, cpu = per[key]
        ratio = "" if key == "old" else (f"  ratio {per['old'][0] / wall:.1f}x wall, "
                                         f"{per['old'][1] / cpu:.1f}x CPU")
        print(f"  {label:8s} {sims:7d} studies per scenario: {1e3 * wall:7.3f} / {1e3 * cpu:7.3f} ms{ratio}")
    print(f"  current, {args.new_sims} studies per scenario in all: {new_wall:.1f} s wall, {new_cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
