"""Moved: the power of a paired comparison is part of :mod:`rlexp.stats`; this path stays for old imports."""

from rlexp.stats._power import (
    DEFAULT_DISCORDANCE,
    WIN_THRESHOLD_PP,
    PowerReport,
    mde_pp,
    n_for_mde,
    power_at,
    power_report,
)

__all__ = ["DEFAULT_DISCORDANCE", "WIN_THRESHOLD_PP", "PowerReport", "mde_pp", "n_for_mde", "power_at", "power_report"]
