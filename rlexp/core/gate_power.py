"""Moved: Gate-1b pass power and exact McNemar power are part of :mod:`rlexp.stats`; this path stays for
old imports."""

from rlexp.stats._gate_power import (
    DELTA_CORRELATION_OF_RHO,
    add_best_of_k,
    gate_1b_best_of_k_normal,
    gate_1b_effect_for_power,
    gate_1b_pass_probability,
    mcnemar_mde,
    mcnemar_power,
)

__all__ = ["DELTA_CORRELATION_OF_RHO", "add_best_of_k", "gate_1b_best_of_k_normal", "gate_1b_effect_for_power",
           "gate_1b_pass_probability", "mcnemar_mde", "mcnemar_power"]
