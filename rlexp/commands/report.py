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
    """Write reports/<experiment>/<attempt>.md (SOP §9's eight deliverables, with plots)."""
    from rlexp.adapters.rendering import write_report
    from rlexp.commands.status import scrub_finished_log

    path = write_report(attempt, reports_dir)
    scrub_finished_log(attempt.parent if attempt.is_file() else attempt)  # a --no-follow run's log
    run_id = None
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.adapters.tracking import log_attempt

        run_id = log_attempt(attempt, tracking_uri, report_path=path)
    plots = sorted(str(p) for p in path.parent.glob(f"{path.stem}_*.png"))
    if json_out:
        print(json.dumps({"report": str(path), "plots": plots, "mlflow_run_id": run_id}))
    else:
        print(f"wrote {path} ({len(plots)} plots)" + (f"; MLflow run {run_id}" if run_id else ""))
