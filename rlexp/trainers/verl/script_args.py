"""``rlexp import`` of a verl launch script: ``key=value`` Hydra overrides become the recipe's dotted
keys (values read as Hydra reads them: YAML scalars and lists); ``rlexp plan`` checks them against
the release's key table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlexp.core.launch_script import argument_value, dataset_argument, secret_argument
from rlexp.errors import InputError

CHECKS_VERSION = False  # a missing --version is refused by the stage (the script does not state the release)
LAUNCH_DEFAULTS: dict[str, Any] = {}


def read_args(script: Path, where: str, args: list[str], version: str | None = None):
    """The recipe, datasets and left-out keys of ``key=value`` Hydra overrides."""
    from rlexp.trainers.verl.hydra import MANAGED_KEYS

    recipe: dict[str, Any] = {}
    datasets: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    for token in args:
        key, eq, raw = token.lstrip("+").partition("=")
        if not eq or not re.match(r"^[A-Za-z_][\w.]*$", key):
            raise InputError(script, where, f"{token!r}: not a Hydra override key=value")
        value = argument_value(raw) if raw else ""
        if secret_argument(key):
            left_out.append(key)
        elif key in ("data.train_files", "data.val_files"):
            role = "pool" if key == "data.train_files" else "ood_monitor"
            datasets[role] = dataset_argument(value[0] if isinstance(value, list) and len(value) == 1 else str(value), key)
        elif key in MANAGED_KEYS or key == "trainer.logger":
            left_out.append(key)
        else:
            recipe[key] = value
    if "pool" not in datasets:
        raise InputError(script, where, "no data.train_files: the data the run trains on is needed for its steps")
    return recipe, datasets, left_out, []
