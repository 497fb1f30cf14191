"""The ``rlexp`` console script: help from precomputed text, everything else through the typer app.

``rlexp --help`` and ``rlexp VERB --help`` are what a newcomer runs first, and rendering them with
typer and rich costs more than the interpreter's own start. The texts typer renders for a pipe (80
columns, no colour) are stored in :mod:`rlexp._cli_help` by ``scripts/write-cli-help``, and
``tests/test_cli_help.py`` renders them again with typer and requires the same bytes, so the
stored text cannot drift from the commands. Anything else — and any help request under a setting
that changes typer's rendering (a width or colour variable) — goes to :func:`rlexp.cli.main`.
This module imports nothing beyond the standard library and the stored texts.
"""

from __future__ import annotations

import os
import sys

# Variables that change how typer and rich render help: with any of them set, typer renders it.
RENDERING_VARIABLES = ("COLUMNS", "LINES", "TERMINAL_WIDTH", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE",
                       "TTY_INTERACTIVE", "_TYPER_FORCE_DISABLE_TERMINAL")  # fmt: skip


def stored_help(argv: list[str]) -> str | None:
    """The stored help text for ``argv`` (``[*command path, "--help"]``), or None."""
    if not argv or argv[-1] != "--help":
        return None
    if any(os.environ.get(name) for name in RENDERING_VARIABLES):
        return None
    from rlexp._cli_help import HELP

    return HELP.get(" ".join(argv[:-1]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = stored_help(args)
    if text is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    from rlexp.cli import main as typer_main

    return typer_main(argv)


if __name__ == "__main__":
    sys.exit(main())
