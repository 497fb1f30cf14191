"""Wheels of third-party releases pinned by sha256, kept in a cache outside the repository.

Trainers' flag and key tables (OpenRLHF's parsers, other trainers' config keys) are read from the
releases' own wheels; those wheels are downloaded once (``pip download --no-deps``, never installed) into a cache directory
and every later use checks the file against the sha256 the repository lists for it, so a wheel
replaced upstream or damaged on disk is an error rather than a silent change of the tables.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


class ReleaseError(Exception):
    """A listed release whose wheel or contents cannot be used (missing wheel, changed layout)."""


@dataclass(frozen=True)
class Release:
    """A listed release: its version, its wheel's file name and the wheel's sha256."""

    version: str
    wheel: str
    sha256: str


def cache_dir(env: str, name: str) -> Path:
    """``$<env>`` or ``~/.cache/rlexp/<name>``."""
    configured = os.environ.get(env)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rlexp" / name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(package: str, version: str, dest: Path, *, python: str = sys.executable,
             pip_args: Sequence[str] = ()) -> Path:
    """``pip download --no-deps <package>==<version>`` (a wheel only) into ``dest``; its path."""
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.glob(f"{package}-*.whl"))
    argv = [python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", *pip_args,
            "--dest", str(dest), f"{package}=={version}"]
    import subprocess  # here: `rlexp plan` imports this module for the release table and starts no process

    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ReleaseError(f"pip download {package}=={version} failed: {tail}")
    wanted = sorted(dest.glob(f"{package}-{version}-*.whl"))
    if not wanted:
        new = sorted(set(dest.glob(f"{package}-*.whl")) - before)
        raise ReleaseError(f"pip download {package}=={version} left no such wheel (new files: {new})")
    return wanted[0]


def fetch(package: str, release: Release, dest: Path, *, refresh_script: str, pip_args: Sequence[str] = ()) -> Path:
    """The release's wheel in ``dest``, downloaded if absent; its sha256 must equal the pinned one."""
    path = dest / release.wheel
    if not path.exists():
        got = download(package, release.version, dest, pip_args=pip_args)
        if got.name != release.wheel:
            raise ReleaseError(f"{package}=={release.version}: pip chose {got.name}, the list pins {release.wheel}")
    actual = sha256_of(path)
    if actual != release.sha256:
        raise ReleaseError(f"{path}: sha256 {actual} differs from the pinned {release.sha256} "
                           f"(delete it to download again, or run {refresh_script} if the release was replaced)")
    return path


def wheel_to_list(package: str, version: str, listed: dict[str, Release], wanted: Sequence[str], dest: Path, *,
                  refresh_script: str, pip_args: Sequence[str] = ()) -> tuple[Release, Path]:
    """For a refresh of the list: a listed release not asked for again keeps its pin (checked);
    any other is downloaded and pinned by the sha256 of what was downloaded."""
    if version in listed and version not in wanted:
        release = listed[version]
        return release, fetch(package, release, dest, refresh_script=refresh_script, pip_args=pip_args)
    path = download(package, version, dest, pip_args=pip_args)
    return Release(version, path.name, sha256_of(path)), path


def release_cli(argv: list[str] | None, *, prog: str, description: str, fetch_help: str, refresh_help: str,
                versions_help: str, fetch_all: Callable[[TextIO], int],
                refresh: Callable[[list[str], TextIO], int]) -> int:
    """The ``fetch`` / ``refresh [VERSION...]`` command line of a module that keeps pinned wheels
    (what ``scripts/fetch-*`` and ``scripts/refresh-*`` run); a :class:`ReleaseError` is one line, exit 1."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help=fetch_help)
    sub.add_parser("refresh", help=refresh_help).add_argument("versions", nargs="*", help=versions_help)
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            return fetch_all(sys.stdout)
        return refresh(list(args.versions), sys.stdout)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
