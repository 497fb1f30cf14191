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
        """``file: field: message`` on one line, each part cut to a readable length (a value quoted
        from the input may be megabytes long)."""
        parts = [shorten(p, limit) for p, limit in ((self.file, MAX_PATH_CHARS), (self.field, MAX_FIELD_CHARS)) if p]
        where = ": ".join(parts)
        message = shorten(self.message, MAX_MESSAGE_CHARS)
        return f"{where}: {message}" if where else message


MAX_PATH_CHARS = 300
MAX_FIELD_CHARS = 200
MAX_MESSAGE_CHARS = 600


def shorten(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs become one space), at most ``limit`` characters: a
    longer one keeps its start and end around "…[N chars]…"."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    keep = max(limit - 16 - len(str(len(text))), 2)
    cut = f"…[{len(text) - keep} chars]…"
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + cut + text[len(text) - tail:]


class ServiceError(Exception):
    """A service rlexp talks to (an eval server, a Ray dashboard) refused or kept failing after
    its retries. The CLI prints it as one line and exits 2: its address comes from the input."""


class CheckFailed(Exception):
    """A command ran correctly but its verdict is a failure (exit code 1)."""
