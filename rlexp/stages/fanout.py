"""Fan-out of attempts: several attempts' training and evaluation at once, then their decisions in order.

:func:`run_attempts` builds one job per attempt — by default ``plan → launch (the local trainer) →
eval``, or the SOP's sequence with its guards (:data:`SOP_STEPS`) — and runs the jobs through
:func:`rlexp.backends.fanout.run_jobs`: as concurrent Ray jobs with ``ray_address``, here without
(one after another, or ``parallel`` at a time). Every job logs to one MLflow store (``tracking_uri``, made absolute so the
jobs, which run in the Ray head's working directory, write the same one).

The decisions come after all jobs, here, one attempt at a time in the order given: ``decide``
reads the experiment's ledger, and Gate-2 needs the first seed's ledger line when it decides the
second (deciding two seeds at once would leave each blind to the other). An attempt whose job
failed is not decided; the others are.

Typical use, two seeds of one rung (siblings differing only in ``recipe.seed``)::

    rlexp.stages.fanout.run_attempts(["experiments/demo/d1", "experiments/demo/d1s2"],
                                     ray_address="http://127.0.0.1:8265")
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError

# (rlexp arguments before the attempt, after it, exit codes that let the job go on)
TRAIN_AND_EVAL: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]], ...] = (
    (("plan",), (), (0,)),
    (("launch",), ("--backend", "local", "--resume", "--json"), (0,)),
    (("eval",), (), (0,)),
)
# Training alone (the demo launches its attempts at once, then evaluates and decides them in order)
LAUNCH_ONLY: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]], ...] = (
    (("launch",), ("--backend", "local", "--resume"), (0,)),
)
# The demo's sequence: a guard's failed verdict (exit 1) is written to guards/ and the job goes on,
# as the demo does; bad input (exit 2) stops it.
SOP_STEPS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]], ...] = (
    (("plan",), (), (0,)),
    (("guard", "g0"), (), (0, 1)),
    (("guard", "g2"), (), (0, 1)),
    (("launch",), ("--backend", "local", "--resume", "--json"), (0,)),
    (("guard", "g1"), (), (0, 1)),
    (("eval",), (), (0,)),
    (("guard", "g4"), ("--limit", "200"), (0, 1)),
    (("guard", "audit"), ("--draw",), (0, 1)),
)


@dataclass(frozen=True)
class AttemptsResult:
    """The fan-out's result per job and the decision of every attempt whose job succeeded."""

    fanout: Any  # rlexp.backends.fanout.FanoutResult
    decisions: dict[str, Any]  # attempt id -> rlexp.protocol.decision.Decision (absent: its job failed)

    @property
    def ok(self) -> bool:
        return self.fanout.ok

    def to_dict(self) -> dict[str, Any]:
        return {**self.fanout.to_dict(),
                "decisions": {a: {"decision": d.decision, "reason": d.reason} for a, d in self.decisions.items()}}


def attempt_job(attempt_dir: Path, tracking_uri: str, steps=TRAIN_AND_EVAL):
    """The job that runs ``steps`` for one attempt (absolute paths: a Ray job runs elsewhere)."""
    from rlexp.backends.fanout import Job, Step

    target = str(attempt_dir.resolve())
    built = []
    for before, after, ok_codes in steps:
        tracking = ("--tracking-uri", tracking_uri) if before[0] in ("launch", "report") else ()
        built.append(Step((*before, target, *after, *tracking), ok_codes))
    return Job(attempt_dir.name, tuple(built), {"rlexp.attempt_dir": target})


def run_attempts(attempts: Sequence[str | Path], *, ray_address: str | None = None, tracking_uri: str | None = None,
                 batch: str | None = None, steps=TRAIN_AND_EVAL, decide: bool = True, report: bool = False,
                 poll_s: float = 1.0, parallel: int = 1) -> AttemptsResult:
    """Run each attempt's ``steps`` as one job (concurrent Ray jobs with ``ray_address``, else
    ``parallel`` processes here at a time), then decide (and with ``report``, report) the attempts
    whose job succeeded, in the order given."""
    from rlexp.backends.fanout import run_jobs
    from rlexp.spec import load_attempt
    from rlexp.tracking.store import resolve_tracking_uri

    if not attempts:
        raise InputError(None, "ATTEMPT", "no attempt given")
    loaded = [load_attempt(a) for a in attempts]
    dirs = [Path(a.attempt_dir).resolve() for a in loaded]
    experiments = {d.parent for d in dirs}
    if len(experiments) != 1:
        raise InputError(None, "ATTEMPT", "the attempts of one fan-out belong to one experiment directory, got "
                         + ", ".join(sorted(str(e) for e in experiments)))
    ids = [d.name for d in dirs]
    if len(set(ids)) != len(ids):
        raise InputError(None, "ATTEMPT", f"an attempt is given twice: {ids}")
    uri = resolve_tracking_uri(tracking_uri)
    jobs = [attempt_job(d, uri, steps) for d in dirs]
    batch = batch or ("attempts-" + "_".join(ids))[:100]
    fanout = run_jobs(jobs, experiment_dir=experiments.pop(), batch=batch, ray_address=ray_address, poll_s=poll_s,
                      parallel=parallel)

    decisions: dict[str, Any] = {}
    if decide:
        from rlexp.stages.decide import decide as decide_stage

        for attempt_dir in dirs:
            if fanout.result(attempt_dir.name).ok:
                decisions[attempt_dir.name] = decide_stage(attempt_dir)
                if report:
                    from rlexp.stages.report import report as report_stage

                    report_stage(attempt_dir, tracking_uri=uri)
    return AttemptsResult(fanout, decisions)


