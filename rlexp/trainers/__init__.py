"""The trainer registry: what ``trainer.name`` names, and the one place that maps a name to its package.

Each trainer is one package, ``rlexp.trainers.<name>``, layered inside as the whole is: the package
itself holds its pure rules (:class:`rlexp.trainers.base.TrainerRules`: key table, steps and LR,
preflight checks, metrics sources, checkpoint layout, resume state; core layer), and its
``launch`` module the work with processes and files (:class:`rlexp.trainers.launch.TrainerLaunch`:
the plan's command, the launch's argv, environment and files, the metrics follower; adapters layer).
Stages ask this registry for the trainer and call it; no module outside a trainer's package
compares ``trainer.name`` with a literal (``tests/test_architecture.py`` counts them).

Adding a trainer: a package ``rlexp/trainers/<name>/`` (copy an existing one) and one line in
:data:`TRAINERS` (docs/ARCHITECTURE.md, "Adding a trainer").
"""

from __future__ import annotations

import importlib
from typing import Any

# trainer.name -> its package. tests/test_architecture.py reads this table: each package (and its
# ``launch`` module, loaded by rlexp.trainers.launch) counts as an import edge of the registry
TRAINERS: dict[str, str] = {
    "openrlhf": "rlexp.trainers.openrlhf",
    "local": "rlexp.trainers.local",
    "trl": "rlexp.trainers.trl",
    "verl": "rlexp.trainers.verl",
}


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
    return importlib.import_module(package(name)).RULES


def metrics_sources() -> tuple[str, ...]:
    """Every metrics source some trainer is followed through (``--metrics-source``), first seen first."""
    seen: dict[str, None] = {}
    for name in TRAINERS:
        seen.update(dict.fromkeys(rules(name).metrics_sources))
    return tuple(seen)
