"""The wheel a user installs works: built from the sources, installed without ``-e`` into a venv of
its own, and run from an empty directory (``rlexp sop show``, ``rlexp plan`` on the committed
example, ``rlexp demo --fast``, every verb's ``--help``).

Slow: a few minutes, most of it installing torch and the dependencies into the fresh venv.
The CPU torch pin goes in first (an unpinned torch pulls a multi-GB CUDA build); both installs
skip byte-compiling (``--no-compile``), which took longer than the installs themselves and only
pays back for modules a run imports. Set ``RLEXP_WHEEL_TEST_KEEP=DIR`` to keep the venv in DIR.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SOP_FILE = REPO / "sop" / "sop-v2.1-final.yaml"
TORCH_VERSION = os.environ.get("RLEXP_TORCH_VERSION", "2.13.0")  # the CPU build scripts/setup installs
# What the build reads: the package, the SOP folder it maps to rlexp.sopdata, the metadata.
BUILD_INPUTS = ("pyproject.toml", "README.md", "rlexp", "sop")

TIMINGS: dict[str, float] = {}


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
         step: str | None = None) -> subprocess.CompletedProcess[str]:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if step is not None:
        TIMINGS[step] = time.monotonic() - start
    return done


def _user_env() -> dict[str, str]:
    """The environment of a user who installed the wheel: nothing points at this checkout."""
    unset = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
             # The venv is installed without byte-compiling: let the first process that imports a
             # module cache its bytecode for the next ones (the demo starts one trainer per attempt).
             "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the build inputs (the checkout gets no build/ or egg-info)."""
    root = tmp_path_factory.mktemp("wheel-build")
    src = root / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(src)],
                cwd=root, step="build wheel")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = (root / "dist").glob("rlexp-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A venv of its own with the CPU torch pin, then the wheel and its ``[local]`` extra (no -e)."""
    keep = os.environ.get("RLEXP_WHEEL_TEST_KEEP")
    root = Path(keep) if keep else tmp_path_factory.mktemp("wheel-venv")
    path = root / "venv"
    if path.exists():
        shutil.rmtree(path)
    # No pip inside: this interpreter's pip installs into it (--python), which saves bootstrapping one.
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=root, step="create venv")
    assert done.returncode == 0, done.stderr[-3000:]
    pip = [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "-q", "--no-compile"]
    done = _run([*pip, f"torch=={TORCH_VERSION}"], cwd=root, step="install torch")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = _run([*pip, f"{wheel}[local]"], cwd=root, step="install wheel[local] + dependencies")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield path
    print("\nwheel test timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()))


@pytest.fixture
def empty(tmp_path) -> Path:
    path = tmp_path / "empty"
    path.mkdir()
    return path


def rlexp(venv: Path, *args: str, cwd: Path, step: str | None = None) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "rlexp"), *args], cwd=cwd, env=_user_env(), step=step)


def test_the_wheel_carries_the_package_the_sop_and_the_flag_tables(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped_sop = archive.read("rlexp/sopdata/sop-v2.1-final.yaml")
    assert shipped_sop == SOP_FILE.read_bytes()
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "rlexp").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources - names == set()
    flag_tables = {p.relative_to(REPO).as_posix() for p in (REPO / "rlexp" / "trainers" / "openrlhf" / "flags").glob("*.txt")}
    assert flag_tables and flag_tables <= names


def test_rlexp_runs_from_the_installed_wheel(venv, empty):
    probe = ("import json, rlexp; from importlib import metadata; "
             "print(json.dumps([rlexp.__file__, metadata.distribution('rlexp').read_text('direct_url.json')]))")
    done = _run([str(venv / "bin" / "python"), "-c", probe], cwd=empty, env=_user_env())
    assert done.returncode == 0, done.stderr[-3000:]
    module_file, direct_url = json.loads(done.stdout)
    assert Path(module_file).is_relative_to(venv)
    assert not json.loads(direct_url).get("dir_info", {}).get("editable", False)


