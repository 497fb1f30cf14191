"""`rlexp compare BASE.jsonl NEW.jsonl`: the SOP's canonical paired report for any two record files.

Each line of either file needs at least ``problem_hash`` and ``correct`` (0/1 or true/false).
Prints Δ, b/c, McNemar exact p (and mid-p), the paired bootstrap CI, Wilson CIs of both
accuracies, the CLT standard error and the minimal detectable effect. ``--json`` keys that
scripts rely on: n, acc_base, acc_new, delta_pp, b, c, mcnemar_p, ci_pp.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer


def compare(
    base: Annotated[Path, typer.Argument(help="Baseline per-problem records (JSONL).")],
    new: Annotated[Path, typer.Argument(help="New per-problem records (JSONL).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    intersect: Annotated[bool, typer.Option("--intersect", help="Compare only the problems both files have, "
                                            "and report what was dropped (default: refuse differing sets).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    resamples: Annotated[int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")] = 10_000,
    confidence: Annotated[float, typer.Option("--confidence", min=0.5, max=0.999)] = 0.95,
    method: Annotated[str, typer.Option("--method", help="Bootstrap CI: percentile, basic or bca.")] = "percentile",
    paired_out: Annotated[Path | None, typer.Option("--paired-out", help="Also write the SOP §1 paired records "
                                                    "{problem_hash, y_baseline, y_new, output_baseline, "
                                                    "output_new} here.")] = None,
) -> None:
    """Paired comparison of two per-problem record files (Δ, b/c, McNemar, bootstrap CI)."""
    from rlexp.errors import InputError
    from rlexp.stats import paired_comparison
    from rlexp.storage.paired import pair_files, write_paired_records

    if method not in ("percentile", "basic", "bca"):
        raise InputError(None, "--method", f"must be percentile, basic or bca, got {method!r}")
    joined = pair_files(base, new, intersect=intersect)
    cmp = paired_comparison(joined.y_baseline, joined.y_new, resamples=resamples, seed=seed, confidence=confidence,
                            method=method)
    result: dict[str, Any] = {
        **cmp.to_dict(),
        "base": str(base),
        "new": str(new),
        "dropped_base_only": len(joined.dropped_base_only),
        "dropped_new_only": len(joined.dropped_new_only),
    }
    if paired_out is not None:
        write_paired_records(paired_out, joined.records)
        result["paired_records"] = str(paired_out)
    if json_out:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    _print(result)


def _print(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{r['new']} vs {r['base']} (N={r['n']} paired problems)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    conf = f"{100 * r['confidence']:g}%"
    rows = [
        ("acc baseline", f"{r['acc_base']:.2%}  (Wilson {conf} [{r['acc_base_ci'][0]:.2%}, {r['acc_base_ci'][1]:.2%}])"),
        ("acc new", f"{r['acc_new']:.2%}  (Wilson {conf} [{r['acc_new_ci'][0]:.2%}, {r['acc_new_ci'][1]:.2%}])"),
        ("Δ = new − baseline", f"{r['delta_pp']:+.2f} pp"),
        ("b (baseline right, new wrong)", str(r["b"])),
        ("c (baseline wrong, new right)", str(r["c"])),
        ("McNemar exact p", f"{r['mcnemar_p']:.4f}"),
        ("McNemar mid-p", f"{r['mcnemar_midp']:.4f}"),
        (f"paired bootstrap {conf} CI ({r['ci_method']}, {r['resamples']} resamples, seed {r['seed']})",
         f"[{r['ci_pp'][0]:+.2f}, {r['ci_pp'][1]:+.2f}] pp"),
        ("SE (CLT)", f"{r['se_pp']:.2f} pp"),
        ("MDE at 80% power, α=0.05", f"{r['mde_pp']:.2f} pp" if r["mde_pp"] is not None else "-"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if r["dropped_base_only"] or r["dropped_new_only"]:
        console.print(f"--intersect dropped {r['dropped_base_only']} problem(s) only in the baseline and "
                      f"{r['dropped_new_only']} only in the new file")
