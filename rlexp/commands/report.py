"""`rlexp report` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def report() -> None:
    """Not built yet."""
    raise CheckFailed("'report' is not implemented yet")
