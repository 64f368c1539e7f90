"""Batched HF `generate` sampler that records the sampler's log-probability of every sampled token.

Not the episode loop (agentrl.rollout.driver) and not the trainer's log-prob recomputation.
The distribution sampled is the trainer's: temperature 1, top-k and top-p off unless asked. The model's
own generation_config (Qwen3 ships top_k=20, top_p=0.95, temperature=0.6) is ignored: a fresh
GenerationConfig with neutral values is passed, and temperature/top-k/top-p (if asked) are applied by
our recording processor so the recorded log-probs are those of the distribution actually sampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


@dataclass(frozen=True)
class SamplingConfig:
    """Sampler knobs.

    Attributes:
        max_new_tokens: tokens per assistant turn (a turn that reaches it has no end-of-turn token).
        temperature: softmax temperature (1.0 = the policy's distribution).
        top_k: keep the k most likely tokens (0 = off).
        top_p: nucleus mass (1.0 = off).
        gen_batch: sequences per `generate` call (bounds KV-cache memory).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    gen_batch: int = 16

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.gen_batch < 1 or self.temperature <= 0:
            raise ValueError(f"bad SamplingConfig {self}: max_new_tokens, gen_batch, temperature must be > 0")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"bad SamplingConfig {self}: need top_k >= 0 and 0 < top_p <= 1")


@dataclass(frozen=True)
class Sample:
    """One sampled turn: `ids` [n] as sampled (ending with the end-of-turn id unless `hit_token_limit`),
    `logprobs` [n] float sampler log-probs (natural log), `hit_token_limit` (no end-of-turn token)."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    hit_token_limit: bool


def _ids(value: Any) -> list[int]:
    """An `eos_token_id` field (None, an int, or a list of ints) as a list of ints."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def stop_token_ids(model: Any, tokenizer: Any, turn_end_ids: tuple[int, ...] | list[int] = ()) -> tuple[int, ...]:
    """Every id that ends a sampled turn: the template's end-of-turn id first, then each id of the model's
    `generation_config.eos_token_id` (Qwen3 ships `[<|im_end|>, <|endoftext|>]`; an int or a list), then
    the tokenizer's `eos_token_id`; duplicates dropped, order kept.

    A turn that samples any of them is finished (not truncated); HF `generate` and vLLM stop on the
    whole list too. `model` may be None (an external sampler): the tokenizer's ids are used then.

    Returns:
        tuple[int, ...], never empty when `turn_end_ids` is not.
    """
    gen = getattr(model, "generation_config", None)
    ids = list(turn_end_ids[:1]) + _ids(getattr(gen, "eos_token_id", None))
    ids += _ids(getattr(tokenizer, "eos_token_id", None))
    return tuple(dict.fromkeys(ids))


def sampling_warpers(cfg: SamplingConfig) -> LogitsProcessorList:
    """HF's temperature / top-k / top-p warpers for `cfg` (empty when sampling the policy as is)."""
    warpers = []
    if cfg.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(cfg.temperature))
    if cfg.top_k:
        warpers.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1.0:
        warpers.append(TopPLogitsWarper(cfg.top_p))
    return LogitsProcessorList(warpers)


