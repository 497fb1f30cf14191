"""Start, watch and stop a trainer child process (the local trainer, OpenRLHF, or ``ray job submit``).

The child gets its own session (process group), so a stop reaches every process it spawned
(Ray's driver, vLLM workers) and a Ctrl-C in the terminal reaches only ``rlexp launch``, which
then stops the child deliberately and records why. Its stdout and stderr go to one log file,
appended, so a resumed run keeps the earlier log. Commands are argv lists, never shell strings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlexp.experiment.layout import pid_alive  # noqa: F401  (re-exported: the one liveness probe)


def start(argv: Sequence[str], *, log_path: str | Path, cwd: str | Path | None = None,
          env: Mapping[str, str] | None = None, die_with_parent: bool = False) -> subprocess.Popen:
    """Start ``argv`` with stdout+stderr appended to ``log_path``; stdin closed.

    ``die_with_parent`` (Linux): the child gets SIGTERM when this process dies, even by SIGKILL,
    so a killed ``rlexp launch`` stops its trainer the same graceful way a Ctrl-C does.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_parent_death_signal if die_with_parent and sys.platform.startswith("linux") else None,
        )


def _parent_death_signal() -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the parent dies (prctl)."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def stop(proc: subprocess.Popen, *, grace_s: float = 60.0, sig: int = signal.SIGTERM) -> int:
    """Ask the child's process group to stop (``sig``), wait ``grace_s``, then kill it.

    The local trainer finishes its current global step and saves on SIGTERM, so the grace period
    is what lets a stop leave a resumable checkpoint.
    """
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by {name}"
    return f"exit code {code}"


def wait_for(predicate, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes (tests and the follower use it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())
