"""The compare stage: per-item results of a baseline and one or more new runs, paired and tested.

:func:`compare_files` reads every file (:mod:`rlexp.evaluation.harnesses`: rlexp records, lm-eval
samples, Inspect logs, lighteval details), pairs each new run with the baseline
(:func:`pair_items`), analyses each pair (:func:`analyse`) and, with several new runs,
Holm-adjusts the p-values over the family. Everything is read and checked before anything is
written.

Pairing joins two item sets by key and checks that each pair is the same item: a differing
content fingerprint is always an error (it is how lm-eval's out-of-order ``--samples`` bug, which
logs the wrong ``doc_id``, shows itself); a differing prompt hash is an error unless allowed, and
then counted; different key sets are an error unless ``--intersect``, and then every dropped key is
reported.

Analysis: when every item of both runs has one 0/1 score (C/I, booleans, 0/1), the SOP's paired
binary analysis (:func:`rlexp.stats.compare_counts`: McNemar, paired bootstrap, Wilson CIs, MDE).
Otherwise — partial credit, several epochs or samples per item — the mean-score mode of
:mod:`rlexp.stats` (:func:`~rlexp.stats.mean_score_comparison`) on per-item means. ``cluster`` makes p, the CI of Δ, the MDE and
the power cluster-robust (CR1 SE, t with G − 1 degrees of freedom); the item-level figures are
kept beside them with the suffix ``_naive``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.harnesses.items import Choice, Item, ItemSet, samples_per_item

# Below this many discordant pairs the BCa interval of the paired difference under-covers: a
# simulation measured 92.8% coverage for a nominal 95% with about 10, while the percentile interval
# held 95-96%. 30 is a conservative round number above that point, not a calibrated threshold.
BCA_MIN_DISCORDANT = 30


def compare_files(files: list[Path], *, fmt: str | None = None, choice: Choice | None = None,
                  intersect: bool = False, allow_prompt_change: bool = False, cluster: str | None = None,
                  mean_score: bool = False, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
                  method: str = "percentile", paired_out: Path | None = None) -> list[dict[str, Any]]:
    """One result dict per new file (compared with ``files[0]``); ``p_holm`` when there are several."""
    from rlexp.evaluation.harnesses import FORMATS, read_items
    from rlexp.stats import adjust_pvalues

    if method not in ("percentile", "basic", "bca", "newcombe"):
        raise InputError(None, "--method", f"must be percentile, basic, bca or newcombe, got {method!r}")
    if fmt is not None and fmt not in FORMATS:
        raise InputError(None, "--format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if len(files) < 2:
        raise InputError(None, "FILES", "need the baseline and at least one file to compare with it")
    if paired_out is not None:
        from rlexp.experiment.files import refuse_output_onto_inputs

        paired_out = refuse_output_onto_inputs(paired_out, files, "--paired-out")
    sets = [read_items(path, fmt, choice, intersect=intersect) for path in files]
    pairs = [pair_items(sets[0], new, intersect=intersect, allow_prompt_change=allow_prompt_change)
             for new in sets[1:]]
    if paired_out is not None and (len(pairs) != 1 or mean_score or not is_binary(pairs[0])):
        raise InputError(None, "--paired-out", "only for two files whose items are scored 0/1 once each")
    results = []
    for paired in pairs:
        result = analyse(paired, resamples=resamples, seed=seed, confidence=confidence, method=method,
                         cluster=cluster, mean_mode=mean_score)
        result.update({
            "base": paired.base.path, "new": paired.new.path,
            "dropped_base_only": paired.dropped_base_only, "dropped_new_only": paired.dropped_new_only,
            "prompt_changed": paired.prompt_changed,
            "dropped": ([{"file": s.path, **d} for s in (paired.base, paired.new) for d in s.dropped]
                        + [{"file": paired.base.path if d["reason"] == "only in the baseline" else paired.new.path, **d}
                           for d in paired.dropped]),
            "sources": {"base": paired.base.provenance(), "new": paired.new.provenance()},
        })
        results.append(result)
    if len(results) > 1:
        adjusted = adjust_pvalues([r["p_value"] for r in results], method="holm")
        for result, p_holm in zip(results, adjusted, strict=True):
            result["p_holm"] = float(p_holm)
    if paired_out is not None:
        from rlexp.experiment.paired import PairedRecord, write_paired_records

        (paired,) = pairs
        records = [PairedRecord(b.key, int(b.scores[0]), int(n.scores[0]), b.output, n.output)
                   for b, n in zip(paired.base_items, paired.new_items, strict=True)]
        write_paired_records(paired_out, records)
        results[0]["paired_records"] = str(paired_out)
    return results


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
                             f"scored different documents under one id ({_content_cause(new, key, b)}); not comparable")
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


def _content_cause(items: ItemSet, key: str, base_item: Item | None = None) -> str:
    """Why two runs' items under one id can hold different content, for this harness."""
    if items.format == "lm-eval":
        return "lm-eval's out-of-order --samples logs wrong doc_ids, or the task's documents changed"
    if items.format == "inspect":
        return ("the target differs" if not key.rsplit(":", 1)[-1].isdigit() else
                "an int id may be a position Inspect assigned: a reordered dataset renumbers it, and an edited "
                "prompt or target changes the item")
    if items.format == "lighteval":
        from rlexp.evaluation.harnesses.lighteval import content_cause

        if base_item is not None:
            return content_cause(base_item, items.items[key])
        return "lighteval's ids are positions in the split: a reordered or edited dataset renumbers them"
    return "the problem's content differs"


