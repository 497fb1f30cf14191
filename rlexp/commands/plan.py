"""`rlexp plan` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def plan() -> None:
    """Not built yet."""
    raise CheckFailed("'plan' is not implemented yet")
