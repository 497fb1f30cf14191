"""`rlexp compare` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def compare() -> None:
    """Not built yet."""
    raise CheckFailed("'compare' is not implemented yet")
