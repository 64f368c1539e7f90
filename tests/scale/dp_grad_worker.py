"""Run under torchrun (not collected by pytest): the FSDP2 data-parallel gradient and update of one batch
against the single-process ones, in fp64. Rank 0 writes the comparison to the JSON path in argv[1].

Case "grad": one minibatch (all rows, zero-advantage rows among them, micro 2 so ranks run different
numbers of passes): the full gradient of every parameter vs agentrl.rl.update.accumulate_gradients.
Case "step": 2 epochs x 2 minibatches with a seeded shuffle, grad clipping and AdamW: parameters after
dp_minibatch_step vs minibatch_step, and their metrics.
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rl"))
from conftest import make_tiny_qwen3, random_batch  # noqa: E402

from agentrl.rl.config import RLConfig  # noqa: E402
from agentrl.rl.update import accumulate_gradients, minibatch_step  # noqa: E402
from agentrl.scale.context import DistContext, shard_groups  # noqa: E402
from agentrl.scale.fsdp import (  # noqa: E402
    _full,
    build_engine,
    copy_full_weights,
    gather_optimizer_state,
    load_optimizer_state,
)
from agentrl.scale.update import dp_accumulate, dp_minibatch_step  # noqa: E402


def cfg(**kw):
    base = dict(micro=2, micro_tokens=0, clip_low=0.2, clip_high=0.3, kl_coef=0.0, temperature=1.0, logprob_chunk_rows=7,
                epochs=1, minibatches=1, max_grad_norm=1.0, top_k=None, top_p=1.0)
    base.update(kw)
    return RLConfig.from_flat(**base)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def main() -> None:
    out = Path(sys.argv[1])
    ctx = DistContext.from_env("cpu")
    torch.use_deterministic_algorithms(True)
    model = make_tiny_qwen3(dtype=torch.float64, tie=False)
    batch = random_batch(n=10, length=16, zero_adv_rows=(1, 4, 5))
    batch.old_logprobs = batch.old_logprobs.double()
    groups = [i // 2 for i in range(batch.num_rows)]  # 5 groups of 2: rank 0 gets 3, rank 1 gets 2
    owner = torch.tensor(shard_groups(groups, ctx.world_size))
    report = {"world_size": ctx.world_size, "owner": owner.tolist()}

    # -- gradient of one minibatch
    c = cfg()
    engine = build_engine(model, "cpu")
    mine = (owner == ctx.rank).nonzero().flatten()
    st = dp_accumulate(engine, batch, mine, ctx, c)
    dp_grads = {n: _full(p.grad).detach().clone() for n, p in engine.lm.named_parameters()}
    if ctx.is_main:
        ref = make_tiny_qwen3(dtype=torch.float64, tie=False)
        ref_st = accumulate_gradients(ref, batch, c, normalizer=batch.num_policy_tokens)
        errs = {n: rel_err(dp_grads[n], p.grad) for n, p in ref.named_parameters()}
        report["grad"] = {"max_rel_err": max(errs.values()), "worst": max(errs, key=errs.get),
                          "params": len(errs), "loss_dp": st["loss"], "loss_1p": ref_st["loss"],
                          "normalizer": st["normalizer"], "passes": st["passes"],
                          "grad_norm_1p": float(torch.linalg.vector_norm(
                              torch.stack([p.grad.norm() for p in ref.parameters()])))}

    # -- the same under the sampler's top-p mask (the loss sees the truncated distribution on every rank)
    c = cfg(top_p=0.9)
    engine = build_engine(model, "cpu")
    st = dp_accumulate(engine, batch, mine, ctx, c)
    dp_grads = {n: _full(p.grad).detach().clone() for n, p in engine.lm.named_parameters()}
    if ctx.is_main:
        ref = make_tiny_qwen3(dtype=torch.float64, tie=False)
        ref_st = accumulate_gradients(ref, batch, c, normalizer=batch.num_policy_tokens)
        report["grad_top_p"] = {"max_rel_err": max(rel_err(dp_grads[n], p.grad) for n, p in ref.named_parameters()),
                                "loss_dp": st["loss"], "loss_1p": ref_st["loss"]}

    # -- full update: shuffled minibatches, clipping, SGD with momentum (linear in the gradients, so the
    # comparison keeps the gradients' precision; AdamW's first steps are sign(g) * lr and would turn
    # the fp32 RMSNorm rounding of near-zero gradient entries into O(1) differences)
    c = cfg(epochs=2, minibatches=2, max_grad_norm=0.05)
    engine = build_engine(model, "cpu")
    opt = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
    m = dp_minibatch_step(engine, opt, batch, owner, ctx, c, generator=torch.Generator().manual_seed(3))
    plain = make_tiny_qwen3(dtype=torch.float64, tie=False)
    copy_full_weights(engine, plain)
    gathered = gather_optimizer_state(engine, opt, plain, is_main=ctx.is_main)
    # resume path: the gathered (single-process format) state into a fresh engine's sharded optimizer
    engine2 = build_engine(plain, "cpu")
    opt2 = torch.optim.SGD(engine2.parameters(), lr=0.5, momentum=0.9)
    load_optimizer_state(engine2, opt2, gathered, plain, is_main=ctx.is_main)
    regathered = gather_optimizer_state(engine2, opt2, plain, is_main=ctx.is_main)
    if ctx.is_main:
        ref = make_tiny_qwen3(dtype=torch.float64, tie=False)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9)
        rm = minibatch_step(ref, ref_opt, batch, c, generator=torch.Generator().manual_seed(3))
        init = make_tiny_qwen3(dtype=torch.float64, tie=False)
        moved = {n: rel_err(p1 - p0, p2 - p0) for (n, p1), p2, p0 in
                 zip(plain.named_parameters(), ref.parameters(), init.parameters(), strict=True)}
        ref_state = ref_opt.state_dict()["state"]
        report["optimizer"] = {
            "ids": sorted(gathered["state"]) == sorted(ref_state),
            "momentum_max_rel_err": max(rel_err(gathered["state"][i]["momentum_buffer"],
                                                ref_state[i]["momentum_buffer"]) for i in ref_state),
            "roundtrip_equal": all(torch.equal(regathered["state"][i][k], gathered["state"][i][k])
                                   for i in gathered["state"] for k in gathered["state"][i]),
            "param_groups_equal": json.dumps(regathered["param_groups"]) == json.dumps(gathered["param_groups"]),
            "params": len(ref_state)}
        report["step"] = {"max_rel_err_update": max(moved.values()),
                          "metrics": {k: [m[k], rm[k]] for k in ("loss", "grad_norm", "grad_norm_max", "tokens_trained",
                                                                  "rows_skipped", "clip_frac", "entropy",
                                                                  "optimizer_steps", "policy_tokens")}}
        out.write_text(json.dumps(report, indent=1))
    ctx.close()


if __name__ == "__main__":
    main()
