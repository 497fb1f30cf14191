"""`rlexp launch ATTEMPT`: start an attempt's training run (the stage is rlexp.stages.launch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rlexp.commands.options import finite
from rlexp.errors import CheckFailed


def launch(
    attempt: Annotated[Path, typer.Argument(help="Attempt directory or its attempt.yaml.")],
    backend: Annotated[str | None, typer.Option(help="local | process | ray (default: local for the local "
                                                     "trainer, ray with --ray-address, else process).")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray dashboard, e.g. "
                                                    "http://127.0.0.1:8265 (implies --backend ray).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the command; write and start nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Launch despite plan errors (needs --reason).")] = False,
    reason: Annotated[str | None, typer.Option(help="Why --force is justified (recorded).")] = None,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="MLflow store (default "
                                                     "sqlite:///mlflow.db here); 'off' disables MLflow.")] = None,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Start the run and return at once.")] = False,
    poll_s: Annotated[float, typer.Option(callback=finite(0.01, 3600),
                                          help="Seconds between metric polls while following.")] = 2.0,
    metrics_source: Annotated[str | None, typer.Option(
        "--metrics-source", help="OpenRLHF backends: follow the trainer's stdout 'Global step N' lines, or its "
                                 "TensorBoard scalars in ATTEMPT/tensorboard (default: stdout; --resume: "
                                 "the source of the original launch).")] = None,
) -> None:
    """Start an attempt's training run (local CPU trainer, OpenRLHF process, or Ray job)."""
    from rlexp.tracking import progress

    progress.silence(json_out)  # --json: stdout is for the machine
    from rlexp.stages.launch import launch as launch_stage

    outcome = launch_stage(attempt, backend=backend, ray_address=ray_address, resume=resume, dry_run=dry_run,
                           force=force, reason=reason, tracking_uri=tracking_uri, follow=not no_follow,
                           poll_s=poll_s, metrics_source=metrics_source)
    if dry_run:
        if json_out:
            print(json.dumps(outcome.to_dict()))
        else:
            import shlex

            print(f"# backend: {outcome.backend}")
            for path in outcome.adapters:
                print(f"# adapter written: {path}")
            print(shlex.join(outcome.argv))
        return
    result = outcome.to_dict()
    if json_out:
        print(json.dumps(result))
    else:
        _print_result(result)
    if result["state"] == "failed":
        raise CheckFailed(f"run failed: {result.get('reason')}")


def _print_result(result: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    line = f"{result['attempt']}: {result['state']}"
    if result.get("steps") is not None:
        line += f" after {result['steps']} global steps"
    if result.get("reason"):
        line += f" - {result['reason']}"
    dropped = result.get("dropped_values") or {}
    if dropped:
        line += f" ({sum(dropped.values())} non-numeric metric values dropped: {', '.join(sorted(dropped))})"
    for key, text in (("not_understood", "metric lines not understood at lines"),
                      ("nonfinite_steps", "steps with NaN/inf, kept in metrics.jsonl:"),
                      ("restarts", "step numbers restarted (a second run in the log) at lines")):
        if result.get(key):
            shown = ", ".join(str(n) for n in result[key][:20]) + (", …" if len(result[key]) > 20 else "")
            line += f" ({len(result[key])} {text} {shown})"
    console.print(line, markup=False, highlight=False)
