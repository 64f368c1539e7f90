import math

import pytest
import torch

from agentrl.rl.loss import policy_loss


def _case(adv):
    logp = torch.log(torch.tensor([[1.5, 0.5]], dtype=torch.float64)).requires_grad_(True)
    old = torch.zeros(1, 2, dtype=torch.float64)
    return logp, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 2)


def test_positive_advantage_clips_high_only():
    logp, old, adv, mask = _case(1.0)
    loss, st = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, normalizer=4.0)
    # token 1: max(-1.5, -1.2) = -1.2 (clipped); token 2: max(-0.5, -0.8) = -0.5 -> -1.7 / 4
    assert loss.item() == pytest.approx(-0.425, abs=1e-12)
    loss.backward()
    # clipped token has no gradient; d(-A r)/dlogp = -A r = -0.5, divided by 4
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.125]], dtype=torch.float64), atol=1e-12)
    assert (st["clip_frac_high"], st["clip_frac_low"], st["clip_frac"]) == (0.5, 0.0, 0.5)
    assert st["ratio_mean"] == pytest.approx(1.0) and st["tokens"] == 2.0


def test_negative_advantage_clips_low_only():
    logp, old, adv, mask = _case(-1.0)
    loss, st = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, normalizer=4.0)
    assert loss.item() == pytest.approx((1.5 + 0.8) / 4, abs=1e-12)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[1.5 / 4, 0.0]], dtype=torch.float64), atol=1e-12)
    assert (st["clip_frac_low"], st["clip_frac_high"]) == (0.5, 0.0)


def test_asymmetric_clip_high():
    logp, old, adv, mask = _case(1.0)
    loss, st = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.6, normalizer=2.0)
    assert loss.item() == pytest.approx(-(1.5 + 0.5) / 2, abs=1e-12) and st["clip_frac"] == 0.0


def test_k3_kl_and_gap_stats_hand_computed():
    logp = torch.log(torch.tensor([[1.5, 1.0]], dtype=torch.float64))
    old = torch.zeros(1, 2, dtype=torch.float64)
    ref = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]])
    loss, st = policy_loss(logp, old, torch.zeros(1, dtype=torch.float64), mask, normalizer=2.0,
                           ref_logp=ref, kl_coef=0.5)
    k3 = 1 / 1.5 + math.log(1.5) - 1  # exp(ref - logp) - (ref - logp) - 1
    assert st["kl_ref"] == pytest.approx(k3, abs=1e-12)
    assert loss.item() == pytest.approx(0.5 * k3 / 2, abs=1e-12)
    assert st["kl_sampler"] == pytest.approx(1.5 - 1 - math.log(1.5), abs=1e-12)
    assert st["logprob_gap"] == pytest.approx(-math.log(1.5)) and st["logprob_gap_abs"] == pytest.approx(math.log(1.5))


def test_masked_positions_never_overflow():
    logp = torch.tensor([[-1.0, 500.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -500.0]])
    loss, st = policy_loss(logp, old, torch.tensor([1.0]), torch.tensor([[1, 0]]), normalizer=1.0,
                           entropy=torch.tensor([[0.3, 9.0]]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0
    assert st["entropy"] == pytest.approx(0.3)


def test_bad_input():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="normalizer"):
        policy_loss(x, x, torch.zeros(2), x, normalizer=0.0)
    with pytest.raises(ValueError, match="adv"):
        policy_loss(x, x, torch.zeros(3), x, normalizer=1.0)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(x, x, torch.zeros(2), x, normalizer=1.0, kl_coef=0.1)
