"""`rlexp status EXPERIMENT_DIR`: every attempt of an experiment in one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rlexp.errors import InputError


def attempt_status(attempt_dir: Path) -> dict[str, Any]:
    """State, steps done and decision of one attempt, read from its files (never from MLflow).

    A state file that says ``running`` while neither the launcher nor the trainer process exists
    is reported as ``lost`` (the machine rebooted, or both were killed): ``--resume`` continues it.
    """
    from rlexp.backends.process import pid_alive
    from rlexp.storage.files import read_json

    row: dict[str, Any] = {"attempt": attempt_dir.name, "parent": None, "state": "not launched", "steps": 0,
                           "decision": None, "reason": None}
    from rlexp.core.spec import load_attempt

    try:
        row["parent"] = load_attempt(attempt_dir).parent_id
    except InputError as exc:  # a broken spec shows as such; the table still renders
        row["reason"] = f"spec: {exc.one_line()}"
    if (attempt_dir / "plan.json").exists() and row["state"] == "not launched":
        row["state"] = "planned"
    state_path = attempt_dir / "launch" / "state.json"
    if state_path.exists():
        state = read_json(state_path)
        row["state"] = state.get("state", "?")
        row["reason"] = state.get("reason")
        if row["state"] == "running" and not (pid_alive(state.get("pid")) or pid_alive(state.get("launcher_pid"))):
            if state.get("launcher_pid") is None:  # started with --no-follow: nobody saw the exit
                row["state"] = "exited"
                row["reason"] = "started with --no-follow; the trainer has exited (see launch/stdout.log)"
            else:
                row["state"] = "lost"
                row["reason"] = "no live process; continue with rlexp launch --resume"
    metrics = attempt_dir / "metrics.jsonl"
    if metrics.exists():
        steps = 0
        with open(metrics, "rb") as fh:
            for line in fh:
                if line.endswith(b"\n") and b"global_step" in line:
                    try:
                        steps = max(steps, int(json.loads(line)["global_step"]))
                    except (ValueError, KeyError, TypeError):
                        continue
        row["steps"] = steps
    if (attempt_dir / "decision.json").exists():
        decision = read_json(attempt_dir / "decision.json")
        row["decision"] = decision.get("decision") if isinstance(decision, dict) else None
    return row


def scrub_finished_log(attempt_dir: Path) -> bool:
    """Replace secret values in ``launch/stdout.log`` once no trainer writes to it any more.

    A followed run is scrubbed by ``rlexp launch`` when it ends; a ``--no-follow`` run has nobody
    watching its end, so ``rlexp status`` and ``rlexp report`` do it: when ``launch/state.json``
    no longer says ``running``, or its trainer pid is dead. A live trainer's log is left alone
    (an atomic rewrite would cut off its further output). True when something was replaced.
    """
    from rlexp.adapters.provenance import scrub_file
    from rlexp.backends.process import pid_alive
    from rlexp.storage.files import read_json

    log, state_path = attempt_dir / "launch" / "stdout.log", attempt_dir / "launch" / "state.json"
    if not (log.is_file() and state_path.is_file()):
        return False
    state = read_json(state_path)
    if not isinstance(state, dict):
        raise InputError(state_path, None, "expected a JSON object")
    if state.get("state") == "running" and pid_alive(state.get("pid")):
        return False
    return scrub_file(log)


def status(
    experiment: Annotated[Path, typer.Argument(help="Experiment directory (holds one folder per attempt).")],
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show every attempt of an experiment: state, global steps done, decision (and scrub secret values
    from the stdout.log of runs that have ended)."""
    if not experiment.is_dir():
        raise InputError(experiment, None, "experiment directory not found")
    attempts = sorted(p for p in experiment.iterdir() if (p / "attempt.yaml").is_file())
    rows = [attempt_status(p) for p in attempts]
    for p in attempts:
        scrub_finished_log(p)
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
