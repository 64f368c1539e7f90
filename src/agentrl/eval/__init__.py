"""Evaluation: held-out pass@1, task-level bootstrap intervals, noise analysis."""
