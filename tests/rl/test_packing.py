"""The padding-free (packed) trunk forward equals the padded one: log-probs, entropies and gradients."""

import pytest
import torch

from agentrl.rl import packing
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.update import enable_gradient_checkpointing


def _grads(model, b, pack, weights):
    model.zero_grad(set_to_none=True)
    lp, ent = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, chunk_rows=5, pack=pack,
                              entropy_grad=True)
    ((lp * weights).sum() + 0.1 * ent.sum()).backward()
    return lp.detach(), ent.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


# fp64 gets the fp32 bound too: Qwen3RMSNorm computes in float32 whatever the model dtype, so a 1e-16
# difference in attention can flip an fp32 rounding (measured: 1.6e-6 on the hidden states).
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-5)])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_equals_padded_with_gradients(tiny_qwen3, make_batch, dtype, tol, checkpointing):
    model = tiny_qwen3(dtype=dtype)
    if checkpointing:
        enable_gradient_checkpointing(model)
    b = make_batch(n=6, length=14, dtype=dtype)
    assert packing.packable(model, b.attention_mask)
    w = torch.randn(b.input_ids.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    lp_ref, ent_ref, g_ref = _grads(model, b, False, w)
    lp, ent, g = _grads(model, b, True, w)
    assert lp.dtype == lp_ref.dtype and lp.shape == lp_ref.shape
    assert (lp - lp_ref).abs().max() <= tol and (ent - ent_ref).abs().max() <= tol
    assert lp[b.policy_mask == 0].eq(0).all()
    assert g.keys() == g_ref.keys() and len(g) == len(list(model.parameters()))
    for k in g:
        scale = g_ref[k].abs().max().clamp(min=1.0)
        assert (g[k] - g_ref[k]).abs().max() <= tol * scale, k


def test_auto_packs_and_leaves_plain_forward_alone(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    before = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    calls = []
    orig = packing.packed_hidden

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    packing_mod = __import__("agentrl.rl.logprobs", fromlist=["packed_hidden"])
    packing_mod.packed_hidden, saved = spy, packing_mod.packed_hidden
    try:
        auto, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask)
    finally:
        packing_mod.packed_hidden = saved
    assert calls == [1]
    plain, _ = policy_logprobs(model, b.input_ids, b.attention_mask, b.policy_mask, pack=False)
    assert torch.allclose(auto, plain, atol=1e-5, rtol=0)
    # once installed, unpacked calls (plain forward, generate) still take the model's own attention
    after = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    assert torch.equal(before, after)
    assert model.config._attn_implementation == "eager"
    assert model.model.layers[0].self_attn.config._attn_implementation == packing.PACKED_ATTENTION


def test_not_packable_batches_and_models(tiny_qwen3, make_batch):
    model = tiny_qwen3(dtype=torch.float64)
    b = make_batch()
    left = b.attention_mask.flip(1)  # left padding: not a run of ones from column 0
    assert not packing.packable(model, left)
    pm = b.policy_mask.flip(1) * left
    pm[:, 0] = 0
    with pytest.raises(ValueError, match="cannot be packed"):
        policy_logprobs(model, b.input_ids, left, pm, pack=True)
    lp, _ = policy_logprobs(model, b.input_ids, left, pm, pack=None)  # falls back to the padded path
    assert lp.shape == b.input_ids.shape
    model.config.model_type = "gpt2"  # an architecture the pack does not know
    assert not packing.packable(model, b.attention_mask)


def test_packed_attention_refuses_dropout_and_delegates_without_pack(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float64)
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    kv = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="dropout"):
        packing.packed_attention(attn, q, kv, kv, None, dropout=0.1, packed_cu=torch.tensor([0, 5]),
                                 packed_bounds=(0, 5))
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    out, _ = packing.packed_attention(attn, q, kv, kv, None, scaling=8 ** -0.5, packed_cu=cu, packed_bounds=(0, 2, 5))
    # without the Python bounds (packed_hidden leaves them out where varlen_attn runs) they are read from packed_cu
    out_cu, _ = packing.packed_attention(attn, q, kv, kv, None, scaling=8 ** -0.5, packed_cu=cu)
    assert torch.equal(out_cu, out)
    ref = torch.cat([torch.nn.functional.scaled_dot_product_attention(
        q[:, :, a:c], kv[:, :, a:c].repeat_interleave(2, 1), kv[:, :, a:c].repeat_interleave(2, 1), is_causal=True)
        for a, c in ((0, 2), (2, 5))], 2).transpose(1, 2)
    assert torch.allclose(out, ref, atol=1e-12)


