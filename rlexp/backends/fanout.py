"""Fan-out: N independent rlexp stage runs, as concurrent Ray jobs or one after another locally.

A :class:`Job` is a named sequence of steps (:class:`Step`): rlexp command lines (the arguments of
``python -m rlexp.cli``, e.g. ``("launch", "/abs/exp/d1", "--backend", "local")``), or library calls
by name (``rlexp.stages.sweep:evaluate_candidate`` with JSON keyword arguments) for work that has
no command. One job is one process: ``python -m rlexp.backends.fanout STEP_JSON...`` runs its steps
in order and stops at the first that fails (a step may name exit codes it tolerates: a guard's
failed verdict is exit 1 and is a record, not a stop).

:func:`run_jobs` runs a batch of jobs

- **on Ray** (``ray_address`` given): each job is one Ray job submitted through the same Job API
  path as ``rlexp launch --backend ray`` (:class:`rlexp.backends.ray_jobs.RayJobRun`: the
  entrypoint is the runner's argv joined with ``shlex.join``, the runtime env forwards
  ``PYTHONPATH`` and the thread counts), all submitted at once, so they run concurrently; each
  job's log is mirrored into ``fanout/<batch>/<job>.log`` while it runs;
- **locally** (no address): each as a child process, its output in the same log; one after another,
  or ``parallel`` at a time (the trainers of the local backend use one core each).

It waits for every job and returns one :class:`JobResult` per job — status, exit code, start and
end time (Ray's own ``start_time``/``end_time`` on Ray), the log's tail — whatever the others did:
a failing job never hides the others' results.

Resumable: the batch's state file (``fanout/<batch>.json``, its path owned by
:class:`rlexp.experiment.layout.ExperimentDir`) records each job's submission id *before* the job
exists. A rerun of the same batch after a kill resubmits no job that SUCCEEDED, re-attaches to a
Ray job that is still running (the submitter died, the job did not), and runs again only the jobs
that failed, were stopped, or never started. A job is "the same" when its name and its steps are.

Ray is imported only inside functions (through ``rlexp.backends.ray_jobs``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.layout import ExperimentDir, check_batch_name

RUNNER_MODULE = "rlexp.backends.fanout"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TAIL_LINES = 40
_CALL = re.compile(r"rlexp(\.[A-Za-z_][A-Za-z0-9_]*)+:[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Step:
    """One step of a job: an rlexp command line (``argv``: the arguments of ``python -m rlexp.cli``),
    or a library call by name (``call``: ``"rlexp.stages.sweep:evaluate_candidate"``, with JSON
    ``kwargs``) for work that has no command of its own."""

    argv: tuple[str, ...] = ()
    ok_codes: tuple[int, ...] = (0,)  # exit codes after which the job goes on
    call: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.argv) == bool(self.call):
            raise InputError(None, "step", "a step is either an rlexp command line (argv) or a call, not both")
        if self.call is not None and not _CALL.fullmatch(self.call):
            raise InputError(None, "step.call", f"expected 'rlexp.<module>:<function>', got {self.call!r:.80}")

    def to_json(self) -> dict[str, Any]:
        if self.call is not None:
            return {"call": self.call, "kwargs": dict(self.kwargs), "ok_codes": list(self.ok_codes)}
        return {"argv": list(self.argv), "ok_codes": list(self.ok_codes)}

    def describe(self) -> str:
        if self.call is not None:
            return f"{self.call}({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"
        return "rlexp " + shlex.join(self.argv)

    @classmethod
    def from_json(cls, text: str) -> Step:
        """A step from the runner's command line; one line (exit 2) when it is not one."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        bad = InputError(None, "step", "expected a JSON object {\"argv\": [rlexp arguments...]} or {\"call\": "
                         f"\"rlexp.<module>:<function>\", \"kwargs\": {{...}}}}, got {text!r:.80}")
        if not isinstance(data, dict):
            raise bad
        codes = data.get("ok_codes", [0])
        if not isinstance(codes, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            raise bad
        if "call" in data:
            if not isinstance(data["call"], str) or not isinstance(data.get("kwargs", {}), dict):
                raise bad
            return cls(call=data["call"], kwargs=data.get("kwargs", {}), ok_codes=tuple(codes))
        argv = data.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise bad
        return cls(tuple(argv), tuple(codes))


@dataclass(frozen=True)
class Job:
    """A named run of rlexp steps; the name is its key in the batch's state file and log folder."""

    name: str
    steps: tuple[Step, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)

    def argv(self, python: str | None = None) -> list[str]:
        """The runner's command line: the Ray job's entrypoint (``shlex.join``), or the local child."""
        return [python or sys.executable, "-m", RUNNER_MODULE,
                *(json.dumps(s.to_json(), separators=(",", ":")) for s in self.steps)]

    def steps_json(self) -> list[dict[str, Any]]:
        return [s.to_json() for s in self.steps]


@dataclass(frozen=True)
class JobResult:
    """How one job ended (or that it had SUCCEEDED before and was not run again: ``reused``)."""

    name: str
    submission_id: str
    status: str  # SUCCEEDED | FAILED | STOPPED (Ray's words; local runs use the first two)
    exit_code: int | None
    started_at: float | None  # seconds since the epoch
    ended_at: float | None
    log_path: str
    log_tail: str
    reused: bool = False

    @property
    def ok(self) -> bool:
        return self.status == SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "submission_id": self.submission_id, "status": self.status,
                "exit_code": self.exit_code, "started_at": self.started_at, "ended_at": self.ended_at,
                "log": self.log_path, "log_tail": self.log_tail, "reused": self.reused}


