"""Each listed OpenRLHF release's own ``train_ppo_ray`` parser, built from its wheel.

OpenRLHF builds its argparse parser inside ``if __name__ == "__main__":`` of
``openrlhf/cli/train_ppo_ray.py``, a module whose top level imports torch, Ray, vLLM and
DeepSpeed. Importing it is out of the question on a machine without them, so
:func:`load_release_parser` reads the file out of the release's wheel with :mod:`ast` and runs
only what the parser needs:

- at the module's top level, the import statements that resolve to the standard library (``argparse``,
  ``os``, ``datetime``); every other import is skipped, and so are the ``train`` function and the rest;
- in the ``__main__`` block, every statement before ``args = parser.parse_args()`` (the parser,
  its ``add_argument`` calls and their loops);
- after parsing, on request, the ``__main__`` statements between ``parse_args()`` and the final
  ``train(args)`` call: OpenRLHF's own post-parse validation (asserts, defaults filled in from
  other flags, ``hierarchize`` of the dotted dialect).

Imports inside those statements go through a guard: standard-library modules import normally;
``openrlhf.*`` modules are executed from the wheel's own file when everything *they* import is
allowed too (``openrlhf.utils.config`` is plain Python); anything else raises
:class:`NeedsDependency`, so a statement that would need a GPU library is reported, never faked.

The wheels are not part of the repository: ``scripts/fetch-openrlhf`` downloads the releases
listed in ``flags/versions.txt`` (each pinned by its sha256) into :func:`cache_dir`, and
``scripts/refresh-openrlhf-flags`` regenerates the flag tables from these parsers.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.backends import pinned_wheels
from rlexp.backends.pinned_wheels import Release, ReleaseError, sha256_of  # noqa: F401  (re-exported)

FLAGS_DIR = Path(__file__).with_name("flags")
VERSIONS_FILE = FLAGS_DIR / "versions.txt"
CACHE_ENV = "RLEXP_OPENRLHF_CACHE"
TRAIN_SCRIPT = "openrlhf/cli/train_ppo_ray.py"
REFRESH_SCRIPT = "scripts/refresh-openrlhf-flags"
FETCH_SCRIPT = "scripts/fetch-openrlhf"
# OpenRLHF publishes one pure-Python wheel per CPython version, all with the same files. Asking
# for the cp311 one whatever Python runs the download keeps the pinned sha256 valid everywhere.
WHEEL_TAG = ("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
             "--platform", "manylinux1_x86_64")


class NeedsDependency(Exception):
    """A statement would import a module that is neither standard library nor plain OpenRLHF code."""

    def __init__(self, module: str):
        super().__init__(f"needs {module}, which is not installed here (only the wheel's own files are read)")
        self.module = module


class Rejected(Exception):
    """The release's parser or its post-parse checks refused an argv (what the trainer would do)."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage  # "parse" | "post-parse"
        self.message = message


# ----------------------------------------------------------------------------- the release list


def listed_releases(path: Path = VERSIONS_FILE) -> list[Release]:
    """The releases rlexp supports, oldest first (the file is kept in that order)."""
    releases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        version, wheel, sha256 = line.split()
        releases.append(Release(version, wheel, sha256))
    return releases


def format_versions_file(releases: list[Release]) -> str:
    lines = [
        "# OpenRLHF releases rlexp supports, oldest first: version, wheel file, sha256 of the wheel.",
        f"# Written by {REFRESH_SCRIPT}; the flag tables v<version>.txt next to this file come from these wheels.",
    ]
    lines += [f"{r.version}\t{r.wheel}\t{r.sha256}" for r in releases]
    return "\n".join(lines) + "\n"


def cache_dir() -> Path:
    """Where wheels are kept between runs: ``$RLEXP_OPENRLHF_CACHE`` or ``~/.cache/rlexp/openrlhf``."""
    return pinned_wheels.cache_dir(CACHE_ENV, "openrlhf")


