"""The FSDP2 training engine of a data-parallel run: a sharded copy of the policy, its optimizer, and
the full-state conversions that keep checkpoints in agentrl's single-process format. Not the loss.

Layout (torch.distributed.fsdp.fully_shard, FSDP2): every decoder layer is its own FSDP unit and the
root unit is `LogprobEngine`, a module whose forward IS agentrl.rl.logprobs.policy_logprobs. The
root owns everything outside the layers (embeddings, final norm, LM head), so its parameters are
gathered once per forward, however many LM-head chunks policy_logprobs runs on this rank (the head
is called outside the HF model's own forward, which FSDP could not see otherwise).

The policy itself (`RunSession.model`) stays a plain, unsharded module on every rank: it samples
rollouts (HF generate or the fast sampler: no collective per generated token) and is refreshed from
the engine after every optimizer step (`copy_full_weights`), as verl's hybrid engine refreshes its
inference engine. Memory per rank: full weights once, plus 1/world of parameters, gradients and AdamW
state.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from agentrl.rl.logprobs import policy_logprobs


class LogprobEngine(nn.Module):
    """Wraps a causal LM so that `engine(input_ids, attention_mask, policy_mask, ...)` returns
    policy_logprobs(lm, ...) (logp [N, L], entropy [N, L]); see agentrl.rl.logprobs for shapes."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, policy_mask: torch.Tensor,
                **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """policy_logprobs(lm, input_ids, attention_mask, policy_mask, **kwargs) (chunk_rows, temperature,
        top_k, top_p, ...)."""
        return policy_logprobs(self.lm, input_ids, attention_mask, policy_mask, **kwargs)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of an HF causal LM (`model.model.layers` and the usual alternatives).

    Raises: ValueError when none is found (the model is then not shardable layer by layer).
    """
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        obj: Any = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj):
            return list(obj)
    raise ValueError(f"FSDP: found no decoder layers in {type(model).__name__} (looked for model.layers, "
                     "transformer.h, gpt_neox.layers, model.decoder.layers)")


def build_engine(model: nn.Module, device: str) -> LogprobEngine:
    """A sharded training copy of `model` (which is left unchanged): each decoder layer and the root
    wrapped by fully_shard over all ranks of the default group. Gradients are SUMMED over ranks (divide
    factor 1), because every rank's loss is already divided by the global token count."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    lm = copy.deepcopy(model).to(device)
    lm.train()
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    units = []
    for layer in decoder_layers(lm):
        units.append(fully_shard(layer, mesh=mesh))
    engine = LogprobEngine(lm)
    units.append(fully_shard(engine, mesh=mesh))
    for unit in units:  # the default averages over ranks; each unit reduces its own parameters
        unit.set_gradient_divide_factor(1.0)
        if hasattr(unit, "set_force_sum_reduction_for_comms"):  # a plain SUM (gloo has no PREMUL_SUM)
            unit.set_force_sum_reduction_for_comms(True)
    return engine


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


@torch.no_grad()
def copy_full_weights(engine: LogprobEngine, model: nn.Module) -> int:
    """Gather every sharded parameter of `engine` (collective: all ranks call it) and copy it in place
    into the same-named parameter of `model` (in place, so samplers holding its tensors see the new
    values). Returns the bytes copied per rank."""
    dst = dict(model.named_parameters())
    copied = 0
    for name, p in engine.lm.named_parameters():
        full = _full(p.detach())
        dst[name].copy_(full.to(dst[name].device, dst[name].dtype))
        copied += full.numel() * full.element_size()
    return copied


def _trainable_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def optimizer_state_to_fqn(state: dict[str, Any], model: nn.Module, prefix: str = "lm.") -> dict[str, Any]:
    """A plain `optimizer.state_dict()` (integer ids = positions among `model`'s trainable parameters, one
    param group) as the FQN-keyed full state dict torch.distributed.checkpoint.state_dict reads."""
    names = [prefix + n for n in _trainable_names(model)]
    if len(state["param_groups"]) != 1:
        raise ValueError("FSDP resume: expected an optimizer with one param group")
    group = dict(state["param_groups"][0])
    ids = group["params"]
    group["params"] = [names[i] for i in ids]
    return {"state": {names[i]: v for i, v in state["state"].items()}, "param_groups": [group]}


def optimizer_state_from_fqn(full: dict[str, Any], model: nn.Module, prefix: str = "lm.") -> dict[str, Any]:
    """The inverse of optimizer_state_to_fqn: a full FQN-keyed optimizer state dict as the plain
    `optimizer.state_dict()` of an AdamW over `model`'s trainable parameters (the checkpoint format)."""
    index = {prefix + n: i for i, n in enumerate(_trainable_names(model))}
    group = dict(full["param_groups"][0])
    group["params"] = [index[n] for n in group["params"]]
    return {"state": {index[n]: v for n, v in full["state"].items()}, "param_groups": [group]}


def load_optimizer_state(engine: LogprobEngine, optimizer: torch.optim.Optimizer, plain_state: dict | None,
                         model: nn.Module, *, is_main: bool) -> None:
    """Load rank 0's plain optimizer state (from a checkpoint of any world size) into the sharded
    optimizer of every rank (broadcast from rank 0; the other ranks pass None)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    full = optimizer_state_to_fqn(plain_state, model) if is_main else {}
    set_optimizer_state_dict(engine, optimizer, optim_state_dict=full,
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def gather_optimizer_state(engine: LogprobEngine, optimizer: torch.optim.Optimizer, model: nn.Module,
                           *, is_main: bool) -> dict[str, Any] | None:
    """The sharded optimizer's full state, gathered to rank 0's CPU in the plain checkpoint format
    (collective: every rank calls it; None on the other ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(engine, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return optimizer_state_from_fqn(full, model) if is_main else None
