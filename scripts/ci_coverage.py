"""Coverage of the paired-difference intervals with few discordant pairs (sop/README.md, "Confidence
intervals with few discordant pairs").

Draws paired 2x2 tables (n11, b, c, n00) ~ Multinomial(N; p11, pb, pc, p00) with the baseline's
accuracy p11 + pb = 0.70, and counts how often each interval of ``rlexp.stats`` holds the true
difference pc - pb: the seeded paired bootstrap as ``rlexp compare`` and ``rlexp decide`` compute it
(10,000 resamples, seed 0, percentile and BCa; computed once per distinct (b, c) with
``bootstrap_delta_ci_many``) and Newcombe's hybrid score interval. Prints a markdown table with the
Monte-Carlo error of each coverage.

Run: PYTHONPATH=. .venv/bin/python scripts/ci_coverage.py [--tables 100000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from rlexp import stats

SETTINGS = (  # (N, pb, pc): about 5, 10 and 20 discordant pairs, with and without an effect
    (1000, 0.0025, 0.0025), (1000, 0.005, 0.005), (1000, 0.003, 0.007), (1000, 0.01, 0.01), (1000, 0.007, 0.013),
)


def coverage(n: int, pb: float, pc: float, tables: int, seed: int, base_acc: float = 0.70) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    p11 = base_acc - pb
    n11, b, c, n00 = rng.multinomial(n, [p11, pb, pc, 1.0 - p11 - pb - pc], size=tables).T
    theta_pp = 100.0 * (pc - pb)
    tol = 1e-9  # the bounds are multiples of 100/N; a bound equal to theta covers it
    out = {"mean discordant pairs": float((b + c).mean())}
    low, high = stats.newcombe_paired_ci_arrays(n11, b, c, n00)
    out["newcombe"] = float(np.mean((100 * low <= theta_pp + tol) & (theta_pp - tol <= 100 * high)))
    for method in ("percentile", "bca"):
        ci = stats.bootstrap_delta_ci_many(list(zip(b.tolist(), c.tolist(), strict=True)), n, method=method)
        out[method] = float(np.mean([ci[key][0] <= theta_pp + tol and theta_pp - tol <= ci[key][1]
                                     for key in zip(b.tolist(), c.tolist(), strict=True)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    se = math.sqrt(0.95 * 0.05 / args.tables)
    print(f"Coverage of nominal 95% intervals, {args.tables} tables per row, seed {args.seed} "
          f"(Monte-Carlo s.e. about {100 * se:.2f}%)\n")
    print("| N | P(b) | P(c) | true Δ | mean b+c | percentile | BCa | Newcombe |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (n, pb, pc) in enumerate(SETTINGS):
        r = coverage(n, pb, pc, args.tables, args.seed + i)
        print(f"| {n} | {pb:g} | {pc:g} | {100 * (pc - pb):+.1f}pp | {r['mean discordant pairs']:.1f} | "
              f"{100 * r['percentile']:.2f}% | {100 * r['bca']:.2f}% | {100 * r['newcombe']:.2f}% |")


if __name__ == "__main__":
    main()
