"""`rlexp decide ATTEMPT`: the SOP's mechanical decision for one evaluated attempt.

The stage (:func:`rlexp.stages.decide.decide`) gathers the inputs, applies the gates and records
the decision; this command chooses the options and renders the result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer


def decide(
    attempt: Annotated[Path, typer.Argument(help="The attempt directory or its attempt.yaml.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print decision.json instead of the summary.")] = False,
    sop_file: Annotated[Path | None, typer.Option("--sop", help="SOP file (default: the version in force).")] = None,
) -> None:
    """Apply the SOP gates to an evaluated attempt; write decision.json, append the ledger."""
    from rlexp.stages.decide import decide as decide_stage

    result = decide_stage(attempt, sop_path=sop_file).to_dict()
    if json_out:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
    else:
        _print_summary(result)


def _print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from rlexp.protocol.decision import (
        calibration_line,
        cluster_line,
        p_label,
        regression_lines,
        selection_line,
        sota_reuse_line,
    )

    console = Console()
    for line in regression_lines(result):  # first, whatever the decision
        console.print(f"[bold red]{line}[/bold red]")
    table = Table(title=f"{result['attempt']} vs {result['baseline']} on {result['primary_set']} "
                        f"(SOP {result['sop_version']})")
    table.add_column("checkpoint", no_wrap=True, min_width=len(max(result["checkpoints"], key=len)))
    for col in ("role", "acc", "Δ pp", "b", "c", p_label(result), "Holm p", "95% CI pp", "1a", "1b"):
        table.add_column(col, justify="right" if col != "role" else "left")
    for name, ck in result["checkpoints"].items():
        table.add_row(name, str(ck["role"]), f"{ck['acc_new']:.1%}", f"{ck['delta_pp']:+.2f}", str(ck["b"]),
                      str(ck["c"]), f"{ck['mcnemar_p']:.4f}", f"{ck['holm_p']:.4f}",
                      f"[{ck['ci_pp'][0]:+.2f}, {ck['ci_pp'][1]:+.2f}]",
                      "pass" if ck["gate_1a"] else "-", "pass" if ck["gate_1b"] else "-")
    console.print(table)
    clustered = cluster_line(result)
    if clustered:
        console.print(clustered)
    adjusted = selection_line(result)
    if adjusted:
        console.print(adjusted)
    reuse = sota_reuse_line(result)
    if reuse:
        console.print(reuse, highlight=False)
    console.print(calibration_line(result), highlight=False)
    g = result["gates"]
    for key in ("gate_2", "stop_3a", "stop_3b", "parser_audit"):
        verdict = {True: "PASS", False: "no", None: "not run"}[g[key]["passed"]]
        console.print(f"{key}: {verdict} — {g[key]['rule']}")
    if result["fault_tree"]["suggestion"]:
        console.print(f"fault tree: {result['fault_tree']['suggestion']}")
    for note in result["notes"]:
        console.print(f"note: {note}")
    console.print(f"[bold]decision: {result['decision']}[/bold] — {result['reason']}"
                  + (" (SOTA pin moved)" if result["sota_moved"] else ""))
