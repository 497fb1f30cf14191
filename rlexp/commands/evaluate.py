"""`rlexp eval` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def evaluate() -> None:
    """Not built yet."""
    raise CheckFailed("'eval' is not implemented yet")
