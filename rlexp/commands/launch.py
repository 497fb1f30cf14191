"""`rlexp launch` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def launch() -> None:
    """Not built yet."""
    raise CheckFailed("'launch' is not implemented yet")
