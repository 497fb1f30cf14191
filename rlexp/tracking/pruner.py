"""The SOP's in-run early-stop rule as an Optuna pruner.

``SopEarlyStopPruner`` prunes a trial when :func:`rlexp.protocol.gates.early_stop` — the very rule the
in-run monitor applies to a live training run (:func:`rlexp.training.monitor.early_stop_verdict`) —
says stop: a trailing moving average of the reported values over ``smoothing_window`` evals, a best
that moves only on a gain of at least ``min_improvement_pp``, and ``patience_evals`` evals without
such a gain. The numbers come from the SOP in force (``sop/``), not from this module.

Report the monitor metric as an accuracy fraction (0..1) with the global step as Optuna's step::

    trial.report(monitor_acc, step=global_step)
    if trial.should_prune():
        raise optuna.TrialPruned()

How it differs from ``optuna.pruners.PatientPruner(None, patience=5)``: Optuna's pruner compares
raw values and counts any new best as progress, so a curve that creeps up by a tenth of a point
per eval is never pruned; the SOP smooths the curve and asks for a full point of gain.

Imported only by the code that builds a study (it imports optuna at module level).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

from rlexp.protocol import gates
from rlexp.spec.settings import sop_or_default

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


class SopEarlyStopPruner(optuna.pruners.BasePruner):
    """Prune when the SOP's early-stop rule fires on the trial's reported values (a maximised accuracy)."""

    def __init__(self, sop: Sop | None = None) -> None:
        self.sop = sop_or_default(sop)

    def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
        points = sorted(trial.intermediate_values.items())
        if not points:
            return False
        return bool(gates.early_stop(points, self.sop).passed)

    def verdict(self, trial: optuna.trial.FrozenTrial):
        """The rule's full verdict on the trial's values (best smoothed value and step, evals since)."""
        return gates.early_stop(sorted(trial.intermediate_values.items()), self.sop)
