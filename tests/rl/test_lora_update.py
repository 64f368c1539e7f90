"""GRPO updates of a LoRA policy: only adapters move, the adapter-off reference is the untouched base."""

import copy

import pytest
import torch

from agentrl.models.lora import AdapterOffReference, apply_lora, reference, trainable_parameters
from agentrl.rl.config import RLConfig
from agentrl.rl.update import minibatch_step


def _cfg(**kw):
    return RLConfig.from_flat(**(dict(micro=2, minibatches=2, epochs=1, max_grad_norm=1e9, lr=1e-2) | kw))


@pytest.mark.parametrize("targets", ["all-linear", "q_proj,v_proj"])
def test_only_adapters_train_and_the_reference_stays_the_base(tiny_qwen3, make_batch, targets):
    base = tiny_qwen3(dtype=torch.float64)
    frozen = copy.deepcopy(base)
    model = apply_lora(base, r=4, alpha=8, dropout=0.0, target_modules=targets)
    params = trainable_parameters(model)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    if targets != "all-linear":
        assert {n.split(".")[-4] for n in names} == {"q_proj", "v_proj"}
    b = make_batch(n=6)
    with torch.no_grad():  # B = 0 at the start: the wrapped model is exactly the base
        assert torch.equal(model(b.input_ids).logits, frozen(b.input_ids).logits)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(params, lr=1e-2)
    ref = AdapterOffReference(model)
    m = minibatch_step(model, opt, b, _cfg(kl_coef=0.1, minibatches=1), ref_model=ref)
    assert m["kl_ref"] == pytest.approx(0.0, abs=1e-12)  # before the first step: policy == reference exactly
    m = minibatch_step(model, opt, b, _cfg(kl_coef=0.1), ref_model=ref)
    assert m["kl_ref"] > 0
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != ("lora_" in n), n  # adapters moved, base weights did not
    model.eval()
    with torch.no_grad(), reference(ref) as r:
        assert torch.equal(r(b.input_ids).logits, frozen(b.input_ids).logits)
    with torch.no_grad():
        assert not torch.allclose(model(b.input_ids).logits, frozen(b.input_ids).logits)


def test_reference_of_a_frozen_copy_is_the_copy(tiny_qwen3):
    m = tiny_qwen3()
    with reference(m) as r:
        assert r is m


def test_lora_settings_are_checked():
    for bad in (dict(lora_r=-1), dict(lora_alpha=0.0), dict(lora_dropout=1.0)):
        with pytest.raises(ValueError, match="lora_"):
            RLConfig.from_flat(**bad)
    with pytest.raises(ValueError, match="LoRA needs r >= 1"):
        apply_lora(torch.nn.Linear(2, 2), r=0, alpha=1, dropout=0, target_modules="all-linear")
