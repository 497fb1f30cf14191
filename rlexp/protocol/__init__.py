"""The protocol's rules, pure: preflight checks, gates, the decision and its verdicts."""
