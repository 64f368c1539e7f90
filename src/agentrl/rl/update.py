"""One training update: minibatches, exact microbatch gradient accumulation, clipping, optimizer steps.

Not the rollout or the trainer loop. The exactness rule (DESIGN.md rule 4): each minibatch has one
normalizer, its total policy tokens (zero-advantage rows included), so summing microbatch losses gives
the minibatch loss and microbatching never changes the gradient; zero-advantage rows contribute exactly
zero gradient when there is no KL term, so their backward pass is skipped.

Memory-aware: a minibatch that runs out of accelerator memory runs again with microbatches half as large (rows or
token budget) until it fits, and the sizes that fit are kept for the model (`_accumulate_fitting`); by the
exactness rule the gradient does not change.

Compiled decoder layers (compile_decoder_layers, RLConfig.update.compile_layers resolved by
resolve_compile_layers) run compiled inside the update only (compiled_layers_active), eager everywhere else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import resource
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from agentrl.models.lora import reference
from agentrl.rl.batch import TrainBatch
from agentrl.rl.logprobs import policy_logprobs
from agentrl.rl.loss import policy_loss
from agentrl.rl.offload import offloaded, resolve_activation_offloading
from agentrl.rl.sections import COMPILE_LAYERS

log = logging.getLogger("agentrl")
# per model, the microbatch limits (micro, micro_tokens) that fit after an out-of-memory backoff (_accumulate_fitting)
_FITTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
MIN_MICRO_TOKENS = 256  # the smallest token budget the backoff halves down to
# RLConfig.update.compile_layers "auto" compiles the decoder layers on CUDA for runs of at least this many steps:
# on the H200 (bench/README.md, eighth session, 2026-12-03; Qwen3-0.6B bf16, RLConfig's microbatches, checkpointing)
# the compiled update ran 69.4k tokens/s against 38.0k eager, saving 0.65 s per update, and its first update paid
# ~25 s of compile: paid back after about 40 updates
COMPILE_PAYBACK_STEPS = 40

_WEIGHTED = ("ratio_mean", "clip_frac_low", "clip_frac_high", "clip_frac", "kl_sampler", "kl_ref",
             "logprob_gap_abs", "logprob_gap", "entropy", "outside_support")


def microbatch_rows(active: torch.Tensor, row_tokens: torch.Tensor, micro: int, micro_tokens: int = 0
                    ) -> list[torch.Tensor]:
    """Split the trained rows `active` (1-D int64 row indices, in order) into microbatches.

    micro_tokens = 0: `micro` rows at a time. micro_tokens > 0 (token-budget microbatching, verl's
    use_dynamic_bsz / ppo_max_token_len_per_gpu): consecutive rows are grouped while their real tokens
    (`row_tokens[row]`, [N] attention-mask sums) add up to at most `micro_tokens`; a row longer than the
    budget runs alone; `micro` is not used. Order is kept, so every row is trained exactly once either way
    and the minibatch gradient is the same (one normaliser per minibatch: the microbatch losses add up).

    Raises: ValueError for micro < 1 or micro_tokens < 0.
    """
    if micro < 1 or micro_tokens < 0:
        raise ValueError(f"microbatch_rows: need micro >= 1 and micro_tokens >= 0, got {micro}, {micro_tokens}")
    if not micro_tokens:
        return [active[s: s + micro] for s in range(0, active.numel(), micro)]
    out: list[torch.Tensor] = []
    start, used = 0, 0
    tokens = row_tokens.cpu()[active].tolist() if active.numel() else []
    for i, n in enumerate(tokens):
        if i > start and used + n > micro_tokens:
            out.append(active[start:i])
            start, used = i, 0
        used += n
    if active.numel():
        out.append(active[start:])
    return out


def accumulate_gradients(
    model: nn.Module, batch: TrainBatch, cfg: Any, *, normalizer: float, ref_model: nn.Module | None = None
) -> dict[str, float]:
    """Backward the minibatch loss into `.grad`, one microbatch at a time (grads ADD to existing ones).

    Args:
        batch: the minibatch (any N rows).
        cfg: an RLConfig: its update section's micro (micro_tokens > 0: token-budget microbatches instead,
            see microbatch_rows), clip_low, clip_high, kl_coef, logprob_chunk_rows, pack_rows (padding-free
            trunk where agentrl.rl.packing.packable allows, else the padded forward), activation_offloading
            (agentrl.rl.offload.resolve_activation_offloading, with the model's own checkpointing); its sampling
            section's temperature, top_k, top_p.
        normalizer: the minibatch's policy-token count (callers pass batch.num_policy_tokens).
        ref_model: frozen reference, required when cfg.update.kl_coef > 0: a frozen copy, or (LoRA) an
            agentrl.models.lora.AdapterOffReference of `model`.

    Returns:
        stats: loss (the minibatch loss = sum of microbatch losses), token-weighted means of the
        policy_loss stats over the rows that were run, rows_skipped, tokens_trained.

    Layers compiled by compile_decoder_layers run compiled in here (forward, backward and the reference's
    forward: compiled_layers_active), and eager everywhere else.
    """
    kl_on = cfg.update.kl_coef > 0
    if kl_on and ref_model is None:
        raise ValueError("accumulate_gradients: cfg.update.kl_coef > 0 needs ref_model")
    pack = None if cfg.update.pack_rows else False
    active = torch.arange(batch.num_rows) if kl_on else (batch.advantages != 0).nonzero().flatten().cpu()
    totals: dict[str, float] = {"loss": 0.0, "tokens_trained": 0.0}
    offload = resolve_activation_offloading(cfg.update.activation_offloading, next(model.parameters()).device,
                                            layers_checkpointed(model))
    with compiled_layers_active():  # layers compiled for the update run compiled here only
        for rows in microbatch_rows(active, batch.attention_mask.sum(1), cfg.update.micro, cfg.update.micro_tokens):
            mb = batch.select(rows)
            if mb.num_policy_tokens == 0:
                continue
            with offloaded(model, offload):  # saved activations in host memory (agentrl.rl.offload)
                loss, st = _microbatch_loss(model, mb, cfg, normalizer, ref_model if kl_on else None, pack)
            loss.backward()
            totals["loss"] += float(loss.detach())
            totals["tokens_trained"] += st["tokens"]
            for k in _WEIGHTED:
                if k in st:
                    totals[k] = totals.get(k, 0.0) + st[k] * st["tokens"]
    for k in _WEIGHTED:
        if k in totals:
            totals[k] /= max(totals["tokens_trained"], 1.0)
    totals["rows_skipped"] = float(batch.num_rows - active.numel())
    return totals


def _microbatch_loss(model: nn.Module, mb: TrainBatch, cfg: Any, normalizer: float, ref_model: nn.Module | None,
                     pack: bool | None) -> tuple[torch.Tensor, dict[str, float]]:
    """policy_loss of one microbatch `mb` (its share of the minibatch loss: `normalizer` is the minibatch's),
    with the k3 KL term against `ref_model` when given."""
    # the sampled distribution: the sampler's temperature AND its top-k/top-p masks (sampler = trainer)
    logp, ent = policy_logprobs(model, mb.input_ids, mb.attention_mask, mb.policy_mask,
                                chunk_rows=cfg.update.logprob_chunk_rows, temperature=cfg.sampling.temperature,
                                top_k=cfg.sampling.top_k or 0, top_p=cfg.sampling.top_p, pack=pack,
                                head_grad_into=True)  # accumulate_gradients runs loss.backward() and reads .grad
    ref_logp = None
    if ref_model is not None:
        # the KL anchor is the reference's full tempered distribution, not a truncated one: its support
        # covers every sampled token, so k3 stays finite when the policy's kept set moves
        with torch.no_grad(), reference(ref_model) as ref:  # LoRA: the policy with adapters off
            ref_logp, _ = policy_logprobs(ref, mb.input_ids, mb.attention_mask, mb.policy_mask,
                                          chunk_rows=cfg.update.logprob_chunk_rows,
                                          temperature=cfg.sampling.temperature, pack=pack)
    return policy_loss(logp, mb.old_logprobs, mb.advantages, mb.policy_mask, clip_low=cfg.update.clip_low,
                       clip_high=cfg.update.clip_high, normalizer=float(normalizer), ref_logp=ref_logp,
                       kl_coef=cfg.update.kl_coef, entropy=ent, weights=mb.is_weights)


def minibatch_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    cfg: Any,
    *,
    ref_model: nn.Module | None = None,
    generator: torch.Generator | None = None,
    minibatches: int | None = None,
) -> dict[str, float]:
    """cfg.update.epochs passes over `batch`, each split into cfg.update.minibatches optimizer steps (or `minibatches`,
    e.g. fewer when a black-box step has fewer rows than cfg.update.minibatches).

    Each minibatch: normalizer = its policy tokens (zero-advantage rows count), gradients accumulated
    over microbatches of cfg.update.micro rows (zero-advantage rows skipped unless cfg.update.kl_coef > 0), global
    grad-norm clipped to cfg.update.max_grad_norm, one optimizer step. A minibatch with nothing to train
    (all advantages zero, no KL) leaves `.grad` None, so the optimizer step changes nothing.

    Args:
        batch: [N, L] TrainBatch; rows are shuffled per epoch when `generator` is given, else kept in order.
        cfg: RLConfig (cfg.update: epochs, minibatches, micro, clip_low, clip_high, kl_coef, max_grad_norm, ...).

    Returns:
        metrics averaged over optimizer steps (loss, grad_norm [pre-clip], grad_norm_max, token-weighted
        clip_frac*, ratio_mean, entropy, kl_sampler, kl_ref [with ref_model], logprob_gap*; NaN when no
        token was trained, e.g. all advantages zero), plus optimizer_steps, rows_skipped,
        tokens_trained, policy_tokens, sampler_nll (-mean sampler log-prob over ALL policy tokens: an
        unbiased estimate of the sampler's entropy, including rows skipped in backward), tokens_per_s
        (policy tokens of the batch times epochs / wall-clock s), peak_memory_bytes, update_s.
    """
    n_mb = cfg.update.minibatches if minibatches is None else minibatches
    if n_mb > batch.num_rows or n_mb < 1:
        raise ValueError(f"minibatch_step: {n_mb} minibatches need 1..{batch.num_rows} (the batch's rows)")
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    batch = batch.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    params = [p for p in model.parameters() if p.requires_grad]
    per_step: list[dict[str, float]] = []
    for _ in range(cfg.update.epochs):
        order = torch.randperm(batch.num_rows, generator=generator) if generator is not None else torch.arange(batch.num_rows)
        for rows in torch.tensor_split(order, n_mb):
            per_step.append(_one_minibatch(model, optimizer, batch.select(rows), cfg, params, ref_model))
    return update_metrics(per_step, batch, epochs=cfg.update.epochs, has_ref=ref_model is not None,
                          elapsed_s=time.perf_counter() - t0, device=device)


def update_metrics(per_step: list[dict[str, float]], batch: TrainBatch, *, epochs: int, has_ref: bool,
                   elapsed_s: float, device: torch.device) -> dict[str, float]:
    """One update's metrics from its optimizer steps' own (`per_step`, one dict each): the mean over
    steps of each metric (token-weighted ones NaN when no token was trained, kl_ref only with a
    reference), grad_norm_max, summed rows_skipped / tokens_trained, and the batch's policy_tokens,
    sampler_nll (nats), optimizer_steps, update_s (`elapsed_s`), tokens_per_s (policy tokens x epochs
    / s) and peak_memory_bytes. Shared by minibatch_step and agentrl.scale's data-parallel update."""
    out = _mean_metrics(per_step)
    for k in _WEIGHTED:  # same keys every step; NaN (stored as null) when no token was trained
        if k != "kl_ref" or has_ref:
            out.setdefault(k, math.nan)
    out["grad_norm_max"] = max(s["grad_norm"] for s in per_step)
    for k in ("rows_skipped", "tokens_trained"):
        out[k] = sum(s[k] for s in per_step)
    pm = batch.policy_mask.bool()
    out["policy_tokens"] = float(pm.sum())
    out["sampler_nll"] = float(-batch.old_logprobs[pm].double().mean()) if pm.any() else 0.0
    out["optimizer_steps"] = float(len(per_step))
    out["update_s"] = elapsed_s
    out["tokens_per_s"] = out["policy_tokens"] * epochs / max(elapsed_s, 1e-9)
    out["peak_memory_bytes"] = float(peak_memory_bytes(device))
    return out


def _one_minibatch(model, optimizer, mb: TrainBatch, cfg, params, ref_model) -> dict[str, float]:
    optimizer.zero_grad(set_to_none=True)
    normalizer = mb.num_policy_tokens
    if normalizer == 0:
        return {"loss": 0.0, "grad_norm": 0.0, "rows_skipped": float(mb.num_rows), "tokens_trained": 0.0}
    st = _accumulate_fitting(model, mb, cfg, normalizer, ref_model)
    with_grad = [p for p in params if p.grad is not None]
    if with_grad:
        st["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(with_grad, cfg.update.max_grad_norm))
        optimizer.step()
    else:
        st["grad_norm"] = 0.0
    optimizer.zero_grad(set_to_none=True)
    return st


def smaller_microbatches(update: Any) -> Any | None:
    """The update section with microbatches half as large: micro_tokens halved (token budgets, down to
    MIN_MICRO_TOKENS), else micro rows halved (down to 1); None when already at the floor."""
    if update.micro_tokens:
        half = update.micro_tokens // 2
        return dataclasses.replace(update, micro_tokens=half) if half >= MIN_MICRO_TOKENS else None
    return dataclasses.replace(update, micro=update.micro // 2) if update.micro > 1 else None


def _accumulate_fitting(model, mb: TrainBatch, cfg, normalizer: float, ref_model) -> dict[str, float]:
    """accumulate_gradients, memory-aware: on an out-of-memory error the minibatch runs again from zero gradients
    with microbatches half as large (smaller_microbatches), until it fits or the floor is reached (then the error
    propagates, and the run's failure names the settings to change: agentrl.rl.run_folder.memory_hint). The limits
    that fit are kept for `model` for the rest of the run, so later steps do not pay the failed attempt again.
    The gradient is the same at any microbatch size (one normalizer per minibatch, module docstring)."""
    fitted = _FITTED.get(model)
    if fitted is not None:
        cfg = dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, micro=fitted[0], micro_tokens=fitted[1]))
    while True:
        try:
            return accumulate_gradients(model, mb, cfg, normalizer=normalizer, ref_model=ref_model)
        except torch.OutOfMemoryError as e:
            smaller = smaller_microbatches(cfg.update)
            if smaller is None:
                raise
            why = str(e).splitlines()[0][:160]
        model.zero_grad(set_to_none=True)  # the partial sums of the microbatches that ran
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log.warning("update out of memory (%s) at micro %d, micro_tokens %d: running the minibatch again with "
                    "micro %d, micro_tokens %d, and keeping that for the rest of the run", why, cfg.update.micro,
                    cfg.update.micro_tokens, smaller.micro, smaller.micro_tokens)
        cfg = dataclasses.replace(cfg, update=smaller)
        _FITTED[model] = (smaller.micro, smaller.micro_tokens)


def _mean_metrics(per_step: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in per_step for k in s}
    return {k: sum(s[k] for s in per_step if k in s) / sum(1 for s in per_step if k in s) for k in sorted(keys)}


def peak_memory_bytes(device: torch.device) -> int:
    """Peak accelerator memory allocated by torch on a CUDA device since the last reset; on CPU, the
    process's peak resident set size (ru_maxrss; KiB on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def adamw(params: Iterable[torch.Tensor], *, lr: float, weight_decay: float = 0.0,
          betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.AdamW:
    """torch.optim.AdamW over `params` (decoupled weight decay, Loshchilov & Hutter 2019), fused where it can be:
    every parameter a plain floating-point tensor on a CUDA device (not a DTensor, e.g. FSDP2's shards).

    The fused kernel updates each parameter in one pass, computing in fp32 whatever the parameter's dtype, and
    allocates nothing; torch's default there (foreach) builds a full copy of the second moments for its square
    root, so a step's peak was the gradients plus that copy (2.22 GiB above weights and optimizer state for
    Qwen3-0.6B in bf16: bench/profile_update.py, issue 26 item 5). Hugging Face's Trainer defaults to the fused
    kernel as well (optim "adamw_torch_fused"). Elsewhere (CPU, DTensor) torch's default is kept. The state
    dict is the same either way, so checkpoints load across the two.

    Raises: ValueError as torch.optim.AdamW (e.g. an empty parameter list).
    """
    params = list(params)
    fused = bool(params) and all(type(p) in (torch.Tensor, nn.Parameter) and p.is_cuda and p.is_floating_point()
                                 for p in params)
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused or None)


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Turn on non-reentrant activation checkpointing of the decoder layers of an HF model, through
    `activation_checkpointing_enable` (transformers >= 5.2x) or `gradient_checkpointing_enable` (older).
    The gradient is unchanged (tested); the model must be in train mode for HF to checkpoint.

    Raises: ValueError if the model supports neither.
    """
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise ValueError(f"enable_gradient_checkpointing: {type(model).__name__} supports no activation checkpointing")
    model.train()


def layers_checkpointed(model: nn.Module) -> bool:
    """Whether any of `model`'s modules (an HF model's decoder layers, plain or under peft) runs checkpointed:
    HF's `gradient_checkpointing` attribute set True by enable_gradient_checkpointing, whatever the transformers
    version calls the model-level property."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def checkpoint_if_configured(cfg: Any, model: nn.Module) -> bool:
    """Turn on activation checkpointing (enable_gradient_checkpointing) when `cfg.update.gradient_checkpointing`
    is set and the run trains (`cfg.run.steps > 0`). On by default (as in TRL's GRPOConfig), so a model that
    cannot checkpoint gets a logged warning and trains without it instead of an error. Returns whether
    checkpointing is on."""
    if not (cfg.update.gradient_checkpointing and cfg.run.steps > 0):
        return False
    try:
        enable_gradient_checkpointing(model)
    except ValueError as e:
        log.warning("gradient checkpointing is on but %s; training without it (--no-gradient-checkpointing "
                    "silences this)", e)
        return False
    return True


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of an HF causal LM (plain or wrapped by peft): `get_decoder().layers`.

    Raises: ValueError if the model has none (not a decoder-only HF model).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, "model", None)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"decoder_layers: {type(model).__name__} has no decoder layers (get_decoder().layers)")
    return list(layers)


class _CompiledScope:
    """Where the compiled decoder layers run: in a thread inside `compiled_layers_active()` (the update's forward,
    and its backward where it runs in that thread: on the CPU), and in a backward pass while such a context is open
    in some thread (CUDA runs backward on autograd's per-device worker thread, so a checkpointed layer's recompute
    is not in the update's thread; no other thread of agentrl runs a backward pass: rollouts, evaluation and
    scoring run without gradients)."""

    def __init__(self) -> None:
        self._local = threading.local()  # .depth: compiled_layers_active() contexts open in this thread
        self._open = 0  # contexts open in any thread
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self._lock:
            self._open += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1
            with self._lock:
                self._open -= 1

    def here(self) -> bool:
        """Whether a compiled layer called now runs its compiled forward."""
        if getattr(self._local, "depth", 0):
            return True
        return self._open > 0 and torch._C._current_graph_task_id() != -1  # -1: not inside a backward pass


_SCOPE = _CompiledScope()


def compiled_layers_active() -> contextlib.AbstractContextManager[None]:
    """Context manager: inside it, in this thread, layers compiled by compile_decoder_layers run their compiled
    forward (and their checkpointed recompute in this forward's backward, wherever autograd runs it: _CompiledScope);
    everywhere else they run eager. Nests; accumulate_gradients enters it around every microbatch's forward and
    backward, so every caller of the update gets it."""
    return _SCOPE.active()


class _CompiledCall:
    """A layer's `_compiled_call_impl` (what nn.Module.__call__ runs when set): the torch.compile'd `_call_impl`
    when _SCOPE.here(), else the layer's own eager `_call_impl`. nn.Module.__getstate__ drops it, so a deepcopy
    of the model (the KL reference, the asynchronous rollout copy, the data-parallel engine) runs eager."""

    __slots__ = ("compiled", "layer")

    def __init__(self, layer: nn.Module, compiled: Any) -> None:
        self.layer, self.compiled = layer, compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _SCOPE.here():
            return self.compiled(*args, **kwargs)
        return self.layer._call_impl(*args, **kwargs)


def compile_decoder_layers(model: nn.Module, *, dynamic: bool = True, mode: str | None = None,
                           backend: str | Callable = "inductor") -> int:
    """torch.compile every decoder layer's forward in place, for the update only: the compiled forward runs inside
    compiled_layers_active() (accumulate_gradients enters it), and every other call of the layer (HF `generate`,
    evaluation, scoring, another thread) runs the eager forward. As `nn.Module.compile` (the module, its
    parameters and its hooks stay as they are; gradient checkpointing and peft adapters added later keep
    working), but the layer's `_compiled_call_impl` is a dispatcher between the two (_CompiledCall). Inductor
    fuses each layer's element-wise work (RMSNorm, RoPE, SiLU-gating, residual adds) around the matmuls and
    attention.

    dynamic=True (default) traces the token count symbolically, so packed microbatches of any length reuse one
    graph instead of recompiling per length. The first update pays the compile (tens of seconds on a GPU); the
    values equal the eager ones up to float rounding (tested: fp32, 1e-5). `backend` is torch.compile's (tests
    pass a recording one). agentrl's FastSampler calls the layers' submodules directly and is unaffected.

    Returns: the number of layers compiled. Raises: ValueError as decoder_layers.
    """
    layers = decoder_layers(model)
    for layer in layers:
        compiled = torch.compile(layer._call_impl, dynamic=dynamic, mode=mode, backend=backend)
        layer._compiled_call_impl = _CompiledCall(layer, compiled)
    return len(layers)


def compiled_layer_count(model: nn.Module) -> int:
    """How many of `model`'s modules compile_decoder_layers compiled (0 for an eager model)."""
    return sum(isinstance(getattr(m, "_compiled_call_impl", None), _CompiledCall) for m in model.modules())


def resolve_compile_layers(setting: str, device: torch.device | str, steps: int) -> bool:
    """Whether a run of `steps` training steps with the policy on `device` compiles its decoder layers for the
    update (RLConfig.update.compile_layers = `setting`): "on" when it trains (steps > 0), "off" never, "auto" on a
    CUDA device for at least COMPILE_PAYBACK_STEPS steps (the compile's payback), else not.

    Raises: ValueError for another setting.
    """
    if setting not in COMPILE_LAYERS:
        raise ValueError(f"resolve_compile_layers: expected 'auto', 'on' or 'off', got {setting!r}")
    if setting == "auto":
        return torch.device(device).type == "cuda" and steps >= COMPILE_PAYBACK_STEPS
    return setting == "on" and steps > 0
