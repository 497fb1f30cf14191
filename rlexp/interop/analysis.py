"""Pairing two item sets, and the paired analysis of per-item scores.

Pairing (:func:`pair_items`) joins a baseline and a new item set by key and checks that each
pair is the same item: a differing content fingerprint is always an error (it is how lm-eval's
out-of-order ``--samples`` bug, which logs the wrong ``doc_id``, shows itself); a differing
prompt hash is an error unless allowed, and then counted; different key sets are an error unless
``--intersect``, and then every dropped key is reported.

Analysis (:func:`analyse`): when every item of both runs has one 0/1 score (C/I, booleans, 0/1),
the SOP's paired binary analysis (:func:`rlexp.stats.compare_counts`: McNemar, paired bootstrap,
Wilson CIs, MDE). Otherwise — partial credit, several epochs or samples per item — the mean-score
mode: per-item means, d_i = new_i − base_i, Δ = mean(d), SE = sd(d)/√n, a paired t-test on d
(df = n − 1), the paired bootstrap CI of Δ (items resampled with replacement), and the number of
samples per item. ``cluster`` adds the cluster-robust SE of Δ (items in the same cluster — a
passage, a source document — are not independent). :func:`holm` adjusts a family's p-values.

The statistics here are kept apart from :mod:`rlexp.stats` on purpose: only the functions below
would change if that module's API did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from rlexp.errors import InputError
from rlexp.interop.items import Item, ItemSet, samples_per_item

_Z = NormalDist()
WIN_THRESHOLD_PP = 3.0  # the SOP's default win threshold (rlexp.core.power.WIN_THRESHOLD_PP)


@dataclass
class PairedItems:
    base: ItemSet
    new: ItemSet
    keys: list[str]
    base_items: list[Item]
    new_items: list[Item]
    dropped: list[dict[str, str]] = field(default_factory=list)
    prompt_changed: int = 0

    @property
    def dropped_base_only(self) -> int:
        return sum(1 for d in self.dropped if d["reason"] == "only in the baseline")

    @property
    def dropped_new_only(self) -> int:
        return sum(1 for d in self.dropped if d["reason"] == "only in the new file")


def pair_items(base: ItemSet, new: ItemSet, *, intersect: bool = False,
               allow_prompt_change: bool = False) -> PairedItems:
    base_only = [k for k in base.items if k not in new.items]
    new_only = [k for k in new.items if k not in base.items]
    if (base_only or new_only) and not intersect:
        example = (base_only or new_only)[0]
        raise InputError(new.path, "items", f"item sets differ from {base.path}: {len(base_only)} only in the "
                         f"baseline, {len(new_only)} only in the new file (e.g. {example[:40]}); compare the "
                         "common items only with --intersect")
    keys = [k for k in base.items if k in new.items]
    if not keys:
        raise InputError(new.path, "items", f"no item in common with {base.path}")
    changed = []
    for key in keys:
        b, n = base.items[key], new.items[key]
        if b.fingerprint != n.fingerprint:
            raise InputError(new.path, key, f"its content differs from the baseline's ({base.path}): the two runs "
                             "scored different documents under one id (lm-eval's out-of-order --samples logs wrong "
                             "doc_ids; a reordered dataset renumbers Inspect's positional ids); not comparable")
        if b.prompt_hash is not None and n.prompt_hash is not None and b.prompt_hash != n.prompt_hash:
            changed.append(key)
    if changed and not allow_prompt_change:
        raise InputError(new.path, "prompt_hash", f"{len(changed)} of {len(keys)} items were asked with a different "
                         f"prompt than in the baseline (e.g. {changed[0]}): a prompt change confounds the comparison; "
                         "compare anyway with --allow-prompt-change")
    dropped = ([{"key": k, "reason": "only in the baseline"} for k in base_only]
               + [{"key": k, "reason": "only in the new file"} for k in new_only])
    return PairedItems(base, new, keys, [base.items[k] for k in keys], [new.items[k] for k in keys], dropped,
                       len(changed))


def cluster_labels(paired: PairedItems, field_name: str) -> list[Any]:
    """The ``field_name`` value of each paired item (from the baseline's doc or metadata)."""
    labels = []
    for item in paired.base_items:
        if field_name not in item.fields:
            offered = ", ".join(sorted(item.fields)) or "none"
            raise InputError(paired.base.path, item.key, f"no scalar field {field_name!r} for --cluster (fields: {offered})")
        labels.append(item.fields[field_name])
    return labels


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (as statsmodels' ``multipletests(method="holm")``)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def is_binary(paired: PairedItems) -> bool:
    return all(i.binary for i in paired.base_items) and all(i.binary for i in paired.new_items)


def analyse(paired: PairedItems, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
            method: str = "percentile", cluster: str | None = None, mean_mode: bool = False) -> dict[str, Any]:
    """The paired comparison of ``paired`` as a flat dict (see the module docstring)."""
    labels = cluster_labels(paired, cluster) if cluster else None
    if is_binary(paired) and not mean_mode:
        out = _binary(paired, resamples=resamples, seed=seed, confidence=confidence, method=method)
    else:
        out = mean_score_comparison([i.mean for i in paired.base_items], [i.mean for i in paired.new_items],
                                    resamples=resamples, seed=seed, confidence=confidence, method=method)
    if labels is not None:
        out.update(clustered_se([b.mean for b in paired.base_items], [n.mean for n in paired.new_items], labels))
        out["cluster_field"] = cluster
    out["samples_per_item"] = {"base": samples_per_item(paired.base_items), "new": samples_per_item(paired.new_items)}
    return out


def _binary(paired: PairedItems, **kwargs: Any) -> dict[str, Any]:
    from rlexp.stats import compare_counts, paired_counts

    y_base = [int(i.scores[0]) for i in paired.base_items]
    y_new = [int(i.scores[0]) for i in paired.new_items]
    out = compare_counts(paired_counts(y_base, y_new), **kwargs).to_dict()
    out["mode"] = "binary"
    out["test"] = "McNemar exact"
    out["p_value"] = out["mcnemar_p"]
    return out


def mean_score_comparison(base_means: Sequence[float], new_means: Sequence[float], *, resamples: int = 10_000,
                          seed: int = 0, confidence: float = 0.95, method: str = "percentile") -> dict[str, Any]:
    """Paired comparison of per-item mean scores: Δ, SE = sd(d)/√n, paired t-test, paired bootstrap CI."""
    import numpy as np
    from scipy import stats as sps

    base = np.asarray(base_means, dtype=float)
    new = np.asarray(new_means, dtype=float)
    d = new - base
    n = len(d)
    if n < 2:
        raise InputError(None, "items", f"the mean-score mode needs at least 2 paired items, got {n}")
    delta = float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    if se > 0:
        t = delta / se
        p = float(2.0 * sps.t.sf(abs(t), df=n - 1))
    else:  # every item moved by the same amount: no sampling variability to test against
        t = math.inf if delta else 0.0
        p = 0.0 if delta else 1.0
    ci = paired_bootstrap_ci(d, resamples=resamples, seed=seed, confidence=confidence, method=method)
    unit = all(0.0 <= x <= 1.0 for x in np.concatenate([base, new]))
    z = _Z.inv_cdf(0.975) + _Z.inv_cdf(0.8)
    mde = z * se if se > 0 else None
    power3 = None
    if unit and se > 0:
        shift = (WIN_THRESHOLD_PP / 100.0) / se
        power3 = _Z.cdf(shift - _Z.inv_cdf(0.975)) + _Z.cdf(-shift - _Z.inv_cdf(0.975))
    scale = 100.0 if unit else 1.0
    return {
        "mode": "mean-score", "test": "paired t", "n": n,
        "mean_base": float(base.mean()), "mean_new": float(new.mean()),
        "delta": delta, "delta_pp": delta * 100.0 if unit else None,
        "sd_d": sd, "se": se, "se_pp": se * 100.0 if unit else None,
        "t": t if math.isfinite(t) else None, "df": n - 1, "p_value": p,
        "ci": [ci[0], ci[1]], "ci_pp": [ci[0] * scale, ci[1] * scale] if unit else None,
        "ci_method": method, "confidence": confidence, "resamples": resamples, "seed": seed,
        "items_improved": int((d > 0).sum()), "items_worse": int((d < 0).sum()),
        "mde": mde, "mde_pp": mde * 100.0 if (mde is not None and unit) else None,
        "power_at_3pp": power3,
    }


def paired_bootstrap_ci(d: Any, *, resamples: int, seed: int, confidence: float, method: str) -> tuple[float, float]:
    """CI of mean(d) by resampling items with replacement (the paired bootstrap). ``bca`` uses
    ``scipy.stats.bootstrap``; ``percentile`` is computed here in chunks (bounded memory)."""
    import numpy as np

    d = np.asarray(d, dtype=float)
    alpha = 1.0 - confidence
    if float(d.std()) == 0.0:
        return float(d[0]), float(d[0])
    if method == "bca":
        from scipy import stats as sps

        res = sps.bootstrap((d,), np.mean, n_resamples=resamples, confidence_level=confidence, method="BCa",
                            rng=np.random.default_rng(seed))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    rng = np.random.default_rng(seed)
    n = len(d)
    chunk = max(1, 2_000_000 // n)
    means = []
    done = 0
    while done < resamples:
        size = min(chunk, resamples - done)
        means.append(d[rng.integers(0, n, size=(size, n))].mean(axis=1))
        done += size
    lo, hi = np.quantile(np.concatenate(means), (alpha / 2, 1 - alpha / 2))
    return float(lo), float(hi)


def clustered_se(base_means: Sequence[float], new_means: Sequence[float], labels: Sequence[Any]) -> dict[str, Any]:
    """Cluster-robust SE of Δ = mean(d) (CR0: sqrt(Σ_g (Σ_{i∈g} (d_i − Δ))²) / n), via
    :func:`rlexp.stats.cluster_robust_mean`, with the naive SE beside it."""
    from rlexp.stats import cluster_robust_mean

    d = [n - b for b, n in zip(base_means, new_means, strict=True)]
    res = cluster_robust_mean(d, labels)
    return {"se_clustered": res.se, "n_clusters": res.n_clusters}
