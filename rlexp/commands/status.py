"""`rlexp status EXPERIMENT_DIR`: every attempt of an experiment in one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def status(
    experiment: Annotated[Path, typer.Argument(help="Experiment directory (holds one folder per attempt).")],
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show every attempt of an experiment: state, global steps done, decision (and scrub secret values
    from the stdout.log of runs that have ended)."""
    from rlexp.stages.status import status as status_stage

    rows = [row.to_dict() for row in status_stage(experiment)]
    if json_out:
        print(json.dumps({"experiment": experiment.name, "attempts": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{experiment.name}: {len(rows)} attempt(s)")
    for column in ("attempt", "parent", "state", "steps", "decision", "note"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["attempt"], r["parent"] or "—", r["state"], str(r["steps"]), r["decision"] or "—",
                      (r["reason"] or "")[:80])
    Console().print(table)
