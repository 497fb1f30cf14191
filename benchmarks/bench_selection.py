"""The selection-adjusted Δ of the best of K = 3 checkpoints: raw, conditional and hybrid, by simulation.

Each study draws N = 1000 problems, a baseline and K = 3 correlated checkpoints problem by problem
(the binary model of ``rlexp sop calibrate``, written out again here: baseline accuracy drawn in
[0.67, 0.74], 12% discordance, checkpoint k flipping a problem through a Gaussian copula with
correlation ρ so that its true Δ is μ_k), then estimates the winner's Δ three ways: the raw Δ, AKM's
conditional estimate and their hybrid (β = α/10), both from ``rlexp.protocol.selection.winner_inference``
on the Δ's and the covariance of the per-problem differences, as ``decide`` does. The truth is the
winner's μ_k, known to the simulation. Printed per row, each with its Monte-Carlo standard error
(± one SE): mean error (bias), median error, RMSE, coverage of the 95% interval, median and 90th
percentile width; and the same restricted to near ties (the winner's observed lead over the
runner-up below half its standard error), where the conditional interval explodes.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_selection.py [--studies 2000] [--seed 0] [--markdown]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.special import ndtri

from rlexp.protocol.selection import winner_inference

TRUTHS = {"equal (+2, +2, +2)": (2.0, 2.0, 2.0), "unequal (+3, +1.5, 0)": (3.0, 1.5, 0.0),
          "close (+2.5, +2.2, +2)": (2.5, 2.2, 2.0)}


def simulate(effects_pp, rho, studies, rng, n=1000, discordance=0.12):
    """Δ̂ (studies, K) and the covariance of the per-problem differences (studies, K, K)."""
    effects = np.asarray(effects_pp) / 100.0
    k = len(effects)
    p0 = rng.uniform(0.67, 0.74, studies)
    y0 = rng.random((studies, n)) < p0[:, None]
    q1 = (discordance - effects[None, :]) / (2 * p0[:, None])          # P(flip | base right)
    q0 = (discordance + effects[None, :]) / (2 * (1 - p0[:, None]))    # P(flip | base wrong)
    threshold = np.where(y0[:, :, None], ndtri(q1)[:, None, :], ndtri(q0)[:, None, :])
    latent = (math.sqrt(rho) * rng.standard_normal((studies, n, 1))
              + math.sqrt(1 - rho) * rng.standard_normal((studies, n, k)))
    flipped = latent < threshold
    d = np.where(flipped, ~y0[:, :, None], y0[:, :, None]).astype(float) - y0[:, :, None]
    x = d.mean(axis=1)
    centred = d - x[:, None, :]
    return x, np.einsum("snj,snk->sjk", centred, centred) / (n * n)


def summary(error, low, high, truth):
    """Figures of one method over the studies given, each (value, Monte-Carlo SE), in pp."""
    m = len(error)
    cover = (low <= truth) & (truth <= high)
    width = high - low
    rmse = math.sqrt(np.mean(error ** 2))
    # SE of the RMSE by the delta method; of a median/quantile from the order statistics' binomial spread
    def quantile_se(v, q):
        s = np.sort(v)
        half = 1.0 * math.sqrt(q * (1 - q) * m)
        lo, hi = int(max(0, q * m - half)), int(min(m - 1, q * m + half))
        return (s[hi] - s[lo]) / 2
    return {"bias": (error.mean(), error.std() / math.sqrt(m)),
            "median_error": (float(np.median(error)), quantile_se(error, 0.5)),
            "rmse": (rmse, np.std(error ** 2) / (2 * rmse * math.sqrt(m))),
            "coverage": (cover.mean(), math.sqrt(max(cover.mean() * (1 - cover.mean()), 1e-12) / m)),
            "width_median": (float(np.median(width)), quantile_se(width, 0.5)),
            "width_p90": (float(np.quantile(width, 0.9)), quantile_se(width, 0.9))}


def run(studies, seed, chunk=500):
    rng = np.random.default_rng(seed)
    rows = []
    for rho in (0.3, 0.6, 0.9):
        for label, truth in TRUTHS.items():
            xs, covs = [], []
            for start in range(0, studies, chunk):
                x, cov = simulate(truth, rho, min(chunk, studies - start), rng)
                xs.append(x)
                covs.append(cov)
            x, cov = np.concatenate(xs), np.concatenate(covs)
            mu = np.asarray(truth)[np.argmax(x, axis=1)]
            srt = np.sort(x, axis=1)
            sd = np.sqrt(np.take_along_axis(np.diagonal(cov, axis1=1, axis2=2), np.argmax(x, axis=1)[:, None], 1)[:, 0])
            tie = (srt[:, -1] - srt[:, -2]) < 0.5 * sd
            for method, beta in (("conditional", 0.0), ("hybrid", None)):
                res = winner_inference(x, cov, step=1 / 1000, beta=beta)
                err, lo, hi = 100 * (res["estimate"] - mu / 100), 100 * res["low"], 100 * res["high"]
                rows.append({"rho": rho, "truth": label, "method": method, "all": summary(err, lo, hi, mu),
                             "near_tie": summary(err[tie], lo[tie], hi[tie], mu[tie]), "near_ties": int(tie.sum())})
            raw = 100 * x.max(axis=1) - mu
            half = 1.959963984540054 * 100 * sd
            rows.append({"rho": rho, "truth": label, "method": "raw",
                         "all": summary(raw, 100 * x.max(axis=1) - half, 100 * x.max(axis=1) + half, mu),
                         "near_tie": summary(raw[tie], (100 * x.max(axis=1) - half)[tie],
                                             (100 * x.max(axis=1) + half)[tie], mu[tie]),
                         "near_ties": int(tie.sum())})
    return rows


def fmt(v, pct=False):
    return f"{100 * v[0]:.1f}% ± {100 * v[1]:.1f}" if pct else f"{v[0]:+.2f} ± {v[1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows = run(args.studies, args.seed)
    print(f"{args.studies} studies per row, seed {args.seed}, ± one Monte-Carlo SE; "
          f"{time.perf_counter() - t0:.1f} s")
    head = "| ρ | true Δ | method | bias pp | median error pp | RMSE pp | coverage | median width pp | 90th pct width pp |"
    for part in ("all", "near_tie"):
        print(f"\n{'All studies' if part == 'all' else 'Near ties (lead < 0.5 SE)'}\n{head}\n|" + "---|" * 9)
        for r in rows:
            s = r[part]
            extra = f" (n={r['near_ties']})" if part == "near_tie" else ""
            print(f"| {r['rho']} | {r['truth']}{extra} | {r['method']} | {fmt(s['bias'])} | {fmt(s['median_error'])} | "
                  f"{fmt(s['rmse'])} | {fmt(s['coverage'], True)} | {fmt(s['width_median'])} | {fmt(s['width_p90'])} |")


if __name__ == "__main__":
    main()
