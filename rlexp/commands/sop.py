"""`rlexp sop ...` (placeholder until its issue lands)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("show")
def _placeholder() -> None:
    """Not built yet."""
    raise typer.Exit(1)
