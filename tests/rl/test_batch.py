import pytest
import torch

from agentrl.rl.batch import collate
from agentrl.rollout.trajectory import Trajectory


def _traj(prompt, comp, mask, lps, reward=1.0):
    return Trajectory(task_id="t", group_id=0, prompt_ids=tuple(prompt), completion_ids=tuple(comp),
                      policy_mask=tuple(mask), sampler_logprobs=tuple(lps), reward=reward)


def test_collate_pads_right_and_aligns_masks():
    a = _traj([5, 6], [7, 8, 9], [1, 0, 1], [-0.5, 0.0, -1.5], reward=1.0)
    b = _traj([5], [7], [1], [-2.0], reward=0.0)
    tb = collate([a, b], pad_id=99, advantages=[0.5, -0.5])
    assert tb.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 99, 99, 99]]
    assert tb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert tb.policy_mask.tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0]]
    assert tb.old_logprobs.tolist() == [[0, 0, -0.5, 0, -1.5], [0, -2.0, 0, 0, 0]]
    assert tb.old_logprobs.dtype == torch.float32 and tb.input_ids.dtype == torch.long
    assert tb.advantages.tolist() == [0.5, -0.5] and tb.rewards.tolist() == [1.0, 0.0]
    assert tb.num_policy_tokens == 3
    sub = tb.select([1])
    assert sub.input_ids.tolist() == [[5, 7]]  # trimmed to the row's real length


def test_collate_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        collate([], 0)
    with pytest.raises(ValueError, match="completion ids"):
        collate([_traj([1], [2, 3], [1], [-1.0])], 0)
    with pytest.raises(ValueError, match="empty prompt"):
        collate([_traj([], [2], [1], [-1.0])], 0)
    with pytest.raises(ValueError, match="one value per trajectory"):
        collate([_traj([1], [2], [1], [-1.0])], 0, advantages=[1.0, 2.0])
