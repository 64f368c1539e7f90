"""One decoder layer's decode step, split into the regions torch.compile may fuse and the cache write it must not see.

Not the decode loop (agentrl.rollout.fast_sampler) and not the attention forms (agentrl.rollout.decode_attention).
A layer's step is three parts (the outer two defined in agentrl.rollout.fast_model, which prefill runs too):
`pre_attention` (input RMSNorm, q/k/v projections, Qwen3's q/k norms, RoPE), then the row's K/V written in place
into the static cache and the attention over it, then `post_attention`
(o_proj, residual add, post-attention RMSNorm, SiLU-gated MLP, residual add). With compile_decode the two outer
parts are each one torch.compile'd function shared by every layer (the layer is an argument; with inlined
nn.Modules its weights are graph inputs, so a region compiles once, not once per layer); the cache write and the
attention stay eager. Only "flex" attention is compiled too (FlexAttention is fused only under torch.compile), as its
own function that reads the cache and writes nothing.

Why the write stays eager: compiling the whole step with the write inside (`kc.scatter_` on a view of the cache)
makes AOTAutograd functionalize the mutated input. Inductor's code then, per layer and step, copied the whole
[b, nkv, span, D] slice of K and of V into a fresh buffer, scattered the new column into it, attended over the copy
and copied the slice back (CPU output code, 2026-12-02): three extra passes over the cache where attention makes
one. On the H200 (2026-12-02, Qwen3-0.6B config, ctx 1024, CUDA graphs) that whole-step compile reached 0.155 /
0.158 of the bandwidth bound at batch 64 / 256 against eager's 0.251 / 0.285, and "flex" inside it 0.159 / 0.115.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.rollout.decode_attention import COMPILED_ONLY, WRITES_NEW_KV, attend
from agentrl.rollout.fast_model import Projections, post_attention, pre_attention


@dataclass(frozen=True)
class LayerFns:
    """The three functions a layer's decode step calls (`decode_layer`), eager or compiled (`layer_fns`)."""

    pre: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # as pre_attention
    attend: Callable[..., torch.Tensor]  # as decode_attention.attend
    post: Callable[..., torch.Tensor]  # as post_attention


EAGER = LayerFns(pre_attention, attend, post_attention)


def layer_fns(compiled: bool, form: str, device: torch.device, backend: Any = "inductor") -> LayerFns:
    """EAGER, or (compiled) pre/post_attention through torch.compile, and `attend` too when `form` is one that
    fuses only compiled ("flex"). `backend` is torch.compile's (tests pass a recording one).

    The outer regions have dynamic shapes (the batch bucket; they never see the span), so one graph each serves
    every layer, bucket and span (one more for a batch of 1, which dynamo specializes, and one more for a prefill's
    [b, S] queries: FastSampler's prefill forwards run the same regions), provided every layer gets
    the same kind of h: dynamo guards a view's base, so a first layer fed a view (embedding output [:, None]) and
    later layers fed the region's fresh output compile twice. The flex attention region is dynamic too, except on
    the CPU, where FlexAttention's C++ template fails to build with a symbolic key length (torch 2.13:
    `cur_kvSplitSize2` undeclared): there each (batch, span) compiles, and past dynamo's recompile limit the
    attention runs eager (the unfused reference: correct, slow).
    """
    if not compiled:
        return EAGER
    if form in COMPILED_ONLY:
        att = torch.compile(attend, backend=backend, dynamic=False if device.type == "cpu" else None)
    else:
        att = attend
    return LayerFns(torch.compile(pre_attention, backend=backend, dynamic=True), att,
                    torch.compile(post_attention, backend=backend, dynamic=True))


def decode_layer(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, at: torch.Tensor,
                 kc: torch.Tensor, vc: torch.Tensor, mask: torch.Tensor, form: str, scaling: float,
                 fns: LayerFns = EAGER, proj: Projections | None = None) -> torch.Tensor:
    """One decoder layer's decode step: h [b, 1, H] (each row's last token) -> [b, 1, H].

    The row's K/V are written in place into kc/vc [b, nkv, span, D] (views of the static cache) at column `at`
    ([b, nkv, 1, D] long: the row's length, its position, which must be the last column `mask` admits; "triton"
    writes them inside its kernel there, one launch instead of three), then attention over the cache under `mask`
    (agentrl.rollout.decode_attention, form `form`, softmax scale `scaling`); cos/sin [b, 1, 1, D] are the rows'
    RoPE rows. As HF's Qwen3/Qwen2/Llama decoder layer: pre-norm attention and MLP, each added to the residual
    stream. `fns` are the regions' functions (`layer_fns`); the write is never inside one (module docstring).
    `proj`: the layer's fused projections (agentrl.rollout.fast_model.FusedProjections) or None (its own modules).
    """
    q, k, v = fns.pre(layer, h, cos, sin, proj)
    if form in WRITES_NEW_KV:  # the attention kernel writes them at column `at` (the mask's last) itself
        return fns.post(layer, h, fns.attend(q, kc, vc, mask, form, scaling, (k, v)), proj)
    kc.scatter_(2, at, k)
    vc.scatter_(2, at, v)
    return fns.post(layer, h, fns.attend(q, kc, vc, mask, form, scaling), proj)
