"""The status stage: every attempt of an experiment, read from its files (never from MLflow)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.layout import AttemptDir, ExperimentDir
from rlexp.experiment.results import read_decision


@dataclass(frozen=True)
class AttemptStatus:
    """One row of ``rlexp status``."""

    attempt: str
    parent: str | None
    state: str          # not launched | planned | running | finished | failed | stopped | lost | exited
    steps: int          # the highest global step in metrics.jsonl
    decision: str | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def attempt_status(attempt_dir: str | Path) -> AttemptStatus:
    """State, steps done and decision of one attempt.

    A state file that says ``running`` while neither the launcher nor the trainer process exists
    is reported as ``lost`` (the machine rebooted, or both were killed): ``--resume`` continues it.
    """
    from rlexp.spec import load_attempt

    ad = AttemptDir(attempt_dir)
    parent, state_name, reason = None, "not launched", None
    try:
        parent = load_attempt(ad.root).parent_id
    except InputError as exc:  # a broken spec shows as such; the table still renders
        reason = f"spec: {exc.one_line()}"
    if ad.plan.exists():
        state_name = "planned"
    state = ad.launch.read_state()
    if state is not None:
        state_name = str(state.get("state", "?"))
        reason = state.get("reason")
        if state_name == "running" and not ad.launch.is_running(state):
            from rlexp.backends.registry import BACKENDS

            runner = BACKENDS.get(str(state.get("backend")))
            # a Ray job outlives its launcher: only the cluster knows whether it still runs
            row = runner.status_row(state) if runner is not None else None
            if row is not None:
                state_name, reason = row
            elif state.get("launcher_pid") is None:  # started with --no-follow: nobody saw the exit
                state_name = "exited"
                reason = "started with --no-follow; the trainer has exited (see launch/stdout.log)"
            else:
                state_name = "lost"
                reason = "no live process; continue with rlexp launch --resume"
    steps = ad.last_metrics_step()
    decision = read_decision(ad.root)
    return AttemptStatus(ad.id, parent, state_name, steps, decision.decision if decision else None,
                         reason if reason is None else str(reason))


def scrub_finished_log(attempt_dir: str | Path) -> bool:
    """Replace secret values in ``launch/stdout.log`` once no trainer writes to it any more.

    A followed run is scrubbed by ``rlexp launch`` when it ends; a ``--no-follow`` run has nobody
    watching its end, so ``rlexp status`` and ``rlexp report`` do it: when ``launch/state.json``
    no longer says ``running``, or its trainer pid is dead. A live trainer's log is left alone
    (an atomic rewrite would cut off its further output). True when something was replaced.
    """
    from rlexp.experiment.provenance import scrub_file

    ad = AttemptDir(attempt_dir)
    if not (ad.launch.stdout_log.is_file() and ad.launch.state.is_file()):
        return False
    state = ad.launch.read_state()
    if ad.launch.is_running(state):
        return False  # a launcher still appends the log (a Ray run's mirror) or a trainer writes it
    return scrub_file(ad.launch.stdout_log)


def status(experiment: str | Path) -> list[AttemptStatus]:
    """Every attempt of an experiment; also scrubs secret values from the logs of ended runs."""
    exp = ExperimentDir(experiment)
    if not exp.root.is_dir():
        raise InputError(exp.root, None, "experiment directory not found")
    attempts = exp.attempts()
    rows = [attempt_status(a.root) for a in attempts]
    for a in attempts:
        scrub_finished_log(a.root)
    return rows
