"""Δ against Baseline-SOTA when the SOTA was pinned on the same problems: the reuse bias, before and
after the pin's selection correction (`decision.json`'s `sota_reuse`).

The pin is the best of K = 3 checkpoints of one run on OOD-1000, so its observed accuracy on those
problems overstates its true accuracy (the winner's curse), and every later Δ against it on the same
problems starts low by as much. `rlexp decide` records, when it pins, the pin's selection correction
(its raw Δ minus its selection-adjusted Δ, `rlexp.protocol.selection`), and adds it to Δ vs SOTA.

Each study draws, problem by problem (the binary model of `rlexp sop calibrate`: N = 1000, baseline
accuracy U(0.67, 0.74), 12% discordance, K = 3 checkpoints flipping through a Gaussian copula with
correlation ρ): Baseline-S0, the pin's K checkpoints with true Δ μ_pin, and a later attempt's checkpoint
(an independent run) with true Δ μ_pin + δ, so that its true Δ vs SOTA is δ. The pin is the winner of the
K (ties to the first); its correction comes from `winner_inference` on the K Δ's and their covariance, as
`decide` computes it. Printed: the mean and median error of Δ vs SOTA before and after the correction
(± one Monte-Carlo SE), for every pin and for the pins that pass Gate-1b's Δ and McNemar clauses.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_sota_reuse.py [--studies 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.special import ndtri
from scipy.stats import binom

from rlexp.protocol.selection import winner_inference


def flips(y0, p0, effect, rng, k, rho, discordance=0.12):
    """(studies, n, k) flip indicators of k checkpoints with true Δ ``effect`` against y0 (copula rho)."""
    q_right = (discordance - effect) / (2 * p0)          # P(flip | baseline right)
    q_wrong = (discordance + effect) / (2 * (1 - p0))    # P(flip | baseline wrong)
    threshold = np.where(y0, ndtri(q_right)[:, None], ndtri(q_wrong)[:, None])
    latent = (math.sqrt(rho) * rng.standard_normal((*y0.shape, 1))
              + math.sqrt(1 - rho) * rng.standard_normal((*y0.shape, k)))
    return latent < threshold[:, :, None]


def simulate(pin_pp, delta_pp, rho, studies, rng, n=1000, k=3, chunk=500):
    """Per study: error of Δ vs SOTA (pp) before and after the correction, and whether the pin passes
    Gate-1b's Δ >= +3pp and McNemar p < 0.05."""
    before, after, passes = [], [], []
    for start in range(0, studies, chunk):
        m = min(chunk, studies - start)
        p0 = rng.uniform(0.67, 0.74, m)
        y0 = rng.random((m, n)) < p0[:, None]
        pin_y = np.where(flips(y0, p0, pin_pp / 100, rng, k, rho), ~y0[:, :, None], y0[:, :, None])
        new_y = np.where(flips(y0, p0, (pin_pp + delta_pp) / 100, rng, 1, 0.0)[:, :, 0], ~y0, y0)
        d = pin_y.astype(float) - y0[:, :, None]
        x = d.mean(axis=1)
        centred = d - x[:, None, :]
        cov = np.einsum("snj,snk->sjk", centred, centred) / (n * n)
        res = winner_inference(x, cov, 0.95, step=1.0 / n)
        win = res["winner"]
        correction = 100 * (res["raw"] - res["estimate"])
        pinned = np.take_along_axis(pin_y, win[:, None, None], axis=2)[:, :, 0]
        vs_sota = 100 * (new_y.astype(float) - pinned).mean(axis=1)
        before.append(vs_sota - delta_pp)
        after.append(vs_sota + correction - delta_pp)
        b = (y0 & ~pinned).sum(axis=1)
        c = (~y0 & pinned).sum(axis=1)
        p = np.minimum(1.0, 2 * binom.cdf(np.minimum(b, c), np.maximum(b + c, 1), 0.5))
        passes.append((100 * res["raw"] >= 3.0 - 1e-9) & (p < 0.05))
    return np.concatenate(before), np.concatenate(after), np.concatenate(passes)


def fmt_mean(v):
    return f"{v.mean():+.2f} ± {v.std(ddof=1) / math.sqrt(len(v)):.2f}"


def fmt_median(v):
    # SE of a median: sqrt(pi/2) sigma / sqrt(m) for a near-normal error
    return f"{np.median(v):+.2f} ± {math.sqrt(math.pi / 2) * v.std(ddof=1) / math.sqrt(len(v)):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"Δ vs SOTA minus its truth (pp), mean and median ± one Monte-Carlo SE, {args.studies} studies per row, "
          f"seed {args.seed}, N=1000, 12% discordance, K=3.\n")
    print("| pin's true Δ | ρ | true Δ vs SOTA | pins | mean before | mean after | median before | median after |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (pin_pp, delta_pp) in enumerate(((3.0, 0.0), (5.0, 0.0), (3.0, 2.0))):
        for j, rho in enumerate((0.3, 0.6, 0.9)):
            rng = np.random.default_rng([args.seed, i, j])
            before, after, passes = simulate(pin_pp, delta_pp, rho, args.studies, rng)
            for label, keep in (("all", np.ones_like(passes)), ("passing Gate-1b", passes)):
                if keep.sum() < 100:
                    continue
                print(f"| {pin_pp:+g} | {rho:g} | {delta_pp:+g} | {label} ({keep.mean():.0%}) | {fmt_mean(before[keep])} | "
                      f"{fmt_mean(after[keep])} | {fmt_median(before[keep])} | {fmt_median(after[keep])} |")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