# ---------------------------------------------------------------------------- the loops' fan-out

def _no_password(url: str | None, option: str) -> None:
    """A Ray job's entrypoint is stored by the cluster and shown by its dashboard: no secret in it."""
    from rlexp.experiment.provenance import scrub_url

    if url and scrub_url(url) != url:
        raise InputError(None, option, "a password in the URL would be stored in the Ray job's entrypoint: give the "
                         "cluster a PostgreSQL password file (~/.pgpass) or PGPASSWORD and drop it from the URL")


def _failures(result: Any) -> str:
    bad = [r for r in result.results if not r.ok]
    return "; ".join(f"{r.name} {r.status} (exit code {r.exit_code}, log {r.log_path})" for r in bad)


@dataclass(frozen=True)
class LadderRunnersResult:
    """The runner jobs' results and the ladder's rungs as the study holds them afterwards."""

    fanout: Any  # rlexp.backends.fanout.FanoutResult
    rungs: list[Any]  # rlexp.spec.ladder.Rung, in claim order, with their decisions
    study: str
    storage: str

    @property
    def ok(self) -> bool:
        return self.fanout.ok

    def to_dict(self) -> dict[str, Any]:
        return {**self.fanout.to_dict(), "study": self.study, "storage": self.storage,
                "rungs": [dict(r.__dict__) for r in self.rungs]}


def run_ladder_runners(experiment: str | Path, *, rungs: int, runners: int, ray_address: str,
                       storage: str | None = None, tracking_uri: str | None = None, poll_s: float = 1.0,
                       batch: str | None = None) -> LadderRunnersResult:
    """``runners`` ladder runners (``rlexp ladder run``) as concurrent Ray jobs on one study.

    They share the study's storage and the MLflow store; the study's claims keep any two from
    running the same rung, so they run the rungs the ladder can run at once (rungs from one parent
    once the root is decided) side by side, and wait for a decision where the next rung needs it.
    Each runner runs at most ``rungs`` rungs (as ``rlexp ladder run --rungs``); the ladder spec's
    ``rungs`` caps the ladder as a whole. (Shares of one total would make a runner that drew the
    root stop early and leave the rungs after it to one runner, one after another.)"""
    from rlexp.backends.fanout import Job, Step, run_jobs
    from rlexp.experiment.provenance import scrub_url
    from rlexp.stages.ladder import ladder_rungs, load_ladder
    from rlexp.tracking.store import resolve_tracking_uri
    from rlexp.tracking.study import LadderStudy

    if runners < 1:
        raise InputError(None, "--runners", f"must be at least 1, got {runners}")
    exp = Path(experiment).resolve()
    load_ladder(exp)  # the ladder spec is checked here, before any job exists
    _no_password(storage, "--storage")
    _no_password(tracking_uri, "--tracking-uri")
    uri = resolve_tracking_uri(tracking_uri) if tracking_uri not in ("off", "none") else tracking_uri
    study = LadderStudy(exp, storage, uri)  # creates the study's tables here, once
    argv = ("ladder", "run", str(exp), "--rungs", str(rungs), "--storage", study.url,
            *(("--tracking-uri", uri) if uri else ()))
    jobs = [Job(f"runner{i + 1}", (Step(argv),), {"rlexp.ladder": exp.name}) for i in range(runners)]
    result = run_jobs(jobs, experiment_dir=exp, batch=batch or f"ladder-{int(time.time())}",
                      ray_address=ray_address, poll_s=poll_s)
    return LadderRunnersResult(result, ladder_rungs(exp, study.claims()), study.name, scrub_url(study.url))


def evaluate_candidates(spec_path: str | Path, candidates: Sequence[str], sets: Sequence[str], *,
                        limit: int | None, ray_address: str, experiment_dir: Path, batch: str,
                        poll_s: float = 1.0) -> Any:
    """A sweep's candidates evaluated at once, one Ray job each (``evaluate_candidate`` by name);
    the sweep's own loop then finds their records complete. Every job runs to its end; a failed
    one is then one error naming all that failed."""
    from rlexp.backends.fanout import Job, Step, run_jobs

    spec = str(Path(spec_path).resolve())
    jobs = [Job(name, (Step(call="rlexp.stages.sweep:evaluate_candidate",
                            kwargs={"spec_path": spec, "candidate": name, "sets": list(sets), "limit": limit}),),
                {"rlexp.sweep_candidate": name}) for name in candidates]
    result = run_jobs(jobs, experiment_dir=experiment_dir, batch=batch, ray_address=ray_address, poll_s=poll_s)
    if not result.ok:
        from rlexp.errors import CheckFailed

        raise CheckFailed(f"sweep: candidate jobs on Ray did not succeed: {_failures(result)}")
    return result
