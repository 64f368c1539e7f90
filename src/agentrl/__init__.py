"""agentrl: train LLM coding agents with reinforcement learning against hidden-test rewards.

Data path: tasks -> envs -> rollout -> reward (hidden tests, sandbox) -> rl -> eval -> report; one sub-package
per stage (docs/design.md).
The sandbox runs every piece of model-written code; nothing the model writes runs in this process.
"""

__version__ = "0.1.0"
