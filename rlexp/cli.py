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

from rlexp.errors import CheckFailed, InputError, ServiceError

# Every command: its name, the module that declares it and the function (or typer group) there. The
# app is built from this table when it is needed, and a run builds only the command it runs: typer
# turns each function's signature into options when the app is called, which costs more for the
# whole table than `rlexp plan` spends planning (benchmarks/bench_cli_startup.py).
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("rlexp.commands.plan", "plan"),
    "launch": ("rlexp.commands.launch", "launch"),
    "eval": ("rlexp.commands.evaluate", "evaluate"),
    "compare": ("rlexp.commands.compare", "compare"),
    "decide": ("rlexp.commands.decide", "decide"),
    "report": ("rlexp.commands.report", "report"),
    "status": ("rlexp.commands.status", "status"),
    "demo": ("rlexp.commands.demo", "demo"),
    "fanout": ("rlexp.commands.fanout", "fanout"),
    "ingest": ("rlexp.commands.ingest", "ingest"),
    "import": ("rlexp.commands.import_", "import_script"),
    "import-run": ("rlexp.commands.import_", "import_run"),
}
GROUPS: dict[str, tuple[str, str]] = {
    "guard": ("rlexp.commands.guard", "SOP guardrails G0, G1, G2, G4 (G3 and G5 run inside launch) and the parser audit."),
    "sop": ("rlexp.commands.sop", "The SOP in force: show it, calibrate its gates."),
    "sweep": ("rlexp.commands.sweep", "Base-model sweeps: candidates ranked against a headroom band."),
    "ladder": ("rlexp.commands.ladder", "A single-variable ladder as an Optuna study: propose and run rungs."),
}


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with the one command (or group) named ``only``."""
    import importlib

    new_app = typer.Typer(
        name="rlexp",
        help="GRPO fine-tuning experiments as a protocol: plan, launch, eval, decide, report.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",  # panels, and command summaries are not cut at 45 characters
    )
    new_app.callback()(_options)
    for name, (module, function) in COMMANDS.items():
        if only in (None, name):
            new_app.command(name)(getattr(importlib.import_module(module), function))
    for name, (module, summary) in GROUPS.items():
        if only in (None, name):
            new_app.add_typer(importlib.import_module(module).app, name=name, help=summary)
    return new_app


def __getattr__(name: str):  # PEP 562: `from rlexp.cli import app` builds the whole app
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def _invoked(args: list[str]) -> str | None:
    """The command a command line runs, when it runs one and asks for no help: only that command is
    built. Anything else (no command, an unknown one, a help request) gets the whole app, so usage
    errors and help list every command."""
    rest = [a for a in args if a != "--verbose"]
    if not rest or rest[0] not in (COMMANDS.keys() | GROUPS.keys()):
        return None
    if any(a in ("--help", "-h") for a in rest):
        return None
    return rest[0]


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
        args = list(sys.argv[1:] if argv is None else argv)
        for position, arg in enumerate(args, start=1):
            if "\0" in arg:  # the OS cannot name such a path; click would fail on it deep inside
                raise InputError(None, f"argument {position}", f"a NUL byte in {arg!r:.80}")
        result = build_app(_invoked(args))(args=args, standalone_mode=False)
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
