"""`rlexp sweep models SPEC`: evaluate candidate base models with one eval configuration, rank
them against the headroom band, select one (docs/sweeps.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("models")
def models(
    spec: Annotated[Path, typer.Argument(help="The sweep directory (experiments/<exp>/sweeps/<id>) or its sweep.yaml.")],
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="MLflow store (default "
                                                     "sqlite:///mlflow.db here); 'off' skips MLflow.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output (ranking.json).")] = False,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray dashboard, e.g. http://127.0.0.1:8265: "
                                                    "each stage's candidates are evaluated at once, one Ray job "
                                                    "each (docs/launch.md, fan-out).")] = None,
) -> None:
    """Rank candidate base models against the headroom band and select one (resumable).

    Stage 1 on the primary OOD set, stage 2 for the finalists, the truncation check; writes
    result/ranking.json and result/report.md, and MLflow runs."""
    from rlexp.stages.sweep import sweep_models

    say = None if json_out else (lambda line: typer.echo(f"sweep: {line}"))
    result = sweep_models(spec, tracking_uri=tracking_uri, progress=say, ray_address=ray_address)
    if json_out:
        typer.echo(json.dumps(result.ranking, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    ranking = result.ranking
    low, high = ranking["criteria"]["band"]
    table = Table(title=f"rlexp sweep {ranking['sweep']}: {ranking['stage1_set']}, band {100 * low:g}–{100 * high:g}%")
    for column in ("rank", "candidate", "acc", "n", "in band", "boxed", "last num", "fail", "trunc", "params",
                   "stage 2"):
        table.add_column(column, justify="left" if column in ("candidate", "stage 2") else "right")
    for row in ranking["candidates"]:
        s = row["primary"]
        stage2 = "selected" if row["selected"] else ("dropped" if row["dropped"] else
                                                     ("finalist" if row["finalist"] else ""))
        table.add_row(str(row["rank"]), row["name"], f"{s['acc']:.1%}", str(s["n"]), "yes" if row["in_band"] else "no",
                      f"{s['boxed_rate']:.1%}", f"{s['last_number_rate']:.1%}", f"{s['fail_rate']:.1%}",
                      f"{s['truncation_rate']:.1%}", str(row["params"] or "?"), stage2)
    console = Console()
    console.print(table)
    selection = ranking["selection"]
    console.print(f"[bold]selected: {selection['candidate'] or 'none'}[/bold] — {selection['reason']}",
                  highlight=False)
    truncation = ranking.get("truncation_check")
    if truncation and truncation.get("verdict"):
        console.print(f"truncation check ({truncation['candidate']}): {truncation['verdict']}", highlight=False)
    console.print(f"wrote {result.ranking_path} and {result.report_path}"
                  + (f"; MLflow parent run {result.mlflow['parent_run_id']}" if result.mlflow else ""),
                  highlight=False)
