"""Fast token-level sampler: own decode loop over a static slot KV cache, CUDA-graph decode steps, in-loop log-probs.

Not the episode driver and not a general HF model runner: it drives the modules of Llama-family decoders
(Qwen3, Qwen2, Llama; full attention, default RoPE, no logit soft-capping) directly and raises for others
(agentrl.rollout.fast_model). Same contract as agentrl.rollout.hf_sampler.sample_turns (plugs into
run_episodes(sampler=...)): one `Sample` per context with ids, the sampling distribution's log-probs
(temperature / top-k / top-p applied by the same HF warpers the reference sampler uses) and hit_token_limit.
Differences that do not change the distribution: tokens are drawn by the exponential race (argmax p / E,
E ~ Exp(1), as vLLM does) instead of torch.multinomial, so a seed gives other tokens than the reference
sampler (and the noise a request gets depends on the slot it runs in); only one [B, V] step of logits is
ever alive.

Scheduling. The cache is `rows` slots, each one sequence left-aligned (agentrl.rollout.fast_model). A call's
requests take slots (at most max_batch at once); every `check_every` decode steps the host harvests finished
rows and, while requests are pending, prefills the next ones into the freed slots (continuous batching: the
batch stays full until the requests run out); once none are pending, live rows are compacted into a smaller
graph bucket when they fit one. Requests are admitted longest budget first (LPT, the longest-processing-time
rule for makespan), and while requests wait the host also checks at the step a row's budget runs out: with
first-come order and checks only every 16 steps, 512 requests with budgets in [64, 250] through 128 slots ran
0.768 of a full batch's decode tokens/s on the H200 (2026-12-02), and a count of decode steps gives 0.769 for
that schedule, so the shortfall was the drain at the end, not the kernels; the same count gives 0.99 for this
one (tests/rollout/test_fast_sampler_continuous.py). Attention spans the written columns rounded up to
`length_multiple` (one graph per (bucket, span)). With keep_kv, a finished row's KV stays in its slot (kept in
place) and the next call's context that extends it token for token (the episode's next turn) is prefilled in
that slot from where the kept KV ends; only when a slot must be reused within a call (more requests than slots) is a kept row's KV
cloned out first.

Decode attention (`decode_attention`: "matmul", "sdpa", "sdpa_gqa", "flex", "triton"; by default "triton" on
CUDA where triton runs, else "matmul", decode_attention.default_form): see
agentrl.rollout.decode_attention; prefill is the same for all. Each layer's decode step is
agentrl.rollout.decode_layer's: with compile_decode (the default on CUDA), its parts before and after attention are
compiled, and the prefill forwards run the same compiled parts, while the KV-cache write and the attention stay
eager ("flex" attention compiled on its own). With fuse_projections (the default on CUDA) both run each layer's
q/k/v and gate/up projections as one GEMM each over a copy of those weights (agentrl.rollout.fast_model).

Threads. A graph capture is invalidated by another thread's CUDA allocation or free while it runs (the async
learner's update beside the opencode policy server's sampler thread did it on the H200, 2026-12-02:
CUBLAS_STATUS_EXECUTION_FAILED in the capture, cudaErrorStreamCaptureInvalidated, then every later draw failed on
the RNG state the broken capture left). So captures run in "thread_local" capture mode and under
CUDA_CAPTURE_LOCK, which code that launches CUDA work in another thread while a sampler may capture holds
meanwhile (agentrl.rl.trainer's asynchronous update and weight copy); a capture that still fails turns the
sampler's graphs off (eager decode from then on) and raises.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.rollout.decode_attention import COMPILED_ONLY, DECODE_ATTENTION, default_form, key_mask
from agentrl.rollout.decode_layer import decode_layer, layer_fns
from agentrl.rollout.fast_model import (
    FusedProjections,
    SlotState,
    arch_of,
    copy_prefixes,
    prefill_slots,
    rope_tables,
)
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sampling_warpers
from agentrl.rollout.prefix_cache import Entry, PrefixStore, weights_version

DEFAULT_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024)  # compaction targets (FastSampler bucket_sizes)
log = logging.getLogger(__name__)

CUDA_CAPTURE_LOCK = threading.RLock()
"""Held by FastSampler while it captures a CUDA graph or empties the allocator's cache; hold it in any thread that
runs CUDA work (allocations, frees, kernels) while a sampler in another thread may be capturing (module
docstring, "Threads"). Re-entrant; never held while waiting on a sampler, so it cannot deadlock with one."""


@dataclass
class SlotRef:
    """A kept entry that lives in the static cache: slot `slot`, columns [0, tokens)."""

    slot: int
    n_tokens: int

    @property
    def tokens(self) -> int:
        return self.n_tokens


@dataclass
class _Row:
    """Host record of an occupied slot: the request (context index) it serves, when it was admitted (decode
    step), its context length and budget (bounds on its cache columns)."""

    ci: int
    t0: int
    m: int
    budget: int

    def col_bound(self, t: int) -> int:
        """An upper bound on the columns the row's KV fills at decode step t (lens <= m + budget - 1)."""
        return self.m + min(max(t - self.t0, 0), self.budget - 1)