def test_every_verb_has_help(venv, empty):
    done = rlexp(venv, "--help", cwd=empty)
    assert done.returncode == 0 and "Usage: rlexp" in done.stdout, done.stdout + done.stderr
    # Every command and subcommand, found by walking the installed CLI, in one interpreter.
    script = """
import contextlib, io, json, sys, typer
from rlexp.cli import app, main
sys.argv[0] = "rlexp"  # the program name click prints in "Usage:"
def walk(cmd, path):
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from walk(sub, [*path, name])
out = {}
for path in walk(typer.main.get_command(app), []):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([*path, "--help"])
    out[" ".join(path)] = [code, buf.getvalue()]
print(json.dumps(out))
"""
    done = _run([str(venv / "bin" / "python"), "-c", script], cwd=empty, env=_user_env(), step="help of every verb")
    assert done.returncode == 0, done.stderr[-3000:]
    helps = json.loads(done.stdout)
    for verb in ("plan", "launch", "eval", "compare", "decide", "report", "status", "demo", "sop show",
                 "sop calibrate", "guard"):
        assert verb in helps
    for verb, (code, text) in helps.items():
        assert code == 0 and text.strip().startswith(f"Usage: rlexp {verb}".rstrip()), (verb, code, text)
    assert list(empty.iterdir()) == []


def test_sop_show_reads_the_shipped_sop(venv, empty):
    done = rlexp(venv, "sop", "show", cwd=empty)
    assert done.returncode == 0 and "v2.1-final" in done.stdout, done.stdout + done.stderr
    done = rlexp(venv, "sop", "show", "--json", cwd=empty)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["sha256"] == hashlib.sha256(SOP_FILE.read_bytes()).hexdigest()
    assert Path(shown["path"]).is_relative_to(venv)


def test_plan_of_the_committed_example(venv, empty):
    example = empty / "seed-a30"
    shutil.copytree(REPO / "experiments" / "seed-a30", example, ignore=shutil.ignore_patterns("plan.json"))
    done = rlexp(venv, "plan", str(example / "a30"), cwd=empty)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plan = json.loads((example / "a30" / "plan.json").read_text())
    # The seed's numbers (tests/test_plan_cli.py): 200 global steps of 8 optimizer steps each.
    assert plan["steps"]["optimizer_steps_total"] == 1600 and plan["steps"]["global_steps_total"] == 200
    assert not [c for c in plan["checks"] if c["severity"] == "error"]
    # The OpenRLHF command is built from the flag tables shipped as package data (v0.9.3 here).
    before = sorted(p.name for p in (example / "a30").iterdir())
    done = rlexp(venv, "launch", str(example / "a30"), "--dry-run", "--json", cwd=empty)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    argv = json.loads(done.stdout)["argv"]
    assert argv[1:3] == ["-m", "openrlhf.cli.train_ppo_ray"]
    assert argv[argv.index("--advantage_estimator") + 1] == "dr_grpo"
    assert sorted(p.name for p in (example / "a30").iterdir()) == before  # a dry run writes nothing


def test_demo_fast_from_an_empty_directory(venv, empty):
    done = rlexp(venv, "demo", "--fast", cwd=empty, step="demo --fast")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sop_sha = hashlib.sha256(SOP_FILE.read_bytes()).hexdigest()
    exp = empty / "experiments" / "demo"
    for attempt in ("d1", "d1s2", "d2"):
        decision = json.loads((exp / attempt / "decision.json").read_text())
        assert decision["sop_version"] == "v2.1-final" and decision["sop_sha256"] == sop_sha
        assert decision["decision"] in (empty / "reports" / "demo" / f"{attempt}.md").read_text()
        git = json.loads((exp / attempt / "launch" / "provenance.json").read_text())["git"]
        # site-packages of a venv in a temporary folder: no commit, and the record says why
        assert git["sha"] is None and git["note"].startswith(("not a git checkout", "not tracked"))
