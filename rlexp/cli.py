"""The ``rlexp`` command line.

Each verb lives in ``rlexp.commands.<verb>`` as a plain function with typed ``Annotated``
options. Those modules import only the standard library and typer at module level; anything
heavy (torch, mlflow, pandas, scipy, vllm) is imported inside the function that needs it, so
``rlexp --help`` and ``rlexp plan`` start fast (see benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import errno
import sys

import typer

from rlexp.commands import compare as compare_cmd
from rlexp.commands import decide as decide_cmd
from rlexp.commands import demo as demo_cmd
from rlexp.commands import evaluate as eval_cmd
from rlexp.commands import fanout as fanout_cmd
from rlexp.commands import guard as guard_cmd
from rlexp.commands import import_ as import_cmd
from rlexp.commands import ingest as ingest_cmd
from rlexp.commands import ladder as ladder_cmd
from rlexp.commands import launch as launch_cmd
from rlexp.commands import plan as plan_cmd
from rlexp.commands import report as report_cmd
from rlexp.commands import sop as sop_cmd
from rlexp.commands import status as status_cmd
from rlexp.commands import sweep as sweep_cmd
from rlexp.errors import CheckFailed, InputError, ServiceError

app = typer.Typer(
    name="rlexp",
    help="GRPO fine-tuning experiments as a protocol: plan, launch, eval, decide, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",  # panels, and command summaries are not cut at 45 characters
)

@app.callback()
def _options(verbose: bool = typer.Option(False, "--verbose", help="Let libraries (MLflow, transformers, torch) "
                                          "log INFO and warnings too.")) -> None:
    """Third-party logging is silenced unless --verbose: rlexp's own output says what runs."""
    quiet_libraries(verbose)


def quiet_libraries(verbose: bool) -> None:
    import os

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


app.command("plan")(plan_cmd.plan)
app.command("launch")(launch_cmd.launch)
app.command("eval")(eval_cmd.evaluate)
app.command("compare")(compare_cmd.compare)
app.command("decide")(decide_cmd.decide)
app.command("report")(report_cmd.report)
app.command("status")(status_cmd.status)
app.command("demo")(demo_cmd.demo)
app.command("fanout")(fanout_cmd.fanout)
app.command("ingest")(ingest_cmd.ingest)
app.command("import")(import_cmd.import_script)
app.command("import-run")(import_cmd.import_run)
app.add_typer(guard_cmd.app, name="guard", help="SOP guardrails G0, G1, G2, G4 (G3 and G5 run inside launch) and the parser audit.")
app.add_typer(sop_cmd.app, name="sop", help="The SOP in force: show it, calibrate its gates.")
app.add_typer(sweep_cmd.app, name="sweep", help="Base-model sweeps: candidates ranked against a headroom band.")
app.add_typer(ladder_cmd.app, name="ladder", help="A single-variable ladder as an Optuna study: propose and run rungs.")


def _run_first(exc: InputError) -> str:
    """A missing file of the experiment directory names the command that writes it."""
    if exc.message != "file not found" or not exc.file:
        return ""
    from rlexp.storage.layout import producer_of

    producer = producer_of(exc.file)
    return f" (run `{producer}` first)" if producer else ""


# OSErrors that a bad path causes (a name too long, a symlink loop, a file where a directory must be,
# a dangling symlink where a directory is created): exit 2 like any bad input
_BAD_PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENXIO}


def main(argv: list[str] | None = None) -> int:
    """Console entry point (the generated script calls ``sys.exit(main())``).

    Commands signal their verdict by raising ``typer.Exit(code)`` (or :class:`CheckFailed`
    for exit 1); bad input is :class:`InputError`, printed as one line, exit 2.
    """
    try:  # recent typer vendors click as typer._click: its usage errors are not click's classes
        from typer._click.exceptions import ClickException
    except ImportError:  # older typer: the click package itself
        from click.exceptions import ClickException

    try:
        for position, arg in enumerate(sys.argv[1:] if argv is None else argv, start=1):
            if "\0" in arg:  # the OS cannot name such a path; click would fail on it deep inside
                raise InputError(None, f"argument {position}", f"a NUL byte in {arg!r:.80}")
        result = app(args=argv, standalone_mode=False)
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
    except typer.Exit as exc:
        return exc.exit_code
    except ClickException as exc:  # usage errors: bad option, out-of-range value, missing argument
        where = getattr(getattr(exc, "ctx", None), "command_path", None)
        text = " ".join(exc.format_message().split())
        print(f"rlexp: {where}: {text}" if where else f"rlexp: {text}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # pathlib's resolve() on a symlink loop in a path given on the command line
        if not str(exc).startswith("Symlink loop"):
            raise
        print(f"rlexp: {' '.join(str(exc).split())[:300]}: a path that is a symlink loop", file=sys.stderr)
        return 2
    except typer.Abort:
        print("rlexp: aborted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno in _BAD_PATH_ERRNOS:  # a path given as input that no file can have: bad input, not the disk
            where = f"{InputError(exc.filename, None, '').one_line().rstrip(': ')}: " if exc.filename else ""
            print(f"rlexp: {where}{exc.strerror or exc}", file=sys.stderr)
            return 2
        # disk full, permissions: one line; the stages' write order makes a rerun repair it
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"rlexp: {where}{exc.strerror or exc} (nothing half-written; rerun the command once fixed)",
              file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
