"""Scored groups: grouping by group_id, unscorable episodes out of the baseline, --mask-truncated,
and the per-step outcome metrics. Hand-derived expected values."""

import math
import random

import pytest
import torch

from agentrl.rl.advantages import group_advantages
from agentrl.rl.config import RLConfig
from agentrl.rl.scoring import episode_advantages, outcome_metrics
from agentrl.rollout.trajectory import Trajectory


def traj(group, reward, end="final_answer", truncated=False, task="t"):
    return Trajectory(task_id=task, group_id=group, prompt_ids=(1,), completion_ids=(2,), policy_mask=(1,),
                      sampler_logprobs=(-0.5,), reward=reward, end_reason=end, terminated=not truncated,
                      truncated=truncated)


def test_matches_group_advantages_when_every_episode_is_scorable():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0, 1.0]
    trajs = [traj(i // 4, r) for i, r in enumerate(rewards)]
    for mode in ("grpo", "dr_grpo", "rloo", "none"):
        got, st = episode_advantages(trajs, mode)
        want, want_st = group_advantages(torch.tensor(rewards), 4, mode)
        assert torch.allclose(got, want, atol=1e-7), mode
        assert st["frac_zero_std"] == want_st["frac_zero_std"] and st["reward_mean"] == pytest.approx(0.5)
        assert st["unscorable"] == 0 and st["frac_untrainable"] == 0


def test_grouping_follows_group_id_not_row_position():
    rewards = {0: [1.0, 0.0, 0.0], 1: [0.0, 0.0, 1.0]}
    ordered = [traj(g, r, task=f"{g}-{i}") for g in (0, 1) for i, r in enumerate(rewards[g])]
    shuffled = ordered[:]
    random.Random(3).shuffle(shuffled)
    a, _ = episode_advantages(ordered, "dr_grpo")
    b, _ = episode_advantages(shuffled, "dr_grpo")
    by_task = {t.task_id: float(v) for t, v in zip(ordered, a, strict=True)}
    assert {t.task_id: float(v) for t, v in zip(shuffled, b, strict=True)} == pytest.approx(by_task)
    assert by_task["0-0"] == pytest.approx(2 / 3) and by_task["0-1"] == pytest.approx(-1 / 3)
    interleaved = [traj(i % 2, r) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]  # groups 0: [1, 0], 1: [0, 0]
    adv, st = episode_advantages(interleaved, "dr_grpo")
    assert adv.tolist() == [0.5, 0.0, -0.5, 0.0] and st["frac_zero_std"] == 0.5


def test_unscorable_episodes_get_zero_and_stay_out_of_the_baseline():
    # group 0: rewards 1, 0, None, 0 -> baseline over the three scorable: mean 1/3 (dr_grpo: r - mean)
    trajs = [traj(0, 1.0), traj(0, 0.0), traj(0, None, end="env_error", truncated=True), traj(0, 0.0)]
    adv, st = episode_advantages(trajs, "dr_grpo")
    assert adv.tolist() == pytest.approx([2 / 3, -1 / 3, 0.0, -1 / 3])
    assert st["unscorable"] == 1 and st["reward_mean"] == pytest.approx(1 / 3)
    grpo, _ = episode_advantages(trajs, "grpo")
    std = torch.tensor([1.0, 0.0, 0.0]).std().item()  # sample std of the scorable three
    assert grpo[0].item() == pytest.approx((2 / 3) / (std + 1e-4), rel=1e-5) and grpo[2].item() == 0.0


def test_a_group_with_fewer_than_two_scorable_episodes_trains_nothing():
    trajs = [traj(0, 1.0), traj(0, None), traj(0, None), traj(1, 0.0), traj(1, 1.0)]
    adv, st = episode_advantages(trajs, "grpo")
    assert adv[:3].tolist() == [0.0, 0.0, 0.0] and adv[3] < 0 < adv[4]
    assert st["frac_untrainable"] == 0.5 and st["unscorable"] == 2
    adv, st = episode_advantages(trajs, "none")  # no baseline: one scorable episode is enough
    assert adv.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0] and st["frac_untrainable"] == 0.0
    adv, st = episode_advantages([traj(0, None), traj(0, None)], "grpo")
    assert adv.tolist() == [0.0, 0.0] and math.isnan(st["reward_mean"]) and st["frac_untrainable"] == 1.0


def test_truncated_episodes_are_graded_by_default_and_masked_on_request():
    # an out-of-turns episode whose final file passes scores 1 and gets a positive advantage by default
    trajs = [traj(0, 1.0, end="out_of_turns", truncated=True), traj(0, 0.0), traj(0, 0.0),
             traj(0, 1.0, end="out_of_tokens", truncated=True)]
    adv, st = episode_advantages(trajs, "dr_grpo")
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5]) and st["masked_truncated"] == 0
    masked, st = episode_advantages(trajs, "dr_grpo", mask_truncated=True)
    # TRL's mask_truncated_completions: advantage 0, but the reward still enters the baseline (mean 0.5)
    assert masked.tolist() == pytest.approx([0.0, -0.5, -0.5, 0.0]) and st["masked_truncated"] == 2


def test_mask_truncated_is_a_config_flag():
    from agentrl.cli.flags import rlconfig_parser

    assert RLConfig().update.mask_truncated is False
    (cfg,) = rlconfig_parser().parse_args_into_dataclasses(["--mask-truncated"])
    assert cfg.update.mask_truncated is True


def test_bad_rewards_are_refused():
    with pytest.raises(ValueError, match="NaN or inf"):
        episode_advantages([traj(0, float("nan")), traj(0, 1.0)], "grpo")
    with pytest.raises(ValueError, match="at least one"):
        episode_advantages([], "grpo")


def test_outcome_metrics_zero_fill_the_vocabulary():
    trajs = [traj(0, 1.0, "submitted"), traj(0, None, "env_error", True), traj(0, 0.0, "out_of_turns", True),
             traj(0, 0.0, "submitted")]
    m = outcome_metrics(trajs, ("submitted", "final_answer", "out_of_turns", "out_of_tokens", "env_error"))
    assert m["rollout/unscorable"] == 1 and m["rollout/truncated"] == 0.5
    assert m["rollout/end_reason/submitted"] == 0.5 and m["rollout/end_reason/final_answer"] == 0.0
    assert m["rollout/end_reason/env_error"] == 0.25 and m["rollout/end_reason/out_of_tokens"] == 0.0
    assert sum(v for k, v in m.items() if k.startswith("rollout/end_reason/")) == pytest.approx(1.0)