def cluster_labels(paired: PairedItems, field_name: str) -> list[Any]:
    """The ``field_name`` value of each paired item (from the baseline's doc or metadata)."""
    labels = []
    for item in paired.base_items:
        if field_name not in item.fields:
            offered = ", ".join(sorted(item.fields)) or "none"
            raise InputError(paired.base.path, item.key, f"no scalar field {field_name!r} for --cluster (fields: {offered})")
        labels.append(item.fields[field_name])
    return labels




def is_binary(paired: PairedItems) -> bool:
    return all(i.binary for i in paired.base_items) and all(i.binary for i in paired.new_items)


def analyse(paired: PairedItems, *, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
            method: str = "percentile", cluster: str | None = None, mean_mode: bool = False) -> dict[str, Any]:
    """The paired comparison of ``paired`` as a flat dict (see the module docstring)."""
    labels = cluster_labels(paired, cluster) if cluster else None
    if is_binary(paired) and not mean_mode:
        out = _binary(paired, resamples=resamples, seed=seed, confidence=confidence, method=method)
    else:
        if method == "newcombe":
            raise InputError(paired.new.path, "--method", "newcombe is an interval for 0/1 outcomes scored once per "
                                                          "item; the mean-score mode takes percentile, basic or bca")
        from rlexp.stats import mean_score_comparison

        out = mean_score_comparison([i.mean for i in paired.base_items], [i.mean for i in paired.new_items],
                                    resamples=resamples, seed=seed, confidence=confidence, method=method)
    if labels is not None:
        _clustered(out, paired, labels, cluster, confidence)
    out["samples_per_item"] = {"base": samples_per_item(paired.base_items), "new": samples_per_item(paired.new_items)}
    return out


def _clustered(out: dict[str, Any], paired: PairedItems, labels: list[Any], field_name: str,
               confidence: float) -> None:
    """With ``--cluster``: p, CI, MDE and power from the CR1 clustered SE with G − 1 degrees of freedom
    (:func:`rlexp.stats.clustered_se`); the item-level figures stay beside them as
    ``*_naive``, and a warning below ``CLUSTER_WARN_BELOW`` clusters."""
    from rlexp.stats import CLUSTER_WARN_BELOW, clustered_se

    base = [b.mean for b in paired.base_items]
    new = [n.mean for n in paired.new_items]
    unit = all(0.0 <= x <= 1.0 for x in base + new)
    res = clustered_se(base, new, labels, confidence=confidence, unit=unit)
    out.update(res)
    out["cluster_field"] = field_name
    binary = out["mode"] == "binary"
    naive = {"p_value": out["p_value"], "ci_method": out["ci_method"], "ci": out.get("ci"), "ci_pp": out.get("ci_pp"),
             "mde": out.get("mde"), "mde_pp": out.get("mde_pp"), "power_at_3pp": out.get("power_at_3pp")}
    out.update({f"{k}_naive": v for k, v in naive.items() if k in out})
    g = res["n_clusters"]
    ci = res["ci_clustered"]
    scale = 100.0 if unit else 1.0
    mde = res["mde_clustered"]
    out["p_value"] = res["p_clustered"] if res["p_clustered"] is not None else 1.0
    out["test"] = f"cluster-robust t (CR1, {g} clusters, df {res['cluster_df']})"
    out["ci_method"] = "cluster-robust t"
    if binary:
        out["ci_pp"] = [ci[0] * 100.0, ci[1] * 100.0] if ci else None
        out["mde_pp"] = mde * 100.0 if mde is not None else None
    else:
        out["ci"] = ci
        out["ci_pp"] = [ci[0] * scale, ci[1] * scale] if (ci and unit) else None
        out["mde"] = mde
        out["mde_pp"] = mde * 100.0 if (mde is not None and unit) else None
    out["power_at_3pp"] = res["power_at_3pp_clustered"]
    if binary:
        for key in ("gate_1b_pass_power_at_3pp", "gate_1b_effect_80_pp", "gate_1b_best_of_k_at_3pp"):
            out[f"{key}_naive"] = out.get(key)
        out.update(clustered_gate_power(res.get("se_clustered_cr1"), res.get("cluster_df")))
    warnings = out.setdefault("warnings", [])
    if g < 2:
        warnings.append(f"--cluster {field_name}: a single cluster; nothing can be inferred across clusters")
    elif g < CLUSTER_WARN_BELOW:
        warnings.append(f"--cluster {field_name}: only {g} clusters (< {CLUSTER_WARN_BELOW}): the CR1 t-test with "
                        f"{g - 1} df over-rejects when cluster sizes differ (a 5% test rejected 7.8% of true nulls "
                        "at 5 unequal clusters, 6.5% at 20, 5.6% at 30); read p and the interval as optimistic")