def download(version: str, dest: Path) -> Path:
    """``pip download --no-deps`` one release's wheel into ``dest``; returns the wheel's path."""
    return pinned_wheels.download("openrlhf", version, dest, pip_args=WHEEL_TAG)


def fetch(release: Release, dest: Path | None = None) -> Path:
    """The release's wheel in the cache, downloaded if absent; its sha256 must match the list."""
    return pinned_wheels.fetch("openrlhf", release, dest or cache_dir(), refresh_script=REFRESH_SCRIPT,
                               pip_args=WHEEL_TAG)


def wheel_for(version: str, dest: Path | None = None) -> Path:
    """The cached wheel of a listed release (no download; :class:`ReleaseError` when absent)."""
    for release in listed_releases():
        if release.version == version:
            path = (dest or cache_dir()) / release.wheel
            if not path.exists():
                raise ReleaseError(f"{path} is missing: run {FETCH_SCRIPT}")
            return path
    raise ReleaseError(f"openrlhf {version} is not listed in {VERSIONS_FILE.name}")


# ----------------------------------------------------------------------------- reading a wheel


class _Wheel:
    """The Python files of a wheel, by module path (``openrlhf/utils/config.py``)."""

    def __init__(self, path: Path):
        self.path = path
        import zipfile  # here: `rlexp plan` reads the committed flag tables, never a wheel

        self._files: dict[str, str] = {}
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if not name.endswith(".py"):
                    continue
                # setuptools may put the package under <dist>.data/purelib/ instead of the root
                parts = name.split("/")
                if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                    parts = parts[2:]
                self._files["/".join(parts)] = archive.read(name).decode("utf-8")

    def source(self, module_path: str) -> str:
        try:
            return self._files[module_path]
        except KeyError:
            raise ReleaseError(f"{self.path.name} has no {module_path}") from None

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._files:
                return candidate
        return None


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


class _GuardedImporter:
    """``__import__`` for the executed statements: stdlib, or plain OpenRLHF modules from the wheel."""

    def __init__(self, wheel: _Wheel):
        self.wheel = wheel
        self.modules: dict[str, types.ModuleType] = {}

    def __call__(self, name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 (builtins' names)
        absolute = _absolute(name, level, (globals or {}).get("__package__") or "")
        if _is_stdlib(absolute):
            return builtins.__import__(absolute, globals, locals, fromlist, 0)
        if absolute.startswith("openrlhf.") and fromlist:
            return self._load(absolute)
        raise NeedsDependency(absolute)

    def _load(self, name: str) -> types.ModuleType:
        if name in self.modules:
            return self.modules[name]
        path = self.wheel.module_file(name)
        if path is None:
            raise NeedsDependency(name)
        source = self.wheel.source(path)
        package = name if path.endswith("/__init__.py") else name.rpartition(".")[0]
        # Checked before anything runs: a module that imports anything else is not executed at
        # all (no half-imported module, no side effect of its first lines in this process).
        for needed in _module_imports(_parse(source, path), package):
            if not (_is_stdlib(needed) or (needed.startswith("openrlhf.") and self._is_plain(needed, {name}))):
                raise NeedsDependency(needed)
        # Only the module's own file runs, never the packages above it: openrlhf/utils/__init__.py
        # imports DeepSpeed, openrlhf/utils/config.py imports nothing but the standard library.
        module = types.ModuleType(name)
        module.__file__ = f"{self.wheel.path.name}/{path}"
        module.__package__ = package
        module.__dict__["__builtins__"] = _guarded_builtins(self)
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102
        self.modules[name] = module
        return module

    def _is_plain(self, name: str, seen: set[str]) -> bool:
        """An OpenRLHF module of the wheel whose imports are, recursively, stdlib or plain modules."""
        path = self.wheel.module_file(name)
        if path is None:
            return False
        if name in seen:
            return True
        package = name if path.endswith("/__init__.py") else name.rpartition(".")[0]
        for needed in _module_imports(_parse(self.wheel.source(path), path), package):
            if not (_is_stdlib(needed) or (needed.startswith("openrlhf.") and self._is_plain(needed, seen | {name}))):
                return False
        return True


def _parse(source: str, filename: str) -> ast.Module:
    """The syntax tree only: OpenRLHF's own invalid string escapes are not this process's warnings."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source, filename)


def _absolute(name: str, level: int, package: str) -> str:
    if level == 0:
        return name
    base = package.split(".")
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, name] if name else base)


def _module_imports(tree: ast.Module, package: str) -> list[str]:
    """Every module a file imports outside its function bodies (those run only when called)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Import):
                found.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append(_absolute(child.module or "", child.level, package))
            visit(child)

    visit(tree)
    return found


def _guarded_builtins(importer: _GuardedImporter) -> dict[str, Any]:
    return {**builtins.__dict__, "__import__": importer}


def _main_block(tree: ast.Module) -> list[ast.stmt]:
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ):
            return node.body
    raise ReleaseError(f'{TRAIN_SCRIPT} has no `if __name__ == "__main__":` block')


