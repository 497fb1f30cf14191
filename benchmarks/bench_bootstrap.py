"""Paired bootstrap of the accuracy difference: rlexp.stats (count resampling) vs scipy.stats.bootstrap.

Both draw 10,000 resamples of N=1,000 paired problems (the reference experiment's table: b=61, c=57) and
compute a 95% percentile CI of delta. scipy resamples problem indices (paired=True); rlexp draws
the counts of the three per-problem differences (-1, 0, +1), which is the same distribution.
Run: .venv/bin/python benchmarks/bench_bootstrap.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy import stats as sps

from rlexp.stats import bootstrap_delta_ci, paired_test

N, B, C, RESAMPLES, REPEATS = 1000, 61, 57, 10_000, 7


def best_of(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    n11 = 677
    base = np.array([1] * n11 + [1] * B + [0] * C + [0] * (N - n11 - B - C), dtype=float)
    new = np.array([1] * n11 + [0] * B + [1] * C + [0] * (N - n11 - B - C), dtype=float)

    def ours():
        return bootstrap_delta_ci(B, C, N, resamples=RESAMPLES, seed=0)

    def scipy_paired():
        return sps.bootstrap((base, new), lambda x, y, axis=-1: np.mean(y - x, axis=axis) * 100.0, paired=True,
                             vectorized=True, n_resamples=RESAMPLES, method="percentile",
                             random_state=np.random.default_rng(0))

    def ours_from_outcomes():  # the library path: validate and count the outcomes, then resample
        return paired_test(base, new).confidence_interval(n_resamples=RESAMPLES, rng=0)

    ours()  # warm-up: imports
    ours_from_outcomes()
    scipy_paired()
    t_ours = best_of(ours)
    t_library = best_of(ours_from_outcomes)
    t_scipy = best_of(scipy_paired)
    ci_ours = ours().ci_pp
    ci_scipy = scipy_paired().confidence_interval
    print(f"paired bootstrap, N={N}, {RESAMPLES} resamples, percentile 95% CI (best of {REPEATS})")
    print(f"  rlexp.stats (count resampling): {1e3 * t_ours:8.2f} ms  CI [{ci_ours[0]:+.2f}, {ci_ours[1]:+.2f}] pp")
    print(f"  rlexp.stats.paired_test(y_base, y_new).confidence_interval(): {1e3 * t_library:8.2f} ms")
    print(f"  scipy.stats.bootstrap(paired):  {1e3 * t_scipy:8.2f} ms  CI [{ci_scipy.low:+.2f}, {ci_scipy.high:+.2f}] pp")
    print(f"  speed-up: {t_scipy / t_ours:.0f}x  (target: rlexp < 5 ms -> {'met' if t_ours < 0.005 else 'NOT met'})")


if __name__ == "__main__":
    main()
