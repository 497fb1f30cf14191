"""`rlexp plan ATTEMPT`: what the trainer will really do, checked before a GPU is touched.

Prints the step counts, the LR at milestones, the eval/save schedule, the preflight checks and
the power of the planned comparison; writes ``plan.json`` next to the spec (atomically).
Exit 0 when no check is an error, 1 when one is, 2 on unusable input.

The output is :mod:`rlexp.commands.plan_view`'s, which the console script also runs without typer.
Module level imports only typer: ``rlexp --help`` imports every command module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def plan(
    spec: Annotated[Path, typer.Argument(help="The attempt directory or its attempt.yaml.")],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")
    ] = False,
) -> None:
    """Step counts, LR schedule, eval/save schedule, preflight checks and power of an attempt."""
    from rlexp.commands.plan_view import run

    code = run(spec, json_output)
    if code:
        raise typer.Exit(code)
