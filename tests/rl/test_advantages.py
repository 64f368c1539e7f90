import math

import pytest
import torch

from agentrl.rl.advantages import ADV_EPS, group_advantages


def test_grpo_hand_computed_sample_std():
    # group [1, 0, 0, 0]: mean 0.25, sample std sqrt((0.5625 + 3*0.0625)/3) = 0.5
    adv, st = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, "grpo")
    exp = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + ADV_EPS)
    assert torch.allclose(adv, exp, atol=1e-6)
    assert st["frac_zero_std"] == 0.0 and st["reward_mean"] == 0.25


def test_dr_grpo_and_rloo_hand_computed():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5])
    adv, _ = group_advantages(r, 4, "dr_grpo")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]), atol=1e-7)
    adv, _ = group_advantages(r, 4, "rloo")
    # leave-one-out: 1 - (0+.5+.5)/3 = 2/3; 0 - 2/3 = -2/3; 0.5 - 1.5/3 = 0
    assert torch.allclose(adv, torch.tensor([2 / 3, -2 / 3, 0.0, 0.0]), atol=1e-6)


def test_rloo_equals_explicit_leave_one_out():
    r = torch.tensor([0.3, 0.9, 0.1, 0.4, 1.0, 0.0])
    adv, _ = group_advantages(r, 3, "rloo")
    g = r.view(2, 3)
    exp = torch.stack([g[:, i] - (g.sum(1) - g[:, i]) / 2 for i in range(3)], dim=1).reshape(-1)
    assert torch.allclose(adv, exp, atol=1e-6)


def test_zero_std_groups_are_exactly_zero_and_counted():
    r = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 1.0, 0.7, 0.7, 0.7])
    for mode in ("grpo", "dr_grpo", "rloo"):
        adv, st = group_advantages(r, 3, mode)
        assert adv[:3].eq(0).all() and adv[6:].eq(0).all() and adv[3:6].ne(0).all()
        assert st["frac_zero_std"] == pytest.approx(2 / 3, abs=1e-12)
    adv, st = group_advantages(r, 3, "none")
    assert torch.equal(adv, r) and st["frac_zero_std"] == pytest.approx(2 / 3)


def test_grpo_is_scale_invariant_per_group():
    r = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.0])
    a, _ = group_advantages(r, 4, "grpo", eps=0.0)
    assert torch.allclose(a[:4], a[4:], atol=1e-6)
    assert math.isclose(float(a[:4].std()), 1.0, abs_tol=1e-6)  # sample std normalised to 1


@pytest.mark.parametrize("rewards,g,mode", [
    (torch.zeros(2, 2), 2, "grpo"), (torch.zeros(5), 2, "grpo"), (torch.zeros(4), 1, "grpo"),
    (torch.tensor([0.0, float("nan")]), 2, "grpo"), (torch.zeros(4), 2, "ppo"),
])
def test_bad_input_raises(rewards, g, mode):
    with pytest.raises(ValueError, match="group_advantages"):
        group_advantages(rewards, g, mode)


def test_eps_must_be_non_negative_and_lists_are_accepted():
    import pytest as _pt

    from agentrl.rl.advantages import group_advantages as ga

    for bad in (-1e-4, float("nan"), float("inf"), "0.1"):
        with _pt.raises(ValueError, match="eps"):
            ga(torch.tensor([0.0, 1.0]), 2, "grpo", eps=bad)
    adv, _ = ga([0.0, 1.0, 1.0, 1.0], 2, "dr_grpo")
    assert adv.tolist() == [-0.5, 0.5, 0.0, 0.0]


def test_estimator_registry_is_what_config_cli_and_group_advantages_read():
    from agentrl.cli import build_parser
    from agentrl.rl.config import ADV_MODES, RLConfig
    from agentrl.rl.estimators import ADV_ESTIMATORS

    assert ADV_MODES == tuple(ADV_ESTIMATORS) == ("grpo", "dr_grpo", "rloo", "none")
    sub = build_parser()._subparsers._group_actions[0].choices["train"]
    action = next(a for a in sub._actions if a.dest == "adv_mode")
    assert list(action.choices) == list(ADV_ESTIMATORS) and all(n in action.help for n in ADV_ESTIMATORS)
    for name, est in ADV_ESTIMATORS.items():
        if est.min_group_size > 1:
            with pytest.raises(ValueError, match=f"adv_mode '{name}' needs group_size >= {est.min_group_size}"):
                RLConfig.from_flat(adv_mode=name, group_size=1, prompts_per_step=2, minibatches=1)
        else:
            assert RLConfig.from_flat(adv_mode=name, group_size=1, prompts_per_step=2, minibatches=1).update.adv_mode == name
    with pytest.raises(ValueError, match="group_advantages: mode 'ppo' is not an advantage estimator; "
                                         "expected one of grpo, dr_grpo, rloo, none"):
        group_advantages(torch.zeros(4), 2, "ppo")