def _is_parse_args(stmt: ast.stmt) -> bool:
    """``args = parser.parse_args()``, the statement that splits building from validating."""
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == "args"
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "parse_args"
        and isinstance(stmt.value.func.value, ast.Name)
        and not stmt.value.args
        and not stmt.value.keywords
    )


def _is_train_call(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id == "train"
    )


# ----------------------------------------------------------------------------- the parser


@dataclass(frozen=True)
class FlagSpec:
    """What the argv builder needs to know about one flag of one release."""

    flag: str  # "--eps_clip", "--actor.eps_clip"
    action: str  # "value" (store), "store_true", "store_false", or argparse's own class name
    nargs: str  # "" (one value), "2", "*", "+", "?"
    type: str  # "str", "int", "float" or the callable's name
    choices: tuple[str, ...]  # empty when any value goes
    required: bool = False

    def row(self) -> str:
        return "\t".join([self.flag, self.action, self.nargs or "-", self.type or "-",
                          ",".join(self.choices) or "-", "required" if self.required else "-"])

    @classmethod
    def from_row(cls, line: str) -> FlagSpec:
        flag, action, nargs, type_, choices, required = line.split("\t")
        return cls(flag, action, "" if nargs == "-" else nargs, "" if type_ == "-" else type_,
                   () if choices == "-" else tuple(choices.split(",")), required == "required")


_ACTIONS = {
    "_StoreAction": "value",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_CountAction": "count",
}


@dataclass
class Parsed:
    """An argv the release accepted: the namespace after its post-parse code, and what that printed."""

    args: Any
    printed: list[str] = field(default_factory=list)
    post_parse_ran: bool = False


