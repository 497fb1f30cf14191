"""The ``rlexp`` command line.

Each verb lives in ``rlexp.commands.<verb>`` as a plain function with typed ``Annotated``
options. Those modules import only the standard library and typer at module level; anything
heavy (torch, mlflow, pandas, scipy, vllm) is imported inside the function that needs it, so
``rlexp --help`` and ``rlexp plan`` start fast (see benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import sys

import typer

from rlexp.errors import InputError

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
    from rlexp.cli_runtime import quiet_libraries

    quiet_libraries(verbose)


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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the typer app (the console script, :func:`rlexp.console.main`, comes here
    for everything it does not answer itself).

    Commands signal their verdict by raising ``typer.Exit(code)`` (or :class:`CheckFailed`
    for exit 1); bad input is :class:`InputError`, printed as one line, exit 2
    (:func:`rlexp.cli_runtime.guarded`). Usage errors are typer's: one line, exit 2.
    """
    from rlexp.cli_runtime import flushed, guarded

    args = list(sys.argv[1:] if argv is None else argv)
    return guarded(lambda: flushed(_run_app(args)))


def _run_app(args: list[str]) -> int:
    try:  # recent typer vendors click as typer._click: its usage errors are not click's classes
        from typer._click.exceptions import ClickException
    except ImportError:  # older typer: the click package itself
        from click.exceptions import ClickException

    for position, arg in enumerate(args, start=1):
        if "\0" in arg:  # the OS cannot name such a path; click would fail on it deep inside
            raise InputError(None, f"argument {position}", f"a NUL byte in {arg!r:.80}")
    try:
        result = build_app(_invoked(args))(args=args, standalone_mode=False)
    except typer.Exit as exc:  # before guarded's RuntimeError: click's Exit and Abort are RuntimeErrors
        return exc.exit_code
    except typer.Abort:
        print("rlexp: aborted", file=sys.stderr)
        return 130
    except ClickException as exc:  # usage errors: bad option, out-of-range value, missing argument
        where = getattr(getattr(exc, "ctx", None), "command_path", None)
        text = " ".join(exc.format_message().split())
        print(f"rlexp: {where}: {text}" if where else f"rlexp: {text}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
