"""rlexp: GRPO fine-tuning experiments as an executable SOP.

The package root stays import-light: ``rlexp --help`` and ``rlexp plan`` must start in well
under half a second, so nothing heavy (torch, mlflow, pandas, scipy, vllm) is imported here.
"""

__version__ = "0.1.0"
