"""RL: config, advantages, losses, the GRPO trainer loop, checkpoints."""