def clustered_gate_power(se: float | None, df: int | None) -> dict[str, Any]:
    """Gate-1b's pass figures under the clustered test, from the noncentral t of the clustered power
    beside them (:func:`rlexp.stats.clustered_gate_figures`, the SOP in force's Gate-1b and K)."""
    from rlexp.spec.sop import load_sop
    from rlexp.stats import clustered_gate_figures

    if not se or not df or se <= 0:
        return {"gate_1b_pass_power_at_3pp": None, "gate_1b_effect_80_pp": None, "gate_1b_best_of_k_at_3pp": None}
    sop = load_sop()
    fig = clustered_gate_figures(100.0 * se, df, min_delta_pp=sop.gate_1b.min_delta_pp,
                                 max_p=sop.gate_1b.max_mcnemar_p, k=sop.checkpoints.k)
    return {"gate_1b_pass_power_at_3pp": fig["gate_1b_pass_power_at_win_threshold"],
            "gate_1b_effect_80_pp": fig["gate_1b_effect_80_pp"],
            "gate_1b_best_of_k_at_3pp": fig["gate_1b_best_of_k_at_win_threshold"]}


def _binary(paired: PairedItems, **kwargs: Any) -> dict[str, Any]:
    from rlexp.stats import compare_counts, paired_counts

    y_base = [int(i.scores[0]) for i in paired.base_items]
    y_new = [int(i.scores[0]) for i in paired.new_items]
    out = compare_counts(paired_counts(y_base, y_new), **kwargs).to_dict()
    out["mode"] = "binary"
    out.update(_gate_power(out["n"], out["discordance"]))
    discordant = out["b"] + out["c"]
    if kwargs.get("method") == "bca" and discordant < BCA_MIN_DISCORDANT:
        out["warnings"] = [f"BCa interval with only {discordant} discordant pairs: it under-covers there (about "
                           "93% for a nominal 95% with 10); the percentile interval (the default) and Newcombe's "
                           "interval (--method newcombe) hold their level"]
    out["test"] = "McNemar exact"
    out["p_value"] = out["mcnemar_p"]
    return out


def _gate_power(n: int, discordance: float) -> dict[str, Any]:
    """Beside the test's power: the chance that a true +3 pp passes Gate-1b at this n and observed
    discordance for one checkpoint, and the true effect that passes it with 80%
    (:func:`rlexp.stats.gate_1b_pass_probability`); and for the best of the SOP's K checkpoints of one run, one
    rate per latent correlation 0.3, 0.6, 0.9 (:func:`rlexp.protocol.calibrate.gate_1b_best_of_k`)."""
    from rlexp.protocol.calibrate import DEFAULT_CORRELATIONS, gate_1b_best_of_k
    from rlexp.spec.sop import load_sop
    from rlexp.stats import gate_1b_effect_for_power, gate_1b_pass_probability

    if discordance <= 0.0:
        return {"gate_1b_pass_power_at_3pp": None, "gate_1b_effect_80_pp": None, "gate_1b_best_of_k_at_3pp": None}
    sop = load_sop()
    gate = sop.gate_1b
    limits = {"min_delta_pp": gate.min_delta_pp, "max_mcnemar_p": gate.max_mcnemar_p}
    at_3pp = gate_1b_pass_probability(3.0, n, discordance, **limits) if discordance >= 0.03 else None
    best = gate_1b_best_of_k(3.0, n, discordance, k=sop.checkpoints.k, **limits) if discordance >= 0.03 else None
    return {"gate_1b_pass_power_at_3pp": at_3pp,
            "gate_1b_effect_80_pp": gate_1b_effect_for_power(n, discordance, **limits),
            "gate_1b_best_of_k_at_3pp": ({"k": sop.checkpoints.k, "correlations": list(DEFAULT_CORRELATIONS),
                                          "rates": list(best)} if best is not None else None)}
