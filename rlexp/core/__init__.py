"""The pure core: the protocol's rules as functions of their inputs (no writes, nothing heavy)."""
