"""Fast token-level sampler: own decode loop over a static KV cache, CUDA-graph decode steps, in-loop log-probs.

Not the episode driver and not a general HF model runner: it drives the modules of Llama-family decoders
(Qwen3, Qwen2, Llama; full attention, default RoPE, no logit soft-capping) directly and raises for others.
Same contract as agentrl.rollout.hf_sampler.sample_turns (plugs into run_episodes(sampler=...)): one `Sample`
per context with ids, the sampling distribution's log-probs (temperature / top-k / top-p applied by the same
HF warpers the reference sampler uses) and hit_token_limit. Differences that do not change the distribution:
tokens are drawn by the exponential race (argmax p / E, E ~ Exp(1), as vLLM does) instead of
torch.multinomial, so a seed gives other tokens than the reference sampler; only one [B, V] step of logits
is ever alive. Attention spans the written cache columns rounded up to `length_multiple` (one graph per
batch bucket and span). Finished rows are masked, and the live rows are compacted into a smaller graph
bucket every `check_every` steps once they fit one.

Decode attention (`decode_attention`: "matmul", the default, "sdpa", "sdpa_gqa"): see
agentrl.rollout.decode_attention; prefill is the same for all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.rollout.decode_attention import DECODE_ATTENTION, attend, key_mask
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sampling_warpers
from agentrl.rollout.prefix_cache import Entry, PrefixStore, weights_version

_SUPPORTED = ("qwen3", "qwen2", "llama")
DEFAULT_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024)  # compaction targets (FastSampler bucket_sizes)


@dataclass
class _Arch:
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


def _arch_of(model: Any) -> _Arch:
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
    head_dim = attn.head_dim
    return _Arch(
        embed=trunk.embed_tokens, layers=list(trunk.layers), norm=trunk.norm, head=model.get_output_embeddings(),
        inv_freq=rot.inv_freq.float(), rope_scale=float(getattr(rot, "attention_scaling", 1.0)),
        n_heads=cfg.num_attention_heads, n_kv=cfg.num_key_value_heads, head_dim=head_dim,
        scaling=float(attn.scaling), vocab=int(model.get_output_embeddings().weight.shape[0]),
    )


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _qkv(attn: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int):
    """x [b, L, H] -> q [b, nh, L, D], k/v [b, nkv, L, D], RoPE applied (HF apply_rotary_pos_emb)."""
    b, length = x.shape[:2]
    q = attn.q_proj(x).view(b, length, -1, head_dim)
    k = attn.k_proj(x).view(b, length, -1, head_dim)
    if getattr(attn, "q_norm", None) is not None:  # Qwen3: RMSNorm over the head dim before RoPE
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = attn.v_proj(x).view(b, length, -1, head_dim).transpose(1, 2)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


class _State:
    """Static buffers of one decode run: per-layer KV cache [B_cap, nkv, L_cap, D] and per-row state.

    Views `[:b]` of these buffers are what a bucket-b CUDA graph reads and writes, so every bucket shares
    the one allocation.
    """

    def __init__(self, arch: _Arch, rows: int, length: int, steps: int, dtype, device):
        shape = (rows, arch.n_kv, length, arch.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in arch.layers]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in arch.layers]
        self.rows, self.length, self.steps = rows, length, steps
        z = dict(device=device)
        self.key_valid = torch.zeros(rows, length, dtype=torch.bool, **z)
        self.tokens = torch.zeros(rows, dtype=torch.long, **z)  # last sampled token per row
        self.positions = torch.zeros(rows, dtype=torch.long, **z)  # its position id
        self.budgets = torch.ones(rows, dtype=torch.long, **z)
        self.done = torch.ones(rows, dtype=torch.bool, **z)
        self.col = torch.zeros(1, dtype=torch.long, **z)  # cache column the next fed token is written to
        self.step = torch.zeros(1, dtype=torch.long, **z)  # index of the token the next step samples
        self.out_ids = torch.zeros(rows, steps, dtype=torch.long, **z)
        self.out_logps = torch.zeros(rows, steps, dtype=torch.float32, **z)

    def small(self) -> list[torch.Tensor]:
        """Every buffer except the KV cache (snapshotted around graph warm-up, permuted by compaction)."""
        return [self.key_valid, self.tokens, self.positions, self.budgets, self.done, self.col, self.step,
                self.out_ids, self.out_logps]


class FastSampler:
    """Sampler for `run_episodes(sampler=...)`: (contexts, per-context max_new_tokens) -> list[Sample].

    Args:
        model: HF Qwen3 / Qwen2 / Llama causal LM on its device (any float dtype), in eval mode.
        stop_ids: ids that end a turn (end-of-turn and end-of-sequence ids, see `stop_token_ids`); a row
            stops after the first one sampled (kept in `ids`; the turn is finished, not truncated). May be empty.
        pad_id: id fed for left padding (never attended to).
        cfg: temperature / top_k / top_p / max_new_tokens as in SamplingConfig (default SamplingConfig());
            `gen_batch` is not used here (see max_batch).
        max_batch: rows decoded together (more contexts are run in successive chunks).
        use_cuda_graphs: capture the decode step per batch bucket (default: on when the model is on CUDA).
        prefill_tokens: padded tokens per prefill forward (bounds prefill activation memory).
        check_every: decode steps between host checks for all-done and for compaction.
        length_multiple: attention spans the written cache columns rounded up to this (one graph per
            (bucket, span), reused across steps and calls).
        min_graph_steps: a new graph is captured only when at least this many steps remain (short turns
            run eagerly rather than pay a capture).
        keep_kv: keep each finished row's KV (agentrl.rollout.prefix_cache) so that a later context extending
            it token for token (the episode's next turn: sampled ids + tool-response ids) prefills only the
            appended ids. Dropped when the weights change.
        share_prompts: identical contexts in one call (the G samples of a GRPO group) are prefilled once and
            their KV copied to the other rows.
        kv_store_tokens: cap on tokens kept by keep_kv (default: the static cache's rows x columns).
        bucket_sizes: the batch sizes a chunk's live rows may be compacted into (each its own CUDA graph per
            span; default DEFAULT_BUCKETS, powers of two from 8). Finer steps (e.g. 8, 16, 24, 32, 48, 64, 96,
            128) keep fewer finished rows in the decoded batch at the cost of more graph captures.
        decode_attention: "matmul" (default), "sdpa" or "sdpa_gqa": how a decode step attends over the static
            cache (agentrl.rollout.decode_attention). All give the same tokens and log-probs up to rounding.

    After each call, `stats` holds context_tokens, prefill_tokens (tokens run through the model),
    reused_tokens (taken from kept KV), shared_rows (rows that copied a group leader's KV).

    Raises:
        ValueError: unsupported architecture (see module doc), or bad arguments.
    """

    def __init__(self, model: Any, *, stop_ids: tuple[int, ...], pad_id: int, cfg: SamplingConfig | None = None,
                 max_batch: int = 256, use_cuda_graphs: bool | None = None, prefill_tokens: int = 16384,
                 check_every: int = 16, length_multiple: int = 128, min_graph_steps: int = 24,
                 keep_kv: bool = True, share_prompts: bool = True, kv_store_tokens: int | None = None,
                 bucket_sizes: tuple[int, ...] | None = None, decode_attention: str = "matmul"):
        if decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"FastSampler: decode_attention must be one of {DECODE_ATTENTION}, "
                             f"got {decode_attention!r}")
        self.decode_attention = decode_attention
        if max_batch < 1 or prefill_tokens < 1 or check_every < 1 or length_multiple < 1:
            raise ValueError("FastSampler: max_batch, prefill_tokens, check_every, length_multiple must be >= 1")
        sizes = DEFAULT_BUCKETS if bucket_sizes is None else tuple(bucket_sizes)
        if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes):
            raise ValueError(f"FastSampler: bucket_sizes must be integers >= 1, got {bucket_sizes!r}")
        self.bucket_sizes = tuple(sorted(set(sizes)))
        cfg = cfg or SamplingConfig()
        self.model, self.cfg, self.pad_id = model, cfg, int(pad_id)
        self.arch = _arch_of(model)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.stop = torch.tensor(sorted(set(int(s) for s in stop_ids)), dtype=torch.long, device=self.device)
        self.max_batch, self.prefill_tokens, self.check_every = max_batch, prefill_tokens, check_every
        self.length_multiple, self.min_graph_steps = length_multiple, min_graph_steps
        self.graphs_on = (self.device.type == "cuda") if use_cuda_graphs is None else bool(use_cuda_graphs)
        if self.graphs_on and self.device.type != "cuda":
            raise ValueError("FastSampler: CUDA graphs need a CUDA model")
        self.warpers = sampling_warpers(cfg)
        self.state: _State | None = None
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.rope_cos = self.rope_sin = None
        self.keep_kv, self.share_prompts, self.kv_store_tokens = keep_kv, share_prompts, kv_store_tokens
        self.store = PrefixStore(0)
        self.stats: dict[str, int] = {}
        self._chunk: tuple[list[list[int]], list[int], int] = ([], [], 0)

    # ---------------------------------------------------------------- public
    @torch.no_grad()
    def __call__(self, contexts: list[list[int]], max_new_tokens: list[int] | None = None) -> list[Sample]:
        """Sample one turn per context. contexts: B non-empty token-id lists; max_new_tokens: B budgets >= 1
        (default cfg.max_new_tokens each). Returns B Samples in order. Raises ValueError on bad input."""
        budgets = list(max_new_tokens) if max_new_tokens is not None else [self.cfg.max_new_tokens] * len(contexts)
        if len(budgets) != len(contexts) or min(budgets, default=1) < 1 or any(not c for c in contexts):
            raise ValueError("FastSampler: need one budget >= 1 per non-empty context")
        self.stats = dict.fromkeys(("context_tokens", "prefill_tokens", "reused_tokens", "shared_rows"), 0)
        self.store.begin(weights_version(self.model) if self.keep_kv else None)
        out: list[Sample] = []
        for k in range(0, len(contexts), self.max_batch):
            out += self._run_chunk(contexts[k: k + self.max_batch], budgets[k: k + self.max_batch])
        self.store.finish()
        return out

    def clear_kv(self) -> None:
        """Drop every kept KV entry (they are also dropped whenever the weights change)."""
        self.store.clear()

    def end_rollout(self) -> None:
        """Called by run_episodes when its episodes have ended: the kept KV is freed (it would be stale after
        the update anyway; its blocks go back to torch's caching allocator, for the update to reuse); the
        static cache and CUDA graphs stay for the next rollout."""
        self.clear_kv()

    # ---------------------------------------------------------------- sampling
    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[b, V] logits -> ([b] token, [b] float32 log-prob under the warped distribution)."""
        scores = self.warpers(None, logits.float())
        logp_all = torch.log_softmax(scores, dim=-1)
        race = torch.empty_like(logp_all).exponential_()  # argmax p/E, E ~ Exp(1): an exact categorical draw
        tok = (logp_all.exp() / race).argmax(dim=-1)
        return tok, logp_all.gather(1, tok[:, None]).squeeze(1)

    # ---------------------------------------------------------------- setup
    def _ensure(self, rows: int, length: int, steps: int) -> _State:
        st = self.state
        if st is None or st.rows < rows or st.length < length or st.steps < steps:
            # A graph memory pool lives only as long as some graph captured into it: once the graphs are
            # dropped, capturing into the old handle trips CUDACachingAllocator's use_count assert.
            self.graphs.clear()
            self.pool = None
            self.state = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            rows = max(rows, st.rows if st else 0)
            length = max(length, st.length if st else 0)
            steps = max(steps, st.steps if st else 0)
            self.state = _State(self.arch, rows, length, steps, self.dtype, self.device)
            pos = torch.arange(length + steps + 1, device=self.device, dtype=torch.float32)
            freqs = pos[:, None] * self.arch.inv_freq.to(self.device)[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D] as HF's rotary embedding
            self.rope_cos = (emb.cos() * self.arch.rope_scale).to(self.dtype)
            self.rope_sin = (emb.sin() * self.arch.rope_scale).to(self.dtype)
        return self.state

    def _buckets(self, rows: int) -> list[int]:
        """Batch sizes a chunk of `rows` may shrink to (graph mode rounds up to 8 so graphs are reused)."""
        top = -(-rows // 8) * 8 if self.graphs_on else rows
        return sorted({top} | {b for b in self.bucket_sizes if b < top})

    # ---------------------------------------------------------------- prefill
    def _prefill(self, st: _State, contexts: list[list[int]], width: int) -> torch.Tensor:
        """Fill cache rows [0, B) for `contexts`, each right-aligned to column `width`; return [B, V] logits of
        each context's last token. A context extending a kept entry gets the entry's KV copied in and only
        its remaining tokens run: the window of the last S columns (S = longest remainder) is computed,
        written only where a row's remainder lies, and attends over the row's whole cache (prefix included).
        """
        n = len(contexts)
        lens = [len(c) for c in contexts]
        reuse = [self.store.lookup(c) if self.keep_kv else (0, None) for c in contexts]
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
        cols = torch.arange(width, device=self.device)
        starts = torch.tensor([width - m for m in lens], device=self.device)
        st.key_valid[:n].zero_()
        st.key_valid[:n, :width] = cols[None, :] >= starts[:, None]
        for i, (p, e) in enumerate(reuse):
            if e is not None:
                a = width - lens[i]
                for li in range(len(self.arch.layers)):
                    st.k[li][i, :, a: a + p] = e.k[li][:, :p]
                    st.v[li][i, :, a: a + p] = e.v[li][:, :p]
        rest = [m - p for m, (p, _) in zip(lens, reuse, strict=True)]
        self.stats["prefill_tokens"] += sum(rest)
        self.stats["reused_tokens"] += sum(p for p, _ in reuse)
        window = max(rest)
        per = max(1, min(self.prefill_tokens // window, self.prefill_tokens * 2048 // (window * width)))
        ids = ids.to(self.device)
        write_from = torch.tensor([width - r for r in rest], device=self.device)
        return torch.cat([self._prefill_rows(st, ids, starts, write_from, r0, min(n, r0 + per), width, window)
                          for r0 in range(0, n, per)])

    def _prefill_rows(self, st: _State, ids, starts, write_from, r0: int, r1: int, width: int, window: int):
        """Rows [r0, r1) of `_prefill`: the last `window` columns through every layer; [r1 - r0, V] logits."""
        ar = self.arch
        c0 = width - window
        qcol = torch.arange(c0, width, device=self.device)  # [S] cache column of each window query
        kcol = torch.arange(width, device=self.device)
        pos = (qcol[None, :] - starts[r0:r1, None]).clamp(min=0)  # [b, S] position ids
        cos, sin = self.rope_cos[pos][:, None], self.rope_sin[pos][:, None]  # [b, 1, S, D]
        write = (qcol[None, :] >= write_from[r0:r1, None])[:, None, :, None]  # [b, 1, S, 1]
        att = (st.key_valid[r0:r1, None, :width] & (kcol[None, None, :] <= qcol[None, :, None]))
        att = att | (kcol[None, None, :] == qcol[None, :, None])  # pad queries see themselves: no NaN rows
        g = ar.n_heads // ar.n_kv
        h = ar.embed(ids[r0:r1, c0:])
        for li, layer in enumerate(ar.layers):
            a = layer.self_attn
            q, k, v = _qkv(a, layer.input_layernorm(h), cos, sin, ar.head_dim)
            kc, vc = st.k[li][r0:r1, :, :width], st.v[li][r0:r1, :, :width]
            kc[:, :, c0:] = torch.where(write, k, kc[:, :, c0:])
            vc[:, :, c0:] = torch.where(write, v, vc[:, :, c0:])
            o = F.scaled_dot_product_attention(q, kc.repeat_interleave(g, 1), vc.repeat_interleave(g, 1),
                                               attn_mask=att[:, None], scale=ar.scaling)
            h = h + a.o_proj(o.transpose(1, 2).reshape(r1 - r0, window, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return ar.head(ar.norm(h[:, -1]))

    def _share(self, st: _State, followers: list[tuple[int, int]], width: int) -> None:
        """Copy each (row, leader row)'s prefilled KV and key mask: prefill once per distinct context."""
        if not followers:
            return
        dst = torch.tensor([f for f, _ in followers], device=self.device)
        src = torch.tensor([lead for _, lead in followers], device=self.device)
        for cache in (*st.k, *st.v):
            cache[dst, :, :width] = cache[src, :, :width]
        st.key_valid[dst] = st.key_valid[src]
        self.stats["shared_rows"] += len(followers)

    # ---------------------------------------------------------------- decode step
    def _decode_step(self, b: int, length: int) -> None:
        """One decode step for rows [0, b), attention over cache columns [0, length). All state in place."""
        st, ar = self.state, self.arch
        pos, col = st.positions[:b], st.col
        st.key_valid[:b].index_fill_(1, col, True)
        mask = key_mask(st.key_valid[:b, :length], self.decode_attention, self.dtype)  # shared by the layers
        cos, sin = self.rope_cos[pos][:, None, None], self.rope_sin[pos][:, None, None]  # [b, 1, 1, D]
        h = ar.embed(st.tokens[:b])[:, None]  # [b, 1, H]
        for li, layer in enumerate(ar.layers):
            a = layer.self_attn
            q, k, v = _qkv(a, layer.input_layernorm(h), cos, sin, ar.head_dim)
            kc, vc = st.k[li][:b, :, :length], st.v[li][:b, :, :length]
            kc.index_copy_(2, col, k)
            vc.index_copy_(2, col, v)
            h = h + a.o_proj(attend(q, kc, vc, mask, self.decode_attention, ar.scaling))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        tok, logp = self._sample(ar.head(ar.norm(h[:, 0])))
        self._record(b, tok, logp)
        pos.add_(1)
        col.add_(1)

    def _record(self, b: int, tok: torch.Tensor, logp: torch.Tensor) -> None:
        st = self.state
        done = st.done[:b]
        tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
        st.out_ids[:b].index_copy_(1, st.step, tok[:, None])
        st.out_logps[:b].index_copy_(1, st.step, logp[:, None].float())
        hit_stop = (tok[:, None] == self.stop[None, :]).any(dim=1)
        done |= hit_stop | (st.step + 1 >= st.budgets[:b])
        st.tokens[:b].copy_(tok)
        st.step.add_(1)

    def _graph(self, b: int, length: int) -> torch.cuda.CUDAGraph:
        """Capture (once per (b, length)) the decode step; warm-up runs are undone from a snapshot."""
        key = (b, length)
        if key in self.graphs:
            return self.graphs[key]
        st = self.state
        snap = [t.clone() for t in st.small()]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # each warm-up step is undone, so it writes the same in-span column
                self._decode_step(b, length)
                for t, s in zip(st.small(), snap, strict=True):
                    t.copy_(s)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self._decode_step(b, length)
        self.graphs[key] = graph
        return graph

    # ---------------------------------------------------------------- one chunk
    def _group(self, contexts: list[list[int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """(order, followers): rows in `order` (row -> context index) put one row per distinct context first;
        followers pairs (row, leader row) for the repeats (none unless share_prompts)."""
        if not self.share_prompts:
            return list(range(len(contexts))), []
        first: dict[tuple[int, ...], int] = {}
        repeats = []
        for i, c in enumerate(contexts):
            key = tuple(c)
            if key in first:
                repeats.append((i, first[key]))
            else:
                first[key] = i
        order = list(first.values()) + [i for i, _ in repeats]
        row_of = {ci: r for r, ci in enumerate(order)}
        return order, [(row_of[i], row_of[lead]) for i, lead in repeats]

    def _run_chunk(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        n = len(contexts)
        order, followers = self._group(contexts)
        width, steps = max(len(c) for c in contexts), max(budgets)
        self._chunk = (contexts, budgets, width)
        self.stats["context_tokens"] += sum(len(c) for c in contexts)
        mult = self.length_multiple
        length = -(-(width + steps - 1) // mult) * mult  # cache columns needed: prompt + fed tokens
        buckets = self._buckets(n)
        st = self._ensure(buckets[-1], length, steps)
        if self.keep_kv:
            self.store.max_tokens = self.kv_store_tokens or st.rows * st.length
        for t in st.small():
            t.zero_()
        st.done.fill_(True)
        st.budgets[:n] = torch.tensor([budgets[i] for i in order], dtype=torch.long, device=self.device)
        st.done[:n] = False
        u = n - len(followers)
        logits = self._prefill(st, [contexts[i] for i in order[:u]], width)
        self._share(st, followers, width)
        if followers:
            logits = torch.cat([logits, logits[torch.tensor([lead for _, lead in followers], device=self.device)]])
        tok, logp = self._sample(logits)
        st.positions[:n] = torch.tensor([len(contexts[i]) for i in order], device=self.device)
        st.col.fill_(width)
        b = buckets[-1]
        self._record(b, torch.cat([tok, tok.new_zeros(b - n)]), torch.cat([logp, logp.new_zeros(b - n)]))
        slots = list(order)  # slot -> context index, for the first len(slots) rows
        results: dict[int, tuple[list[int], list[float]]] = {}
        for t in range(1, steps):
            if t % self.check_every == 1 or self.check_every == 1:
                b, slots = self._maybe_compact(b, slots, buckets, results)
                if not slots:
                    break
            # attend over the written columns only, rounded up (step t writes column width + t - 1)
            cur = min(length, -(-(width + t) // mult) * mult)
            if self.graphs_on and ((b, cur) in self.graphs or steps - t >= self.min_graph_steps):
                self._graph(b, cur).replay()
            else:
                self._decode_step(b, cur)
        self._harvest(range(len(slots)), slots, results)
        return [self._to_sample(*results[i], budgets[i]) for i in range(n)]

    def _harvest(self, rows, slots: list[int], results: dict) -> None:
        rows = list(rows)
        if not rows:
            return
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        ids = self.state.out_ids.index_select(0, idx).cpu().tolist()
        lps = self.state.out_logps.index_select(0, idx).cpu().tolist()
        for r, i, lp in zip(rows, ids, lps, strict=True):
            results[slots[r]] = (i, lp)
            if self.keep_kv:
                self._keep(r, slots[r], i)

    def _keep(self, row: int, ci: int, out_ids: list[int]) -> None:
        """Store row `row`'s KV (context `ci` + its sampled ids but the last, never fed) in self.store.
        The row's tokens are contiguous: columns [width - len(context), width + k - 1)."""
        contexts, budgets, width = self._chunk
        ctx = contexts[ci]
        k = self._turn_len(out_ids, budgets[ci])
        n_tok = len(ctx) + k - 1
        if not self.store.wants(n_tok):
            return
        a, b = width - len(ctx), width + k - 1
        st = self.state
        entry = Entry([c[row, :, a:b].clone() for c in st.k], [c[row, :, a:b].clone() for c in st.v])
        self.store.put(tuple(ctx) + tuple(out_ids[: k - 1]), entry)

    def _turn_len(self, out_ids: list[int], budget: int) -> int:
        """Tokens the turn keeps: up to and including the first stop id, at most `budget`."""
        row = out_ids[:budget]
        stops = set(self.stop.tolist())
        end = next((j for j, t in enumerate(row) if t in stops), None)
        return len(row) if end is None else end + 1

    def _maybe_compact(self, b: int, slots: list[int], buckets: list[int], results: dict) -> tuple[int, list[int]]:
        """Host check: harvest finished rows; move live rows to the front when they fit a smaller bucket."""
        st = self.state
        done = st.done[: len(slots)].cpu().tolist()
        live = [r for r, d in enumerate(done) if not d]
        if len(live) == len(slots):
            return b, slots
        target = next(x for x in buckets if x >= max(len(live), 1))
        if target >= b and live:
            return b, slots
        self._harvest([r for r, d in enumerate(done) if d], slots, results)
        if not live:
            return b, []
        idx = torch.tensor(live, dtype=torch.long, device=self.device)
        for cache in (*st.k, *st.v):
            cache[: len(live)] = cache.index_select(0, idx)
        for t in st.small():
            if t.dim() >= 1 and t.shape[0] == st.rows:
                t[: len(live)] = t.index_select(0, idx)
                t[len(live): target] = t is st.done  # rows past the live ones: empty and done
        return target, [slots[r] for r in live]

    def _to_sample(self, ids: list[int], logps: list[float], budget: int) -> Sample:
        k = self._turn_len(ids, budget)
        stopped = k > 0 and int(ids[k - 1]) in set(self.stop.tolist())
        return Sample(tuple(ids[:k]), tuple(logps[:k]), hit_token_limit=not stopped)


def fast_sampler_for(model: Any, tokenizer: Any, cfg: SamplingConfig | None = None, *,
                     enable_thinking: bool = False, **kwargs: Any) -> FastSampler:
    """A FastSampler with the driver's stop ids (`stop_token_ids`: the template's end-of-turn token and every
    end-of-sequence id of the model) and pad id.

    kwargs go to FastSampler (max_batch, use_cuda_graphs, ...). Raises as FastSampler does.
    """
    from agentrl.chat.tito import turn_format
    from agentrl.rollout.hf_sampler import stop_token_ids

    fmt = turn_format(tokenizer, enable_thinking=enable_thinking)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else fmt.eot_ids[0]
    return FastSampler(model, stop_ids=stop_token_ids(model, tokenizer, fmt.eot_ids), pad_id=pad, cfg=cfg, **kwargs)
