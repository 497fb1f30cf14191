"""Watching and comparing runs: MLflow, Optuna studies and sweeps, progress lines."""
