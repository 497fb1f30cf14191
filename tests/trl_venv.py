"""The TRL venv the real-TRL tests run in, found as ``rlexp launch`` finds it
(:func:`rlexp.trainers.trl.script.trl_python`): where it is missing the module is skipped, and in
CI (``$CI`` set) that is an error, since scripts/run-tests builds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def trl_python_or_skip() -> Path:
    from rlexp.trainers.trl.script import trl_python

    python = trl_python(must_exist=False)
    if not python.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"CI: {python} is missing; scripts/run-tests builds it with scripts/setup-trl")
        pytest.skip(f"no TRL venv at {python} (run scripts/setup-trl)", allow_module_level=True)
    return python