class SampledLogprobProcessor(LogitsProcessor):
    """Samples the next token itself and records its log-prob; HF `generate` then runs greedily.

    Each call: apply temperature / top-k / top-p (HF would apply them after custom processors), take
    one step of log-softmax [B, V], draw one token per row by inverse-CDF sampling (a float64 cumulative
    sum and one uniform per row: an exact draw from the distribution, using the torch RNG), record
    that token's log-prob, and return scores that are 0 at the drawn token and -inf elsewhere, so the
    greedy step picks it. This replaces `torch.multinomial` over the vocabulary (one exponential
    variate per vocabulary entry and row, the dominant cost of a CPU decode step with a 152k vocab).
    Memory: one [B, V] float32 tensor per step, never the whole [B, T, V].
    """

    def __init__(self, cfg: SamplingConfig, prompt_len: int):
        self.warpers = sampling_warpers(cfg)
        self.prompt_len = prompt_len
        self.steps: list[torch.Tensor] = []  # each [B]: log-prob of the token drawn at that step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = self.warpers(input_ids, scores)
        logp = torch.log_softmax(scores.float(), dim=-1)  # [B, V]
        cdf = logp.double().exp().cumsum(dim=-1)  # [B, V], last column ~ 1
        u = torch.rand(cdf.shape[0], 1, dtype=torch.float64, device=cdf.device) * cdf[:, -1:]
        drawn = torch.searchsorted(cdf, u).clamp_(max=cdf.shape[1] - 1)  # [B, 1]
        # a token of probability 0 can only be hit through rounding at the CDF's flat end: step back
        bad = torch.isinf(logp.gather(-1, drawn))
        if bool(bad.any()):
            drawn = torch.where(bad, logp.argmax(dim=-1, keepdim=True), drawn)
        self.steps.append(logp.gather(-1, drawn).squeeze(-1).cpu())
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter_(-1, drawn, 0.0)

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[B, T_new] log-probs of the generated tokens (after `generate` returns `sequences`)."""
        n_new = sequences.shape[1] - self.prompt_len
        if not self.steps:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.steps[:n_new], dim=1)


class PerRowBudget(StoppingCriteria):
    """Stops row i once it has generated `budgets[i]` new tokens (per-episode context budget)."""

    def __init__(self, budgets: list[int], prompt_len: int):
        self.budgets = torch.tensor(budgets)
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        n_new = input_ids.shape[1] - self.prompt_len
        return (self.budgets <= n_new).to(input_ids.device)


def _left_pad(contexts: list[list[int]], pad_id: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] ids and attention mask, left-padded so every row's next token is at column L."""
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), width), dtype=torch.long)
    for i, c in enumerate(contexts):
        ids[i, width - len(c) :] = torch.tensor(c, dtype=torch.long)
        mask[i, width - len(c) :] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def _generate_chunk(model, contexts, budgets, *, stop_ids, pad_id, cfg) -> list[Sample]:
    device = next(model.parameters()).device
    ids, mask = _left_pad(contexts, pad_id, str(device))
    width = ids.shape[1]
    rec = SampledLogprobProcessor(cfg, width)
    gen_cfg = GenerationConfig(
        do_sample=False, max_new_tokens=max(budgets), temperature=None, top_k=None, top_p=None, min_p=None,
        typical_p=1.0, repetition_penalty=1.0, eos_token_id=list(stop_ids), pad_token_id=pad_id,
        bos_token_id=None, num_beams=1, use_cache=True,
    )
    # generate() fills every field left None from model.generation_config (Qwen3: top_k=20, top_p=0.95,
    # temperature=0.6, ...); swap in a blank one so nothing the trainer does not know leaks in.
    saved, model.generation_config = model.generation_config, GenerationConfig()
    try:
        out = model.generate(
            input_ids=ids, attention_mask=mask, generation_config=gen_cfg,
            logits_processor=LogitsProcessorList([rec]),
            stopping_criteria=StoppingCriteriaList([PerRowBudget(budgets, width)]),
        )
    finally:
        model.generation_config = saved
    logps = rec.finish(out)
    new = out[:, width:].cpu()
    samples = []
    for i, budget in enumerate(budgets):
        row = new[i, :budget].tolist()
        stop = next((j for j, t in enumerate(row) if t in stop_ids), None)
        n = len(row) if stop is None else stop + 1
        samples.append(Sample(tuple(row[:n]), tuple(logps[i, :n].tolist()), hit_token_limit=stop is None))
    return samples


def sample_turns(
    model: Any,
    contexts: list[list[int]],
    *,
    stop_ids: tuple[int, ...],
    pad_id: int,
    cfg: SamplingConfig = SamplingConfig(),
    max_new_tokens: list[int] | None = None,
) -> list[Sample]:
    """Sample one assistant turn for each context, `cfg.gen_batch` contexts per `generate` call.

    Args:
        model: an HF causal LM (any dtype/device).
        contexts: B token-id lists (prompt + everything so far), unpadded; left-padded here.
        stop_ids: ids that end a turn (`stop_token_ids`: the end-of-turn token and every end-of-sequence id);
            a turn ends after the first one sampled (it is kept, and the turn is not `hit_token_limit`).
        pad_id: pad token id (masked out; never attended to).
        max_new_tokens: per-context token budgets (default `cfg.max_new_tokens` each; each >= 1).

    Returns:
        B `Sample`s, in the order of `contexts`; each holds only sampled ids (the padding `generate` writes
        after a row's stop token or budget is cut off).
    """
    budgets = max_new_tokens or [cfg.max_new_tokens] * len(contexts)
    if len(budgets) != len(contexts) or min(budgets, default=1) < 1 or any(not c for c in contexts):
        raise ValueError("sample_turns: need one budget >= 1 per non-empty context")
    out: list[Sample] = []
    for k in range(0, len(contexts), cfg.gen_batch):
        out += _generate_chunk(
            model, contexts[k : k + cfg.gen_batch], budgets[k : k + cfg.gen_batch],
            stop_ids=tuple(stop_ids), pad_id=pad_id, cfg=cfg,
        )
    return out
