"""How many [chunk, vocab] tensors the LM head's chunks keep alive through a forward and backward of
agentrl.rl.logprobs.policy_logprobs: the update's memory above weights and optimizer state is dominated by
them (issue 26 item 5). Counted with a TorchDispatchMode over every op, so the count is the same on any device."""

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from agentrl.rl.logprobs import policy_logprobs

VOCAB = 4099


class _MaxLiveLogits(TorchDispatchMode):
    """The most [*, VOCAB] float tensors (distinct storages, not those of `static`: the weights and their views)
    alive at once while the mode is on."""

    def __init__(self, static=()):
        super().__init__()
        self.static = {t.untyped_storage().data_ptr() for t in static}
        self.live: dict[int, StorageWeakRef] = {}
        self.max_live = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[1] == VOCAB and t.is_floating_point():
                st = t.untyped_storage()
                if st.data_ptr() in self.static:
                    continue
                self.live.setdefault(st.data_ptr(), StorageWeakRef(st))
        self.live = {k: w for k, w in self.live.items() if not w.expired()}
        self.max_live = max(self.max_live, len(self.live))
        return out


def _max_live(model, b, **kw):
    model.zero_grad(set_to_none=True)
    with _MaxLiveLogits(static=list(model.parameters())) as m:
        lp, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=1024, **kw)
        (lp * b.policy_mask).sum().backward()
    return m.max_live, lp.detach(), ent.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def test_the_head_keeps_at_most_three_logit_sized_tensors_and_the_entropy_needs_no_graph(tiny_qwen3, make_batch):
    """The entropy is a statistic: built outside autograd (one in-place temporary) it leaves the chunk with at
    most 3 [M, V] tensors alive (log-softmax output, its gradient, the logits' gradient; the gradient of
    log p(target) is written by nll_loss's backward, where gather's is a zeros tensor plus a scatter_add copy);
    inside autograd (the earlier code, still there as entropy_grad=True) the forward held logits, log-softmax,
    exp and their product. Same log-probs, entropies and gradients either way (the loss has no entropy term)."""
    model = tiny_qwen3(dtype=torch.float32, vocab=VOCAB, tie=True)
    b = make_batch(vocab=VOCAB)
    lean, lp, ent, g = _max_live(model, b)
    full, lp2, ent2, g2 = _max_live(model, b, entropy_grad=True)
    assert lean <= 3 < full, (lean, full)
    assert torch.equal(lp, lp2) and torch.allclose(ent, ent2, atol=1e-6, rtol=0)
    assert all(torch.allclose(g[k], g2[k], atol=1e-7, rtol=1e-6) for k in g)
    assert not ent.requires_grad


def test_entropy_grad_gives_the_entropys_gradient(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    _, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=5, entropy_grad=True)
    assert ent.requires_grad
    ent.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    _, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=5)
    assert not ent.requires_grad
