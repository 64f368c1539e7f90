"""The model side of the fast sampler: a Llama-family decoder's modules, the slot KV cache, and prefill into slots.

Not the decode loop or its scheduling (agentrl.rollout.fast_sampler) and not decode attention
(agentrl.rollout.decode_attention). The cache is a set of slots (rows), each holding one sequence's KV
left-aligned: token i of the row's sequence sits in column i, so a column is also the token's position id.
A row's `lens` is how many columns hold its KV; a decode step writes its fed token at column `lens` and
advances it. Slots are independent: a finished row's KV stays where it is (kept for the episode's next turn,
which then prefills only its appended ids in the same slot), and a free slot can be prefilled for a new
request while the other rows go on decoding (continuous batching).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

_SUPPORTED = ("qwen3", "qwen2", "llama")


@dataclass
class Arch:
    """The pieces of a Llama-family causal LM the decode loop calls (the model's own modules)."""

    embed: Any
    layers: list
    norm: Any
    head: Any
    inv_freq: torch.Tensor  # [D/2] float32
    rope_scale: float
    n_heads: int
    n_kv: int
    head_dim: int
    scaling: float
    vocab: int


def arch_of(model: Any) -> Arch:
    """Check the model is a supported decoder and collect its modules.

    Raises:
        ValueError: unsupported model type, sliding-window layers, non-default RoPE, or logit post-processing.
    """
    cfg = model.config
    mtype = getattr(cfg, "model_type", "?")
    if mtype not in _SUPPORTED:
        raise ValueError(f"FastSampler: model_type {mtype!r} is not supported (expected one of {_SUPPORTED}); "
                         "use agentrl.rollout.hf_sampler.sample_turns")
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        raise ValueError(f"FastSampler: {mtype} with sliding-window layers is not supported")
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"FastSampler: only default RoPE is supported, got {rope}")
    if getattr(cfg, "final_logit_softcapping", None) or getattr(model, "logit_scale", None) is not None:
        raise ValueError("FastSampler: logit soft-capping / scaling is not supported")
    trunk = model.get_decoder()
    rot = trunk.rotary_emb
    attn = trunk.layers[0].self_attn
    return Arch(
        embed=trunk.embed_tokens, layers=list(trunk.layers), norm=trunk.norm, head=model.get_output_embeddings(),
        inv_freq=rot.inv_freq.float(), rope_scale=float(getattr(rot, "attention_scaling", 1.0)),
        n_heads=cfg.num_attention_heads, n_kv=cfg.num_key_value_heads, head_dim=attn.head_dim,
        scaling=float(attn.scaling), vocab=int(model.get_output_embeddings().weight.shape[0]),
    )


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Projections(NamedTuple):
    """One decoder layer's input projections each as one matrix (agentrl.rollout.fast_model.FusedProjections):
    qkv [(nh + 2 nkv) * D, H] (q_proj's rows, then k_proj's, then v_proj's; qkv_bias [(nh + 2 nkv) * D] or None)
    and gate_up [2 I, H] (gate_proj's rows, then up_proj's; gate_up_bias [2 I] or None), the model's dtype."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None


def qkv(attn: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int,
        proj: Projections | None = None):
    """x [b, L, H] -> q [b, nh, L, D], k/v [b, nkv, L, D], RoPE applied (HF apply_rotary_pos_emb);
    cos/sin broadcast against [b, heads, L, D]. With `proj` the three projections are one GEMM over its fused
    matrix (the same products, one launch instead of three)."""
    b, length = x.shape[:2]
    if proj is None:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    else:
        nk = attn.k_proj.out_features
        y = F.linear(x, proj.qkv, proj.qkv_bias)
        q, k, v = y.split([y.shape[-1] - 2 * nk, nk, nk], dim=-1)
    q, k = q.view(b, length, -1, head_dim), k.view(b, length, -1, head_dim)
    if getattr(attn, "q_norm", None) is not None:  # Qwen3: RMSNorm over the head dim before RoPE
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = v.view(b, length, -1, head_dim).transpose(1, 2)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


def mlp(layer: Any, x: torch.Tensor, proj: Projections | None = None) -> torch.Tensor:
    """The layer's SiLU-gated MLP on x [b, L, H] -> [b, L, H]: down(act(gate(x)) * up(x)) as HF's Qwen3 / Qwen2 /
    Llama MLP; with `proj` gate and up are one GEMM over its fused matrix."""
    m = layer.mlp
    if proj is None:
        return m(x)
    gate, up = F.linear(x, proj.gate_up, proj.gate_up_bias).chunk(2, dim=-1)
    return m.down_proj(m.act_fn(gate) * up)


def pre_attention(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  proj: Projections | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h [b, L, H] (a decode step: L = 1, each row's last token; a prefill: its S query tokens), cos/sin
    [b, 1, L, D] (the tokens' RoPE rows), all of the model's dtype -> q [b, nh, L, D], k and v [b, nkv, L, D]:
    input RMSNorm, projections (one GEMM with the layer's fused `proj`), q/k norms (Qwen3), RoPE."""
    return qkv(layer.self_attn, layer.input_layernorm(h), cos, sin, layer.self_attn.head_dim, proj)


