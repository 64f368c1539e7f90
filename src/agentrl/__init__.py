"""agentrl: train LLM coding agents with reinforcement learning against hidden-test rewards.

Stages (one sub-package each): tasks -> envs -> chat/rollout -> rl -> eval -> io.
The sandbox runs every piece of model-written code; nothing the model writes runs in this process.
"""

__version__ = "0.1.0"
