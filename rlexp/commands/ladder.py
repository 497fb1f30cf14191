"""`rlexp ladder propose EXP` and `rlexp ladder run EXP --rungs N`: a single-variable ladder as an Optuna study.

The stages (:mod:`rlexp.stages.ladder`) propose, claim, run and record the rungs; these commands
choose the options and render the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rlexp.errors import InputError

app = typer.Typer(no_args_is_help=True)

ExperimentArg = Annotated[Path, typer.Argument(help="The experiment directory (holding ladder.yaml).")]
StorageOption = Annotated[str | None, typer.Option(
    "--storage", help="Optuna storage URL (default: $RLEXP_STUDY_STORAGE, else optuna.db beside a SQLite MLflow "
                      "store); e.g. postgresql://user@host/db.")]
TrackingOption = Annotated[str | None, typer.Option(
    "--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db); \"off\" skips it.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def parse_changes(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` options as a mapping; VALUE is read as a YAML scalar or list (0.1, 16, [a, b])."""
    from rlexp.experiment.files import loads_yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError(None, "--change", f"{item!r:.60}: expected KEY=VALUE")
        # the strict loader: no aliases, no deep nesting, no integer past 4300 digits
        out[key.strip()] = loads_yaml(None, text, f"--change {key.strip()[:60]}")
    return out


@app.command("propose")
def propose(
    experiment: ExperimentArg,
    change: Annotated[list[str] | None, typer.Option(
        "--change", help="Propose this rung instead (KEY=VALUE, from the ladder's current parent); a rung "
                         "changes one training variable.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what the next rung is; write no attempt.yaml (the study is opened, created if missing).")] = False,
    storage: StorageOption = None,
    tracking_uri: TrackingOption = None,
    json_out: JsonOption = False,
) -> None:
    """Propose the ladder's next single-variable rung and write its attempt.yaml."""
    from rlexp.stages.ladder import propose_rung

    result = propose_rung(experiment, change=parse_changes(change or []), storage=storage,
                          tracking_uri=tracking_uri, write=not dry_run)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    p = result.proposal
    if p.action == "run" and p.kind == "root":
        typer.echo(f"first rung: the root {p.attempt} — run it with `rlexp ladder run {experiment}`")
    elif p.action == "run":
        what = (f"confirmation seed {p.seed} of {p.seed_of}" if p.kind == "confirmation"
                else f"{p.variable} = {p.value} from {p.parent}")
        typer.echo(f"next rung {p.attempt} ({p.kind}): {what} — {p.reason}")
        if result.spec:
            typer.echo(f"wrote {result.spec}")
    elif p.action == "wait":
        typer.echo(f"wait: {p.reason}")
    else:
        typer.echo(f"the ladder stops ({p.kind}): {p.reason}")


@app.command("run")
def run(
    experiment: ExperimentArg,
    rungs: Annotated[int, typer.Option("--rungs", min=1, max=1000, help="Run at most this many rungs.")] = 1,
    storage: StorageOption = None,
    tracking_uri: TrackingOption = None,
    json_out: JsonOption = False,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray dashboard, e.g. http://127.0.0.1:8265: --runners ladder runners as concurrent Ray "
                              "jobs on this study (docs/launch.md, fan-out).")] = None,
    runners: Annotated[int, typer.Option("--runners", min=1, max=64, help="With --ray-address: how many runners; "
                                                                         "each runs at most --rungs rungs.")] = 2,
) -> None:
    """Run rungs of the ladder (plan → guards → launch → eval → decide → report each); stop on STOP-3 or DEBUG."""
    if ray_address:
        return _run_on_ray(experiment, rungs, runners, ray_address, storage, tracking_uri, json_out)
    import contextlib
    import sys

    from rlexp.stages.ladder import run_ladder

    # the stages' progress lines go to stdout; with --json stdout is the result alone
    with contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext():
        result = run_ladder(experiment, rungs=rungs, storage=storage, tracking_uri=tracking_uri)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ladder {result.study} ({result.storage})")
    for col in ("rung", "decision", "Δ pp", "MLflow run", "reason"):
        table.add_column(col)
    for r in result.ran:
        table.add_row(r.attempt, r.decision, "-" if r.delta_pp is None else f"{r.delta_pp:+.1f}",
                      r.mlflow_run_id or "-", r.reason)
    console = Console()
    console.print(table)
    if result.stopped is not None:
        console.print(f"the ladder stops ({result.stopped.kind}): {result.stopped.reason}", highlight=False)


def _run_on_ray(experiment: Path, rungs: int, runners: int, ray_address: str, storage: str | None,
                tracking_uri: str | None, json_out: bool) -> None:
    from rlexp.errors import CheckFailed
    from rlexp.stages.fanout import run_ladder_runners

    result = run_ladder_runners(experiment, rungs=rungs, runners=runners, ray_address=ray_address, storage=storage,
                                tracking_uri=tracking_uri)
    data = result.to_dict()
    if json_out:
        typer.echo(json.dumps(data, indent=2, default=str))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"ladder {result.study} ({result.storage}): {len(data['jobs'])} runner(s) on Ray, "
                            f"{data['wall_s']:.0f} s")
        for col in ("rung", "parent", "change", "decision"):
            table.add_column(col)
        for r in result.rungs:
            change = f"seed {r.seed} (of {r.seed_of})" if r.seed_of else (f"{r.variable} = {r.value}" if r.variable
                                                                          else "root")
            table.add_row(r.attempt, str(r.parent or "-"), change, str(r.decision or "-"))
        console = Console()
        console.print(table)
        for job in data["jobs"]:
            console.print(f"{job['name']}: {job['status']} (exit code {job['exit_code']}), log {job['log']}",
                          highlight=False)
    if not result.ok:
        failed = [j["name"] for j in data["jobs"] if j["status"] != "SUCCEEDED"]
        raise CheckFailed(f"ladder: runner job(s) {', '.join(failed)} did not succeed (see their logs)")
