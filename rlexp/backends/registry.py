"""The backend registry: what ``rlexp launch --backend`` names, and how each one runs a trainer's argv.

A trainer declares the backends that run it (:attr:`rlexp.trainers.base.TrainerRules.backends`);
a backend knows nothing of trainers. ``local`` and ``process`` start a child process here (the
local trainer, or a trainer's own command line); ``ray`` submits the argv as a Ray job through
the Job API (rlexp.backends.ray_jobs), which outlives its launcher and is re-attached to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError


class ProcessBackend:
    """A child process of ``rlexp launch``, in its own process group (rlexp.backends.process)."""

    takes_address = False  # a cluster address (--ray-address) selects the backend that takes one

    def __init__(self, name: str):
        self.name = name

    def check(self, address: str | None, *, dry_run: bool) -> None:
        """Refuse what cannot run before anything is written."""

    def live_submission(self, state: Mapping[str, Any] | None, address: str | None, *, resume: bool,
                        state_path: Path) -> Any:
        """A run of the attempt that outlived its launcher and is followed again (None: none)."""
        return None

    def plan(self, attempt_id: str, attempt_dir: Path, argv: list[str], address: str | None, *,
             forward_env: bool, resume: bool, env: Mapping[str, str] | None) -> tuple[list[str], Any, str | None]:
        """(the argv to record, the job to submit, its submission id): a process runs ``argv`` itself."""
        return argv, None, None

    def start(self, argv: list[str], job: Any, *, log_path: Path, cwd: Path, env: Mapping[str, str] | None,
              follow: bool, log_start: int | None, record: Callable[[dict[str, Any]], None]) -> Any:
        """Start the run; the handle has ``pid``, ``poll()``, ``wait()``, ``stop()`` and ``view()``."""
        import os

        from rlexp.backends import process

        # following: the child dies with us (SIGTERM -> it saves its step), so a killed launcher never
        # leaves an unwatched trainer behind; --no-follow: the child outlives us by design
        full_env = {**os.environ, **env} if env is not None else None
        return _ProcessRun(process.start(argv, log_path=log_path, cwd=cwd, env=full_env, die_with_parent=follow))

    def state_fields(self, run: Any) -> dict[str, Any]:
        """What ``launch/state.json`` records of a started run: a process's pid (liveness)."""
        return {"pid": run.pid}

    def status_row(self, state: Mapping[str, Any]) -> tuple[str, str] | None:
        """``rlexp status`` for a run whose launcher is gone (None: the process's liveness says it)."""
        return None


class _ProcessRun:
    def __init__(self, popen: Any):
        self.popen = popen
        self.pid = popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self) -> int:
        return self.popen.wait()

    def stop(self) -> int:
        from rlexp.backends import process

        return process.stop(self.popen)

    def view(self) -> None:  # no cluster to ask how it ended: the exit code says it
        return None


class RayJobBackend(ProcessBackend):
    """A Ray job through Ray's Job API (rlexp.backends.ray_jobs): it outlives this process (a
    SIGKILL here leaves it running; ``--resume`` re-attaches); its status, exit code and stop come
    from the cluster."""

    takes_address = True

    def check(self, address: str | None, *, dry_run: bool) -> None:
        if not address:
            raise InputError(None, "--ray-address", f"the {self.name} backend needs --ray-address http://HOST:8265")
        if not dry_run:
            from rlexp.backends.ray_jobs import check_ray_dashboard

            check_ray_dashboard(address)  # before plan.json: a dead cluster writes nothing

    def live_submission(self, state: Mapping[str, Any] | None, address: str | None, *, resume: bool,
                        state_path: Path) -> Any:
        from rlexp.backends import ray_jobs

        return ray_jobs.live_submission(state, address, resume=resume, state_path=state_path)

    def plan(self, attempt_id: str, attempt_dir: Path, argv: list[str], address: str | None, *,
             forward_env: bool, resume: bool, env: Mapping[str, str] | None) -> tuple[list[str], Any, str | None]:
        from rlexp.backends import ray_jobs

        job = ray_jobs.plan_job(attempt_id, attempt_dir, argv, address, local_trainer=forward_env, resume=resume,
                                env=env)
        return job.display_argv(), job, job.submission_id

    def start(self, argv: list[str], job: Any, *, log_path: Path, cwd: Path, env: Mapping[str, str] | None,
              follow: bool, log_start: int | None, record: Callable[[dict[str, Any]], None]) -> Any:
        from rlexp.backends import ray_jobs

        return ray_jobs.open_run(job, log_path=log_path, record=record, log_start=log_start if job.reattach else None)

    def state_fields(self, run: Any) -> dict[str, Any]:
        return {}  # its submission id and address, recorded by open_run before it existed

    def status_row(self, state: Mapping[str, Any]) -> tuple[str, str] | None:
        if not state.get("ray_submission_id"):
            return None
        from rlexp.backends.ray_jobs import status_row

        return status_row(state)


# --backend NAME -> the backend; tests/test_architecture.py reads this table
BACKENDS: dict[str, ProcessBackend] = {
    "local": ProcessBackend("local"),
    "process": ProcessBackend("process"),
    "ray": RayJobBackend("ray"),
}


def backend(name: str) -> ProcessBackend:
    """The backend ``name``; an InputError on ``--backend`` naming the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise InputError(None, "--backend", f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}") from None


def default_backend(trainer_backends: tuple[str, ...], address: str | None) -> str:
    """``--backend`` unstated: the one that takes the cluster address when one is given, else the
    trainer's first."""
    if address:
        return next(name for name, b in BACKENDS.items() if b.takes_address)
    return trainer_backends[0]
