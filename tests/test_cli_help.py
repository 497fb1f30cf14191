"""The console script's stored help texts are typer's own, and printing them imports no typer."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlexp._cli_help import HELP
from rlexp.console import RENDERING_VARIABLES, command_paths, render

CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in RENDERING_VARIABLES}


def test_every_command_has_a_stored_text():
    assert sorted(HELP) == sorted(command_paths()), "run scripts/write-cli-help"
    assert {"", "plan", "guard g2", "sop calibrate"} <= set(HELP)


@pytest.mark.parametrize("path", sorted(HELP))
def test_stored_text_equals_typers_rendering(path):
    assert HELP[path] == render(path), f"`rlexp {path} --help` changed: run scripts/write-cli-help"


def _console(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import sys; from rlexp.console import main; rc = main(sys.argv[1:]); "
            "print('typer imported' if 'typer' in sys.modules else 'no typer', file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)


def test_help_is_printed_without_typer():
    done = _console(["plan", "--help"], CLEAN_ENV)
    assert done.returncode == 0 and done.stdout == HELP["plan"]
    assert done.stderr.strip() == "no typer"
    assert "Usage: rlexp plan" in done.stdout


def test_a_rendering_variable_or_a_real_command_goes_to_typer():
    wide = _console(["--help"], {**CLEAN_ENV, "COLUMNS": "150"})
    assert wide.returncode == 0 and wide.stderr.strip() == "typer imported"
    assert "Usage: " in wide.stdout and max(len(line) for line in wide.stdout.splitlines()) > 80  # typer's, 150 wide
    unknown = _console(["no-such-verb", "--help"], CLEAN_ENV)
    assert unknown.returncode == 2 and "typer imported" in unknown.stderr
