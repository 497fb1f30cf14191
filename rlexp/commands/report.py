"""`rlexp report ATTEMPT`: regenerate the one-page report and log it to MLflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def report(
    attempt: Annotated[Path, typer.Argument(help="Attempt directory or its attempt.yaml.")],
    reports_dir: Annotated[
        Path | None,
        typer.Option("--reports-dir", help="Where <experiment>/ reports go (default: reports/ beside experiments/)."),
    ] = None,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="MLflow store (default "
                                                     "sqlite:///mlflow.db here); 'off' skips MLflow.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Write reports/<experiment>/<attempt>.md (the report's eight deliverables, with plots)."""
    from rlexp.stages.report import report as report_stage

    result = report_stage(attempt, reports_dir=reports_dir, tracking_uri=tracking_uri)
    if json_out:
        print(json.dumps(result.to_dict()))
    else:
        print(f"wrote {result.report} ({len(result.plots)} plots)"
              + (f"; MLflow run {result.mlflow_run_id}" if result.mlflow_run_id else ""))
        if result.mlflow_url:
            print(f"compare attempts in MLflow (after `mlflow ui`): {result.mlflow_url}")
