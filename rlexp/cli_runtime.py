"""What every rlexp command line shares, whether typer parsed it (:mod:`rlexp.cli`) or the console
script did (:mod:`rlexp.console`): third-party logging quieted, and rlexp's errors turned into one line
on stderr and an exit code. Standard library and rlexp's error types only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable

from rlexp.errors import CheckFailed, InputError, ServiceError


def quiet_libraries(verbose: bool) -> None:
    """Third-party logging is silenced unless ``--verbose``: rlexp's own output says what runs."""
    if verbose:
        os.environ["RLEXP_VERBOSE"] = "1"
        return
    # read by the libraries at import (they are imported later, inside the commands) and by child processes
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


# ----------------------------------------------------------------------------- errors as exit codes

# OSErrors that a bad path causes (a name too long, a symlink loop, a file where a directory must be,
# a dangling symlink where a directory is created): exit 2 like any bad input
_BAD_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENXIO}


def guarded(command: Callable[[], int]) -> int:
    """Run a command and turn rlexp's errors into one line on stderr and an exit code: bad input
    (:class:`InputError`, a path no file can have) 2, an unusable service 2, a failed check
    (:class:`CheckFailed`) 1, a disk error 1."""
    try:
        return command()
    except InputError as exc:
        print(f"rlexp: {exc.one_line()}{_run_first(exc)}", file=sys.stderr)
        return 2
    except ServiceError as exc:
        print(f"rlexp: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        if str(exc):
            print(f"rlexp: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # pathlib's resolve() on a symlink loop in a path given on the command line
        if not str(exc).startswith("Symlink loop"):
            raise
        print(f"rlexp: {' '.join(str(exc).split())[:300]}: a path that is a symlink loop", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno in _BAD_PATH_ERRNOS:  # a path given as input that no file can have: bad input, not the disk
            where = f"{InputError(exc.filename, None, '').one_line().rstrip(': ')}: " if exc.filename else ""
            print(f"rlexp: {where}{exc.strerror or exc}", file=sys.stderr)
            return 2
        # disk full, permissions: one line; the stages' write order makes a rerun repair it
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else "a write failed: "
        print(f"rlexp: {where}{exc.strerror or exc} (nothing half-written; rerun the command once fixed)",
              file=sys.stderr)
        return 1


def _run_first(exc: InputError) -> str:
    """A missing file of the experiment directory names the command that writes it."""
    if exc.message != "file not found" or not exc.file:
        return ""
    from rlexp.experiment.layout import producer_of

    producer = producer_of(exc.file)
    return f" (run `{producer}` first)" if producer else ""


def flushed(code: int) -> int:
    """``code`` once what the command printed has reached stdout: output redirected to a full disk
    is a failed write like any other (one line, exit 1), not an error Python reports after the exit
    code was chosen. The unwritable rest is discarded so the interpreter's own flush at exit cannot
    fail again."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            sys.stdout.flush()
        raise OSError(exc.errno, exc.strerror, "<standard output>") from None
    return code
