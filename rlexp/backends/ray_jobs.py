"""A training run as a Ray job, driven through Ray's Job API (``ray.job_submission``).

``rlexp launch --backend ray`` submits the trainer's argv as the entrypoint of one job with a
submission id that rlexp chooses and records in ``launch/state.json`` before the job exists, and
from then on asks the cluster — never a ``ray job submit`` client's exit code — what happened:

- status: ``get_job_info`` (PENDING/RUNNING are alive; SUCCEEDED, FAILED, STOPPED are ends);
- the exit code: the job's ``driver_exit_code`` (the trainer's own code: the entrypoint is the
  trainer's argv itself, no wrapper), else the one in Ray's "failed with exit code N" message;
- stop: ``stop_job``, which sends the trainer SIGTERM and, after ``RAY_JOB_STOP_WAIT_TIME_S``
  (set in the job's runtime env to :data:`STOP_GRACE_S`, so the local trainer can finish its step
  and save), SIGKILL;
- logs: ``tail_job_logs`` mirrored into ``launch/stdout.log`` while the job runs, completed from
  ``get_job_logs`` when it ends (so the stdout metrics follower of the OpenRLHF path sees every line).

A job outlives the process that submitted it: after a SIGKILL of ``rlexp launch`` it runs on,
``rlexp status`` asks the Job API (:func:`job_view`), and ``rlexp launch --resume`` re-attaches to
the same submission while it is alive (:class:`RayJobRun` ``.attach``) instead of submitting again.

Ray is imported only inside functions; only the ``ray`` backend imports this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError

ALIVE = ("PENDING", "RUNNING")
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
STOP_GRACE_S = 60  # as rlexp.backends.process.stop: time for the trainer to finish its step and save
# What the local trainer's job inherits from the launcher: which rlexp it imports and how many
# threads torch uses (the same thread count gives the same numbers as the local backend).
# A job otherwise runs in the Ray head's environment, not the submitter's.
FORWARDED_ENV = ("PYTHONPATH", "RLEXP_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM")
_EXIT_CODE_MESSAGE = re.compile(r"failed with exit code (-?\d+)")


@dataclass(frozen=True)
class JobView:
    """What the Job API says about one submission."""

    submission_id: str
    status: str  # PENDING | RUNNING | SUCCEEDED | FAILED | STOPPED
    exit_code: int | None  # the entrypoint's (the trainer's) exit code; None while alive or when stopped
    message: str | None

    @property
    def alive(self) -> bool:
        return self.status in ALIVE

    def summary(self) -> str:
        """One line: the status and the first line of Ray's message."""
        first = (self.message or "").strip().splitlines()[:1]
        # Ray appends the log's tail to a failure's message; launch/stdout.log has all of it
        text = first[0].split(", last available logs")[0].rstrip(" :.") if first else ""
        return f"Ray job {self.submission_id} {self.status}" + (f": {text[:200]}" if text else "")


def entrypoint(argv: Sequence[str]) -> str:
    """The job's entrypoint. Ray runs it with a shell, so each argv element is quoted
    (``shlex.join``): the shell parses it back into exactly ``argv``, metacharacters inert."""
    return shlex.join(list(argv))