def test_row_bounds_stay_out_of_the_layers_arguments_where_varlen_runs(monkeypatch):
    """Where varlen_attn runs (CUDA, bf16/fp16) the layers get only the offsets tensor and the longest row: no tuple
    of Python ints whose length, a compiled layer's guard, changes with each microbatch's row count (each new count
    recompiled the update's layers); elsewhere the per-row SDPA path gets the bounds too."""
    cu = torch.tensor([0, 3, 7, 12], dtype=torch.int32)
    monkeypatch.setitem(packing._VARLEN, "fn", lambda *a, **k: None)
    monkeypatch.setitem(packing._VARLEN, "params", ())
    monkeypatch.setitem(packing._VARLEN, "broken", False)
    cuda = torch.device("cuda")
    monkeypatch.setattr(packing, "ATTENTION_HEAD_GROUPS", 1)
    kw = packing.pack_kwargs(cu, 5, cuda, torch.bfloat16)
    assert set(kw) == {"packed_cu", "packed_max"} and kw["packed_cu"] is cu and kw["packed_max"] == 5
    for device, dtype in ((cuda, torch.float32), (torch.device("cpu"), torch.bfloat16)):
        assert packing.pack_kwargs(cu, 5, device, dtype)["packed_bounds"] == (0, 3, 7, 12)
    monkeypatch.setitem(packing._VARLEN, "broken", True)  # a torch whose kernel failed once: per-row SDPA
    assert packing.pack_kwargs(cu, 5, cuda, torch.bfloat16)["packed_bounds"] == (0, 3, 7, 12)


def _cpu_varlen(calls):
    """A reference varlen_attn on the CPU (FlashAttention's contract: q [T, H, D], k/v [T, Hkv, D] with Hkv dividing
    H, cu_seqlens, causal within each row) that records each call's head counts."""
    def fn(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=True, scale=None):
        calls.append((q.shape[1], k.shape[1]))
        rep = q.shape[1] // k.shape[1]
        bounds = [int(x) for x in cu_q]
        outs = [torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1).repeat_interleave(rep, 0),
            v[a:b].transpose(0, 1).repeat_interleave(rep, 0), is_causal=is_causal, scale=scale).transpose(0, 1)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return torch.cat(outs, 0)
    return fn


def _use_cpu_varlen(monkeypatch, native_gqa: bool) -> list:
    """packing's varlen_attn replaced by _cpu_varlen (with `native_gqa` as the probe's answer); returns the list
    of its calls' (query heads, key/value heads)."""
    calls: list = []
    monkeypatch.setitem(packing._VARLEN, "fn", _cpu_varlen(calls))
    monkeypatch.setitem(packing._VARLEN, "params", ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q",
                                                    "max_k", "is_causal", "scale"))
    monkeypatch.setitem(packing._VARLEN, "broken", False)
    monkeypatch.setitem(packing._VARLEN, "gqa", native_gqa)
    return calls


