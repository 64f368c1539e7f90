"""Supervised warm start (SFT) on expert or recorded trajectories, beside the RL trainer. Not RL.

`agentrl.sft.data` builds token-level trajectories (scripted experts played through the real
environments, JSONL files); `agentrl.sft.trainer` is the NLL loop over their policy tokens;
`agentrl.sft.commands` is `agentrl sft`. (Nothing is imported here, so `agentrl --help` stays fast.)
"""

