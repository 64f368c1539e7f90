"""Supervised warm start (SFT) on expert or recorded trajectories, beside the RL trainer. Not RL.

`agentrl.sft.data` builds token-level trajectories (scripted experts played through the real
environments, JSONL files); `agentrl.sft.trainer` is the NLL loop over their policy tokens;
`agentrl.sft.run` is `agentrl sft`; `agentrl.sft.warm_start` is `agentrl train --warm-start sft`.
Importing this package registers that warm start with the trainer (agentrl.rl.warm_start); nothing
heavy is imported here, so `agentrl --help` stays fast.
"""

from agentrl.rl.warm_start import register_warm_start


def _sft_warm_start(sess):
    """`--warm-start sft` (agentrl.sft.warm_start.sft_warm_start, imported when a run uses it)."""
    from agentrl.sft.warm_start import sft_warm_start

    return sft_warm_start(sess)


def _check_sft_warm_start(cfg):
    from agentrl.sft.warm_start import check_sft_warm_start

    check_sft_warm_start(cfg)


register_warm_start("sft", _sft_warm_start, check=_check_sft_warm_start)