class ReleaseParser:
    """One release's parser, and its post-parse statements ready to run."""

    def __init__(self, version: str, wheel: Path):
        self.version = version
        self.wheel_path = wheel
        self._wheel = _Wheel(wheel)
        source = self._wheel.source(TRAIN_SCRIPT)
        filename = f"{wheel.name}/{TRAIN_SCRIPT}"
        tree = ast.parse(source, filename)
        body = _main_block(tree)
        split = next((i for i, stmt in enumerate(body) if _is_parse_args(stmt)), None)
        if split is None:
            raise ReleaseError(f"{filename}: no `args = parser.parse_args()` in the __main__ block")
        post = body[split + 1:]
        if not post or not _is_train_call(post[-1]):
            raise ReleaseError(f"{filename}: the __main__ block does not end with train(args)")
        self.skipped_imports: list[str] = []  # top-level import statements left unrun
        self._importer = _GuardedImporter(self._wheel)
        self._globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": _guarded_builtins(self._importer)}
        for node in tree.body:  # top level: imports only, and only those that resolve here
            if isinstance(node, ast.Import | ast.ImportFrom):
                try:
                    self._exec([node], filename, self._globals)
                except NeedsDependency:
                    self.skipped_imports.append(ast.unparse(node))
        try:
            self._exec(body[:split], filename, self._globals)
        except NeedsDependency as exc:
            raise ReleaseError(f"{filename}: building the parser {exc}") from None
        except NameError as exc:
            raise ReleaseError(f"{filename}: building the parser uses a name defined outside it ({exc})") from None
        import argparse  # here: `rlexp plan` reads the committed flag tables, never a parser

        parser = self._globals.get(body[split].value.func.value.id)  # type: ignore[attr-defined]
        if not isinstance(parser, argparse.ArgumentParser):
            raise ReleaseError(f"{filename}: parse_args() is not called on an ArgumentParser")
        self.parser: argparse.ArgumentParser = parser
        self._post = compile(ast.Module(body=post[:-1], type_ignores=[]), filename, "exec")

    @staticmethod
    def _exec(stmts: list[ast.stmt], filename: str, namespace: dict[str, Any]) -> None:
        exec(compile(ast.Module(body=stmts, type_ignores=[]), filename, "exec"), namespace)  # noqa: S102

    def flags(self) -> list[FlagSpec]:
        """Every long option in parser order (an action with aliases gives one row per alias)."""
        import argparse

        out = []
        for action in self.parser._actions:  # argparse keeps no public list of its actions
            if isinstance(action, argparse._HelpAction):
                continue
            kind = _ACTIONS.get(type(action).__name__, type(action).__name__)
            nargs = "" if action.nargs is None else str(action.nargs)
            if kind in ("store_true", "store_false", "store_const", "count"):
                nargs = ""
            type_name = ""
            if kind in ("value", "append"):
                type_name = "str" if action.type is None else getattr(action.type, "__name__", repr(action.type))
            choices = tuple(str(c) for c in action.choices) if action.choices is not None else ()
            for option in action.option_strings:
                if option.startswith("--"):
                    out.append(FlagSpec(option, kind, nargs, type_name, choices, bool(action.required)))
        return out

    def parse(self, argv: list[str], *, post_parse: bool = True) -> Parsed:
        """Parse ``argv`` (the flags, without ``python -m ...``) as the trainer would.

        :class:`Rejected` when the parser exits (unknown flag, bad value, wrong count) or a
        post-parse check fails; :class:`NeedsDependency` when a post-parse statement this argv
        reaches would import a library that is not here.
        """
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = self.parser.parse_args(list(argv))
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            raise Rejected("parse", lines[-1] if lines else "the parser exited") from None
        if not post_parse:
            return Parsed(args)
        namespace = {**self._globals, "args": args}
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(self._post, namespace)  # noqa: S102
        except NeedsDependency:
            raise
        except AssertionError as exc:
            raise Rejected("post-parse", str(exc) or "assertion failed") from None
        except Exception as exc:  # the trainer would stop with this same exception
            raise Rejected("post-parse", f"{type(exc).__name__}: {exc}") from None
        return Parsed(namespace["args"], out.getvalue().splitlines(), post_parse_ran=True)


def load_release_parser(version: str, wheel: Path | None = None) -> ReleaseParser:
    """The parser of a listed release, from its cached wheel."""
    return ReleaseParser(version, wheel or wheel_for(version))


# ----------------------------------------------------------------------------- flag tables


def table_path(version: str) -> Path:
    return FLAGS_DIR / f"v{version}.txt"


def format_table(release: Release, flags: list[FlagSpec]) -> str:
    lines = [
        f"# OpenRLHF {release.version} ({release.wheel}, sha256 {release.sha256})",
        f"# {TRAIN_SCRIPT}, parser order; written by {REFRESH_SCRIPT}",
        "# flag\taction\tnargs\ttype\tchoices\trequired",
    ]
    lines += [spec.row() for spec in flags]
    return "\n".join(lines) + "\n"