class FastSampler:
    """Sampler for `run_episodes(sampler=...)`: (contexts, per-context max_new_tokens) -> list[Sample].

    Args:
        model: HF Qwen3 / Qwen2 / Llama causal LM on its device (any float dtype), in eval mode.
        stop_ids: ids that end a turn (end-of-turn and end-of-sequence ids, see `stop_token_ids`); a row
            stops after the first one sampled (kept in `ids`; the turn is finished, not truncated). May be empty.
        pad_id: id fed by finished rows and pad queries (never attended to by a live row).
        cfg: temperature / top_k / top_p / max_new_tokens as in SamplingConfig (default SamplingConfig());
            `gen_batch` is not used here (see max_batch).
        max_batch: slots decoded together; more requests wait and take the slots that finished rows free
            (continuous batching within the call).
        use_cuda_graphs: capture the decode step per batch bucket (default: on when the model is on CUDA).
        prefill_tokens: padded tokens per prefill forward (bounds prefill activation memory).
        check_every: decode steps between host checks (harvest, admit pending requests, compaction).
        admit_rows: while requests wait, a host check also runs at the step by which this many live rows' budgets
            have run out (their slots are free then), so freed slots are refilled in groups: each check is a host
            sync and each admission a prefill forward, whose cost is mostly fixed per call on a GPU. None (default):
            max(1, max_batch // 16), e.g. 8 for 128 slots (1 = a check at every budget end).
        length_multiple: attention spans the written cache columns rounded up to this (one graph per
            (bucket, span), reused across steps and calls).
        min_graph_steps: a new graph is captured only when at least this many steps remain (short turns
            run eagerly rather than pay a capture).
        keep_kv: keep each finished row's KV in its slot (agentrl.rollout.prefix_cache matches the next call's
            contexts to it by token ids) so that a context extending it token for token (the episode's next
            turn: sampled ids + tool-response ids) prefills only the appended ids, in place. Dropped when the
            weights change.
        share_prompts: identical contexts admitted together (the G samples of a GRPO group) are prefilled
            once and their KV copied to the other rows.
        kv_store_tokens: cap on tokens kept by keep_kv (default: the static cache's rows x columns).
        bucket_sizes: the batch sizes live rows may be compacted into (each its own CUDA graph per span;
            default DEFAULT_BUCKETS, powers of two from 8).
        decode_attention: "matmul", "sdpa", "sdpa_gqa", "flex" or "triton": how a decode step attends over the
            static cache (agentrl.rollout.decode_attention). All give the same tokens and log-probs up to rounding.
            None (default): decode_attention.default_form(the model's device), "triton" on CUDA (compute
            capability >= 8.0) where triton imports, else "matmul". "flex" implies compile_decode (FlexAttention
            is fused only under torch.compile); "triton" (a split-KV kernel reading only each row's keys) needs the
            triton package and CUDA (or Triton's interpreter), else ValueError.
        compile_decode: each decoder layer's step around its attention through torch.compile: one compiled
            function for the part before attention (norm, projections, RoPE) and one for the part after (o_proj,
            MLP, residual adds), each shared by every layer and run by the decode steps and the prefill forwards
            alike; the KV-cache write and the attention ("flex": compiled on its own, reading the cache only) stay
            eager (agentrl.rollout.decode_layer says why). The token pick (`pick_token`) is compiled as well; the
            noise it reads is drawn eagerly. The first calls pay the compile (H200, Qwen3-0.6B: about
            12 s for the decode step's regions). None (default): on for a CUDA model, off on the CPU (where
            inductor's C++ compile costs minutes and the step's cost is the vocabulary, not launches).
        fuse_projections: decode and prefill through each layer's q/k/v and gate/up projections fused into one
            matrix each (agentrl.rollout.fast_model.FusedProjections: 4 GEMM launches a layer instead of 7, for
            a copy of those weights, refreshed in place when the weights change). None (default): on for a CUDA
            model whose layers allow it, else off; True raises ValueError for layers that cannot be fused.
        release_kv: give the static KV cache's memory back when a rollout ends (`end_rollout`, which run_episodes
            calls before the trainer's update) and take it again on the next call, so the update can use it
            (agentrl.rollout.kv_memory). "vmm": to the device, through CUDA virtual memory management, keeping
            the addresses, so the CUDA graphs stay valid (the cost: the driver's unmap, map and memset per
            rollout; the cache is then outside PyTorch's allocator, `kv_mapped_bytes()` says how much is held);
            "allocator": to PyTorch's caching allocator, where the update reuses it with no driver call, and the
            graphs are kept when the next call's cache gets the same blocks back, else re-captured
            (stats["kv_moved"]); True: "vmm" where supported, else "allocator"; False: kept; None (default): "vmm"
            where supported, else kept. On the H200 (Qwen3-0.6B config, coding-tools step 8 x 8, bf16, 16k-token
            update, results/bench/issue26_h200_2026-12-03c) "vmm" took 12.25 GiB back in ~10 ms a step (steps
            6.17 s, peak 18.2 GB, against 6.05 s and 22.0 GB kept), while "allocator" got other blocks back at
            every step after the first and re-captured its graphs (steps 6.95 s).

    After each call, `stats` holds context_tokens, prefill_tokens (tokens run through the model),
    reused_tokens (KV taken from kept rows), shared_rows (rows that copied a group leader's KV),
    admitted_late (requests prefilled into a slot freed during the call), kept_in_place (contexts that
    extended the KV left in their own slot), cloned_out (kept rows copied out of a slot needed again),
    graph_captures (CUDA graphs captured during the call, one per new (batch bucket, span)), capture_ms (host
    milliseconds those captures took, warm-up included), kv_alloc_ms (milliseconds making, growing or restoring
    the static cache, synchronized), kv_moved (release_kv "allocator": restores whose blocks came back at other
    addresses, so the graphs were dropped), decode_steps (decode steps run, each over its bucket's
    rows), decode_row_steps (the sum of those buckets: decode tokens / decode_row_steps is the occupancy),
    host_checks (host syncs of the decode loop) and admissions (prefill calls that admitted requests).

    Raises:
        ValueError: unsupported architecture (see module doc), or bad arguments.
    """

    @staticmethod
    def default_admit_rows(max_batch: int) -> int:
        """admit_rows when not given: max(1, max_batch // 16), e.g. 8 for 128 slots."""
        return max(1, max_batch // 16)

    def __init__(self, model: Any, *, stop_ids: tuple[int, ...], pad_id: int, cfg: SamplingConfig | None = None,
                 max_batch: int = 256, use_cuda_graphs: bool | None = None, prefill_tokens: int = 16384,
                 check_every: int = 16, length_multiple: int = 128, min_graph_steps: int = 24,
                 keep_kv: bool = True, share_prompts: bool = True, kv_store_tokens: int | None = None,
                 bucket_sizes: tuple[int, ...] | None = None, decode_attention: str | None = None,
                 compile_decode: bool | None = None, admit_rows: int | None = None,
                 release_kv: bool | str | None = None, fuse_projections: bool | None = None):
        if decode_attention is not None and decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"FastSampler: decode_attention must be one of {DECODE_ATTENTION} or None, "
                             f"got {decode_attention!r}")
        if max_batch < 1 or prefill_tokens < 1 or check_every < 1 or length_multiple < 1:
            raise ValueError("FastSampler: max_batch, prefill_tokens, check_every, length_multiple must be >= 1")
        sizes = DEFAULT_BUCKETS if bucket_sizes is None else tuple(bucket_sizes)
        if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes):
            raise ValueError(f"FastSampler: bucket_sizes must be integers >= 1, got {bucket_sizes!r}")
        self.bucket_sizes = tuple(sorted(set(sizes)))
        cfg = cfg or SamplingConfig()
        self.model, self.cfg, self.pad_id = model, cfg, int(pad_id)
        self.arch = arch_of(model)
        self.device = next(model.parameters()).device
        if decode_attention is None:
            decode_attention = default_form(self.device)
        self.decode_attention: str = decode_attention
        if decode_attention == "triton":  # a clear ValueError now rather than a failed first rollout
            from agentrl.rollout.triton_decode import check_device

            try:
                check_device(self.device)
            except ValueError as e:
                raise ValueError(f"FastSampler: decode_attention: {e}") from None
        self.dtype = next(model.parameters()).dtype
        self.stop = torch.tensor(sorted(set(int(s) for s in stop_ids)), dtype=torch.long, device=self.device)
        self._stops = set(self.stop.tolist())
        self.max_batch, self.prefill_tokens, self.check_every = max_batch, prefill_tokens, check_every
        self.admit_rows = self.default_admit_rows(max_batch) if admit_rows is None else int(admit_rows)
        if self.admit_rows < 1:
            raise ValueError(f"FastSampler: admit_rows must be >= 1, got {admit_rows!r}")
        self.length_multiple, self.min_graph_steps = length_multiple, min_graph_steps
        self.graphs_on = (self.device.type == "cuda") if use_cuda_graphs is None else bool(use_cuda_graphs)
        if self.graphs_on and self.device.type != "cuda":
            raise ValueError("FastSampler: CUDA graphs need a CUDA model")
        self.warpers = sampling_warpers(cfg)
        self.state: SlotState | None = None
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self.keep_kv, self.share_prompts, self.kv_store_tokens = keep_kv, share_prompts, kv_store_tokens
        self.store = PrefixStore(0)
        self.stats: dict[str, int] = {}
        # compile_decode: regional compilation of each decoder layer's step (agentrl.rollout.decode_layer): the
        # part before attention (input RMSNorm, q/k/v projections, q/k norms, RoPE) and the part after (o_proj,
        # residual adds, post-attention RMSNorm, SiLU-gated MLP) are each one torch.compile'd function shared by every
        # layer, so inductor fuses the ~50 small kernels a layer of the H200 profile and compile time is one layer's
        # (the whole-step compile of 28 unrolled layers did not finish a first row in 119 s on the H200). The KV write
        # into the static cache and the attention (but "flex", compiled on its own, reading the cache only) stay
        # eager: with the write inside the compiled layer, inductor copied the whole K and V slices per layer and step
        # (functionalized input mutation), and that step ran at 0.155 / 0.158 of the bandwidth bound at batch
        # 64 / 256 against eager's 0.251 / 0.285 (H200, 2026-12-02). Embedding, final norm, head, the noise draw and
        # recording stay eager (the captured graph draws its noise through the graph-safe default generator); the
        # token pick from logits and noise (`pick_token`) is compiled too.
        if release_kv is None or release_kv is True:
            from agentrl.rollout.kv_memory import vmm_supported

            release_kv = "vmm" if vmm_supported(self.device) else ("allocator" if release_kv else False)
        if release_kv not in (None, False, "vmm", "allocator"):
            raise ValueError(f"FastSampler: release_kv must be None, a bool, 'vmm' or 'allocator', got {release_kv!r}")
        self.release_kv: str = release_kv or ""
        if compile_decode is None:
            compile_decode = self.device.type == "cuda"
        self.compile_decode = bool(compile_decode) or decode_attention in COMPILED_ONLY  # "flex" fuses only compiled
        self._layer_fns = layer_fns(self.compile_decode, decode_attention, self.device)
        # the pick reads the [b, V] logits once or twice compiled, against ~8 passes over fp32 copies eager
        self._pick = torch.compile(pick_token, dynamic=True) if self.compile_decode else pick_token
        self.fused = self._fused_projections(fuse_projections)

    def _fused_projections(self, fuse: bool | None) -> FusedProjections | None:
        """The fused projections FastSampler's `fuse_projections` asks for (None: on CUDA where the layers allow)."""
        if not (fuse or (fuse is None and self.device.type == "cuda")):
            return None
        try:
            return FusedProjections(self.arch)
        except ValueError as e:
            if fuse:
                raise ValueError(f"FastSampler: {e}") from None
            log.info("FastSampler: projections not fused (%s)", e)
            return None

    # ---------------------------------------------------------------- public
    @torch.no_grad()
    def __call__(self, contexts: list[list[int]], max_new_tokens: list[int] | None = None) -> list[Sample]:
        """Sample one turn per context. contexts: B non-empty token-id lists; max_new_tokens: B budgets >= 1
        (default cfg.max_new_tokens each). Returns B Samples in order. Raises ValueError on bad input."""
        budgets = list(max_new_tokens) if max_new_tokens is not None else [self.cfg.max_new_tokens] * len(contexts)
        if len(budgets) != len(contexts) or min(budgets, default=1) < 1 or any(not c for c in contexts):
            raise ValueError("FastSampler: need one budget >= 1 per non-empty context")
        self.stats = dict.fromkeys(("context_tokens", "prefill_tokens", "reused_tokens", "shared_rows",
                                    "admitted_late", "kept_in_place", "cloned_out", "graph_captures",
                                    "capture_ms", "decode_steps", "decode_row_steps", "host_checks",
                                    "admissions", "kv_alloc_ms", "kv_moved"), 0)
        version = weights_version(self.model) if self.keep_kv or self.fused is not None else None
        if self.fused is not None:
            self.fused.refresh(version)
        self.store.begin(version if self.keep_kv else None)
        out = self._run(contexts, budgets) if contexts else []
        self.store.finish()
        return out

    def clear_kv(self) -> None:
        """Drop every kept KV entry (they are also dropped whenever the weights change)."""
        self.store.clear()

    def end_rollout(self) -> None:
        """Called by run_episodes when its episodes have ended: the kept entries are dropped (they would be
        stale after the update anyway). With release_kv the static cache's memory is given back until the next
        call, which takes it again (and drops the CUDA graphs if the cache came back at other addresses), unless
        another thread holds CUDA_CAPTURE_LOCK (an asynchronous update); without it the cache and graphs stay."""
        self.clear_kv()
        st = self.state
        if self.release_kv and st is not None and st.kv_held:
            # An unmap or free while another thread captures invalidates its capture, so the lock; when another
            # thread holds it (the asynchronous learner's update, agentrl.rl.trainer) the cache is kept: waiting
            # would stall this rollout thread until that update ends, and the update running now could not use
            # the memory anyway.
            if not CUDA_CAPTURE_LOCK.acquire(blocking=False):
                return
            try:
                st.release_kv()  # the graphs stay: none replays before _ensure restores (and checks) the cache
            finally:
                CUDA_CAPTURE_LOCK.release()

    def kv_mapped_bytes(self) -> int:
        """Bytes of static KV cache held outside PyTorch's caching allocator (release_kv with VMM, while held):
        add them to `torch.cuda.memory_allocated()` / `max_memory_allocated()` for the sampler's true footprint."""
        return self.state.kv_mapped_bytes() if self.state is not None else 0

    # ---------------------------------------------------------------- sampling
    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[b, V] logits -> ([b] token, [b] float32 log-prob under the warped distribution). The noise is drawn
        eagerly (graph-safe default generator); the pick is `pick_token`, compiled with compile_decode."""
        scores = self.warpers(None, logits.float()) if self.warpers else logits
        race = torch.empty(scores.shape, dtype=torch.float32, device=scores.device).exponential_()
        return self._pick(scores, race)

    # ---------------------------------------------------------------- setup
    def _ensure(self, rows: int, length: int, steps: int) -> SlotState:
        """The state with at least these sizes; a larger one keeps the old one's slots (and so its kept KV)."""
        st = self.state
        grow = st is None or st.rows < rows or st.length < length or st.steps < steps
        if grow or not st.kv_held:
            t0 = time.perf_counter()
            self._make_kv(rows, length, steps, grow)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.stats["kv_alloc_ms"] = self.stats.get("kv_alloc_ms", 0) + int((time.perf_counter() - t0) * 1e3)
        return self.state

    def _make_kv(self, rows: int, length: int, steps: int, grow: bool) -> None:
        """_ensure's allocation: restore a released cache, or make / grow the state (graphs dropped)."""
        st = self.state
        if not grow:  # released by end_rollout: take the memory again
            with CUDA_CAPTURE_LOCK:
                if not self._restore(st):  # other addresses: the graphs captured over the old ones must go
                    self.graphs.clear()
                    self.pool = None
                    self.stats["kv_moved"] = self.stats.get("kv_moved", 0) + 1
        else:
            # A graph memory pool lives only as long as some graph captured into it: once the graphs are
            # dropped, capturing into the old handle trips CUDACachingAllocator's use_count assert.
            self.graphs.clear()
            self.pool = None
            if st is not None:  # grow by at least a quarter, so growing contexts do not reallocate every turn
                mult = self.length_multiple
                length = max(length, -(-(st.length * 5 // 4) // mult) * mult) if length > st.length else length
                self.state = None
                self.state = st.grown(self.arch, rows, length, steps)
            else:
                self.state = SlotState(self.arch, rows, length, steps, self.dtype, self.device,
                                       releasable=self.release_kv)
            if self.device.type == "cuda":
                with CUDA_CAPTURE_LOCK:  # a cudaFree while another thread captures invalidates its capture
                    torch.cuda.empty_cache()
            self.rope = rope_tables(self.arch, self.state.length + 1, self.dtype, self.device)

    def _restore(self, st: SlotState) -> bool:
        """st.restore_kv(); when the driver is out of memory (PyTorch's allocator still caches what the update
        freed), the allocator's cache is emptied and the restore tried once more. Returns restore_kv's answer;
        raises its CudaDriverError when the second try fails too."""
        from agentrl.rollout.kv_memory import CudaDriverError

        try:
            return st.restore_kv()
        except CudaDriverError as e:
            if self.device.type != "cuda":
                raise
            log.warning("FastSampler: restoring the KV cache failed (%s); emptying PyTorch's cache and retrying", e)
            torch.cuda.empty_cache()
            return st.restore_kv()

    def _buckets(self, rows: int) -> list[int]:
        """Batch sizes `rows` slots may shrink to (graph mode rounds up to 8 so graphs are reused)."""
        top = -(-rows // 8) * 8 if self.graphs_on else rows
        return sorted({top} | {b for b in self.bucket_sizes if b < top})

    # ---------------------------------------------------------------- decode step
    def _decode_step(self, b: int, span: int) -> None:
        """One decode step for slots [0, b), attention over cache columns [0, span). All state in place: each
        live row feeds its last token at column lens[r] (its position), samples the next, advances lens."""
        live = (~self.state.done[:b]).long()
        tok, logp = self._sample(self._forward(b, span))
        self._record(b, tok, logp)
        self.state.lens[:b].add_(live)

    def _forward(self, b: int, span: int) -> torch.Tensor:
        """The decode step's model part: [b, V] logits of slots [0, b) fed their last tokens, each row's K/V
        written into its cache column lens[r] (each layer through `decode_layer`, its regions compiled when
        compile_decode)."""
        st, ar = self.state, self.arch
        lens = st.lens[:b]
        mask = key_mask(st.cols[None, :span] <= lens[:, None], self.decode_attention, self.dtype)
        cos, sin = self.rope[0][lens][:, None, None], self.rope[1][lens][:, None, None]  # [b, 1, 1, D]
        at = lens.view(b, 1, 1, 1).expand(b, ar.n_kv, 1, ar.head_dim)
        h = ar.embed(st.tokens[:b, None])  # [b, 1, H]; not a view (see decode_layer.layer_fns)
        for li, layer in enumerate(ar.layers):
            h = decode_layer(layer, h, cos, sin, at, st.k[li][:b, :, :span], st.v[li][:b, :, :span], mask,
                             self.decode_attention, ar.scaling, self._layer_fns,
                             self.fused.layers[li] if self.fused is not None else None)
        return ar.head(ar.norm(h[:, 0]))

    def _record(self, b: int, tok: torch.Tensor, logp: torch.Tensor) -> None:
        """Store slot rows [0, b)'s sampled tokens at their own sample index; finished rows record padding."""
        st = self.state
        done = st.done[:b]
        live = (~done).long()
        tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
        at = st.nsamp[:b, None]
        st.out_ids[:b].scatter_(1, at, tok[:, None])
        st.out_logps[:b].scatter_(1, at, logp[:, None].float())
        st.nsamp[:b].add_(live)
        hit_stop = (tok[:, None] == self.stop[None, :]).any(dim=1)
        done |= hit_stop | (st.nsamp[:b] >= st.budgets[:b])
        st.tokens[:b].copy_(tok)

    def _graph(self, b: int, span: int) -> torch.cuda.CUDAGraph:
        """Capture (once per (b, span)) the decode step; warm-up runs are undone from a snapshot (they write
        KV only at the rows' own next columns, which the replay writes again)."""
        key = (b, span)
        if key in self.graphs:
            return self.graphs[key]
        t0 = time.perf_counter()
        with CUDA_CAPTURE_LOCK:
            try:
                graph = self._capture(b, span)
            except Exception as e:
                # a failed capture leaves no usable graph (and may leave the CUDA RNG mid-capture): no more
                # captures in this sampler; the caller records this batch's failure
                self.graphs_on = False
                self.graphs.clear()
                self.pool = None
                log.error("FastSampler: capturing the decode step's CUDA graph (batch %d, span %d) failed (%s: %s); "
                          "decoding without CUDA graphs from now on", b, span, type(e).__name__, e)
                raise
        self.graphs[key] = graph
        self.stats["graph_captures"] = self.stats.get("graph_captures", 0) + 1
        self.stats["capture_ms"] = self.stats.get("capture_ms", 0) + round(1000 * (time.perf_counter() - t0))
        return graph

    def _capture(self, b: int, span: int) -> torch.cuda.CUDAGraph:
        """Warm up on a side stream (undone from a snapshot) and capture one decode step; CUDA_CAPTURE_LOCK held."""
        st = self.state
        snap = [t.clone() for t in st.small()]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._decode_step(b, span)
                for t, s in zip(st.small(), snap, strict=True):
                    t.copy_(s)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's allocations no longer invalidate this capture (only this thread's would)
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            self._decode_step(b, span)
        return graph

    # ---------------------------------------------------------------- one call
    def _assign(self, contexts: list[list[int]]) -> tuple[dict[int, tuple[int, Any]], list[int]]:
        """Match contexts to kept entries: ({context: (p, entry)} for the contexts that reuse p > 0 kept tokens,
        [contexts in admission order]). A slot entry goes to the longest match only (that context is prefilled
        in the slot, in place); a context whose best slot entry another took has those p tokens copied."""
        if not self.keep_kv:
            return {}, list(range(len(contexts)))
        found = [self.store.lookup(c) for c in contexts]
        reuse = {i: (p, e) for i, (p, e) in enumerate(found) if e is not None and p > 0}
        return reuse, list(range(len(contexts)))

    def _run(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        n = len(contexts)
        self.stats["context_tokens"] += sum(len(c) for c in contexts)
        mult = self.length_multiple
        need = -(-max(len(c) + b for c, b in zip(contexts, budgets, strict=True)) // mult) * mult
        reuse, order = self._assign(contexts)
        order.sort(key=lambda i: -budgets[i])  # longest budget first (stable): the drain at the end is shortest
        cap = self._buckets(min(n, self.max_batch))[-1]
        old_rows = self.state.rows if self.state is not None else 0
        st = self._ensure(max(cap, old_rows if reuse else 0), need, max(budgets))
        if self.keep_kv:
            self.store.max_tokens = self.kv_store_tokens or st.rows * st.length
        # slots: in-place claims first (longest match wins a slot), then free slots for the rest
        claim: dict[int, int] = {}
        by_len = sorted(reuse, key=lambda i: -reuse[i][0])
        for i in by_len:
            e = reuse[i][1]
            if isinstance(e, SlotRef) and e.slot not in claim.values() and e.slot < st.rows:
                claim[i] = e.slot
        taken = set(claim.values())
        self._rows: dict[int, _Row] = {}
        self._fill = [0] * st.rows  # host bound on the lens of slots not occupied (finished rows: exact)
        st.done.fill_(True)
        free_mask = torch.ones(st.rows, dtype=torch.bool)
        free_mask[list(taken)] = False
        st.lens[free_mask.to(self.device)] = 0
        self._free = [s for s in range(max(cap, max(taken, default=-1) + 1)) if s not in taken]
        self._pending = deque(i for i in order if i not in claim)
        self._claim, self._reuse = claim, reuse
        self._contexts, self._budgets = contexts, budgets
        self._kept_here: dict[int, tuple[tuple[int, ...], SlotRef]] = {}  # slot -> this call's kept entry there
        results: dict[int, tuple[list[int], list[float]]] = {}
        first = [i for i in order if i in claim]
        while self._pending and len(first) < max(cap, len(claim)) and self._free:
            first.append(self._pending.popleft())
        self._admit(first, t=0)
        t, b, span, next_end = 0, self._cover(), 0, 0
        while True:
            left = max((r.t0 + r.budget - 1 - t for r in self._rows.values()), default=0)
            # t = 0: rows done at their first token; while requests wait, also the step by which admit_rows rows'
            # budgets have run out (their slots are free then; a row that stops early waits for a regular check)
            if t % self.check_every == 0 or left <= 0 or (self._pending and t >= next_end):
                b = self._check(t, results)
                if not self._rows:
                    break
                span = self._span(b, t)
                ends = sorted(r.t0 + r.budget - 1 for r in self._rows.values())  # each live row's last step
                left, next_end = ends[-1] - t, ends[min(self.admit_rows, len(ends)) - 1]
            t += 1
            self.stats["decode_steps"] += 1
            self.stats["decode_row_steps"] += b
            left += max((budgets[i] for i in self._pending), default=0)
            if self.graphs_on and ((b, span) in self.graphs or left >= self.min_graph_steps):
                self._graph(b, span).replay()
            else:
                self._decode_step(b, span)
        return [self._to_sample(*results[i], budgets[i]) for i in range(n)]

    def _span(self, b: int, t: int) -> int:
        """Attention columns for the steps after step t up to the next check: every slot below b's columns
        (live rows' bound check_every steps ahead) + the one written, rounded up to length_multiple."""
        top = max(self._fill[:b])
        for s, r in self._rows.items():
            if s < b:
                top = max(top, r.col_bound(t + self.check_every + 1))
        mult = self.length_multiple
        return min(self.state.length, -(-(top + 1) // mult) * mult)

    def _cover(self) -> int:
        """The smallest bucket holding every occupied slot."""
        top = max(self._rows, default=0) + 1
        return next(x for x in self._buckets(self.state.rows) + [self.state.rows] if x >= top)

    def _admit(self, cis: list[int], t: int) -> None:
        """Prefill contexts `cis` into slots (claimed ones in their own slot from the kept KV on; others into
        free slots, copying a kept or shared prefix first) and record their first sampled token."""
        if not cis:
            return
        st, ctxs = self.state, self._contexts
        self.stats["admissions"] += 1
        slots, starts, run, copies, followers = self._place(cis, t)
        copy_prefixes(st, *copies)
        self.stats["prefill_tokens"] += sum(len(ctxs[ci]) - p for ci, p in zip(run, starts, strict=True))
        logits = prefill_slots(self.arch, st, self.rope, slots, [ctxs[ci] for ci in run], starts, self.pad_id,
                               self.prefill_tokens, self._layer_fns,
                               self.fused.layers if self.fused is not None else None)
        if followers:
            copy_prefixes(st, [f for f, _, _ in followers], [lead for _, lead, _ in followers],
                          [m for _, _, m in followers])
            pos = {s: j for j, s in enumerate(slots)}
            logits = torch.cat([logits, logits[torch.tensor([pos[lead] for _, lead, _ in followers],
                                                            device=self.device)]])
            slots = slots + [f for f, _, _ in followers]
            self.stats["shared_rows"] += len(followers)
        if t > 0:
            self.stats["admitted_late"] += len(slots)
        idx = torch.tensor(slots, device=self.device, dtype=torch.long)
        rows = [self._rows[s] for s in slots]
        st.lens[idx] = torch.tensor([r.m for r in rows], device=self.device)
        st.budgets[idx] = torch.tensor([r.budget for r in rows], device=self.device)
        st.out_ids[idx] = self.pad_id
        tok, logp = self._sample(logits)
        st.out_ids[idx, 0] = tok
        st.out_logps[idx, 0] = logp.float()
        st.nsamp[idx] = 1
        st.tokens[idx] = tok
        stop = (tok[:, None] == self.stop[None, :]).any(dim=1)
        st.done[idx] = stop | (st.budgets[idx] <= 1)

    def _place(self, cis: list[int], t: int):
        """Slots for contexts `cis`: (slots to prefill, their kept-prefix lengths, their contexts, prefix copies
        (dst slots, src slots, lengths), followers [(slot, leader slot, length)] that copy a leader's prefill).
        Registers each in self._rows; an entry cloned out earlier is copied into its new slot here."""
        st, ctxs = self.state, self._contexts
        slots, starts, run, copies, followers = [], [], [], ([], [], []), []
        leaders: dict[tuple[int, ...], int] = {}
        for ci in cis:
            own = ci in self._claim
            slot = self._claim[ci] if own else self._free.pop(0)
            if not own:
                self._evict(slot)
            key = tuple(ctxs[ci])
            self._rows[slot] = _Row(ci, t, len(key), self._budgets[ci])
            if self.share_prompts and not own:
                if key in leaders:
                    followers.append((slot, leaders[key], len(key)))
                    continue
                leaders[key] = slot
            p, e = self._reuse.get(ci, (0, None))
            if t > 0 and isinstance(e, SlotRef):  # its slot may have been reused by now; a clone is safe
                p, e = 0, None
            if own:
                self.stats["kept_in_place"] += 1
            elif isinstance(e, SlotRef):
                copies[0].append(slot)
                copies[1].append(e.slot)
                copies[2].append(p)
            elif e is not None:  # an entry cloned out of a slot reused within the last call
                for li in range(len(self.arch.layers)):
                    st.k[li][slot, :, :p] = e.k[li][:, :p]
                    st.v[li][slot, :, :p] = e.v[li][:, :p]
            self.stats["reused_tokens"] += p
            slots.append(slot)
            starts.append(p)
            run.append(ci)
        return slots, starts, run, copies, followers

    def _evict(self, slot: int) -> None:
        """A slot is about to be overwritten: a kept entry of this call there is cloned out first."""
        got = self._kept_here.pop(slot, None)
        if got is None:
            return
        key, ref = got
        if self.store.pending.get(key) is ref:
            st = self.state
            self.store.pending[key] = Entry([c[slot, :, : ref.n_tokens].clone() for c in st.k],
                                            [c[slot, :, : ref.n_tokens].clone() for c in st.v])
            self.stats["cloned_out"] += 1

    def _check(self, t: int, results: dict) -> int:
        """Host check at step t: harvest finished rows, admit pending requests into free slots, or (none
        pending) compact live rows into a smaller bucket. Returns the bucket to decode next."""
        st = self.state
        self.stats["host_checks"] += 1
        occupied = sorted(self._rows)
        done = st.done[torch.tensor(occupied, device=self.device)].cpu().tolist() if occupied else []
        finished = [s for s, d in zip(occupied, done, strict=True) if d]
        self._harvest(finished, results)
        if self._pending and finished:
            self._free = sorted(self._free + finished)
            take = [self._pending.popleft() for _ in range(min(len(self._pending), len(self._free)))]
            self._admit(take, t)
            return self._cover()
        b = self._cover()
        if self._pending or not self._rows:
            return b
        target = next(x for x in self._buckets(st.rows) if x >= len(self._rows))
        if target >= b:
            return b
        return self._compact(target, t)

    def _compact(self, target: int, t: int) -> int:
        """Move the live rows to slots [0, len(live)) by a permutation of the slots below the current bucket
        (rows kept this call move with their entries), so the next steps run a `target`-row bucket."""
        st = self.state
        b = self._cover()
        live = sorted(self._rows)
        kept = sorted(self._kept_here)
        rest = [s for s in range(b) if s not in self._rows and s not in self._kept_here]
        perm = live + [s for s in kept if s < b] + rest  # new slot j takes old slot perm[j]
        width = min(st.length, max(self._fill[:b] + [r.col_bound(t) for r in self._rows.values()]) + 1)
        idx = torch.tensor(perm, device=self.device, dtype=torch.long)
        for cache in (*st.k, *st.v):
            cache[:b, :, :width] = cache[:b, :, :width].index_select(0, idx)
        for tns in st.small():
            tns[:b] = tns[:b].index_select(0, idx)
        new_of = {old: new for new, old in enumerate(perm)}
        self._rows = {new_of[s]: r for s, r in self._rows.items()}
        moved = {}
        for s, (key, ref) in self._kept_here.items():
            if s < b:
                ref.slot = new_of[s]
                s = new_of[s]
            moved[s] = (key, ref)
        self._kept_here = moved
        self._fill[:b] = [self._fill[old] for old in perm]
        return target

    def _harvest(self, slots: list[int], results: dict) -> None:
        """Read finished rows' samples; with keep_kv, leave each one's KV in its slot as a kept entry."""
        if not slots:
            return
        st = self.state
        idx = torch.tensor(slots, dtype=torch.long, device=self.device)
        ids = st.out_ids.index_select(0, idx).cpu().tolist()
        lps = st.out_logps.index_select(0, idx).cpu().tolist()
        for s, i, lp in zip(slots, ids, lps, strict=True):
            r = self._rows.pop(s)
            results[r.ci] = (i, lp)
            k = self._turn_len(i, r.budget)
            self._fill[s] = r.m + k - 1
            if self.keep_kv and self.store.wants(r.m + k - 1):
                key = tuple(self._contexts[r.ci]) + tuple(i[: k - 1])
                ref = SlotRef(s, r.m + k - 1)
                self.store.put(key, ref)
                self._kept_here[s] = (key, ref)

    def _turn_len(self, out_ids: list[int], budget: int) -> int:
        """Tokens the turn keeps: up to and including the first stop id, at most `budget`."""
        row = out_ids[:budget]
        end = next((j for j, t in enumerate(row) if t in self._stops), None)
        return len(row) if end is None else end + 1

    def _to_sample(self, ids: list[int], logps: list[float], budget: int) -> Sample:
        k = self._turn_len(ids, budget)
        stopped = k > 0 and int(ids[k - 1]) in self._stops
        return Sample(tuple(ids[:k]), tuple(logps[:k]), hit_token_limit=not stopped)


def pick_token(scores: torch.Tensor, race: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exponential race's pick: scores [b, V] (any float dtype: logits, or warped fp32 scores) and race [b, V]
    float32 (i.i.d. Exp(1) noise) -> ([b] long token, [b] float32 log-prob of it under softmax(scores)).

    token = argmax_v p_v / E_v with p = softmax(scores) in float32: P(token = v) = p_v exactly (the minimum of
    independent E_v / p_v ~ Exp(p_v) is attained at v with probability p_v / sum p; the Gumbel-max trick in
    exponential form, as vLLM samples). A pure function, so torch.compile fuses it (FastSampler's compile_decode):
    the log-softmax, the race and the gather read the logits in one or two passes instead of eager's fp32 copies.
    """
    logp_all = torch.log_softmax(scores.float(), dim=-1)
    tok = (logp_all.exp() / race).argmax(dim=-1)
    return tok, logp_all.gather(1, tok[:, None]).squeeze(1)


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
