"""`rlexp ingest FILE --trainer NAME`: what rlexp reads from a trainer's metrics file, and what it cannot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def ingest(
    file: Annotated[Path, typer.Argument(help="A metrics file: a console log, a JSONL, verl's file logger output, "
                                              "TRL's trainer_state.json, or a TensorBoard directory.")],
    trainer: Annotated[str, typer.Option("--trainer", help="openrlhf, verl, trl or local.")],
    fmt: Annotated[str | None, typer.Option("--format", help="openrlhf-console, verl-console, verl-file, jsonl, "
                                            "trainer-state or tensorboard (default: from the file's name).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Every step as {step, metrics}; not_understood as "
                                           "line numbers.")] = False,
) -> None:
    """Read one training-metrics file as `launch` would: steps read, metrics by canonical name, lines not
    understood (by number), runs found. Nothing is written. Exit 2 when no step could be read."""
    from rlexp.errors import InputError
    from rlexp.training.log_files import log_summary, read_log, summary_lines

    read = read_log(file, trainer, fmt)
    summary = log_summary(file, read)
    if not summary["steps_read"]:
        bad = summary["not_understood"]
        raise InputError(file, None, f"no metric steps found as {read.format} of {trainer}"
                         + (f"; {len(bad)} lines not understood, the first at line {bad[0]}" if bad else ""))
    from rlexp.protocol.run_health import health_of_log
    from rlexp.spec.sop import load_sop

    # no attempt, so no plan: the resume gate checks the steps, not the LR (import-run checks both)
    health = health_of_log([run.rows for run in read.runs], load_sop())
    if json_out:
        summary["run_health"] = [v.to_dict() for v in health]
        print(json.dumps(summary, allow_nan=False, default=str))
        return
    from rlexp.protocol.run_health import health_lines

    print("\n".join(summary_lines(summary) + health_lines(health)))
