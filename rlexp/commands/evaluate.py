"""`rlexp eval ATTEMPT`: the K=3 pre-registered checkpoints + baselines on the eval sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def evaluate(
    attempt: Annotated[Path, typer.Argument(help="Attempt directory or its attempt.yaml.")],
    checkpoint: Annotated[
        list[str] | None,
        typer.Option("--checkpoint", help="Only this target (global_stepN, baseline_s0, baseline_sota); repeatable."),
    ] = None,
    set_role: Annotated[
        list[str] | None, typer.Option("--set", help="Only this eval set (ood_primary, id, sanity); repeatable.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Only the first N problems of each set (smoke tests).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable summary on stdout.")] = False,
) -> None:
    """Evaluate the pre-registered checkpoints and the baselines with one pipeline (resumable)."""
    from rlexp.stages.evaluate import evaluate as evaluate_stage

    outcome = evaluate_stage(attempt, checkpoints=checkpoint or None, sets=set_role or None, limit=limit,
                       show_progress=not as_json)
    if as_json:
        typer.echo(json.dumps(outcome.to_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rlexp eval {attempt}")
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("set", no_wrap=True)
    for column in ("n", "acc", "boxed", "last_num", "unparsed", "none", "trunc", "new"):
        table.add_column(column, justify="right")
    for f in outcome.files:
        s = f.summary
        table.add_row(f.checkpoint, f.set_role, str(s.n), f"{s.accuracy:.1%}", f"{s.parse_rate('boxed'):.1%}",
                      f"{s.parse_rate('last_number'):.1%}", f"{s.parse_rate('unparsed'):.1%}",
                      f"{s.parse_rate('none'):.1%}",
                      f"{s.truncation_rate:.1%}", str(f.new_records))
    console = Console()
    console.print(table)
    for note in outcome.selection.get("notes", []):
        console.print(f"selection: {note}")
    console.print(f"paired records: {len(outcome.paired)} files under eval/paired/")
