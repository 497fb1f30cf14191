"""How often do the SOP's gates pass when nothing works, and when a real +3pp effect exists?

``rlexp sop calibrate`` simulates paired studies shaped like the final comparison of the campaign
behind the SOP (sop/README.md, "Calibration"): N=1000 problems, a baseline with true accuracy
drawn uniformly from 67-74%, about 12% of problems discordant between a checkpoint and the
baseline, and K=3 checkpoints of one run that are correlated with each other (they share most
of their flips, as checkpoints of one run do).

Model, per simulated study: baseline outcomes y0_i ~ Bernoulli(p0). A checkpoint flips a problem
the baseline got right with probability q1 = (d - delta) / (2 p0) and one it got wrong with
probability q0 = (d + delta) / (2 (1 - p0)), so the expected discordance is d and the true
effect is delta. Flips of the K checkpoints are correlated through a Gaussian copula: checkpoint
k flips problem i when sqrt(rho) Z_i + sqrt(1 - rho) E_ik < Phi^-1(q). A second seed (for
Gate-2) is an independent run against the same baseline outcomes.

Each study is then judged by the same rules as ``rlexp.core.gates`` (vectorised here; a test checks
the vectorised verdicts against the scalar gates on simulated studies). Everything is numpy,
seeded, and takes seconds for thousands of studies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlexp.core.gates import EPS
from rlexp.core.sop import Sop


@dataclass(frozen=True)
class CalibrationSettings:
    sims: int = 2000
    seed: int = 0
    n: int = 1000
    base_acc_low: float = 0.67
    base_acc_high: float = 0.74
    discordance: float = 0.12
    k: int = 3
    rho: float = 0.6                 # correlation of the flip propensities of two checkpoints of one run
    effect_pp: float = 3.0           # the true effect of the alternative scenario
    resamples: int = 2000            # bootstrap resamples per simulated comparison
    chunk: int = 250                 # studies simulated at once (memory: chunk * n * k floats)


@dataclass(frozen=True)
class CalibrationRow:
    gate: str
    scenario: str                    # "null (0pp)" or "+3pp"
    per_checkpoint: float            # mean pass rate of a single pre-registered checkpoint
    best_of_k: float                 # any of the K checkpoints passes
    holm_best_of_k: float | None     # any passes with Holm-adjusted p (None: rule has no p)
    mc_se: float                     # Monte-Carlo standard error of per_checkpoint


@dataclass(frozen=True)
class Calibration:
    settings: CalibrationSettings
    sop_version: str
    sop_sha256: str
    rows: tuple[CalibrationRow, ...]
    mean_discordance: float
    mean_base_acc: float

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"settings": asdict(self.settings), "sop_version": self.sop_version, "sop_sha256": self.sop_sha256,
                "mean_discordance": self.mean_discordance, "mean_base_acc": self.mean_base_acc,
                "rows": [asdict(r) for r in self.rows]}

    def markdown(self) -> str:
        s = self.settings
        lines = [
            f"Simulated paired studies: {s.sims} per scenario, seed {s.seed}, N={s.n}, baseline accuracy "
            f"U({s.base_acc_low:.2f}, {s.base_acc_high:.2f}) (mean {self.mean_base_acc:.3f}), discordance "
            f"{s.discordance:.2f} (observed {self.mean_discordance:.3f}), K={s.k} checkpoints with flip "
            f"correlation rho={s.rho}, {s.resamples} bootstrap resamples, SOP {self.sop_version}.",
            "",
            "| gate | true effect | per checkpoint | best of K | best of K, Holm p | MC s.e. |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            holm = f"{100 * r.holm_best_of_k:.2f}%" if r.holm_best_of_k is not None else "-"
            lines.append(f"| {r.gate} | {r.scenario} | {100 * r.per_checkpoint:.2f}% | {100 * r.best_of_k:.2f}% "
                         f"| {holm} | {100 * r.mc_se:.2f}% |")
        return "\n".join(lines) + "\n"


def simulate_counts(settings: CalibrationSettings, effect_pp: float, rng: Any, sims: int) -> dict[str, Any]:
    """b and c per (study, run, checkpoint) for ``sims`` studies; two runs (seeds) per study."""
    import numpy as np
    from scipy.special import ndtri

    s = settings
    delta = effect_pp / 100.0
    p0 = rng.uniform(s.base_acc_low, s.base_acc_high, size=sims)
    y0 = rng.random((sims, s.n)) < p0[:, None]
    q1 = np.clip((s.discordance - delta) / (2 * p0), 1e-12, 1 - 1e-12)
    q0 = np.clip((s.discordance + delta) / (2 * (1 - p0)), 1e-12, 1 - 1e-12)
    threshold = np.where(y0, ndtri(q1)[:, None], ndtri(q0)[:, None])  # (sims, n)
    b = np.empty((sims, 2, s.k), dtype=np.int64)
    c = np.empty((sims, 2, s.k), dtype=np.int64)
    for run in range(2):
        shared = rng.standard_normal((sims, s.n, 1), dtype=np.float32)
        own = rng.standard_normal((sims, s.n, s.k), dtype=np.float32)
        flips = np.sqrt(s.rho) * shared + np.sqrt(1 - s.rho) * own < threshold[:, :, None]
        b[:, run] = np.sum(flips & y0[:, :, None], axis=1)
        c[:, run] = np.sum(flips & ~y0[:, :, None], axis=1)
    return {"b": b, "c": c, "base_acc": y0.mean(axis=1)}


def mcnemar_exact_vec(b: Any, c: Any) -> Any:
    """Exact two-sided McNemar p for arrays of (b, c): min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))."""
    import numpy as np
    from scipy.stats import binom

    m = b + c
    p = np.minimum(1.0, 2.0 * binom.cdf(np.minimum(b, c), np.maximum(m, 1), 0.5))
    return np.where(m == 0, 1.0, p)


def holm_vec(p: Any) -> Any:
    """Holm-adjusted p along the last axis (:func:`rlexp.stats.adjust_pvalues`)."""
    from rlexp.stats import adjust_pvalues

    return adjust_pvalues(p, method="holm", axis=-1)


def bootstrap_ci_low_vec(b: Any, c: Any, n: int, resamples: int, confidence: float, rng: Any) -> Any:
    """Percentile-bootstrap CI low bound (pp) for arrays of (b, c), same draw as rlexp.stats."""
    import numpy as np

    flat_b, flat_c = b.ravel(), c.ravel()
    m_total = flat_b + flat_c
    p_disc = m_total / n
    p_win = np.divide(flat_c, m_total, out=np.zeros(len(flat_c)), where=m_total > 0)
    m = rng.binomial(n, p_disc[None, :], size=(resamples, len(flat_b)))
    wins = rng.binomial(m, p_win[None, :])
    low = np.quantile(2 * wins - m, (1 - confidence) / 2, axis=0)
    return (100.0 * low / n).reshape(b.shape)


def gate_passes(delta_pp: Any, p: Any, ci_low: Any, gate: Any, *, ci_is_alternative: bool) -> Any:
    """Vectorised Gate-1a (``ci_is_alternative``: p OR CI) / Gate-1b (p AND CI), rlexp.core.gates semantics."""
    delta_ok = delta_pp >= gate.min_delta_pp - EPS
    p_ok = p < gate.max_mcnemar_p - EPS
    ci_ok = ci_low > gate.min_ci_low_pp + EPS
    return delta_ok & ((p_ok | ci_ok) if ci_is_alternative else (p_ok & ci_ok))


def judge(b: Any, c: Any, n: int, sop: Sop, resamples: int, rng: Any) -> dict[str, Any]:
    """Gate verdicts for simulated (b, c) of shape (sims, 2 runs, K)."""
    import numpy as np

    delta = 100.0 * (c - b) / n
    p = mcnemar_exact_vec(b, c)
    holm = holm_vec(p)
    # The CI only matters where delta can pass a gate; bootstrap just those comparisons (the first
    # seed's; the second seed enters only through its delta).
    ci_low = np.full(delta.shape, -np.inf)
    need = delta >= min(sop.gate_1a.min_delta_pp, sop.gate_1b.min_delta_pp) - EPS
    need[:, 1:, :] = False
    if need.any():
        ci_low[need] = bootstrap_ci_low_vec(b[need], c[need], n, resamples, sop.bootstrap.confidence, rng)
    out = {
        "gate_1a": gate_passes(delta, p, ci_low, sop.gate_1a, ci_is_alternative=True),
        "gate_1b": gate_passes(delta, p, ci_low, sop.gate_1b, ci_is_alternative=False),
        "gate_1a_holm": gate_passes(delta, holm, ci_low, sop.gate_1a, ci_is_alternative=True),
        "gate_1b_holm": gate_passes(delta, holm, ci_low, sop.gate_1b, ci_is_alternative=False),
        "mcnemar_p<0.05": p < 0.05,
    }
    # STOP-1 = Gate-1b on the first seed (any checkpoint) AND Gate-2 over both seeds' primary deltas
    # (the primary checkpoint is the one with the largest delta, as rlexp decide records it).
    g2 = sop.gate_2
    primary = delta.max(axis=2)  # (sims, 2)
    gate2 = np.all(primary > g2.min_each_delta_pp + EPS, axis=1) & (primary.mean(axis=1) >= g2.min_mean_delta_pp - EPS)
    out["stop_1"] = out["gate_1b"][:, 0, :].any(axis=1) & gate2
    out["delta"] = delta
    return out


def calibrate(sop: Sop, settings: CalibrationSettings | None = None) -> Calibration:
    """Pass rates of each gate under no effect and under ``settings.effect_pp``, seeded."""
    import numpy as np

    s = settings or CalibrationSettings()
    rng = np.random.default_rng(s.seed)
    rows: list[CalibrationRow] = []
    disc: list[float] = []
    accs: list[float] = []
    for scenario, effect in (("null (0pp)", 0.0), (f"{s.effect_pp:+g}pp", s.effect_pp)):
        tallies: dict[str, list[Any]] = {}
        done = 0
        while done < s.sims:
            size = min(s.chunk, s.sims - done)
            sim = simulate_counts(s, effect, rng, size)
            verdicts = judge(sim["b"], sim["c"], s.n, sop, s.resamples, rng)
            if effect == 0.0:
                disc.append(float(((sim["b"] + sim["c"]) / s.n).mean()))
                accs.append(float(sim["base_acc"].mean()))
            for key, value in verdicts.items():
                if key != "delta":
                    tallies.setdefault(key, []).append(value)
            done += size
        joined = {k: np.concatenate(v, axis=0) for k, v in tallies.items()}
        for gate in ("gate_1a", "gate_1b", "mcnemar_p<0.05"):
            first = joined[gate][:, 0, :]  # the first seed's K checkpoints
            per = float(first.mean())
            holm = joined.get(f"{gate}_holm")
            rows.append(CalibrationRow(
                gate={"gate_1a": "Gate-1a", "gate_1b": "Gate-1b"}.get(gate, "McNemar p<0.05 alone"),
                scenario=scenario, per_checkpoint=per, best_of_k=float(first.any(axis=1).mean()),
                holm_best_of_k=float(holm[:, 0, :].any(axis=1).mean()) if holm is not None else None,
                mc_se=float(np.sqrt(per * (1 - per) / s.sims)),
            ))
        stop1 = float(joined["stop_1"].mean())
        rows.append(CalibrationRow("STOP-1 (1b + Gate-2)", scenario, stop1, stop1, None,
                                   float(np.sqrt(stop1 * (1 - stop1) / s.sims))))
    return Calibration(s, sop.version, sop.sha256, tuple(rows), float(np.mean(disc)), float(np.mean(accs)))
