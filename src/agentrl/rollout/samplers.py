"""The registry of token samplers: one name, help line and builder each, read by RLConfig validation, the
CLI's `--sampler` choices and help, and the run session. Not a sampler itself (agentrl.rollout.hf_sampler,
agentrl.rollout.fast_sampler).

A builder takes (model, tokenizer, SamplingConfig, max_batch, enable_thinking) and returns the driver's
`SampleFn` (contexts and budgets in, `Sample`s out) bound to that model, or None for the driver's
built-in HF `generate` path. `enable_thinking` picks the chat template's thinking-mode turn format,
whose end-of-turn ids are the sampler's stop ids.
Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.registry import Registry


@dataclass(frozen=True)
class SamplerSpec:
    """One registered sampler: `name` (the --sampler value), `help` (one line), `build` (see module doc),
    `supports_lora`: it samples through the model's forward, so peft adapters are applied (a sampler that
    reads the base weights directly would sample another policy than the one trained)."""

    name: str
    help: str
    build: Callable[[Any, Any, Any, int, bool], Any]
    supports_lora: bool = True


def _hf(model: Any, tokenizer: Any, cfg: Any, max_batch: int, enable_thinking: bool) -> None:
    return None  # the driver calls agentrl.rollout.hf_sampler.sample_turns itself


def _fast(model: Any, tokenizer: Any, cfg: Any, max_batch: int, enable_thinking: bool) -> Any:
    from agentrl.rollout.fast_sampler import fast_sampler_for

    return fast_sampler_for(model, tokenizer, cfg, max_batch=max_batch, enable_thinking=enable_thinking)


SAMPLERS: Registry[SamplerSpec] = Registry("a sampler", (
    SamplerSpec("hf", "batched HF generate with the recording logits processor (any causal LM)", _hf),
    SamplerSpec("fast", "static KV cache + CUDA graphs, Qwen3/Qwen2/Llama (agentrl.rollout.fast_sampler)", _fast,
                supports_lora=False),
))


def sampler_help() -> str:
    """The --sampler help text, one entry per registered sampler."""
    return SAMPLERS.help("Token sampler", lambda s: f"{s.name} ({s.help})")


def get_sampler(name: str, *, flag: str = "--sampler") -> SamplerSpec:
    """The registered SamplerSpec called `name`; ValueError naming `flag` and the registered names."""
    return SAMPLERS.lookup(name, flag=flag)


def build_sampler(name: str, model: Any, tokenizer: Any, cfg: Any, *, max_batch: int,
                  enable_thinking: bool = False) -> Any:
    """The `SampleFn` of sampler `name` for `model` (None: the driver's HF generate path).

    Args:
        cfg: agentrl.rollout.hf_sampler.SamplingConfig; max_batch: episodes sampled together;
        enable_thinking: the chat template's thinking-mode turn format (its stop ids).

    Raises: ValueError for an unknown name, or whatever the sampler's builder raises for this model.
    """
    return get_sampler(name).build(model, tokenizer, cfg, max_batch, enable_thinking)
