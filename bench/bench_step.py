"""Benchmark: one full GRPO training step split into generate / tool execution / update seconds.

Not a test and not the trainer. Settings: edit-menu and coding-tools (agentrl.envs), 8 prompts x 8 samples,
bug-fix tasks. The policy is a random-weight Qwen3-0.6B architecture, which never writes a valid tool call,
so the turns' CONTENT is the environment's scripted expert (read, edit, test, submit; a random menu op, so
rewards are mixed): each turn the real sampler (FastSampler, or HF generate with --sampler hf) decodes
exactly as many tokens as the expert's turn has, for every live episode, and those tokens are then replaced
by the expert's (sampler log-probs recorded as 0.0). Generation therefore costs what a policy emitting the
expert's turns would, and the tools run real reads, edits, tests and hidden-test grading in the sandbox.
generate_s = wall time inside the sampler; tools_s = the rest of the rollout (tool calls and grading in the
driver's thread pool, parsing, template encoding); update_s = advantages + collate + minibatch_step.

    PYTHONPATH=src python bench/bench_step.py --device cuda [--config PATH]
    PYTHONPATH=src python bench/bench_step.py --device cpu --tiny --prompts 2 --group 2   # smoke
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback

import torch
from _common import Table, device_meta, free, is_oom, make_model

from agentrl.rollout.driver import RolloutConfig, run_episodes
from agentrl.rollout.models import _qwen3_tokenizer_source, load_tokenizer
from agentrl.rollout.sampler import Sample, SamplingConfig, sample_turns

try:
    from agentrl.envs import expert_turns, make_env
except ImportError as e:  # envs not merged into this checkout yet
    expert_turns = make_env = None
    ENVS_ERROR = f"agentrl.envs is not available ({e}); merge the envs branch"
else:
    ENVS_ERROR = ""


class ExpertReplaySampler:
    """SampleFn: times the real sampler on the expert turn's token count, returns the expert turn's ids.

    The episode of a context is found by its prompt (prompt ids -> expert turns, registered up front), and
    the turn index by counting "<|im_start|>assistant" in the context (the prompt holds one).
    """

    def __init__(self, real, tokenizer, eot_id: int):
        self.real, self.tok, self.eot = real, tokenizer, eot_id
        self.by_prompt: dict[tuple[int, ...], list[list[int]]] = {}
        self.marker = tokenizer.encode("<|im_start|>assistant", add_special_tokens=False)
        self.generate_s = 0.0
        self.tokens = 0

    def register(self, prompt_ids: list[int], turns: list[list]) -> None:
        texts = ["\n".join(f"<tool_call>\n{c.raw}\n</tool_call>" for c in calls) for calls in turns]
        texts.append("I fixed the function and ran the tests.")  # after the last tool turn: a final answer
        self.by_prompt[tuple(prompt_ids)] = [self.tok.encode(t, add_special_tokens=False) + [self.eot] for t in texts]

    def _turn_ids(self, ctx: list[int]) -> list[int]:
        turns = next((t for p, t in self.by_prompt.items() if tuple(ctx[: len(p)]) == p), None)
        if turns is None:
            raise ValueError("ExpertReplaySampler: context with an unregistered prompt")
        m = self.marker
        k = sum(1 for i in range(len(ctx) - len(m) + 1) if ctx[i: i + len(m)] == m) - 1
        return turns[min(k, len(turns) - 1)]

    def __call__(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        want = [self._turn_ids(c)[:b] for c, b in zip(contexts, budgets, strict=True)]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.real(contexts, [len(w) for w in want])
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.generate_s += time.perf_counter() - t0
        self.tokens += sum(map(len, want))
        return [Sample(tuple(w), (0.0,) * len(w), hit_token_limit=w[-1] != self.eot) for w in want]


def make_real_sampler(kind: str, model, pad_id: int, cfg: SamplingConfig):
    if kind == "fast":
        from agentrl.rollout.fast_sampler import FastSampler

        return FastSampler(model, stop_ids=(), pad_id=pad_id, cfg=cfg, max_batch=256)
    return lambda ctxs, budgets: sample_turns(model, ctxs, stop_ids=(), pad_id=pad_id, cfg=cfg, max_new_tokens=budgets)


def one_step(args, env_name: str, model, tok) -> dict:
    from agentrl.chat.template import render_prompt
    from agentrl.rl.advantages import group_advantages
    from agentrl.rl.batch import collate
    from agentrl.rl.config import RLConfig
    from agentrl.rl.update import minibatch_step
    from agentrl.sandbox import Sandbox
    from agentrl.tasks import make_tasks

    rng = random.Random(0)
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=256, gen_batch=args.gen_batch), max_turns=6,
                        max_context_tokens=4096)
    pad_id = tok.pad_token_id
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    replay = ExpertReplaySampler(make_real_sampler(args.sampler, model, pad_id, cfg.sampling), tok, eot)
    tasks = make_tasks(args.prompts, seed=args.seed)
    sandbox = Sandbox()
    pairs, gids = [], []
    for g, task in enumerate(tasks):
        for _ in range(args.group):
            env = make_env(env_name, sandbox=sandbox, max_turns=6)
            prompt = render_prompt(tok, env.reset(task, seed=args.seed))
            replay.register(prompt, expert_turns(env_name, task, rng, random_op=True))
            pairs.append((make_env(env_name, sandbox=sandbox, max_turns=6), task))
            gids.append(g)
    try:
        replay.real([list(next(iter(replay.by_prompt)))], [4])  # warm-up (kernels, allocator)
        t0 = time.perf_counter()
        trajs = run_episodes(model, tok, pairs, cfg=cfg, group_ids=gids, seed=args.seed, sampler=replay)
        rollout_s = time.perf_counter() - t0
    finally:
        sandbox.close()
    t1 = time.perf_counter()
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    adv, _ = group_advantages(rewards, args.group)
    rl = RLConfig(micro=args.micro, minibatches=2, prompts_per_step=args.prompts, group_size=args.group, lr=1e-6)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=rl.lr, weight_decay=0.0)
    stats = minibatch_step(model, opt, collate(trajs, pad_id, adv), rl)
    model.eval()
    update_s = time.perf_counter() - t1
    del opt
    ends = {}
    for t in trajs:
        ends[t.end_reason] = ends.get(t.end_reason, 0) + 1
    return {"env": env_name, "episodes": len(trajs), "gen_tokens": replay.tokens, "generate_s": replay.generate_s,
            "tools_s": rollout_s - replay.generate_s, "update_s": update_s,
            "step_s": rollout_s + update_s, "mean_reward": float(rewards.mean()),
            "policy_tokens": int(stats["policy_tokens"]), "ends": json.dumps(ends, sort_keys=True)}


COLUMNS = [("env", ""), ("episodes", "d"), ("gen_tokens", "d"), ("generate_s", ".2f"), ("tools_s", ".2f"),
           ("update_s", ".2f"), ("step_s", ".2f"), ("mean_reward", ".2f"), ("policy_tokens", "d"), ("ends", "")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--config", default=None, help="Qwen3 config.json or its folder (default: ../shared/assets/...)")
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--envs", nargs="+", default=["edit-menu", "coding-tools"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--gen-batch", dest="gen_batch", type=int, default=16, help="rows per generate call (--sampler hf)")
    p.add_argument("--sampler", choices=["fast", "hf"], default="fast")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    meta = device_meta(args.device) | {"sampler": args.sampler, "prompts": args.prompts, "group": args.group,
                                      "dtype": args.dtype}
    table = Table("bench_step", COLUMNS, meta)
    if ENVS_ERROR:
        table.note(ENVS_ERROR)
        return 1
    model = make_model(args.config, args.dtype, args.device, tiny=args.tiny)
    tok = load_tokenizer(_qwen3_tokenizer_source())
    for env_name in args.envs:
        try:
            table.add(**one_step(args, env_name, model, tok))
        except Exception as e:  # noqa: BLE001 - one setting failing must not end the table
            table.add(env=env_name, ends="OOM" if is_oom(e) else f"ERR {type(e).__name__}")
            traceback.print_exc()
        free(args.device)
    table.note("generate_s: inside the sampler; tools_s: rest of the rollout (tools, grading, parsing); "
               "update_s: advantages + collate + minibatch_step (fp32 optimizer state on the model's dtype)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
