"""RL: config, run setup, run folder, training state, the Backend protocol, advantages, losses, updates,
the GRPO loops, checkpoints."""
