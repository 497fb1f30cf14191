"""`rlexp fanout ATTEMPT...`: several attempts' training and evaluation at once, then their decisions.

The stage is :func:`rlexp.stages.fanout.run_attempts`; this command chooses the options and
renders one row per job (status, exit code, time, the last line of its log) and the decisions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlexp.errors import CheckFailed


def fanout(
    attempts: Annotated[list[Path], typer.Argument(help="Attempt directories (or their attempt.yaml) of one "
                                                        "experiment, e.g. two seeds of one rung.")],
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray dashboard, e.g. http://127.0.0.1:8265: "
                                                    "one Ray job per attempt, all at once. Without it the "
                                                    "attempts run here, --parallel at a time.")] = None,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="MLflow store shared by every job "
                                                     "(default sqlite:///mlflow.db here).")] = None,
    batch: Annotated[str | None, typer.Option(help="Name of the batch (its state file under the experiment's "
                                                   "fanout/); rerun with the same name to resume.")] = None,
    guards: Annotated[bool, typer.Option("--guards", help="Run the SOP's guards in each job too (g0, g2, g1, g4, "
                                                          "the audit draw), as the demo does.")] = False,
    decide: Annotated[bool, typer.Option(help="Decide the attempts whose job succeeded, in the order given.")] = True,
    report: Annotated[bool, typer.Option("--report", help="Write each decided attempt's report too.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64, help="Without --ray-address: run this "
                                          "many jobs at once here (the local trainer uses one core).")] = 1,
) -> None:
    """Run attempts as concurrent Ray jobs (or one after another), then decide them in order."""
    from rlexp.stages.fanout import SOP_STEPS, TRAIN_AND_EVAL, run_attempts

    result = run_attempts(attempts, ray_address=ray_address, tracking_uri=tracking_uri, batch=batch,
                          steps=SOP_STEPS if guards else TRAIN_AND_EVAL, decide=decide, report=report,
                          parallel=parallel)
    data = result.to_dict()
    if json_out:
        print(json.dumps(data))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"fan-out {data['batch']} ({data['mode']}): {data['wall_s']:.0f} s, "
                            f"all jobs at once for {data['overlap_s']:.0f} s")
        for col in ("job", "status", "exit", "time s", "decision", "last log line"):
            table.add_column(col)
        for job in data["jobs"]:
            took = f"{job['ended_at'] - job['started_at']:.0f}" if job["started_at"] and job["ended_at"] else "-"
            decided = data["decisions"].get(job["name"], {}).get("decision", "-")
            last = (job["log_tail"].strip().splitlines() or [""])[-1][:80]
            table.add_row(job["name"], job["status"] + (" (done before)" if job["reused"] else ""),
                          str(job["exit_code"]), took, decided, last)
        Console().print(table)
    if not result.ok:
        failed = [j["name"] for j in data["jobs"] if j["status"] != "SUCCEEDED"]
        raise CheckFailed(f"fan-out: {len(failed)} job(s) did not succeed: {', '.join(failed)} "
                          f"(their logs: {Path(data['jobs'][0]['log']).parent})")
