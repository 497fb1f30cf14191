"""What a wheel carries, checked without building one: the package list, the package data, the SOP
read through ``importlib.resources``, and the git commit recorded when the code is not a checkout.

tests/test_wheel.py builds and installs the wheel itself (minutes); these run in a second.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from rlexp.experiment.provenance import GitState, code_git_state, git_state, installed_commit

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def data_folders() -> set[Path]:
    """Folders of data (no Python) shipped through a package's ``package-data`` pattern with a
    folder in it, e.g. ``"rlexp" = ["assets/demo-base/*"]``: files, not packages."""
    out = set()
    for package, patterns in SETUPTOOLS["package-data"].items():
        for pattern in patterns:
            if "/" in pattern:
                out.add(REPO.joinpath(*package.split("."), *pattern.split("/")[:-1]))
    return out


def test_every_folder_of_the_package_is_listed_and_the_sop_folder_is_mapped():
    on_disk = {"rlexp"}
    data = data_folders()
    for folder in (REPO / "rlexp").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__" and folder not in data and any(
                f.is_file() for f in folder.iterdir()):
            on_disk.add(".".join(folder.relative_to(REPO).parts))
    assert all(not any(f.suffix == ".py" for f in d.iterdir()) for d in data), "a data folder holds Python"
    listed = set(SETUPTOOLS["packages"])
    assert (on_disk | {"rlexp.sopdata"}) - listed == set(), "missing from [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk - {"rlexp.sopdata"} == set(), "listed in pyproject.toml but not in rlexp/"
    assert SETUPTOOLS["package-dir"] == {"rlexp.sopdata": "sop"}


def test_every_data_file_is_package_data():
    """A file that is not Python and not matched by package-data would be missing from the wheel."""
    patterns = SETUPTOOLS["package-data"]
    roots = {"rlexp.sopdata": REPO / "sop"}
    for package in SETUPTOOLS["packages"]:
        folder = roots.get(package, REPO.joinpath(*package.split(".")))
        for path in folder.iterdir():
            if path.is_file() and path.suffix not in (".py", ".pyc"):
                assert any(fnmatch.fnmatch(path.name, p) for p in patterns.get(package, [])), path
    for folder in data_folders():  # and every file of a data folder matches its pattern
        package_root = next(REPO.joinpath(*p.split(".")) for p in patterns if folder.is_relative_to(
            REPO.joinpath(*p.split("."))))
        for path in folder.iterdir():
            rel = path.relative_to(package_root).as_posix()
            assert any(fnmatch.fnmatch(rel, p) for ps in patterns.values() for p in ps if "/" in p), path


def test_the_sop_in_force_is_read_through_importlib_resources():
    from importlib import resources

    from rlexp.spec.sop import DEFAULT_SOP, load_sop

    shipped = resources.files("rlexp.sopdata") / "sop-v2.1-final.yaml"
    assert shipped.read_bytes() == (REPO / "sop" / "sop-v2.1-final.yaml").read_bytes()
    assert DEFAULT_SOP.read_bytes() == shipped.read_bytes()
    sop = load_sop()
    assert sop.version == "v2.1-final" and sop.path == str(DEFAULT_SOP)


# --- the commit of the code that ran -----------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A git checkout with a tracked package folder and an untracked ``.venv`` inside it."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never the repository around tmp
    repo = tmp_path / "project"
    (repo / "rlexp").mkdir(parents=True)
    (repo / "rlexp" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / ".venv" / "lib" / "site-packages").mkdir(parents=True)
    return repo


@needs_git
def test_a_checkout_gives_its_commit_and_whether_it_is_dirty(checkout):
    head = _git(checkout, "rev-parse", "HEAD")
    assert git_state(checkout) == GitState(sha=head, dirty=False, branch=_git(checkout, "branch", "--show-current"))
    (checkout / "rlexp" / "__init__.py").write_text("changed = True\n")
    assert git_state(checkout).dirty is True


@needs_git
def test_an_untracked_folder_inside_a_checkout_gives_no_commit(checkout):
    """A wheel installed into a project's .venv: the project's commit is not the code's."""
    state = git_state(checkout / ".venv" / "lib" / "site-packages")
    assert (state.sha, state.dirty, state.branch) == (None, None, None)
    assert state.note.startswith("not tracked by the git checkout around it")


@needs_git
def test_a_folder_outside_any_checkout_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "site-packages").mkdir()
    state = git_state(tmp_path / "site-packages")
    assert state.sha is None and state.note.startswith("not a git checkout")


def _fake_distribution(root: Path, name: str, direct_url: dict | None) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))


def test_a_pip_install_from_git_gives_the_commit_pip_recorded(tmp_path, monkeypatch):
    # direct_url.json as PEP 610 specifies it for `pip install git+https://...@main`
    _fake_distribution(tmp_path, "fromgit", {"url": "https://example.org/r.git",
                                             "vcs_info": {"vcs": "git", "commit_id": "c" * 40,
                                                          "requested_revision": "main"}})
    _fake_distribution(tmp_path, "fromwheel", {"url": "file:///tmp/x-1.0-py3-none-any.whl", "archive_info": {}})
    _fake_distribution(tmp_path, "fromindex", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_commit("fromgit") == GitState(sha="c" * 40, dirty=False, branch="main",
                                                   note="installed by pip from https://example.org/r.git")
    assert installed_commit("fromwheel") is None
    assert installed_commit("fromindex") is None
    assert installed_commit("not-installed-anywhere") is None

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "site-packages").mkdir()
    assert code_git_state(tmp_path / "site-packages", distribution="fromgit").sha == "c" * 40
    assert code_git_state(tmp_path / "site-packages", distribution="fromwheel").note.startswith(
        "not a git checkout")