def read_table(version: str) -> list[FlagSpec]:
    rows = []
    for line in table_path(version).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(FlagSpec.from_row(line))
    return rows


# ----------------------------------------------------------------------------- the two scripts

MIN_VERSION = "0.9.3"  # the oldest release rlexp supports (the campaign's); older ones are not listed


def version_key(version: str) -> tuple[int, ...]:
    """Release order: ``0.10.1 < 0.10.1.post1 < 0.10.1.post2 < 0.10.2``."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if not match:
        raise ValueError(f"not a final OpenRLHF release number: {version!r}")
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch), -1 if post is None else int(post))


def published_versions(python: str = sys.executable) -> list[str]:
    """Final releases on the package index from :data:`MIN_VERSION` on (``pip index versions``)."""
    import subprocess  # here: `rlexp plan` reads the flag tables and starts no process

    result = subprocess.run([python, "-m", "pip", "index", "versions", "openrlhf"],
                            capture_output=True, text=True, check=False)
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if result.returncode != 0 or line is None:
        raise ReleaseError(f"pip index versions openrlhf failed: {result.stderr.strip()[-300:]}")
    versions = []
    for item in line.split(":", 1)[1].split(","):
        item = item.strip()
        if re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", item) and version_key(item) >= version_key(MIN_VERSION):
            versions.append(item)
    return versions


def _fetch_all(out, workers: int = 4) -> int:
    """Every listed wheel into the cache; downloads run ``workers`` at a time (pip's start-up
    dominates: about 1 s per wheel on its own)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    dest = cache_dir()
    start = time.monotonic()
    releases = listed_releases()

    def one(release: Release) -> str | None:
        try:
            fetch(release, dest)
        except ReleaseError as exc:
            return f"openrlhf {release.version}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        errors = [e for e in pool.map(one, releases) if e]
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{len(releases) - len(errors)} of {len(releases)} OpenRLHF wheels in {dest} "
          f"({time.monotonic() - start:.1f} s)", file=out)
    return 1 if errors else 0


def _refresh(wanted: list[str], out) -> int:
    dest = cache_dir()
    listed = {r.version: r for r in listed_releases()} if VERSIONS_FILE.exists() else {}
    versions = set(listed) | set(wanted or published_versions())
    FLAGS_DIR.mkdir(exist_ok=True)
    releases = []
    for version in sorted(versions, key=version_key):
        release, path = pinned_wheels.wheel_to_list("openrlhf", version, listed, wanted, dest,
                                                    refresh_script=REFRESH_SCRIPT, pip_args=WHEEL_TAG)
        flags = ReleaseParser(version, path).flags()
        table_path(version).write_text(format_table(release, flags), encoding="utf-8")
        releases.append(release)
        print(f"openrlhf {version}: {len(flags)} flags -> {table_path(version).name}", file=out)
    for stale in FLAGS_DIR.glob("v[0-9]*.txt"):
        if stale.stem[1:] not in versions:
            stale.unlink()
            print(f"removed {stale.name} (not a listed release)", file=out)
    VERSIONS_FILE.write_text(format_versions_file(releases), encoding="utf-8")
    print(f"{len(releases)} releases -> {VERSIONS_FILE.name}", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return pinned_wheels.release_cli(
        argv, prog="python -m rlexp.trainers.openrlhf.parser", description=__doc__.split("\n")[0],
        fetch_help=f"download the listed wheels into the cache ({FETCH_SCRIPT})",
        refresh_help=f"rewrite versions.txt and the flag tables ({REFRESH_SCRIPT})",
        versions_help=f"releases to add or re-pin (default: all published from {MIN_VERSION} on)",
        fetch_all=_fetch_all, refresh=_refresh)


if __name__ == "__main__":
    sys.exit(main())
