"""`rlexp plan` through the console script without typer is the same command as through typer: the same
values parsed from the command line, the same bytes printed, the same exit code; anything else goes to
typer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rlexp.cli
import rlexp.commands.plan_view
import rlexp.console
from rlexp.console import RENDERING_VARIABLES, plan_arguments

EXAMPLE = Path(__file__).resolve().parent.parent / "experiments" / "seed-a30"
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in RENDERING_VARIABLES}

PLAIN_FORMS = [
    ["plan", "a30"],
    ["plan", "a30", "--json"],
    ["plan", "--json", "a30"],
    ["plan", "dir with space/attempt.yaml", "--json"],
    ["plan", "äö/a30"],
    ["plan", "./-starts-after-dot"],
]
# typer's to parse or refuse: help, global options, `--`, option-like or empty arguments, extra words
OTHER_FORMS = [
    ["plan"],
    ["plan", "--json"],
    ["plan", "a30", "b"],
    ["plan", "a30", "--json", "--json"],
    ["plan", "-x"],
    ["plan", "--", "-a30"],
    ["plan", "a30", "--jso"],
    ["plan", "a30", "--help"],
    ["plan", ""],
    ["plan", "a\0b"],
    ["--verbose", "plan", "a30"],
    ["launch", "a30"],
    [],
]


def _parsed_by(entry, argv: list[str], monkeypatch) -> tuple[int, list]:
    """What the command runs with when ``entry`` parses ``argv`` (the command itself replaced)."""
    calls: list = []

    def record(spec, json_output):
        calls.append((spec, json_output))
        return 0

    monkeypatch.setattr(rlexp.commands.plan_view, "run", record)
    return entry(list(argv)), calls


@pytest.mark.parametrize("argv", PLAIN_FORMS, ids=repr)
def test_plain_forms_parse_as_typer_parses_them(argv, monkeypatch):
    assert plan_arguments(list(argv)) is not None
    typer_code, typer_calls = _parsed_by(rlexp.cli.main, argv, monkeypatch)
    fast_code, fast_calls = _parsed_by(rlexp.console.main, argv, monkeypatch)
    assert typer_code == fast_code == 0
    assert len(typer_calls) == 1 and fast_calls == typer_calls
    spec, json_output = fast_calls[0]
    assert isinstance(spec, Path) and json_output == ("--json" in argv)


@pytest.mark.parametrize("argv", OTHER_FORMS, ids=repr)
def test_other_forms_go_to_typer(argv):
    assert plan_arguments(list(argv)) is None


@pytest.fixture
def example(tmp_path: Path) -> Path:
    dest = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("plan.json"))
    # a blocked attempt (exit 1): a28's pool of 400 prompts ends the run before its intended 200 steps
    content = yaml.safe_load((dest / "a29b" / "attempt.yaml").read_text())
    content["id"] = "a28"
    content["datasets"]["pool"]["size"] = 400
    (dest / "a28").mkdir()
    (dest / "a28" / "attempt.yaml").write_text(yaml.safe_dump(content, sort_keys=False))
    (dest / "bad").mkdir()
    (dest / "bad" / "attempt.yaml").write_text("id: bad\ntrainer: {name: openrlhf}\nrecipe: [1, 2]\n")
    return dest


def _run(code: str, args: list[str]) -> subprocess.CompletedProcess:
    program = (f"import sys; sys.argv[0] = 'rlexp'; {code}; rc = main(sys.argv[1:]); "
               "print('typer imported' if 'typer' in sys.modules else 'no typer', file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", program, *args], env=CLEAN_ENV, capture_output=True,
                          timeout=120)


@pytest.mark.parametrize("attempt,json_flag,exit_code", [
    ("a30", True, 0), ("a30", False, 0), ("a28", True, 1), ("a28", False, 1), ("bad", True, 2), ("nope", False, 2),
])
def test_both_paths_print_the_same_bytes(example, attempt, json_flag, exit_code):
    args = ["plan", str(example / attempt), *(["--json"] if json_flag else [])]
    through_typer = _run("from rlexp.cli import main", args)
    written = (example / attempt / "plan.json").read_bytes() if exit_code < 2 else None
    console = _run("from rlexp.console import main", args)
    assert console.returncode == through_typer.returncode == exit_code, console.stderr
    assert console.stdout == through_typer.stdout
    assert console.stderr.replace(b"no typer", b"typer imported") == through_typer.stderr
    assert b"no typer" in console.stderr  # the console script answered it without importing typer
    if exit_code < 2:
        assert (example / attempt / "plan.json").read_bytes() == written
        if json_flag:
            assert console.stdout == written  # --json prints what it wrote
    else:
        assert console.stdout == b"" and len(console.stderr.decode().splitlines()) == 2  # one line + the marker
        assert not (example / attempt / "plan.json").exists()


def test_an_abort_in_a_command_is_one_line_and_exit_130(monkeypatch, capsys):
    """click's Abort (Ctrl-C at a prompt) is a RuntimeError: it must not reach the handler of pathlib's
    symlink-loop RuntimeError, which re-raises anything else as a traceback."""
    import typer

    def abort(spec, json_output):
        raise typer.Abort()

    monkeypatch.setattr(rlexp.commands.plan_view, "run", abort)
    assert rlexp.cli.main(["plan", "a30"]) == 130
    assert capsys.readouterr().err == "rlexp: aborted\n"