def runtime_env(*, forward_env: bool, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The job's runtime env: unbuffered output (live logs), the stop grace period, and for the
    local trainer the launcher's :data:`FORWARDED_ENV` values (never one naming a secret)."""
    from rlexp.experiment.provenance import redact_env

    env_vars = {"PYTHONUNBUFFERED": "1", "RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S)}
    if forward_env:
        environ = os.environ if environ is None else environ
        picked = {k: environ[k] for k in FORWARDED_ENV if environ.get(k)}
        env_vars.update(redact_env(picked))
    return {"env_vars": env_vars}


def client(address: str):
    """A ``JobSubmissionClient`` for the dashboard at ``address``; one line (exit 2) when Ray's job
    client is not installed or the dashboard does not answer."""
    url = normalize_ray_address(address)
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise InputError(None, "--backend", "the ray backend needs Ray's job client: "
                         "pip install 'rlexp[ray]' (ray[default])") from None
    import logging

    # its INFO lines ("WebSocket closed for job ...") would land on rlexp's stderr, which carries
    # one line per error; the job's own output goes to launch/stdout.log
    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(url)
    except Exception as exc:  # noqa: BLE001 - requests' ConnectionError, Ray's RuntimeError, ...
        raise InputError(None, "--ray-address", f"Ray Job API unreachable at {url}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None


def view_from_info(submission_id: str, info: Any) -> JobView:
    """A :class:`JobView` of Ray's ``JobDetails``/``JobInfo``. ``driver_exit_code`` is a field of
    recent Ray releases; older ones state the code only in the message of a FAILED job."""
    status = str(getattr(info.status, "value", info.status))
    message = getattr(info, "message", None)
    code = getattr(info, "driver_exit_code", None)
    if code is None and status == "FAILED" and message:
        match = _EXIT_CODE_MESSAGE.search(message)
        code = int(match.group(1)) if match else None
    if status == "SUCCEEDED" and code is None:
        code = 0
    return JobView(submission_id=submission_id, status=status, exit_code=code, message=message)


def job_view(address: str, submission_id: str) -> JobView | None:
    """The Job API's view of ``submission_id``; None when the cluster does not know it (a new
    cluster since). Raises InputError when the dashboard does not answer."""
    jobs = client(address)
    try:
        info = jobs.get_job_info(submission_id)
    except RuntimeError as exc:
        if "does not exist" in str(exc) or "404" in str(exc):
            return None
        raise InputError(None, "--ray-address", f"Ray Job API at {address}: {str(exc).splitlines()[0][:200]}") from None
    return view_from_info(submission_id, info)


class _LogMirror:
    """Appends a job's log to ``launch/stdout.log`` while it runs (``tail_job_logs``, in a thread
    with its own event loop) and completes it from ``get_job_logs`` at the end.

    ``start`` is the byte offset in ``stdout.log`` where this submission's log begins (earlier
    launches' logs come before it); on a re-attach the file is cut back to it and the job's log
    is mirrored again from its beginning, so nothing is lost or written twice.
    """

    def __init__(self, jobs: Any, submission_id: str, path: Path, start: int):
        self.jobs, self.submission_id, self.path, self.start = jobs, submission_id, path, start
        self.written = 0  # bytes of the job's log in the file
        self._lock = threading.Lock()
        self._closing = threading.Event()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            if fh.tell() > start:
                fh.truncate(start)
        self._thread = threading.Thread(target=self._run, name=f"ray-logs-{submission_id}", daemon=True)
        self._thread.start()

    def _append(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        with self._lock:
            if self._closing.is_set():  # complete() has written the rest from get_job_logs
                return
            with open(self.path, "ab") as fh:
                fh.write(data)
            self.written += len(data)

    def _run(self) -> None:
        import asyncio

        async def tail() -> None:
            async for chunk in self.jobs.tail_job_logs(self.submission_id):  # ends when the job ends
                if self._closing.is_set():
                    return
                self._append(chunk)

        with contextlib.suppress(Exception):  # a broken stream is repaired by complete()
            asyncio.run(tail())

    def complete(self, timeout_s: float = 10.0) -> None:
        """The job has ended: let the stream drain, then append what it missed."""
        self._thread.join(timeout_s)
        self._closing.set()
        with contextlib.suppress(Exception):
            full = self.jobs.get_job_logs(self.submission_id).encode("utf-8", "replace")
            with self._lock, open(self.path, "ab") as fh:
                if len(full) > self.written:
                    fh.write(full[self.written:])
                    self.written = len(full)


class RayJobRun:
    """One submission, with the parts of ``subprocess.Popen`` that ``rlexp launch`` uses
    (``pid``, ``poll``, ``wait``) plus :meth:`stop` and :meth:`view`.

    ``poll()`` returns None while the job is alive, else the trainer's exit code; a job stopped
    through the Job API has none (Ray records no exit code for it), so ``poll()`` returns
    ``-SIGTERM`` for it (how Ray stops it) and :meth:`view` says STOPPED.
    """

    pid = None  # the trainer runs under the Ray head, not as our child
    min_interval_s = 0.5  # the follower polls every 50 ms; the Job API is asked at most this often
    unreachable_grace_s = 120.0

    def __init__(self, jobs: Any, address: str, submission_id: str, log_path: Path, log_start: int):
        self.jobs, self.address, self.submission_id = jobs, address, submission_id
        self.log_start = log_start
        self._view: JobView | None = None
        self._asked = 0.0
        self._failing_since: float | None = None
        self._mirror = _LogMirror(jobs, submission_id, Path(log_path), log_start)

    @classmethod
    def submit(cls, address: str, submission_id: str, argv: Sequence[str], *, runtime_env: Mapping[str, Any],
               metadata: Mapping[str, str], log_path: Path) -> RayJobRun:
        jobs = client(address)
        log_start = Path(log_path).stat().st_size if Path(log_path).exists() else 0
        try:
            jobs.submit_job(entrypoint=entrypoint(argv), submission_id=submission_id,
                            runtime_env=dict(runtime_env), metadata=dict(metadata))
        except RuntimeError as exc:
            raise InputError(None, "--ray-address", f"Ray Job API refused the job: "
                             f"{str(exc).splitlines()[0][:200]}") from None
        return cls(jobs, address, submission_id, log_path, log_start)

    @classmethod
    def attach(cls, address: str, submission_id: str, *, log_path: Path, log_start: int | None) -> RayJobRun:
        """Follow a submission that is already running (``--resume`` after the launcher died)."""
        jobs = client(address)
        if log_start is None:  # a state file without it: keep what is there, append after it
            log_start = Path(log_path).stat().st_size if Path(log_path).exists() else 0
        return cls(jobs, address, submission_id, log_path, log_start)

    def view(self) -> JobView:
        """The Job API's answer; asked at most every :attr:`min_interval_s` while the job lives
        (the follower polls often), and kept once the job has ended."""
        if self._view is not None and (not self._view.alive or time.monotonic() - self._asked < self.min_interval_s):
            return self._view
        try:
            view = view_from_info(self.submission_id, self.jobs.get_job_info(self.submission_id))
        except Exception as exc:  # noqa: BLE001 - requests' errors, Ray's RuntimeError
            # a dashboard restart or a network blip must not end the following of a long run:
            # the job goes on meanwhile; only a lasting silence is an error
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if self._view is None or now - self._failing_since > self.unreachable_grace_s:
                raise InputError(None, "--ray-address", f"Ray Job API at {self.address} has not answered for "
                                 f"{now - self._failing_since:.0f} s ({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}); "
                                 f"the job may still run: rlexp launch --resume re-attaches") from None
            return self._view
        self._failing_since = None
        self._asked = time.monotonic()
        if not view.alive:
            self._mirror.complete()
        self._view = view
        return view

    def poll(self) -> int | None:
        view = self.view()
        if view.alive:
            return None
        if view.exit_code is not None:
            return view.exit_code
        return -signal.SIGTERM if view.status == "STOPPED" else 1

    def wait(self, poll_s: float = 0.5) -> int:
        while (code := self.poll()) is None:
            time.sleep(poll_s)
        return code

    def stop(self, grace_s: float = STOP_GRACE_S + 30) -> int:
        """``stop_job`` and wait for the end (Ray: SIGTERM, SIGKILL after the job's grace period)."""
        if self.poll() is None:
            with contextlib.suppress(RuntimeError):
                self.jobs.stop_job(self.submission_id)
            deadline = time.monotonic() + grace_s
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        code = self.poll()
        return code if code is not None else -signal.SIGKILL


# ---------------------------------------------------------------------------- the launch's side

@dataclass(frozen=True)
class RayJobPlan:
    """The job ``rlexp launch`` submits — or, with ``reattach``, the live submission it follows."""

    address: str
    submission_id: str
    argv: tuple[str, ...]  # the entrypoint: the trainer's argv
    runtime_env: dict[str, Any]
    metadata: dict[str, str]
    reattach: bool = False

    def display_argv(self) -> list[str]:
        """The same submission as a ``ray job submit`` command (for ``--dry-run``, ``argv.json``
        and ``launch.sh``; rlexp itself submits through the Job API)."""
        return ray_job_argv(list(self.argv), self.address, runtime_env=self.runtime_env,
                            submission_id=self.submission_id)


def plan_job(attempt_id: str, attempt_dir: Path, train_argv: Sequence[str], address: str, *, local_trainer: bool,
             resume: bool, env: Mapping[str, str] | None = None) -> RayJobPlan:
    """A new submission: a fresh submission id, the runtime env (plus ``env``: what the trainer must
    see, e.g. where its file logger writes), metadata naming the attempt."""
    job_env = runtime_env(forward_env=local_trainer)
    job_env["env_vars"].update(env or {})
    return RayJobPlan(
        address=normalize_ray_address(address),
        submission_id=f"rlexp-{attempt_id}-{int(time.time())}",
        argv=tuple(train_argv),
        runtime_env=job_env,
        metadata={"rlexp.attempt_id": attempt_id, "rlexp.attempt_dir": str(attempt_dir),
                  "rlexp.resume": str(resume).lower()},
    )


def live_submission(state: Mapping[str, Any] | None, address: str | None, *, resume: bool,
                    state_path: Path) -> RayJobPlan | None:
    """The submission recorded in ``launch/state.json`` when the Job API says it is still alive.

    With ``--resume`` it is re-attached to (a second submission would train the same attempt twice
    into the same files); without, the launch is refused. None when there is no such submission,
    or it has ended (``--resume`` then submits anew from the last checkpoint).
    """
    if not state or state.get("backend") != "ray" or not state.get("ray_submission_id"):
        return None
    submission_id = str(state["ray_submission_id"])
    recorded = state.get("ray_address")
    where = address or recorded
    if not where:
        return None
    view = job_view(where, submission_id)
    if view is None or not view.alive:
        return None
    if not resume:
        raise InputError(state_path, "ray_submission_id", f"{view.summary()} is still training this attempt; "
                         "rlexp launch --resume re-attaches to it (or stop it first)")
    return RayJobPlan(address=normalize_ray_address(where), submission_id=submission_id, argv=(), runtime_env={},
                      metadata={}, reattach=True)


def open_run(job: RayJobPlan, *, log_path: Path, log_start: int | None, record) -> RayJobRun:
    """Submit ``job`` (or attach to it), calling ``record(fields)`` with the fields that
    ``launch/state.json`` keeps — *before* a new job exists, so that a launcher killed at any
    moment leaves the submission id on disk for ``rlexp status`` and ``--resume``."""
    if job.reattach:
        run = RayJobRun.attach(job.address, job.submission_id, log_path=log_path, log_start=log_start)
        record({"ray_submission_id": job.submission_id, "ray_address": job.address, "ray_log_start": run.log_start})
        return run
    start = log_path.stat().st_size if log_path.exists() else 0
    record({"ray_submission_id": job.submission_id, "ray_address": job.address, "ray_log_start": start})
    return RayJobRun.submit(job.address, job.submission_id, job.argv, runtime_env=job.runtime_env,
                            metadata=job.metadata, log_path=log_path)


def status_row(state: Mapping[str, Any]) -> tuple[str, str]:
    """``rlexp status`` for a Ray run whose launcher is gone: (state, note) from the Job API."""
    submission_id, address = state.get("ray_submission_id"), state.get("ray_address")
    if not address:
        return "lost", "no Ray address recorded; continue with rlexp launch --resume"
    try:
        view = job_view(str(address), str(submission_id))
    except InputError as exc:
        return "unknown", exc.one_line()
    if view is None:
        return "lost", f"Ray job {submission_id} unknown to the cluster at {address}; continue with rlexp launch --resume"
    if view.alive:
        return "running", f"{view.summary()}; no launcher follows it: rlexp launch --resume re-attaches"
    if state.get("launcher_pid") is None:
        return "exited", f"started with --no-follow; {view.summary()}"
    return "lost", f"{view.summary()}; its launcher died: continue with rlexp launch --resume"


# ----------------------------------------------------------------------------- the Ray address and CLI


def ray_job_argv(
    train_argv: list[str],
    address: str,
    *,
    runtime_env: Mapping[str, Any] | None = None,
    submission_id: str | None = None,
) -> list[str]:
    """``ray job submit --address URL --runtime-env-json JSON [--submission-id ID] -- <train argv>``."""
    argv = ["ray", "job", "submit", "--address", normalize_ray_address(address)]
    argv += ["--runtime-env-json", json.dumps(dict(runtime_env or {}), sort_keys=True, separators=(",", ":"))]
    if submission_id:
        argv += ["--submission-id", submission_id]
    return [*argv, "--", *train_argv]


def ray_stop_argv(address: str, submission_id: str) -> list[str]:
    """``ray job stop --address URL ID``: stopping the submit client does not stop the job."""
    return ["ray", "job", "stop", "--address", normalize_ray_address(address), submission_id]


def normalize_ray_address(address: str) -> str:
    """The Ray dashboard's HTTP address (``ray job submit`` talks to the dashboard, port 8265)."""
    address = address.strip()
    if not address:
        raise InputError(None, "--ray-address", "empty address")
    if "://" not in address:
        address = f"http://{address}"
    if not address.startswith(("http://", "https://")):
        raise InputError(None, "--ray-address", f"expected the dashboard's http:// address, got {address}")
    return address.rstrip("/")


def check_ray_dashboard(address: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """GET ``<address>/api/version`` before submitting: an unreachable cluster is one clear line
    now instead of a stack trace from ``ray job submit`` later."""
    from rlexp.evaluation.engines.http import HttpFailure, HttpLimits, get_json

    url = normalize_ray_address(address) + "/api/version"
    limits = HttpLimits(connect_timeout_s=timeout_s, read_timeout_s=timeout_s, timeout_s=timeout_s,
                        max_response_bytes=1 << 16, retries=0)
    try:
        info = get_json(url, limits)
    except HttpFailure as exc:
        raise InputError(None, "--ray-address", f"Ray dashboard unreachable or not answering at {address}: "
                                                f"{exc}") from None
    return info if isinstance(info, dict) else {"version": info}