@pytest.mark.parametrize("native", [True, False])
def test_attention_split_into_head_groups_gives_the_same_values_and_gradients(monkeypatch, native):
    """ATTENTION_HEAD_GROUPS: each group of heads its own varlen call (8 query / 4 key-value heads in 2 and 4
    groups; key/value heads passed as they are or repeated to every query head) gives the one call's output and
    q/k/v gradients (fp64, to 1e-12), and the per-row SDPA path's; a count that does not divide the key/value
    heads (3) runs one call."""
    calls = _use_cpu_varlen(monkeypatch, native)
    g = torch.Generator().manual_seed(0)
    q0 = torch.randn(1, 8, 11, 16, generator=g, dtype=torch.float64)
    k0, v0 = (torch.randn(1, 4, 11, 16, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.randn(1, 11, 8, 16, generator=g, dtype=torch.float64)
    cu = torch.tensor([0, 4, 5, 11], dtype=torch.int32)

    def run(groups):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        calls.clear()
        out = packing._varlen_attention(q, k, v, cu, 6, 0.3, groups)
        (out * w).sum().backward()
        return out.detach(), q.grad, k.grad, v.grad, list(calls)

    ref = run(1)
    assert ref[4] == [(8, 4 if native else 8)]
    for groups in (2, 4):
        got = run(groups)
        assert got[4] == [(8 // groups, (4 if native else 8) // groups)] * groups
        for a, b in zip(got[:4], ref[:4], strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert len(run(3)[4]) == 1
    q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
    sdpa, _ = packing.packed_attention(None, q, k, v, None, scaling=0.3, packed_cu=cu, packed_bounds=(0, 4, 5, 11),
                                       packed_max=6)
    torch.testing.assert_close(sdpa.detach(), ref[0], atol=1e-12, rtol=0)


def test_head_groups_split_the_call_only_inside_compiled_layers(monkeypatch):
    """packed_attention on the varlen path: packed_head_groups=2 makes 2 calls of half the heads where the layer is
    being compiled, and one call in an eager layer (where the split's extra ops cost ~30% of the update's time on
    the H200 and it saves the same memory); the output is the same either way."""
    calls = _use_cpu_varlen(monkeypatch, True)
    monkeypatch.setattr(packing, "_varlen_applies", lambda device, dtype: True)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 8, 9, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 4, 9, 16, generator=g, dtype=torch.float64) for _ in range(2))
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    outs = {}
    for compiling in (False, True):
        monkeypatch.setattr(packing, "_in_compiled_region", lambda c=compiling: c)
        calls.clear()
        outs[compiling], _ = packing.packed_attention(None, q, k, v, None, scaling=0.25, packed_cu=cu, packed_max=5,
                                                      packed_head_groups=2)
        assert calls == ([(4, 2)] * 2 if compiling else [(8, 4)])
    torch.testing.assert_close(outs[True], outs[False], atol=1e-12, rtol=0)
    monkeypatch.undo()
    traced = torch.compile(lambda x: x + int(packing._in_compiled_region()), backend="eager", fullgraph=True)
    assert packing._in_compiled_region() is False and float(traced(torch.zeros(1))) == 1.0


def test_head_groups_reach_the_layers_only_where_varlen_runs(monkeypatch):
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    monkeypatch.setitem(packing._VARLEN, "fn", lambda *a, **k: None)
    monkeypatch.setitem(packing._VARLEN, "params", ())
    monkeypatch.setitem(packing._VARLEN, "broken", False)
    monkeypatch.setattr(packing, "ATTENTION_HEAD_GROUPS", 1)
    assert "packed_head_groups" not in packing.pack_kwargs(cu, 4, torch.device("cuda"), torch.bfloat16)
    monkeypatch.setattr(packing, "ATTENTION_HEAD_GROUPS", 2)
    assert packing.pack_kwargs(cu, 4, torch.device("cuda"), torch.bfloat16)["packed_head_groups"] == 2
    assert "packed_head_groups" not in packing.pack_kwargs(cu, 4, torch.device("cpu"), torch.float32)


def _lora(model, dropout=0.0):
    from agentrl.models.lora import apply_lora

    peft_model = apply_lora(model, r=4, alpha=8, dropout=dropout, target_modules="all-linear")
    with torch.no_grad():  # B starts at zero (adapters inert); make them change the function
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return peft_model


@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_equals_padded_with_lora(tiny_qwen3, make_batch, checkpointing):
    """A peft LoRA policy packs like its base: same log-probs and adapter gradients, adapters on and off."""
    from agentrl.models.lora import AdapterOffReference, reference

    dtype = torch.float64
    base = tiny_qwen3(dtype=dtype)
    b = make_batch(n=6, length=14, dtype=dtype)
    with torch.no_grad():
        base_lp, _ = policy_logprobs(base, b.input_ids, b.attention_mask, b.policy_mask, pack=False)
    model = _lora(base)
    if checkpointing:
        enable_gradient_checkpointing(model)
    assert packing.packable(model, b.attention_mask)
    w = torch.randn(b.input_ids.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    lp_ref, ent_ref, g_ref = _grads(model, b, False, w)
    lp, ent, g = _grads(model, b, True, w)
    assert (lp - lp_ref).abs().max() <= 1e-5 and (ent - ent_ref).abs().max() <= 1e-5
    assert g.keys() == g_ref.keys() and g and all("lora_" in k for k in g)  # only the adapters train
    for k in g:
        assert (g[k] - g_ref[k]).abs().max() <= 1e-5 * g_ref[k].abs().max().clamp(min=1.0), k
    assert (lp - base_lp).abs().max() > 1e-3  # the adapters change the function ...
    with torch.no_grad(), reference(AdapterOffReference(model)) as ref:  # ... and the KL reference drops them
        off, _ = policy_logprobs(ref, b.input_ids, b.attention_mask, b.policy_mask, pack=True)
    assert (off - base_lp).abs().max() <= 1e-5


def test_lora_update_takes_the_packed_path(tiny_qwen3, make_batch):
    """accumulate_gradients on a LoRA policy with pack_rows on runs the packed trunk for policy and reference."""
    from agentrl.models.lora import AdapterOffReference
    from agentrl.rl import logprobs as logprobs_mod
    from agentrl.rl.config import RLConfig
    from agentrl.rl.update import accumulate_gradients

    model = _lora(tiny_qwen3(dtype=torch.float64), dropout=0.1)
    model.train()
    b = make_batch(n=4, length=12)
    calls = []
    orig = logprobs_mod.packed_hidden

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    cfg = RLConfig.from_flat(micro=2, micro_tokens=0, kl_coef=0.05, logprob_chunk_rows=7, pack_rows=True)
    logprobs_mod.packed_hidden = spy
    try:
        accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens, ref_model=AdapterOffReference(model))
    finally:
        logprobs_mod.packed_hidden = orig
    assert len(calls) == 4  # 2 micro-batches x (policy + adapter-off reference)
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_packed_equals_padded_on_llama(make_batch):
    """Llama-family trunks (no mask dict; e.g. the GGUF-converted SmolLM2) pack too, with the same values."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).to(torch.float64)
    b = make_batch(n=5, length=13)
    assert packing.packable(model, b.attention_mask)
    w = torch.randn(b.input_ids.shape, generator=torch.Generator().manual_seed(4)).to(torch.float64)
    lp_ref, ent_ref, g_ref = _grads(model, b, False, w)
    lp, ent, g = _grads(model, b, True, w)
    assert (lp - lp_ref).abs().max() <= 1e-5 and (ent - ent_ref).abs().max() <= 1e-5  # fp32 RoPE/norm inside
    for k in g_ref:
        assert (g[k] - g_ref[k]).abs().max() <= 1e-5 * g_ref[k].abs().max().clamp(min=1.0), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (varlen FlashAttention)")
@pytest.mark.parametrize("native", [True, False])
def test_varlen_attention_with_grouped_heads_native_or_repeated_on_cuda(tiny_qwen3, make_batch, native):
    """bf16 on CUDA, 4 query / 2 key-value heads: the packed trunk through varlen_attn with the key/value heads as
    they are (where _probe_native_gqa finds the kernel takes them) and repeated to every query head give the same
    log-probs and gradients, and both stay within bf16 rounding of the padded forward."""
    model = tiny_qwen3(dtype=torch.bfloat16).cuda()
    b = make_batch(n=6, length=14, dtype=torch.float32).to("cuda")
    fn, _ = packing._varlen_fn()
    if fn is None:
        pytest.skip("this torch has no varlen_attn")
    probed = packing._probe_native_gqa(torch.device("cuda"), torch.bfloat16)
    if native and not probed:
        pytest.skip("this torch's varlen_attn needs equal head counts (the repeat path is tested)")
    w = torch.randn(b.input_ids.shape, generator=torch.Generator().manual_seed(3)).cuda()
    saved = packing._VARLEN.get("gqa")
    try:
        packing._VARLEN["gqa"] = native
        lp, _, g = _grads(model, b, True, w)
        packing._VARLEN["gqa"] = not native
        lp_other, _, g_other = _grads(model, b, True, w)
    finally:
        packing._VARLEN["gqa"] = saved
    lp_pad, _, _ = _grads(model, b, False, w)
    assert not packing._VARLEN.get("broken")
    torch.testing.assert_close(lp, lp_other, atol=2e-2, rtol=0)
    for k in g:
        torch.testing.assert_close(g[k].float(), g_other[k].float(), atol=5e-2, rtol=5e-2, msg=k)
    assert (lp - lp_pad).abs().max() < 0.1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (varlen FlashAttention)")
def test_head_groups_on_cuda_give_the_one_calls_log_probs_and_gradients(tiny_qwen3, make_batch, monkeypatch):
    """bf16 on CUDA through the real varlen_attn: the packed trunk with each layer's attention in 2 head groups
    (4 query / 2 key-value heads) gives the one call's log-probs and gradients (each head's attention is computed
    alone by the kernel either way: equal up to the order of the key/value gradients' sums)."""
    if packing._varlen_fn()[0] is None:
        pytest.skip("this torch has no varlen_attn")
    model = tiny_qwen3(dtype=torch.bfloat16).cuda()
    b = make_batch(n=6, length=14, dtype=torch.float32).to("cuda")
    w = torch.randn(b.input_ids.shape, generator=torch.Generator().manual_seed(3)).cuda()
    monkeypatch.setattr(packing, "_in_compiled_region", lambda: True)  # the split runs in eager layers too
    monkeypatch.setattr(packing, "ATTENTION_HEAD_GROUPS", 1)
    lp, _, g = _grads(model, b, True, w)
    monkeypatch.setattr(packing, "ATTENTION_HEAD_GROUPS", 2)
    lp2, _, g2 = _grads(model, b, True, w)
    assert not packing._VARLEN.get("broken")
    torch.testing.assert_close(lp2, lp, atol=1e-3, rtol=0)
    for k in g:
        torch.testing.assert_close(g2[k].float(), g[k].float(), atol=1e-2, rtol=1e-2, msg=k)
