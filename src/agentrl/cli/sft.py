"""`agentrl sft`: supervised warm start on expert trajectories (or a JSONL file), saved for `agentrl train --model`.

Not the run itself (agentrl.sft.run.run_sft): flags in, SFTRunConfig (with its PolicyConfig) + SFTConfig out.
"""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from typing import Any

from agentrl.chat.bundled import BUNDLED
from agentrl.cli.args import non_negative_int, positive_int
from agentrl.cli.config_file import add_parser_config_flags
from agentrl.cli.flags import add_policy_flags, policy_from_args
from agentrl.models.dtypes import DTYPE_HELP
from agentrl.rl.sections import AGENT_ISOLATION, switch_arg
from agentrl.sft.config import SFTConfig
from agentrl.sft.run import SFTRunConfig, run_sft

# SFTConfig's counts, checked by their flags at parse (SFTConfig refused them later as "bad SFTConfig: epochs, batch,
# micro must be >= 1 ...", without naming the one given)
SFT_INT_TYPES: dict[str, Any] = {"epochs": positive_int, "batch": positive_int, "micro": positive_int,
                                 "max_tokens": positive_int, "warmup_steps": non_negative_int}
# the SFTConfig fields' help (their docstring's Attributes, as flag help)
SFT_HELP: dict[str, str] = {
    "epochs": "passes over the trajectories", "lr": "AdamW peak learning rate (linear warmup, cosine decay)",
    "batch": "trajectories per optimizer step", "micro": "trajectories per forward/backward (same gradient)",
    "max_tokens": "trajectories longer than this (prompt + completion tokens) are dropped",
    "warmup_steps": "linear warmup steps of the learning rate",
    "min_lr_ratio": "the cosine decay ends at this fraction of --lr", "max_grad_norm": "global gradient-norm clip "
    "(<= 0 = off)", "weight_decay": "AdamW decoupled weight decay", "seed": "seed of the shuffling order",
}


def register(subparsers: Any) -> None:
    """Add `sft` to the agentrl command line."""
    p = subparsers.add_parser("sft", help="supervised warm start on expert trajectories (or a JSONL file)",
                              description="Supervised fine-tuning on scripted-expert episodes of --env (or a JSONL "
                              "of trajectories); writes a model folder that `agentrl train --model`, eval and smoke "
                              "load. --model takes a run folder (runs/x) as well.")
    d, s = SFTRunConfig(), SFTConfig()
    model, tasks = p.add_argument_group("model"), p.add_argument_group("tasks and environment")
    opt, output = p.add_argument_group("optimisation"), p.add_argument_group("output")
    tasks.add_argument("--env", default=d.env, help="environment whose expert plays (default edit-menu)")
    add_policy_flags(model, d.policy, only=("model", "tokenizer", "chat_template", "dtype", "device", "thinking"), help={
        "dtype": DTYPE_HELP + " Weights stay fp32; bf16 runs forward/backward under autocast.",
        "chat_template": f"Chat template replacing the model's own: {' | '.join(BUNDLED)} (bundled, tool calling) or a .jinja "
                         "path; saved with the output model.",
        "thinking": "Template thinking mode, as train --thinking."})
    tasks.add_argument("--tasks", default=d.tasks,
                   help="task source the expert plays: bugfix (default) | wordle | another train --tasks source")
    tasks.add_argument("--n-tasks", type=positive_int, default=d.n_tasks, help="expert episodes (one per task)")
    tasks.add_argument("--families", default=d.families, help="comma-separated task families (default: all)")
    tasks.add_argument("--split", default=d.split, choices=("train", "heldout"), help="split of --tasks the expert plays")
    tasks.add_argument("--random-op", action="store_true", help="expert picks the edit op at random from the menu")
    tasks.add_argument("--max-turns", type=positive_int, default=d.max_turns, help="maximum assistant turns per expert episode")
    tasks.add_argument("--from-jsonl", default=d.from_jsonl, help="train on this JSONL instead of expert episodes")
    output.add_argument("--save-jsonl", default=d.save_jsonl, help="also write the training trajectories here")
    output.add_argument("--out", default=d.out, help="output folder (model, tokenizer, sft_summary.json, sft.log)")
    opt.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute activations in backward (less memory, more time)")
    opt.add_argument("--lora-r", type=non_negative_int, default=d.lora_r, help="LoRA rank (0 = full fine-tuning)")
    opt.add_argument("--lora-alpha", type=float, default=d.lora_alpha, help="LoRA scale numerator (alpha / r)")
    opt.add_argument("--lora-dropout", type=float, default=d.lora_dropout, help="dropout on the adapters' input")
    opt.add_argument("--lora-target-modules", default=d.lora_target_modules,
                   help="all-linear (every linear layer but the LM head) or comma-separated module names")
    output.add_argument("--lora-merge", action="store_true", help="also write <out>/merged (adapters merged in)")
    tasks.add_argument("--agent", default=d.agent, choices=("", "opencode"),
                   help="play the expert through a black-box harness: opencode (bug-fix tasks; the warm start "
                        "of `train --agent opencode`) (default: '', agentrl's own --env loop)")
    tasks.add_argument("--agent-isolation", default=d.agent_isolation, choices=AGENT_ISOLATION,
                   type=switch_arg(AGENT_ISOLATION, None, "none", "agent_isolation"),
                   help="with --agent: bubblewrap where usable (auto), required (bwrap), or none")
    tasks.add_argument("--agent-binary", default=d.agent_binary, help="with --agent: the harness binary (default: found)")
    tasks.add_argument("--agent-timeout-s", type=float, default=d.agent_timeout_s,
                   help="with --agent: wall-clock limit of one harness run, seconds")
    for f in fields(SFTConfig):
        if f.name in ("betas", "autocast_bf16"):
            continue
        kind = SFT_INT_TYPES.get(f.name, type(getattr(s, f.name)))  # counts checked at parse, naming the flag
        opt.add_argument("--" + f.name.replace("_", "-"), type=kind, default=getattr(s, f.name),
                       help=SFT_HELP[f.name])
    add_parser_config_flags(p)
    p.set_defaults(func=main, parser=p)


def main(args: argparse.Namespace) -> int:
    """CLI entry: split `args` into SFTRunConfig + SFTConfig and run (or, with --print-config, print them once both
    are built, so a value the run would refuse is refused here too, as `train --print-config` does); exit code 0
    on success."""
    from agentrl.models.device import resolve_dtype

    policy = policy_from_args(args)
    dtype = resolve_dtype(policy.dtype, policy.model)
    if dtype == "fp16":
        raise ValueError(f"--dtype {policy.dtype}: fp16 SFT needs loss scaling, which agentrl does not do; "
                         "pass --dtype bf16 (autocast) or fp32")
    own = {f.name: getattr(args, f.name) for f in fields(SFTRunConfig) if f.name != "policy"}
    knobs = {f.name: getattr(args, f.name) for f in fields(SFTConfig) if hasattr(args, f.name)}
    cfg = SFTConfig(**knobs, autocast_bf16=dtype == "bf16")
    run_cfg = SFTRunConfig(policy=replace(policy, dtype=dtype), **own)
    if args.print_config:
        from agentrl.cli.config_file import dump_parser_config

        print(dump_parser_config(args.parser, args), end="")
        return 0
    run_sft(run_cfg, cfg)
    return 0