@dataclass(frozen=True)
class FanoutResult:
    """Every job's result, in the order the jobs were given, and how the batch ran."""

    batch: str
    mode: str  # "ray" | "local"
    ray_address: str | None
    results: tuple[JobResult, ...]
    wall_s: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def result(self, name: str) -> JobResult:
        return next(r for r in self.results if r.name == name)

    def overlap_s(self) -> float:
        """Seconds during which every job of the batch ran at once (0 when they never all did)."""
        spans = [(r.started_at, r.ended_at) for r in self.results if not r.reused]
        if not spans or any(a is None or b is None for a, b in spans):
            return 0.0
        return max(0.0, min(b for _, b in spans) - max(a for a, _ in spans))  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "mode": self.mode, "ray_address": self.ray_address, "ok": self.ok,
                "wall_s": round(self.wall_s, 2), "overlap_s": round(self.overlap_s(), 2),
                "jobs": [r.to_dict() for r in self.results]}


class _State:
    """The batch's state file; only the process that drives the batch writes it."""

    def __init__(self, experiment: ExperimentDir, batch: str, ray_address: str | None):
        self.experiment, self.batch = experiment, batch
        self.path = experiment.fanout_state(batch)
        self.data = experiment.read_fanout_state(batch) or {"batch": batch, "jobs": {}}
        self.data["ray_address"] = ray_address

    def entry(self, job: Job) -> dict[str, Any] | None:
        """The recorded entry of ``job`` when it was recorded with the same steps."""
        entry = self.data["jobs"].get(job.name)
        return entry if entry is not None and entry.get("steps") == job.steps_json() else None

    def record(self, job: Job, **fields: Any) -> dict[str, Any]:
        from rlexp.experiment.files import atomic_write_json

        entry = {**(self.entry(job) or {}), "steps": job.steps_json(), **fields}
        self.data["jobs"][job.name] = entry
        atomic_write_json(self.path, self.data)
        return entry


def _tail(path: Path, start: int, lines: int) -> str:
    """The last ``lines`` lines of ``path`` from byte ``start`` on (this run's part of the log)."""
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read()[-256 * 1024:]
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _reused(job: Job, entry: Mapping[str, Any], log: Path, tail_lines: int) -> JobResult:
    return JobResult(job.name, str(entry["submission_id"]), SUCCEEDED, entry.get("exit_code", 0),
                     entry.get("started_at"), entry.get("ended_at"), str(log),
                     _tail(log, int(entry.get("log_start") or 0), tail_lines), reused=True)


