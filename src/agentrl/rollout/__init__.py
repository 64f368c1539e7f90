"""Rollout: samplers (HF generate, the fast static-KV sampler), the multi-turn episode driver, trajectories,
rows rebuilt from black-box traces."""
