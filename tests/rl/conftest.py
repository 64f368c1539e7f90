"""Fixtures for agentrl.rl tests: a tiny random Qwen3 (real HF architecture, small config)."""

import pytest
import torch


def make_tiny_qwen3(*, dtype=torch.float64, tie=False, seed=0, vocab=61):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=tie,
                      max_position_embeddings=128, attn_implementation="eager")
    model = Qwen3ForCausalLM(cfg).to(dtype)
    with torch.no_grad():  # random init is tiny; widen it so log-probs and gradients are not all ~uniform
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.fixture
def tiny_qwen3():
    return make_tiny_qwen3


def random_batch(n=6, length=14, vocab=61, seed=1, zero_adv_rows=(), dtype=torch.float64):
    """A TrainBatch-like set of tensors with ragged right padding and interleaved policy/observation spans."""
    from agentrl.rl.batch import TrainBatch

    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (n, length), generator=g)
    attention_mask = torch.zeros(n, length, dtype=torch.long)
    policy_mask = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        real = length - (i % 4)  # rows of different lengths
        attention_mask[i, :real] = 1
        input_ids[i, real:] = 0
        prompt = 3 + i % 2
        policy_mask[i, prompt:real] = 1
        policy_mask[i, prompt + 3: prompt + 5] = 0  # a tool observation in the middle
    old = (-torch.rand(n, length, generator=g, dtype=torch.float64) * 3).to(torch.float32) * policy_mask
    adv = torch.randn(n, generator=g).to(torch.float32)
    for r in zero_adv_rows:
        adv[r] = 0.0
    return TrainBatch(input_ids, attention_mask, policy_mask, old, adv, torch.zeros(n))


@pytest.fixture
def make_batch():
    return random_batch
