"""Benchmark: one full GRPO training step split into generate / tool execution / update seconds.

Not a test and not the trainer. Settings: edit-menu and coding-tools (agentrl.envs), 8 prompts x 8 samples,
bug-fix tasks. The policy is a random-weight Qwen3-0.6B architecture, which never writes a valid tool call,
so the turns' CONTENT is the environment's scripted expert (read, edit, test, submit; a random menu op, so
rewards are mixed): each turn the real sampler (FastSampler, or HF generate with --sampler hf) decodes
exactly as many tokens as the expert's turn has, for every live episode, and those tokens are then replaced
by the expert's (sampler log-probs recorded as 0.0). Generation therefore costs what a policy emitting the
expert's turns would, and the tools run real reads, edits, tests and hidden-test grading in the sandbox.
generate_s = wall time inside the sampler; tools_s = the rest of the rollout (tool calls and grading in the
driver's thread pool, parsing, template encoding); update_s = the update. Each row is one call of the
trainer's own agentrl.rl.trainer.train_step on a RunSession whose model is the random one saved to a temp dir.

    PYTHONPATH=src python bench/bench_step.py --device cuda [--config PATH]
    PYTHONPATH=src python bench/bench_step.py --device cpu --tiny --prompts 2 --group 2   # smoke
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from _common import Table, device_meta, free, is_oom, make_model, model_name, target, target_text

from agentrl.models.device import DEVICE_HELP, DTYPE_HELP, dtype_arg, resolve_device
from agentrl.models.load import load_tokenizer
from agentrl.models.presets import qwen3_tokenizer_source
from agentrl.rollout.hf_sampler import Sample, SamplingConfig, sample_turns

try:
    from agentrl.envs import expert_turns, make_env
except ImportError as e:  # envs not merged into this checkout yet
    expert_turns = make_env = None
    ENVS_ERROR = f"agentrl.envs is not available ({e}); merge the envs branch"
else:
    ENVS_ERROR = ""


class ExpertReplaySampler:
    """SampleFn: times the real sampler on the expert turn's token count, returns the expert turn's ids.

    Each prompt has one expert script per episode of its group (registered up front; a random menu op each,
    so a group's rewards differ). In a call, the j-th context with a given prompt plays that prompt's j-th
    script (the driver keeps episodes in order, and every scripted episode runs the same number of turns);
    the turn index is the count of "<|im_start|>assistant" in the context minus the prompt's one.
    """

    def __init__(self, real, tokenizer, eot_id: int):
        self.real, self.tok, self.eot = real, tokenizer, eot_id
        self.by_prompt: dict[tuple[int, ...], list[list[list[int]]]] = {}
        self.marker = tokenizer.encode("<|im_start|>assistant", add_special_tokens=False)
        self.generate_s = 0.0
        self.tokens = 0
        self.gen_peak = 0  # CUDA max_memory_allocated at the end of each sampler call (bytes, max over calls)
        self.kv_ms = 0  # the real sampler's stats["kv_alloc_ms"], summed over calls
        self.kv_moved = 0  # and its stats["kv_moved"]

    def register(self, prompt_ids: list[int], turns: list[list]) -> None:
        """Add one episode's script: `turns` is a list of ToolCall lists (then a final answer)."""
        texts = ["\n".join(c.raw for c in calls) for calls in turns]  # raw: the exact <tool_call> block
        texts.append("I fixed the function and ran the tests.")  # after the last tool turn: a final answer
        script = [self.tok.encode(t, add_special_tokens=False) + [self.eot] for t in texts]
        self.by_prompt.setdefault(tuple(prompt_ids), []).append(script)

    def _turn_ids(self, ctx: list[int], seen: dict) -> list[int]:
        prompt = next((p for p in self.by_prompt if tuple(ctx[: len(p)]) == p), None)
        if prompt is None:
            raise ValueError("ExpertReplaySampler: context with an unregistered prompt")
        j = seen[prompt] = seen.get(prompt, -1) + 1
        scripts = self.by_prompt[prompt]
        script = scripts[j % len(scripts)]
        m = self.marker
        k = sum(1 for i in range(len(ctx) - len(m) + 1) if ctx[i: i + len(m)] == m) - 1
        return script[min(k, len(script) - 1)]

    def end_rollout(self) -> None:
        """Forwarded to the real sampler (the FastSampler frees its kept KV)."""
        if callable(end := getattr(self.real, "end_rollout", None)):
            end()

    def __call__(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        seen: dict = {}
        want = [self._turn_ids(c, seen)[:b] for c, b in zip(contexts, budgets, strict=True)]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.real(contexts, [len(w) for w in want])
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.generate_s += time.perf_counter() - t0
        self.kv_ms += getattr(self.real, "stats", {}).get("kv_alloc_ms", 0)
        self.kv_moved += getattr(self.real, "stats", {}).get("kv_moved", 0)
        if torch.cuda.is_available():  # + the static cache when it lives outside the allocator (VMM, release_kv)
            self.gen_peak = max(self.gen_peak, torch.cuda.max_memory_allocated() + kv_outside(self.real))
        self.tokens += sum(map(len, want))
        return [Sample(tuple(w), (0.0,) * len(w), hit_token_limit=w[-1] != self.eot) for w in want]


# --release-kv -> FastSampler(release_kv=...); default: the FastSampler's own (vmm where CUDA has it, else off)
RELEASE = {"default": None, "vmm": "vmm", "allocator": "allocator", "off": False}


def make_real_sampler(kind: str, model, pad_id: int, cfg: SamplingConfig, release_kv: str = "default"):
    if kind == "fast":
        from agentrl.rollout.fast_sampler import FastSampler

        return FastSampler(model, stop_ids=(), pad_id=pad_id, cfg=cfg, max_batch=256, release_kv=RELEASE[release_kv])
    return lambda ctxs, budgets: sample_turns(model, ctxs, stop_ids=(), pad_id=pad_id, cfg=cfg, max_new_tokens=budgets)


def save_random_model(args, workdir: Path) -> str:
    """Random-weight model of --config (Qwen3-0.6B's by default) + the real Qwen3 tokenizer saved to
    `workdir/model` (what RLConfig.model can load; the Qwen2.5-Coder models share Qwen3's 151,936-id vocabulary);
    --tiny: "tiny-qwen3", or with --config the config's tiny trunk (bench/_common.TINY), saved the same way."""
    if args.tiny and args.config is None:
        return "tiny-qwen3"
    model = make_model(args.config, "bf16", args.device, tiny=args.tiny)  # random init on the GPU is fast; each setting loads
    # it in its own dtype (RLConfig.dtype)
    model.save_pretrained(workdir / "model")
    load_tokenizer(tokenizer_source(args.config)).save_pretrained(workdir / "model")
    del model
    return str(workdir / "model")


def tokenizer_source(config: str | None) -> str:
    """The real Qwen3 tokenizer (agentrl.models.presets.qwen3_tokenizer_source); where that asset is absent (a
    GPU host that got only the repository) and --config names a pretrained model converted into the models
    cache (`agentrl assets fetch NAME`), that model's own tokenizer, the same 151,936-id vocabulary family.

    Raises: FileNotFoundError naming both places when neither is there."""
    try:
        return qwen3_tokenizer_source()
    except FileNotFoundError as e:
        from agentrl.models.pretrained import models_cache_dir

        cached = models_cache_dir() / str(config or "")
        if config and (cached / "tokenizer_config.json").is_file():
            return str(cached)
        raise FileNotFoundError(f"{e}; nor a converted {config!r} in {models_cache_dir()}") from e


def register_step(sess, replay: ExpertReplaySampler, step: int) -> None:
    """Register the expert turns of every episode train_step(sess, step) will run (same tasks, same seed)."""
    from agentrl.chat.template import render_prompt
    from agentrl.envs import make_env
    from agentrl.rl.run_setup import env_kwargs
    from agentrl.rl.trainer import _seed, step_tasks

    cfg = sess.cfg
    rng = random.Random(f"bench:{step}")
    replay.by_prompt.clear()
    for task in step_tasks(sess.tasks.train, cfg.sampling.prompts_per_step, cfg.sampling.group_size, cfg.run.seed, step)[:: cfg.sampling.group_size]:
        obs = make_env(cfg.env.name, **env_kwargs(cfg, sess.sandbox)).reset(task, seed=_seed(cfg, "train", step))
        prompt = render_prompt(sess.tokenizer, obs)
        for _ in range(cfg.sampling.group_size):
            replay.register(prompt, expert_turns(cfg.env.name, task, rng, random_op=True))


def cache_gib(real) -> float:
    """GiB of the FastSampler's static KV cache, held or released (0 for the HF sampler or before the first
    call)."""
    st = getattr(real, "state", None)
    return st.kv_bytes / 2**30 if st is not None else 0.0


def kv_outside(real) -> int:
    """Bytes of the sampler's static cache held outside PyTorch's allocator now (FastSampler.kv_mapped_bytes:
    release_kv's VMM buffers while mapped), which torch.cuda.max_memory_allocated() does not count."""
    return real.kv_mapped_bytes() if callable(getattr(real, "kv_mapped_bytes", None)) else 0


def _watch_update(sess, real) -> dict:
    """Wrap sess.update (this instance only) to record, when the update starts, the CUDA memory allocated
    (weights + AdamW state + whatever the rollout left) plus the sampler's cache held outside the allocator
    ("start"), and that outside part alone ("kv_outside": it stays the same through the update)."""
    seen: dict = {}
    inner = sess.update

    def update(*a, **kw):
        seen["kv_held"] = getattr(getattr(real, "state", None), "kv_held", True)
        if torch.cuda.is_available():
            seen["kv_outside"] = kv_outside(real)
            seen["start"] = torch.cuda.memory_allocated() + seen["kv_outside"]
        return inner(*a, **kw)

    sess.update = update
    return seen


def run_env(args, env_name: str, dtype: str, model_path: str, workdir: Path, table: Table,
            release: str = "default") -> None:
    from agentrl.rl.config import RLConfig
    from agentrl.rl.session import RunSession
    from agentrl.rl.trainer import train_step

    cfg = RLConfig.from_flat(model=model_path, env=env_name, dtype=dtype,
                   device=args.device, prompts_per_step=args.prompts, group_size=args.group, micro=args.micro,
                   micro_tokens=args.micro_tokens, gen_batch=args.gen_batch, steps=args.steps,
                   out=str(workdir / f"{env_name}_{dtype}"), seed=args.seed)
    with RunSession.open(cfg) as sess:
        eot = sess.tokenizer.convert_tokens_to_ids("<|im_end|>")
        sampling = SamplingConfig(max_new_tokens=cfg.sampling.max_new_tokens, gen_batch=cfg.sampling.gen_batch)
        real = make_real_sampler(args.sampler, sess.model, sess.pad_id, sampling, release)
        replay = ExpertReplaySampler(real, sess.tokenizer, eot)
        sess.sampler = replay
        seen = _watch_update(sess, real)
        for step in range(args.steps):
            register_step(sess, replay, step)
            replay.generate_s, replay.tokens, replay.gen_peak, replay.kv_ms, replay.kv_moved = 0.0, 0, 0, 0, 0
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            m = train_step(sess, step)
            # update: minibatch_step's own reset of the allocator's peak, plus the cache held outside it then
            gen, upd = replay.gen_peak / 2**30, (m["peak_memory_bytes"] + seen.get("kv_outside", 0)) / 2**30
            released = getattr(real, "release_kv", "") if not seen.get("kv_held", True) else ""
            table.add(env=env_name, dtype=dtype, release_kv=released or "off", step=step,
                      microbatch=f"{args.micro_tokens}-token microbatches" if args.micro_tokens else f"micro {args.micro}",
                      episodes=int(m["rollout/episodes"]), kv_moved=replay.kv_moved,
                      gen_tokens=replay.tokens, generate_s=replay.generate_s, kv_alloc_s=replay.kv_ms / 1e3,
                      tools_s=m["time/rollout_s"] - replay.generate_s, update_s=m["time/update_s"],
                      step_s=m["time/step_s"], mean_reward=m["reward_mean"], policy_tokens=int(m["policy_tokens"]),
                      peak_gib=max(gen, upd), gen_peak_gib=gen, upd_peak_gib=upd,
                      upd_start_gib=seen.get("start", 0) / 2**30, kv_cache_gib=cache_gib(real),
                      peak_phase=("update" if upd >= gen else "generate") if torch.cuda.is_available() else "cpu")
        sess.results.finish("completed", wall_clock_s=time.perf_counter() - sess.t_start)


TARGETS = (  # issue 15 targets 6 and 7 on the coding-tools rows: (target, column, figure, op, threshold)
    ("6", "tools_s", "tools seconds of a coding-tools step (64 episodes)", "<=", 1.5),
    ("7", "step_s", "seconds per coding-tools step (8 x 8)", "<=", 7.0),
    ("7", "peak_gb", "peak GB (1e9 bytes) of a coding-tools step, generate or update", "<=", 20.0),
)


def targets(rows: list[dict], first_step: int = 1) -> list[dict]:
    """Targets 6 and 7 for bf16 and fp32 (and any other dtype measured), per release_kv setting of the rows
    (vmm / allocator: the KV cache's memory given back during the update; off: kept): the mean over coding-tools steps
    >= first_step (step 0 pays graph captures; all steps when there is no later one)."""
    out = []
    ct = [r for r in rows if r["env"] == "coding-tools" and isinstance(r.get("step_s"), float)]
    for dtype in dict.fromkeys(["bf16", "fp32", *(r["dtype"] for r in ct)]):
        of_dtype = [r for r in ct if r["dtype"] == dtype]
        settings = list(dict.fromkeys(r.get("release_kv") for r in of_dtype)) or [None]
        for rel in settings:
            rs = [r for r in of_dtype if r.get("release_kv") == rel]
            rs = [r for r in rs if r["step"] >= first_step] or rs
            note = "" if dtype == "bf16" else " (the target is bf16's; fp32 to compare with the write-up)"
            kv = "" if rel is None else (", KV kept during the update" if rel == "off" else
                                         f", KV released during the update ({rel})")
            for tid, col, fig, op, thr in TARGETS:
                vals = [r["peak_gib"] * 2**30 / 1e9 if col == "peak_gb" else r[col] for r in rs]
                mb = "/".join(dict.fromkeys(r["microbatch"] for r in rs if r.get("microbatch"))) or "micro 4"
                where = f"{mb}, {dtype}{kv}, steps {','.join(str(r['step']) for r in rs)}" if rs else dtype
                if col == "peak_gb" and rs:
                    where += f", peak in {'/'.join(sorted({r['peak_phase'] for r in rs}))}"
                out.append(target(tid, f"{fig}, {where}{note}", sum(vals) / len(vals) if vals else None, op, thr))
    return out


COLUMNS = [("env", ""), ("dtype", ""), ("release_kv", ""), ("step", "d"), ("episodes", "d"), ("gen_tokens", "d"),
           ("generate_s", ".2f"), ("kv_alloc_s", ".2f"), ("kv_moved", "d"), ("tools_s", ".2f"), ("update_s", ".2f"),
           ("step_s", ".2f"), ("mean_reward", ".2f"), ("policy_tokens", "d"),
           ("peak_gib", ".1f"), ("gen_peak_gib", ".1f"), ("upd_peak_gib", ".1f"), ("upd_start_gib", ".1f"),
           ("kv_cache_gib", ".1f"), ("peak_phase", "")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", type=resolve_device, help=DEVICE_HELP)
    p.add_argument("--config", default=None, help="config.json, its folder, or a bench/configs/ name "
                   "(default: Qwen3-0.6B's, ../shared/assets/qwen3-0.6b-config)")
    p.add_argument("--tiny", action="store_true", help="tiny trunk (CPU smoke test)")
    p.add_argument("--dtypes", nargs="+", default=["bf16"], type=dtype_arg,
                   help="train dtypes, one setting each (e.g. bf16 fp32); " + DTYPE_HELP)
    p.add_argument("--envs", nargs="+", default=["edit-menu", "coding-tools"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--micro-tokens", dest="micro_tokens", type=int, default=0,
                   help="RLConfig.micro_tokens: token-budget microbatches (0 = --micro rows)")
    p.add_argument("--gen-batch", dest="gen_batch", type=int, default=16, help="rows per generate call (--sampler hf)")
    p.add_argument("--sampler", choices=["fast", "hf"], default="fast")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=2, help="train steps per setting (step 0 includes graph capture)")
    p.add_argument("--release-kv", dest="release_kv", nargs="+", choices=list(RELEASE), default=["default"],
                   help="FastSampler release_kv settings, one setting each: give the static KV cache's memory back "
                        "during the update (vmm: to the device, same addresses; allocator: to PyTorch's cache)")
    args = p.parse_args()
    meta = device_meta(args.device) | {"model": model_name(args.config), "sampler": args.sampler, "prompts": args.prompts, "group": args.group,
                                      "micro": args.micro, "micro_tokens": args.micro_tokens}
    table = Table("bench_step", COLUMNS, meta)
    if ENVS_ERROR:
        table.note(ENVS_ERROR)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench_step_") as tmp:
        model_path = save_random_model(args, Path(tmp))
        for dtype, env_name, rel in ((d, e, r) for d in args.dtypes for e in args.envs for r in args.release_kv):
            try:
                run_env(args, env_name, dtype, model_path, Path(tmp), table, rel)
            except Exception as e:  # noqa: BLE001 - one setting failing must not end the table
                table.note(f"{env_name} {dtype} release_kv {rel}: {'OOM' if is_oom(e) else 'ERR'} "
                           f"{type(e).__name__}: {e}")
                traceback.print_exc()
            free(args.device)
    for t in targets(table.rows):
        table.note(target_text(t))
    table.note("agentrl.rl.trainer.train_step per row. generate_s: inside the sampler; tools_s: rest of the rollout "
               "(tools, grading, parsing, template encoding); update_s: the trainer's update time (minibatch_step); "
               "gen_peak / upd_peak: CUDA max allocated over the sampler calls / inside the update (reset before "
               "each); upd_start: allocated when the update starts; kv_cache: the FastSampler's static KV cache; kv_alloc_s: "
               "of generate_s, making, growing or restoring that cache; "
               "release_kv vmm / allocator: the cache's memory was given back during the update, to the device / to "
               "PyTorch's cache (agentrl.rollout.kv_memory; the peaks add the cache's bytes held outside PyTorch's "
               "allocator); kv_moved: restores at other addresses (graphs re-captured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
