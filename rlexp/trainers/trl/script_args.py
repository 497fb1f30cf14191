"""``rlexp import`` of a TRL launch script: ``--field value`` arguments of a TRL script become
``GRPOConfig`` / ``ModelConfig`` fields; ``rlexp plan`` checks them against TRL's fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.core.launch_script import argument_value, dataset_argument, secret_argument
from rlexp.errors import InputError

CHECKS_VERSION = False  # a missing --version is refused by the stage (the script does not state the release)
LAUNCH_DEFAULTS: dict[str, Any] = {}
OWNED = ("output_dir", "report_to", "logging_dir")
DATASET_FLAGS = ("dataset_name", "dataset_path")


def read_args(script: Path, where: str, args: list[str], version: str | None = None):
    """The recipe, datasets and left-out keys of ``--field value`` arguments."""
    recipe: dict[str, Any] = {}
    datasets: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            raise InputError(script, where, f"{token!r}: expected --field value")
        key, eq, raw = token[2:].partition("=")
        if not eq:
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                raw = args[i + 1]
                i += 1
            else:
                raw = "true"
        i += 1
        value = argument_value(raw)
        key = key.replace("-", "_")
        if secret_argument(key):
            left_out.append(key)
        elif key in DATASET_FLAGS:
            datasets["pool"] = dataset_argument(str(value), f"--{key}")
        elif key in OWNED:
            left_out.append(key)
        else:
            recipe[key] = value
    if "pool" not in datasets:
        raise InputError(script, where, "no --dataset_name: the data the run trains on is needed for its steps")
    return recipe, datasets, left_out, []