def run_jobs(jobs: Sequence[Job], *, experiment_dir: str | Path, batch: str, ray_address: str | None = None,
             poll_s: float = 1.0, tail_lines: int = TAIL_LINES, env: Mapping[str, str] | None = None,
             parallel: int = 1, echo: Callable[[str, str], None] | None = None) -> FanoutResult:
    """Run ``jobs`` as concurrent Ray jobs on the cluster at ``ray_address``, or here when it is None
    (``parallel`` child processes at a time, one after another by default); wait for all and return
    every job's result (see the module docstring). Locally, ``echo(job name, line)`` also receives
    each line of a job's output as it is written to the job's log."""
    check_batch_name(batch)
    names = [j.name for j in jobs]
    for name in names:
        check_batch_name(name)
    if len(set(names)) != len(names):
        raise InputError(None, "jobs", f"job names must be unique in a batch, got {names}")
    if parallel < 1:
        raise InputError(None, "parallel", f"must be >= 1, got {parallel}")
    experiment = ExperimentDir(Path(experiment_dir).resolve())
    started = time.monotonic()
    if ray_address:
        from rlexp.backends.ray_jobs import normalize_ray_address

        address = normalize_ray_address(ray_address)
        results = _run_on_ray(jobs, experiment, batch, address, poll_s, tail_lines)
        return FanoutResult(batch, "ray", address, tuple(results), time.monotonic() - started)
    results = _run_locally(jobs, experiment, batch, tail_lines, env, parallel, echo)
    return FanoutResult(batch, "local", None, tuple(results), time.monotonic() - started)


@dataclass
class _LocalRun:
    """A job running here: its child process, where its log started, and the thread copying its output."""

    job: Job
    process: Any
    submission_id: str
    started_at: float
    log_start: int
    copier: Any


def _run_locally(jobs: Sequence[Job], experiment: ExperimentDir, batch: str, tail_lines: int,
                 env: Mapping[str, str] | None, parallel: int = 1,
                 echo: Callable[[str, str], None] | None = None) -> list[JobResult]:
    """Each job as a child process, at most ``parallel`` at a time, in the order given."""
    state = _State(experiment, batch, None)
    results: dict[str, JobResult] = {}
    waiting: list[Job] = []
    for job in jobs:
        entry = state.entry(job)
        if entry is not None and entry.get("status") == SUCCEEDED:
            results[job.name] = _reused(job, entry, experiment.fanout_log(batch, job.name), tail_lines)
        else:
            waiting.append(job)
    running: list[_LocalRun] = []
    while waiting or running:
        while waiting and len(running) < parallel:
            running.append(_start_locally(waiting.pop(0), experiment, batch, state, env, echo))
        done = next((r for r in running if r.process.poll() is not None), None)
        if done is None:
            time.sleep(0.1)
            continue
        running.remove(done)
        done.copier.join()
        code = done.process.returncode
        status = SUCCEEDED if code == 0 else FAILED
        state.record(done.job, status=status, exit_code=code, ended_at=time.time())
        log = experiment.fanout_log(batch, done.job.name)
        results[done.job.name] = JobResult(done.job.name, done.submission_id, status, code, done.started_at,
                                           time.time(), str(log), _tail(log, done.log_start, tail_lines))
    return [results[job.name] for job in jobs]


