"""`rlexp decide` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def decide() -> None:
    """Not built yet."""
    raise CheckFailed("'decide' is not implemented yet")
