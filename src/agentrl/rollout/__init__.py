"""Rollout: samplers (HF generate), the multi-turn episode driver, trajectories."""
