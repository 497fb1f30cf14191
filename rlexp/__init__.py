"""rlexp: GRPO fine-tuning experiments as an executable SOP.

The protocol's stages are library functions; the ``rlexp`` command line only renders them::

    import rlexp

    rlexp.plan("experiments/demo/d2")        # -> PlanResult (plan.json written)
    rlexp.launch("experiments/demo/d2")      # -> LaunchResult (trains, follows metrics)
    rlexp.evaluate("experiments/demo/d2")    # -> EvalOutcome (K=3 + baselines, records)
    rlexp.guard("g2", "experiments/demo/d2") # -> Verdict
    rlexp.decide("experiments/demo/d2")      # -> Decision (decision.json, ledger)
    rlexp.report("experiments/demo/d2")      # -> ReportResult (markdown + plots)
    rlexp.status("experiments/demo")         # -> list of AttemptStatus
    rlexp.demo("/tmp/rlexp-demo")            # -> DemoResult
    rlexp.sweep_models("experiments/demo/sweeps/s1")  # -> SweepResult (ranking, selection, report)

The package root stays import-light: ``rlexp --help`` and ``rlexp plan`` must start in well
under half a second, so each stage is imported on first use (PEP 562 ``__getattr__``), and
nothing heavy (torch, mlflow, pandas, scipy, vllm) is imported here.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> the module under rlexp.stages that defines it (never a submodule of rlexp itself, so
# that `rlexp.report` is always the function, whatever has been imported)
_STAGES = {
    "plan": "plan",
    "launch": "launch",
    "evaluate": "evaluate",
    "guard": "guard",
    "decide": "decide",
    "report": "report",
    "status": "status",
    "demo": "demo",
    "sweep_models": "sweep",
}

__all__ = ["__version__", *_STAGES]


def __getattr__(name: str) -> Any:
    if name in _STAGES:
        import importlib

        return getattr(importlib.import_module(f"rlexp.stages.{_STAGES[name]}"), name)
    raise AttributeError(f"module 'rlexp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
