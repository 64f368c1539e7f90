"""A tiny end-to-end GRPO update: sampled episodes -> advantages -> collate -> minibatch_step."""

import pytest
import torch

from agentrl.rl.advantages import group_advantages
from agentrl.rl.batch import collate
from agentrl.rl.config import RLConfig
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.update import accumulate_gradients, enable_gradient_checkpointing, minibatch_step
from agentrl.rollout.trajectory import Trajectory


def _sample_group(model, prompt, group_size, new_tokens, obs, gen):
    """Sample a group of two-turn episodes (batched, same lengths) with a tool observation between the
    turns, recording the sampler's log-prob of each sampled token."""
    ids = torch.tensor([prompt] * group_size)
    mask, lps = [], []
    for turn in range(2):
        for _ in range(new_tokens):
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[:, -1].float(), -1)  # [G, V]
            tok = torch.multinomial(logp.exp(), 1, generator=gen)  # [G, 1]
            ids = torch.cat([ids, tok], dim=1)
            mask.append(1), lps.append(logp.gather(1, tok)[:, 0])
        if turn == 0:
            ids = torch.cat([ids, torch.tensor([obs] * group_size)], dim=1)
            mask.extend([0] * len(obs)), lps.extend([torch.zeros(group_size)] * len(obs))
    lps = torch.stack(lps, dim=1)  # [G, C]
    trajs = []
    for g in range(group_size):
        comp = ids[g, len(prompt):].tolist()
        reward = sum(t % 2 == 0 for t in comp) / len(comp)  # a toy verifiable reward in [0, 1]
        trajs.append(Trajectory(task_id="toy", group_id=0, prompt_ids=tuple(prompt), completion_ids=tuple(comp),
                                policy_mask=tuple(mask), sampler_logprobs=tuple(lps[g].tolist()), reward=reward))
    return trajs


def test_one_grpo_step_moves_parameters(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for prompt in ([1, 2, 3], [4, 5, 6, 7]):
        trajs += _sample_group(model, prompt, group_size=4, new_tokens=4, obs=[9, 9], gen=gen)
    rewards = torch.tensor([t.reward for t in trajs])
    adv, st = group_advantages(rewards, 4, "grpo")
    batch = collate(trajs, pad_id=0, advantages=adv)
    # on-policy: trainer log-probs equal the sampler's up to float error
    lp, _ = policy_logprobs(model, batch.input_ids, batch.attention_mask, batch.policy_mask)
    assert torch.allclose(lp, batch.old_logprobs, atol=1e-5)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = RLConfig.from_flat(group_size=4, prompts_per_step=2, micro=3, lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.update.lr, weight_decay=cfg.update.weight_decay)
    metrics = minibatch_step(model, opt, batch, cfg)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and metrics["clip_frac"] == 0.0
    assert metrics["kl_sampler"] == pytest.approx(0.0, abs=1e-6) and metrics["logprob_gap_abs"] < 1e-4
    assert st["frac_zero_std"] < 1.0  # the seed gives at least one group with mixed rewards
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_bf16_model_gives_fp32_logprobs(tiny_qwen3, make_batch, dtype):
    model = tiny_qwen3(dtype=dtype)
    b = make_batch()
    lp, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
    assert lp.dtype == torch.float32 and torch.isfinite(lp).all() and (ent >= 0).all()


def test_gradient_checkpointing_keeps_the_gradient(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch(n=4)
    cfg = RLConfig.from_flat(micro=2)
    accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens)
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    enable_gradient_checkpointing(model)
    assert model.model.gradient_checkpointing and model.training
    accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens)
    for r, p in zip(ref, model.parameters(), strict=True):
        assert torch.allclose(p.grad, r, rtol=1e-9, atol=1e-12)
