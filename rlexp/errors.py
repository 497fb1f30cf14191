"""The one error type for unusable input.

Every bad input (malformed YAML or JSONL, unknown keys, wrong types, leakage, mismatched
record sets, NaN metrics, missing files) raises :class:`InputError`. The CLI turns it into a
single line ``rlexp: <file>: <field>: <message>`` on stderr and exit code 2.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Unusable input, located by file and field (key path, line number, column...)."""

    def __init__(self, file: str | Path | None, field: str | None, message: str):
        self.file = str(file) if file is not None else None
        self.field = field
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        where = ": ".join(parts)
        text = f"{where}: {self.message}" if where else self.message
        return " ".join(text.split())  # always exactly one line


class ServiceError(Exception):
    """A service rlexp talks to (an eval server, a Ray dashboard) refused or kept failing after
    its retries. The CLI prints it as one line and exits 2: its address comes from the input."""


class CheckFailed(Exception):
    """A command ran correctly but its verdict is a failure (exit code 1)."""
