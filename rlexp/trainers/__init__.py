"""The trainer registry: what ``trainer.name`` names, and the one place that maps a name to its package.

Each trainer is one package, ``rlexp.trainers.<name>``, layered inside as the whole is: the package
itself holds its pure rules (:class:`rlexp.trainers.base.TrainerRules`: key table, steps and LR,
preflight checks, metrics sources, checkpoint layout, resume state; core layer), and its
``launch`` module the work with processes and files (:class:`rlexp.trainers.launch.TrainerLaunch`:
the plan's command, the launch's argv, environment and files, the metrics follower; adapters layer).
Stages ask this registry for the trainer and call it; no module outside a trainer's package
compares ``trainer.name`` with a literal (``tests/test_architecture.py`` counts them).

Adding a trainer: one package (copy an existing one), registered by one of: a line in
:data:`TRAINERS` (rlexp's own), :func:`register` called before rlexp's spec modules are imported
(a program that embeds rlexp), or ``RLEXP_TRAINER_PACKAGES=name=package[,...]`` in the environment
(a package outside rlexp, for the CLI): docs/ARCHITECTURE.md, "Adding a trainer".
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any

from rlexp.errors import InputError

# trainer.name -> its package. tests/test_architecture.py reads this table: each package (and its
# ``launch`` module, loaded by rlexp.trainers.launch) counts as an import edge of the registry
TRAINERS: dict[str, str] = {
    "openrlhf": "rlexp.trainers.openrlhf",
    "local": "rlexp.trainers.local",
    "trl": "rlexp.trainers.trl",
    "verl": "rlexp.trainers.verl",
}

# the environment's registrations: "name=package[,name=package...]" (packages outside rlexp)
PACKAGES_VARIABLE = "RLEXP_TRAINER_PACKAGES"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def register(name: str, package_name: str) -> None:
    """Register trainer ``name`` as the package ``package_name`` (an importable module exposing
    ``RULES``, with a ``launch`` module exposing ``LAUNCH``). Call it before rlexp's spec modules
    are imported: the spec's ``trainer.name`` rule lists the trainers known then. A name rlexp
    already has is refused (a package cannot replace a trainer)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(None, PACKAGES_VARIABLE, f"trainer name {name!r}: expected [a-z][a-z0-9_-]*")
    if not isinstance(package_name, str) or not _MODULE.fullmatch(package_name):
        raise InputError(None, PACKAGES_VARIABLE, f"trainer {name}: package {package_name!r} is not a module name")
    if TRAINERS.get(name, package_name) != package_name:
        raise InputError(None, PACKAGES_VARIABLE, f"trainer {name!r} is registered already (as {TRAINERS[name]})")
    TRAINERS[name] = package_name


def _register_from_environment() -> None:
    stated = os.environ.get(PACKAGES_VARIABLE, "")
    for entry in filter(None, (e.strip() for e in stated.split(","))):
        name, sep, package_name = entry.partition("=")
        if not sep:
            raise InputError(None, PACKAGES_VARIABLE, f"{entry!r}: expected name=package")
        register(name.strip(), package_name.strip())


_register_from_environment()


def names() -> tuple[str, ...]:
    """Every ``trainer.name`` rlexp knows, in registry order."""
    return tuple(TRAINERS)


def package(name: str) -> str:
    """The package of trainer ``name``; a ValueError naming the known ones when there is none."""
    try:
        return TRAINERS[name]
    except KeyError:
        raise ValueError(f"unknown trainer {name!r}; expected one of {', '.join(TRAINERS)}") from None


def rules(name: str) -> Any:
    """The pure rules of trainer ``name`` (its package's ``RULES``, a rlexp.trainers.base.TrainerRules;
    the registry imports no trainer module but by name, so that any core module may ask it)."""
    module = package(name)
    try:
        return importlib.import_module(module).RULES
    except (ImportError, AttributeError) as exc:
        if module.startswith("rlexp."):
            raise  # rlexp's own trainers: a broken install, not the user's input
        raise InputError(None, PACKAGES_VARIABLE, f"trainer {name}: package {module} has no RULES "
                         f"({type(exc).__name__}: {exc})") from None


def metrics_sources() -> tuple[str, ...]:
    """Every metrics source some trainer is followed through (``--metrics-source``), first seen first."""
    seen: dict[str, None] = {}
    for name in TRAINERS:
        seen.update(dict.fromkeys(rules(name).metrics_sources))
    return tuple(seen)
