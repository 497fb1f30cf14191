"""The regression flag's false-flag rate: one family per attempt, Holm within it (rlexp.protocol.decision.regressions).

Simulated attempts under the null: S0, the SOTA checkpoint, the parent's and the attempt's K = 3
checkpoints all have the same accuracy on every set (no checkpoint is truly worse than anything),
drawn problem by problem: a shared problem difficulty, a component shared by the three checkpoints
of one run (correlation ``rho``), and each model's own noise. The McNemar exact p-values are
computed here from the binomial CDF, not by rlexp. The family is what ``decide`` looks at: each
checkpoint against S0 and SOTA on the OOD and ID sets, and against the parent on the primary set
(15 comparisons). The bound is the flag's stated rate, 5% of attempts, within the Monte-Carlo error.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import binom

from rlexp.protocol.decision import regressions

ALPHA = 0.05


def null_attempts(attempts: int, rho: float, seed: int, n: int = 1000, accuracy: float = 0.7,
                  difficulty: float = 0.5) -> dict[str, np.ndarray]:
    """(attempts, n) outcomes per model and set; every model's accuracy is ``accuracy``."""
    rng = np.random.default_rng(seed)
    out = {}
    for role in ("ood_primary", "id"):
        u = rng.standard_normal((attempts, n))
        run = rng.standard_normal((attempts, n))
        for name in ("s0", "sota", "parent", "ck0", "ck1", "ck2"):
            own = rng.standard_normal((attempts, n))
            noise = math.sqrt(rho) * run + math.sqrt(1 - rho) * own if name.startswith("ck") else own
            out[(name, role)] = math.sqrt(difficulty) * u + math.sqrt(1 - difficulty) * noise < ndtri(accuracy)
    return out


def mcnemar(y_base: np.ndarray, y_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = (y_base & ~y_new).sum(axis=-1)
    c = (~y_base & y_new).sum(axis=-1)
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(b, c), b + c, 0.5))
    return np.where(b + c == 0, 1.0, p), 100.0 * (c - b) / y_base.shape[-1]


@pytest.mark.parametrize("rho", [0.3, 0.9])
def test_the_flag_fires_on_at_most_five_percent_of_null_attempts(rho):
    attempts = 2000
    y = null_attempts(attempts, rho, seed=int(rho * 10))
    stats = {}
    for k in range(3):
        for base in ("s0", "sota"):
            for role in ("ood_primary", "id"):
                stats[(f"baseline_{base}", f"ck{k}", role)] = mcnemar(y[(base, role)], y[(f"ck{k}", role)])
        stats[("parent", f"ck{k}", "ood_primary")] = mcnemar(y[("parent", "ood_primary")], y[(f"ck{k}", "ood_primary")])
    fired = raw_fired = 0
    for a in range(attempts):
        comparisons = {key: SimpleNamespace(delta_pp=float(d[a]), mcnemar_p=float(p[a]), ci_pp=(0.0, 0.0))
                       for key, (p, d) in stats.items() if key[0] != "parent"}
        parent = {key[1]: {"delta_pp": float(d[a]), "mcnemar_p": float(p[a]), "ci_pp": [0.0, 0.0]}
                  for key, (p, d) in stats.items() if key[0] == "parent"}
        flagged = regressions(comparisons, parent, alpha=ALPHA)
        assert all(r["family_size"] == 15 for r in flagged)
        fired += bool(flagged)
        raw_fired += any(float(p[a]) < ALPHA and float(d[a]) < 0 for p, d in stats.values())
    rate, raw_rate = fired / attempts, raw_fired / attempts
    se = math.sqrt(max(rate * (1 - rate), ALPHA * (1 - ALPHA)) / attempts)
    assert rate <= ALPHA + 2 * se                 # the stated rate, within two Monte-Carlo SEs
    assert raw_rate > 0.08                        # the per-comparison rule it replaces fired far more often
