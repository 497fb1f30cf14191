"""`rlexp status` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def status() -> None:
    """Not built yet."""
    raise CheckFailed("'status' is not implemented yet")
