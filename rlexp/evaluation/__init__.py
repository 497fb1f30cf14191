"""Evaluation: answer grading, the tasks, generation and the eval engines and harnesses."""
