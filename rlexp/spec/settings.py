"""The SOP's settings for code that takes them as optional arguments (the guards, the in-run
monitor): the SOP file is read only when no SOP is handed in."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlexp.spec.sop import GuardrailSettings, Sop


def sop_or_default(sop: Sop | None = None) -> Sop:
    """``sop`` itself, or the SOP in force."""
    if sop is not None:
        return sop
    from rlexp.spec.sop import load_sop

    return load_sop()


def guard_settings(sop: Sop | None = None) -> GuardrailSettings:
    """The SOP's ``guardrails`` section (G0-G5 and the spike log), of ``sop`` or the SOP in force."""
    return sop_or_default(sop).guardrails
