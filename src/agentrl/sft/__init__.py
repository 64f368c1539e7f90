"""Supervised warm start (SFT) on expert or recorded trajectories, beside the RL trainer. Not RL.

`agentrl.sft.data` builds token-level trajectories (scripted experts played through the real
environments, JSONL files); `agentrl.sft.trainer` is the NLL loop over their policy tokens;
`agentrl.sft.run` is `agentrl sft`; `agentrl.sft.warm_start` is `agentrl train --warm-start sft`, which
the trainer's warm-start registry (agentrl.rl.warm_start) names by import path. Nothing is imported or
registered here.
"""
