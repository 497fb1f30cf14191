"""Step math of trainers other than OpenRLHF (whose step math is rlexp.core.schedule)."""