def post_attention(layer: Any, h: torch.Tensor, o: torch.Tensor, proj: Projections | None = None) -> torch.Tensor:
    """h [b, L, H] (the layer's input, the residual stream), o [b, L, nh * D] (attention output, HF head order)
    -> [b, L, H]: h + o_proj(o), then its post-attention-normed MLP added (as HF's decoder layer; gate and up one
    GEMM with the layer's fused `proj`)."""
    h = h + layer.self_attn.o_proj(o)
    return h + mlp(layer, layer.post_attention_layernorm(h), proj)


def _fusable(arch: Arch) -> str:
    """Why the layers' projections cannot be fused ("" when they can): each of q/k/v_proj and gate/up_proj must be
    a plain torch.nn.Linear (not wrapped by peft or a quantizer), with biases on all of a group or none, and the
    MLP must be gate/up/down with an `act_fn` (HF's Llama-family MLP)."""
    lin = torch.nn.Linear
    for i, layer in enumerate(arch.layers):
        m = layer.mlp
        for group in _groups(layer):
            if any(type(x) is not lin for x in group):
                return f"layer {i}: {[type(x).__name__ for x in group]} are not all torch.nn.Linear"
            if len({x.bias is None for x in group}) > 1:
                return f"layer {i}: biases on some projections of a group only"
        if type(getattr(m, "down_proj", None)) is not lin or not callable(getattr(m, "act_fn", None)):
            return f"layer {i}: the MLP is not gate/up/down_proj with an act_fn"
    return ""


