"""`rlexp demo` (placeholder until its issue lands)."""

from __future__ import annotations

from rlexp.errors import CheckFailed


def demo() -> None:
    """Not built yet."""
    raise CheckFailed("'demo' is not implemented yet")