def _start_locally(job: Job, experiment: ExperimentDir, batch: str, state: _State,
                   env: Mapping[str, str] | None, echo: Callable[[str, str], None] | None) -> _LocalRun:
    import os
    import subprocess
    import threading

    log = experiment.fanout_log(batch, job.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.exists() else 0
    submission_id = f"local-{batch}-{job.name}-{int(time.time() * 1000)}"
    t0 = time.time()
    state.record(job, submission_id=submission_id, status="RUNNING", exit_code=None, started_at=t0,
                 ended_at=None, ray_address=None, log_start=start)
    process = subprocess.Popen(job.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=dict(os.environ if env is None else env))

    def copy() -> None:  # the job's output into its log (and to echo), line by line as it comes
        with open(log, "ab") as out:
            for line in process.stdout:
                out.write(line)
                out.flush()
                if echo is not None:
                    echo(job.name, line.decode("utf-8", "replace").rstrip("\n"))

    copier = threading.Thread(target=copy, name=f"fanout-{job.name}", daemon=True)
    copier.start()
    return _LocalRun(job, process, submission_id, t0, start, copier)


def _run_on_ray(jobs: Sequence[Job], experiment: ExperimentDir, batch: str, address: str, poll_s: float,
                tail_lines: int) -> list[JobResult]:
    from rlexp.backends import ray_jobs

    client = ray_jobs.client(address)  # one line (exit 2) when the dashboard does not answer
    state = _State(experiment, batch, address)
    done: dict[str, JobResult] = {}
    running: dict[str, tuple[Job, Any, Path]] = {}
    for job in jobs:
        log = experiment.fanout_log(batch, job.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        entry = state.entry(job)
        if entry is not None and entry.get("status") == SUCCEEDED:
            done[job.name] = _reused(job, entry, log, tail_lines)
            continue
        if entry is not None and entry.get("ray_address") == address:
            # recorded but not known to have ended: the submitter was killed; ask the cluster
            view = ray_jobs.job_view(address, str(entry["submission_id"]))
            if view is not None and view.status == SUCCEEDED:
                info = client.get_job_info(view.submission_id)
                entry = state.record(job, status=SUCCEEDED, exit_code=view.exit_code,
                                     **_times(info))
                done[job.name] = _reused(job, entry, log, tail_lines)
                continue
            if view is not None and view.alive:
                run = ray_jobs.RayJobRun.attach(address, view.submission_id, log_path=log,
                                                log_start=entry.get("log_start"))
                running[job.name] = (job, run, log)
                continue
        submission_id = f"rlexp-fanout-{batch}-{job.name}-{int(time.time() * 1000)}"
        start = log.stat().st_size if log.exists() else 0
        # recorded before the job exists: a submitter killed at any moment leaves the id on disk
        state.record(job, submission_id=submission_id, status="SUBMITTED", exit_code=None, started_at=None,
                     ended_at=None, ray_address=address, log_start=start)
        run = ray_jobs.RayJobRun.submit(
            address, submission_id, job.argv(), runtime_env=ray_jobs.runtime_env(forward_env=True),
            metadata={"rlexp.fanout.batch": batch, "rlexp.fanout.job": job.name,
                      "rlexp.experiment_dir": str(experiment.root), **dict(job.metadata)},
            log_path=log)
        running[job.name] = (job, run, log)

    while running:
        for name, (job, run, log) in list(running.items()):
            code = run.poll()
            if code is None:
                continue
            view = run.view()
            info = client.get_job_info(run.submission_id)
            exit_code = view.exit_code
            entry = state.record(job, status=view.status, exit_code=exit_code, **_times(info))
            done[name] = JobResult(name, run.submission_id, view.status, exit_code, entry.get("started_at"),
                                   entry.get("ended_at"), str(log), _tail(log, run.log_start, tail_lines))
            del running[name]
        if running:
            time.sleep(poll_s)
    return [done[j.name] for j in jobs]


def _times(info: Any) -> dict[str, float | None]:
    """Ray's start and end of a job (milliseconds since the epoch) in seconds."""
    start, end = getattr(info, "start_time", None), getattr(info, "end_time", None)
    return {"started_at": start / 1000.0 if start else None, "ended_at": end / 1000.0 if end else None}


# ---------------------------------------------------------------------------- the job's process

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlexp.backends.fanout STEP_JSON...``: run the steps in order — a command line as
    ``python -m rlexp.cli ...``, a call in this process — and exit with the first intolerable exit
    code, else 0 (a call: 0 when it returns, 2 on bad input, 1 on any other exception)."""
    import subprocess

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        steps = [Step.from_json(a) for a in args]
        if not steps:
            raise InputError(None, "step", "no step given")
    except InputError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    for i, step in enumerate(steps, 1):
        print(f"fanout: step {i}/{len(steps)}: {step.describe()}", flush=True)
        t0 = time.monotonic()
        if step.call is not None:
            code = _call(step)
        else:
            code = subprocess.call([sys.executable, "-m", "rlexp.cli", *step.argv])
        print(f"fanout: step {i}/{len(steps)}: exit code {code} after {time.monotonic() - t0:.1f} s", flush=True)
        if code not in step.ok_codes:
            return code if code > 0 else 128 - code  # a signal -N: the shell's 128+N
    return 0


def _call(step: Step) -> int:
    """A library step, by name: the function is looked up when the job runs (the fan-out layer
    imports no stage), and its result is printed as one JSON line when it has ``to_dict``."""
    import importlib
    import traceback

    module, _, name = str(step.call).partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(**step.kwargs)
    except InputError as exc:
        print(exc.one_line(), file=sys.stderr, flush=True)
        return 2
    except Exception:  # noqa: BLE001 - the job's log gets the traceback; the exit code says it failed
        traceback.print_exc()
        return 1
    if hasattr(result, "to_dict"):
        print("fanout: result " + json.dumps(result.to_dict(), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