def _groups(layer: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The layer's modules fused together, in their matrices' row order: (q_proj, k_proj, v_proj) and (gate_proj,
    up_proj); None for one it lacks."""
    a, m = layer.self_attn, layer.mlp
    return (tuple(getattr(a, n, None) for n in ("q_proj", "k_proj", "v_proj")),
            tuple(getattr(m, n, None) for n in ("gate_proj", "up_proj")))


def _stacked(mods: tuple[Any, ...], name: str) -> torch.Tensor | None:
    """An uninitialized tensor the size of `mods`' `name` tensors ("weight" or "bias") stacked by rows; None
    when they have none."""
    ts = [getattr(x, name) for x in mods]
    if ts[0] is None:
        return None
    return torch.empty((sum(t.shape[0] for t in ts), *ts[0].shape[1:]), dtype=ts[0].dtype, device=ts[0].device)


class FusedProjections:
    """Each layer's q/k/v projections and gate/up projections as one matrix each (`Projections`), copied from
    the model's own weights: a decode step at batch 64 on the H200 launched 225 GEMMs of about 5 us each, two
    thirds of them these five (results/bench/issue26_h200_2026-12-04, profile_profile.txt); fused, a layer runs
    4 GEMMs instead of 7. The copies cost memory (Qwen3-0.6B: 0.59 GB in bf16, Qwen2.5-Coder-1.5B: 1.7 GB) and
    must follow the weights: `refresh(version)` copies them again in place (same addresses, so captured CUDA
    graphs stay valid) whenever the weights' version tag has changed (agentrl.rollout.prefix_cache.weights_version).

    Raises: ValueError when the model's layers cannot be fused (`_fusable` says why).
    """

    def __init__(self, arch: Arch):
        why = _fusable(arch)
        if why:
            raise ValueError(f"fuse_projections: {why}")
        self.arch = arch
        self.version: Any = None  # nothing copied yet: the first refresh fills the buffers
        self.layers = [Projections(_stacked(qkv_mods, "weight"), _stacked(qkv_mods, "bias"),
                                   _stacked(gu_mods, "weight"), _stacked(gu_mods, "bias"))
                       for qkv_mods, gu_mods in map(_groups, arch.layers)]

    def refresh(self, version: Any) -> bool:
        """Copy the weights (again) unless `version` is the one last copied. Returns True when it copied."""
        if version == self.version:
            return False
        with torch.no_grad():
            for layer, p in zip(self.arch.layers, self.layers, strict=True):
                (qkv_mods, gu_mods) = _groups(layer)
                for dst, mods, name in ((p.qkv, qkv_mods, "weight"), (p.qkv_bias, qkv_mods, "bias"),
                                        (p.gate_up, gu_mods, "weight"), (p.gate_up_bias, gu_mods, "bias")):
                    if dst is not None:
                        torch.cat([getattr(x, name) for x in mods], out=dst)
        self.version = version
        return True

    @property
    def nbytes(self) -> int:
        """Bytes of the fused copies."""
        return sum(t.numel() * t.element_size() for p in self.layers for t in p if t is not None)


def rope_tables(arch: Arch, positions: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [positions, D] in `dtype`, as HF's rotary embedding computes them."""
    pos = torch.arange(positions, device=device, dtype=torch.float32)
    freqs = pos[:, None] * arch.inv_freq.to(device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * arch.rope_scale).to(dtype), (emb.sin() * arch.rope_scale).to(dtype)


def _kv_slot(shape: tuple[int, ...], dtype, device, releasable: str):
    """One layer's zeroed K or V slots [R, nkv, L, D]: (tensor, its buffer or None). releasable ("vmm" or
    "allocator"; "" for a plain tensor): carved from an agentrl.rollout.kv_memory buffer (`kv_buffer`)."""
    if not releasable:
        return torch.zeros(shape, dtype=dtype, device=device), None
    from agentrl.rollout.kv_memory import kv_buffer

    n = 1
    for d in shape:
        n *= d
    buf = kv_buffer(n * torch.empty(0, dtype=dtype).element_size(), torch.device(device), mode=releasable)
    return _view(buf, shape, dtype), buf


def _view(buf: Any, shape: tuple[int, ...], dtype) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    return buf.tensor.view(dtype)[:n].view(shape)


def _kv_slots(n_layers: int, shape: tuple[int, ...], dtype, device, releasable: str):
    """(k, v, buffers): n_layers K and n_layers V slot tensors (see _kv_slot); buffers: K's then V's, [] when
    not releasable."""
    made = [_kv_slot(shape, dtype, device, releasable) for _ in range(2 * n_layers)]
    ts = [t for t, _ in made]
    return ts[:n_layers], ts[n_layers:], [b for _, b in made if b is not None]


class SlotState:
    """Static buffers of the decode loop: per-layer KV slots [R, nkv, L, D] and per-row state.

    Per row r (slot): lens [R] long (columns holding the row's KV; the next fed token goes to column lens[r],
    which is also its position id), tokens [R] long (the last sampled token, fed next), budgets [R] long (tokens
    to sample this turn), nsamp [R] long (tokens sampled so far), done [R] bool, out_ids [R, S + 1] long and
    out_logps [R, S + 1] float32 (the turn's samples; index nsamp[r] is where the next one goes; a done row
    writes its padding to the spare last index). cols [L] long is arange(L) (key masks). Views `[:b]` of these
    buffers are what a bucket-b CUDA graph reads and writes, so every bucket shares the one allocation.

    releasable ("vmm", "allocator", or "" for plain tensors): each layer's K and V slots are carved from an
    agentrl.rollout.kv_memory buffer, so `release_kv()` can give their memory back between rollouts and
    `restore_kv()` take it again: at the same addresses with "vmm" on CUDA with virtual memory management
    (`kv_stable`), else from PyTorch's allocator, where `restore_kv()` says whether the addresses came back.
    """

    def __init__(self, arch: Arch, rows: int, length: int, steps: int, dtype, device, *, releasable: str = ""):
        self.rows, self.length, self.steps = rows, length, steps
        self.kv_shape, self.kv_dtype, self.releasable = (rows, arch.n_kv, length, arch.head_dim), dtype, releasable
        self.n_layers = len(arch.layers)
        self.k, self.v, self.kv_buffers = _kv_slots(len(arch.layers), self.kv_shape, dtype, device, releasable)
        self.kv_ptrs: list[int] = []  # the slots' addresses when released from a plain buffer
        z = dict(device=device, dtype=torch.long)
        self.cols = torch.arange(length, **z)
        self.lens = torch.zeros(rows, **z)
        self.tokens = torch.zeros(rows, **z)
        self.budgets = torch.ones(rows, **z)
        self.nsamp = torch.zeros(rows, **z)
        self.done = torch.ones(rows, dtype=torch.bool, device=device)
        self.out_ids = torch.zeros(rows, steps + 1, **z)
        self.out_logps = torch.zeros(rows, steps + 1, dtype=torch.float32, device=device)

    @property
    def kv_bytes(self) -> int:
        """Bytes of the K and V slots of every layer, held or released."""
        n = 2 * self.n_layers * torch.empty(0, dtype=self.kv_dtype).element_size()
        for d in self.kv_shape:
            n *= d
        return n

    @property
    def kv_held(self) -> bool:
        """False between `release_kv()` and `restore_kv()`."""
        return all(b.mapped for b in self.kv_buffers)

    @property
    def kv_stable(self) -> bool:
        """True when `release_kv()` keeps the slots' addresses (CUDA graphs captured over them stay valid): the
        buffers are agentrl.rollout.kv_memory.VmmBuffer (releasable, on a device with virtual memory management)."""
        return bool(self.kv_buffers) and all(b.stable_address for b in self.kv_buffers)

    def kv_mapped_bytes(self) -> int:
        """Bytes of KV memory held outside PyTorch's caching allocator (VmmBuffers while mapped), which
        `torch.cuda.memory_allocated()` does not count."""
        return sum(b.mapped_bytes for b in self.kv_buffers)

    def release_kv(self) -> None:
        """Give the KV slots' memory back (contents lost; the per-row buffers stay). Needs `releasable`. With
        stable buffers the views keep their addresses (capture and replay over them only after `restore_kv()`);
        otherwise the views are dropped and `restore_kv()` makes new ones at other addresses.

        Raises: RuntimeError without `releasable`; agentrl.rollout.kv_memory.CudaDriverError from the driver."""
        if not self.releasable:
            raise RuntimeError("SlotState.release_kv: the state was not made releasable")
        if not self.kv_stable:
            self.kv_ptrs = [t.data_ptr() for t in (*self.k, *self.v)]
            self.k, self.v = [], []
        for b in self.kv_buffers:
            b.release()

    def restore_kv(self) -> bool:
        """Zeroed KV slots again after `release_kv()` (no-op while held). Returns True when every slot tensor is
        at the address it had before the release (always with stable buffers; with plain ones when PyTorch's
        allocator handed the same blocks back), so graphs captured over them are still valid. Raises
        CudaDriverError (e.g. out of memory) from the driver."""
        if self.kv_held:
            return True
        for b in self.kv_buffers:
            b.restore()
        if self.kv_stable:
            return True
        n = len(self.kv_buffers) // 2
        views = [_view(b, self.kv_shape, self.kv_dtype) for b in self.kv_buffers]
        self.k, self.v = views[:n], views[n:]
        return [t.data_ptr() for t in views] == self.kv_ptrs

    def small(self) -> list[torch.Tensor]:
        """Every per-row buffer (snapshotted around graph warm-up, permuted by compaction)."""
        return [self.lens, self.tokens, self.budgets, self.nsamp, self.done, self.out_ids, self.out_logps]

    def grown(self, arch: Arch, rows: int, length: int, steps: int) -> SlotState:
        """A larger state (at least this one's sizes) holding this one's KV and per-row buffers in the same
        slots and columns; this one's KV is released layer by layer as it is copied (peak: the new cache plus
        one old layer)."""
        rows, length, steps = max(rows, self.rows), max(length, self.length), max(steps, self.steps)
        new = SlotState.__new__(SlotState)
        new.rows, new.length, new.steps = rows, length, steps
        new.kv_shape, new.kv_dtype, new.releasable = (rows, arch.n_kv, length, arch.head_dim), self.kv_dtype, \
            self.releasable
        new.kv_ptrs, new.n_layers = [], len(arch.layers)
        dev = self.lens.device
        held, n = self.kv_held and bool(self.k), len(arch.layers)
        if not held:  # released: nothing to keep; new zeroed slots
            self.k, self.v, self.kv_buffers = [], [], []
            new.k, new.v, new.kv_buffers = _kv_slots(n, new.kv_shape, self.kv_dtype, dev, self.releasable)
        else:
            out: list[list[torch.Tensor]] = [[], []]
            bufs: list[Any] = []
            for j, old in enumerate((self.k, self.v)):
                for i in range(len(old)):
                    t, buf = _kv_slot(new.kv_shape, self.kv_dtype, dev, self.releasable)
                    t[: self.rows, :, : self.length] = old[i]
                    old[i] = None  # release as we go (a buffer goes with its last view)
                    if self.kv_buffers:
                        self.kv_buffers[j * n + i] = None
                    out[j].append(t)
                    bufs += [buf] if buf is not None else []
            self.kv_buffers = []
            new.k, new.v, new.kv_buffers = out[0], out[1], bufs
        new.cols = torch.arange(length, device=dev, dtype=torch.long)
        for name in ("lens", "tokens", "nsamp"):
            t = torch.zeros(rows, device=dev, dtype=torch.long)
            t[: self.rows] = getattr(self, name)
            setattr(new, name, t)
        new.budgets = torch.ones(rows, device=dev, dtype=torch.long)
        new.done = torch.ones(rows, device=dev, dtype=torch.bool)
        new.out_ids = torch.zeros(rows, steps + 1, device=dev, dtype=torch.long)
        new.out_logps = torch.zeros(rows, steps + 1, device=dev, dtype=torch.float32)
        return new


def prefill_slots(arch: Arch, st: SlotState, rope: tuple[torch.Tensor, torch.Tensor], slots: list[int],
                  contexts: list[list[int]], starts: list[int], pad_id: int, prefill_tokens: int, fns: Any = None,
                  proj: list[Projections] | None = None) -> torch.Tensor:
    """Prefill `contexts` into cache rows `slots`, left-aligned (token i in column i); row i's columns
    [0, starts[i]) already hold the KV of contexts[i][:starts[i]] (kept in place or copied there), so only its
    tokens from starts[i] on are run. Returns [n, V] logits of each context's last token (model dtype).

    The queries of row i are its remaining tokens (columns starts[i] .. len - 1), padded to the longest
    remainder S; a pad query writes its KV to a scratch column past the widest context and its output is
    dropped. Each query attends to the row's columns up to its own. Rows run `per` at a time so that at most
    about `prefill_tokens` queries (and prefill_tokens * 2048 query-key pairs) are alive.

    A forward whose rows all start at column 0 (fresh contexts, nothing kept) attends over the keys it has just
    computed with one causal SDPA call (GQA through `enable_gqa`, no mask: the flash kernel on CUDA): a real query
    j sees keys 0..j, all of them its own row's tokens, so the result is the masked call's over the cache up to
    rounding. Rows that extend kept KV read the cache with an explicit mask.

    Each layer's parts before and after its attention are `fns`'s (agentrl.rollout.decode_layer.LayerFns, default
    `pre_attention` / `post_attention` eager; the sampler's compiled regions with compile_decode, traced once more for a prefill's [b, S] shapes),
    fed the layer's fused projections `proj[layer]` when given (FusedProjections).
    """
    dev = st.lens.device
    n = len(contexts)
    lens = [len(c) for c in contexts]
    rest = [m - p for m, p in zip(lens, starts, strict=True)]
    width, window = max(lens), max(rest)
    per = max(1, min(prefill_tokens // window, prefill_tokens * 2048 // (window * (width + 1))))
    out = []
    for r0 in range(0, n, per):
        r1 = min(n, r0 + per)
        ids = torch.full((r1 - r0, window), pad_id, dtype=torch.long)
        for i in range(r0, r1):
            ids[i - r0, : rest[i]] = torch.tensor(contexts[i][starts[i]:], dtype=torch.long)
        out.append(_prefill_rows(arch, st, rope, slots[r0:r1], ids.to(dev), starts[r0:r1], rest[r0:r1], width,
                                 fns, proj))
    return torch.cat(out)


def _prefill_rows(arch: Arch, st: SlotState, rope, slots: list[int], ids: torch.Tensor, starts: list[int],
                  rest: list[int], width: int, fns: Any = None, proj: list[Projections] | None = None) -> torch.Tensor:
    """One forward of `prefill_slots`: ids [b, S] (each row's remaining tokens, padded) -> [b, V] logits."""
    dev = ids.device
    b, window = ids.shape
    contiguous = slots == list(range(slots[0], slots[0] + b))
    idx = torch.tensor(slots, device=dev, dtype=torch.long)
    start = torch.tensor(starts, device=dev, dtype=torch.long)
    n_q = torch.tensor(rest, device=dev, dtype=torch.long)
    j = torch.arange(window, device=dev)
    qvalid = j[None, :] < n_q[:, None]  # [b, S]
    qcol = start[:, None] + j[None, :]  # column (= position) of each query
    wcol = torch.where(qvalid, qcol, torch.full_like(qcol, width))  # pad queries write the scratch column
    qpos = qcol.clamp(max=width - 1)
    cos, sin = rope[0][qpos][:, None], rope[1][qpos][:, None]  # [b, 1, S, D]
    widx = wcol[:, None, :, None].expand(b, arch.n_kv, window, arch.head_dim)
    g = arch.n_heads // arch.n_kv
    fresh = not any(starts)  # every row's keys are this forward's: causal attention over k, v themselves
    att = None  # [b, S, W + 1]: each query's keys in the cache (rows extending kept KV)
    if not fresh:
        kcol = torch.arange(width + 1, device=dev)
        att = (kcol[None, None, :] <= qpos[:, :, None]) & (kcol[None, None, :] < width)
    pre, post = (fns.pre, fns.post) if fns is not None else (pre_attention, post_attention)
    h = arch.embed(ids)
    for li, layer in enumerate(arch.layers):
        w = proj[li] if proj is not None else None
        q, k, v = pre(layer, h, cos, sin, w)
        if contiguous:  # views: written in place
            kc = st.k[li][slots[0]: slots[0] + b, :, : width + 1]
            vc = st.v[li][slots[0]: slots[0] + b, :, : width + 1]
        else:  # gathered rows, written back below
            kc = st.k[li][:, :, : width + 1].index_select(0, idx)
            vc = st.v[li][:, :, : width + 1].index_select(0, idx)
        kc.scatter_(2, widx, k)
        vc.scatter_(2, widx, v)
        if fresh:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=arch.scaling, enable_gqa=g > 1)
        else:
            o = F.scaled_dot_product_attention(q, kc.repeat_interleave(g, 1), vc.repeat_interleave(g, 1),
                                               attn_mask=att[:, None], scale=arch.scaling)
        if not contiguous:
            st.k[li][:, :, : width + 1].index_copy_(0, idx, kc)
            st.v[li][:, :, : width + 1].index_copy_(0, idx, vc)
        h = post(layer, h, o.transpose(1, 2).reshape(b, window, -1), w)
    last = h[torch.arange(b, device=dev), n_q - 1]  # [b, H]: each row's last real token
    return arch.head(arch.norm(last))


def copy_prefixes(st: SlotState, dst: list[int], src: list[int], lengths: list[int]) -> None:
    """Copy columns [0, lengths[i]) of slot src[i] into slot dst[i] (all sources read before any write, so a
    slot may be both). The KV of a shared prompt (a GRPO group's leader row) or of a kept entry whose slot
    another context extends."""
    if not dst:
        return
    dev = st.lens.device
    width = max(lengths)
    d = torch.tensor(dst, device=dev, dtype=torch.long)
    s = torch.tensor(src, device=dev, dtype=torch.long)
    keep = (torch.arange(width, device=dev)[None, :] < torch.tensor(lengths, device=dev)[:, None])[:, None, :, None]
    for cache in (*st.k, *st.v):
        rows = cache[:, :, :width]
        rows.index_copy_(0, d, torch.where(keep, rows.index_select(0, s), rows.index_select(0, d)))
