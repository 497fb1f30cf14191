"""`rlexp compare BASE NEW [NEW...]`: paired comparison of per-item results, from rlexp or another harness.

The files are rlexp record files (``problem_hash``, ``correct``), lm-evaluation-harness
``--log_samples`` files, Inspect logs (``.eval`` or ``.json``) or lighteval details (parquet);
the format is detected from the content (``--format`` forces it). Items are paired by
``<task>:<id>`` and their content fingerprints must agree (see :mod:`rlexp.evaluation.harnesses`; the logic is
:mod:`rlexp.stages.compare`). Scores of
0/1 (C/I, booleans) get the SOP's paired binary analysis: Δ, b/c, McNemar exact p (and mid-p), the
paired bootstrap CI, Wilson CIs, the CLT SE and the minimal detectable effect. Partial credit or
several samples per item get the mean-score mode (paired t-test and bootstrap on per-item means).
With several new files, each is compared with the first (the baseline) and the p-values are
Holm-adjusted over the family. ``--json`` keys that scripts rely on (two files): n, acc_base,
acc_new, delta_pp, b, c, mcnemar_p, ci_pp; mean-score mode: n, mean_base, mean_new, delta, se,
p_value, ci; every mode: mode, p_value, sources, dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rlexp.commands.options import SEED, finite


def compare(
    files: Annotated[list[Path], typer.Argument(help="BASE NEW [NEW...]: per-item results; the first is the "
                                                "baseline.", show_default=False)],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    intersect: Annotated[bool, typer.Option("--intersect", help="Compare only the items all files can use, and "
                                            "report each one dropped and why (default: refuse).")] = False,
    fmt: Annotated[str | None, typer.Option("--format", help="rlexp, lm-eval, inspect or lighteval "
                                            "(default: detected from the content).")] = None,
    task: Annotated[str | None, typer.Option("--task", help="The task, where a file has several.")] = None,
    filter_: Annotated[str | None, typer.Option("--filter", help="lm-eval filter, where a file has several "
                                                "(e.g. strict-match, flexible-extract).")] = None,
    metric: Annotated[str | None, typer.Option("--metric", help="The metric, where a file has several.")] = None,
    scorer: Annotated[str | None, typer.Option("--scorer", help="Inspect scorer, where a log has several.")] = None,
    allow_prompt_change: Annotated[bool, typer.Option("--allow-prompt-change", help="Compare items asked with "
                                                      "a different prompt (counted) instead of refusing.")] = False,
    cluster: Annotated[str | None, typer.Option("--cluster", help="A doc or metadata field: also report the "
                                                "cluster-robust SE of Δ over its values.")] = None,
    mean_score: Annotated[bool, typer.Option("--mean-score", help="Use the mean-score mode (paired t) even "
                                             "for 0/1 scores.")] = False,
    seed: Annotated[int, typer.Option("--seed", **SEED, help="Bootstrap seed.")] = 0,
    resamples: Annotated[int, typer.Option("--resamples", min=100, max=1_000_000,
                                            help="Bootstrap resamples.")] = 10_000,
    confidence: Annotated[float, typer.Option("--confidence", callback=finite(0.5, 0.999))] = 0.95,
    method: Annotated[str, typer.Option("--method", help="CI of Δ: paired bootstrap percentile, basic or bca; or "
                                        "newcombe (Newcombe's hybrid score interval, 0/1 scores).")] = "percentile",
    paired_out: Annotated[Path | None, typer.Option("--paired-out", help="Also write the paired records "
                                                    "{problem_hash, y_baseline, y_new, output_baseline, "
                                                    "output_new} here (two files scored 0/1).")] = None,
) -> None:
    """Paired comparison of per-item results (Δ, b/c, McNemar or paired t, bootstrap CI; Holm over several)."""
    from rlexp.evaluation.harnesses import Choice
    from rlexp.stages.compare import compare_files

    results = compare_files(files, fmt=fmt, choice=Choice(task=task, filter=filter_, metric=metric, scorer=scorer),
                            intersect=intersect, allow_prompt_change=allow_prompt_change, cluster=cluster,
                            mean_score=mean_score, resamples=resamples, seed=seed, confidence=confidence,
                            method=method, paired_out=paired_out)
    output: dict[str, Any] = results[0] if len(results) == 1 else {
        "base": str(files[0]), "family": {"adjustment": "holm", "m": len(results)}, "comparisons": results}
    if json_out:
        typer.echo(json.dumps(output, indent=2, allow_nan=False))
        return
    for result in results:
        _print(result)


def _print(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{r['new']} vs {r['base']} (N={r['n']} paired items, {r['mode']})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    conf = f"{100 * r['confidence']:g}%"
    boot = f"paired bootstrap {conf} CI ({r['ci_method']}, {r['resamples']} resamples, seed {r['seed']})"
    if r["ci_method"] == "newcombe":
        boot = f"Newcombe hybrid score {conf} CI"
    clustered = "se_clustered" in r
    if clustered:
        g, df = r["n_clusters"], r["cluster_df"]
        boot = f"{conf} CI, cluster-robust t (CR1, df {df})"
    if r["mode"] == "binary":
        rows = [
            ("acc baseline", f"{r['acc_base']:.2%}  (Wilson {conf} [{r['acc_base_ci'][0]:.2%}, {r['acc_base_ci'][1]:.2%}])"),
            ("acc new", f"{r['acc_new']:.2%}  (Wilson {conf} [{r['acc_new_ci'][0]:.2%}, {r['acc_new_ci'][1]:.2%}])"),
            ("Δ = new − baseline", f"{r['delta_pp']:+.2f} pp"),
            ("b (baseline right, new wrong)", str(r["b"])),
            ("c (baseline wrong, new right)", str(r["c"])),
            ("McNemar exact p" + (" (items independent)" if clustered else ""), f"{r['mcnemar_p']:.4f}"),
            ("McNemar mid-p", f"{r['mcnemar_midp']:.4f}"),
            (boot, _interval(r["ci_pp"], "{:+.2f}", " pp")),
            ("SE (CLT)" + (" (items independent)" if clustered else ""), f"{r['se_pp']:.2f} pp"),
            (_mde_label(r), f"{r['mde_pp']:.2f} pp" if r["mde_pp"] is not None else "none within the discordance"),
            ("power at +3 pp" + (" (clustered)" if clustered else " (exact McNemar, observed discordance)"),
             _pct(r["power_at_3pp"])),
            ("Gate-1b pass probability at a true +3 pp, one checkpoint" + (" (clustered)" if clustered else ""),
             _pct(r["gate_1b_pass_power_at_3pp"])),
            (_best_label(r.get("gate_1b_best_of_k_at_3pp")), _range(r.get("gate_1b_best_of_k_at_3pp"))),
            ("true effect passing Gate-1b with 80%, one checkpoint",
             f"{r['gate_1b_effect_80_pp']:.2f} pp" if r["gate_1b_effect_80_pp"] is not None else "none"),
        ]
    else:
        rows = [
            ("mean score baseline", f"{r['mean_base']:.4f}"),
            ("mean score new", f"{r['mean_new']:.4f}"),
            ("Δ = new − baseline", f"{r['delta']:+.4f}"),
            ("SE = sd(d)/√n", f"{r['se']:.4f}"),
            (f"paired t (df {r['df']}) p" + (" (items independent)" if clustered else ""),
             f"{r['p_value_naive' if clustered else 'p_value']:.4f}"),
            (boot, _interval(r["ci"], "{:+.4f}", "")),
            ("items better / worse", f"{r['items_improved']} / {r['items_worse']}"),
            (_mde_label(r), f"{r['mde']:.4f}" if r["mde"] is not None else "-"),
            ("power at +3 pp" + (" (clustered)" if clustered else ""), _pct(r["power_at_3pp"])),
        ]
    spi = r["samples_per_item"]
    rows.append(("samples per item (base / new)", f"{_spi(spi['base'])} / {_spi(spi['new'])}"))
    if clustered:
        rows.append((f"clusters ({r['cluster_field']})", str(g)))
        scale, unit, digits = (100.0, " pp", 2) if r["mode"] == "binary" else (1.0, "", 4)
        cr1 = r["se_clustered_cr1"]
        rows.append(("SE clustered, CR0 / CR1", f"{scale * r['se_clustered']:.{digits}f} / "
                     + (f"{scale * cr1:.{digits}f}{unit}" if cr1 is not None else "-")))
        if r["mode"] == "binary":
            rows.append(("Gate-1b figures above", "clustered test (Δ bar and cluster-robust p)"))
        rows.append((f"cluster-robust t (CR1, df {df}) p",
                     f"{r['p_clustered']:.4f}" if r["p_clustered"] is not None else "-"))
    if "p_holm" in r:
        rows.append(("p, Holm-adjusted over the family", f"{r['p_holm']:.4f}"))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for role in ("base", "new"):
        s = r["sources"][role]
        chosen = ", ".join(f"{k} {v}" for k, v in s["chosen"].items() if v) or "-"
        console.print(f"{role}: {s['path']}: {s['format']} ({s['harness']} {s['harness_version'] or 'version unknown'})"
                      f", task {s['task'] or '-'}, {chosen}")
        for note in s["notes"]:
            console.print(f"  note: {note}")
        if s["no_answer_counted_as_0"]:
            console.print(f"  {s['no_answer_counted_as_0']} 'N' (no answer) value(s) counted as 0")
    for warning in r.get("warnings", []):
        console.print(f"warning: {warning}")
    if r["prompt_changed"]:
        console.print(f"--allow-prompt-change: {r['prompt_changed']} item(s) were asked with a different prompt")
    if r["dropped"]:
        console.print(f"--intersect dropped {len(r['dropped'])} item(s) ({r['dropped_base_only']} only in the "
                      f"baseline, {r['dropped_new_only']} only in the new file); --json lists each with its reason")


def _interval(ci: list[float] | None, fmt: str, unit: str) -> str:
    return f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]{unit}" if ci is not None else "-"


def _mde_label(r: dict[str, Any]) -> str:
    if "se_clustered" in r:
        return f"MDE at 80% power, α=0.05 (clustered, t with {r['cluster_df']} df)"
    return "MDE at 80% power, α=0.05" + (" (exact McNemar)" if r["mode"] == "binary" else "")


def _best_label(best: dict[str, Any] | None) -> str:
    if not best:
        return "Gate-1b pass probability at a true +3 pp, best of K"
    rhos = best["correlations"]
    return (f"Gate-1b pass probability at a true +3 pp, best of {best['k']} "
            f"(checkpoint correlation ρ {rhos[-1]:g} to {rhos[0]:g})")


def _range(best: dict[str, Any] | None) -> str:
    if not best:
        return "-"
    rates = best["rates"]
    return f"{rates[-1]:.0%}–{rates[0]:.0%}"


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def _spi(s: dict[str, float]) -> str:
    return str(s["min"]) if s["min"] == s["max"] else f"{s['min']}–{s['max']} (mean {s['mean']:.2f})"
