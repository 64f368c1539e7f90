"""`--warm-start sft`: the supervised warm start inside `agentrl train`, before the first held-out evaluation.

Not the SFT loop (agentrl.sft.trainer) or its data (agentrl.sft.data): this wires them to a run. The
scripted expert of `--env` plays the first `warm_start_tasks` training tasks with the edit picked at
random from the menu (`random_op`), through the run's own environment settings and sandbox, so the model
learns the tool-call format and the procedure (read, edit, test, submit) but not which edit is right:
that is left to GRPO. The summary (settings, data, loss curve, NLL before/after, seconds) becomes the
results file's `warm_start` section. Listed as "sft" in agentrl.rl.warm_start (by import path).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

log = logging.getLogger("agentrl.train")

WARMUP_STEPS = 3  # linear warmup of the warm start's lr (then cosine to MIN_LR_RATIO of it)
MIN_LR_RATIO = 0.1


def check_sft_warm_start(cfg: Any) -> None:
    """ValueError (before a run writes anything) when `cfg` cannot be warm-started by SFT: an agent harness
    (it has no scripted expert), or an environment whose expert does not play the run's tasks' kind."""
    from agentrl.envs import env_specs, get_spec

    if cfg.agent.name:
        raise ValueError(f"--warm-start sft plays agentrl's own environments' scripted experts; it does not apply "
                         f"to --agent {cfg.agent.name} (warm-start the model with `agentrl sft` and pass it as --model)")
    spec = get_spec(cfg.env.name)
    if not spec.random_op_expert:
        able = ", ".join(n for n, sp in env_specs().items() if sp.random_op_expert)
        raise ValueError(f"--warm-start sft needs an environment whose scripted expert can pick the edit at random "
                         f"({able}); --env {cfg.env.name} has none: warm-start it with `agentrl sft --env "
                         f"{cfg.env.name}` (docs/sft.md) and pass its output folder as --model with --warm-start none")
    if cfg.tasks.source != "bugfix":
        raise ValueError(f"--warm-start sft plays the scripted expert on generated bug-fix tasks (--tasks bugfix); "
                         f"got --tasks {cfg.tasks.source}")


def turns_over_budget(trajs: Any, max_new_tokens: int) -> tuple[int, int, int]:
    """(turns longer than `max_new_tokens`, all turns, the longest turn's tokens) of expert trajectories: a turn
    the policy cannot finish within its budget (the quick preset's 32 tokens with --env coding-tools: 79 of 128
    expert turns were longer, up to 74 tokens; every GRPO group then scored 0 and no update ran)."""
    lengths = [len(turn.completion_ids) for t in trajs for turn in t.turns]
    return sum(n > max_new_tokens for n in lengths), len(lengths), max(lengths, default=0)


def sft_config(cfg: Any) -> Any:
    """The SFTConfig of a run's warm start: its warm_start_* fields, cfg.update.micro rows per forward, cfg.run.seed."""
    from agentrl.sft.config import SFTConfig

    return SFTConfig(epochs=cfg.warm_start.epochs, lr=cfg.warm_start.lr, batch=cfg.warm_start.batch,
                     micro=cfg.update.micro, max_tokens=cfg.sampling.max_context_tokens, warmup_steps=WARMUP_STEPS,
                     min_lr_ratio=MIN_LR_RATIO, seed=cfg.run.seed, autocast_bf16=False)


def sft_warm_start(sess: Any) -> dict[str, Any]:
    """Fine-tune `sess.model` in place on random-op expert episodes of the run's first training tasks.

    Args:
        sess: an open agentrl.rl.session.RunSession (model, tokenizer, sandbox, training tasks, progress).

    Returns:
        The JSON-ready summary: method, settings (SFTConfig fields, env, tasks, random_op), data
        (trajectories, mean expert reward, policy tokens, dropped), nll_before / nll_after
        (nats per policy token over the warm-start data), losses and steps (per optimizer step),
        data_s / train_s / wall_clock_s.

    Raises:
        ValueError: the expert cannot play the tasks, or no trajectory fits max_context_tokens.
    """
    from agentrl.rl.run_setup import env_kwargs
    from agentrl.sft.data import expert_trajectories
    from agentrl.sft.trainer import planned_steps, policy_nll, sft, trainable

    cfg, t0 = sess.cfg, time.perf_counter()
    tasks = list(sess.tasks.train[: cfg.warm_start.tasks])
    scfg = sft_config(cfg)
    bar = sess.progress.add_task("warm start: expert episodes", total=len(tasks), unit="episodes")
    trajs = expert_trajectories(
        cfg.env.name, tasks, sess.tokenizer, random_op=True, seed=cfg.run.seed, sandbox=sess.sandbox,
        max_turns=cfg.env.max_turns, max_context_tokens=cfg.sampling.max_context_tokens,  # whole expert turns, never cut
        enable_thinking=cfg.policy.thinking, env_kwargs=env_kwargs(cfg, sess.sandbox),
        on_progress=lambda done, total: sess.progress.update(bar, completed=done))
    sess.progress.remove_task(bar)
    data_s = time.perf_counter() - t0
    rewards = [t.reward for t in trajs if t.reward is not None]
    log.info("warm start (sft): %d random-op expert episodes of %s in %.1f s (mean reward %.3f, %d policy tokens)",
             len(trajs), cfg.env.name, data_s, sum(rewards) / max(len(rewards), 1), sum(t.num_policy_tokens for t in trajs))
    over, turns, longest = turns_over_budget(trajs, cfg.sampling.max_new_tokens)
    if over:
        log.warning("warm start: %d of %d expert turns are longer than --max-new-tokens %d (longest %d tokens): "
                    "the policy is cut off before it can finish such a turn; raise --max-new-tokens", over, turns,
                    cfg.sampling.max_new_tokens, longest)
    pad = sess.pad_id
    nll_before = policy_nll(sess.model, trajs, pad, micro=scfg.micro)
    total = planned_steps(len(trainable(trajs, scfg.max_tokens)), scfg)  # the steps sft() takes
    bar = sess.progress.add_task("warm start: sft steps", total=total, unit="steps")

    def on_step(rec: dict[str, float]) -> None:
        sess.progress.advance(bar)
        log.info("warm start step %d/%d (epoch %d)  loss %.4f  grad_norm %.3f  lr %.2e", rec["step"] + 1, total,
                 rec["epoch"], rec["loss"], rec["grad_norm"], rec["lr"])

    t1 = time.perf_counter()
    metrics = sft(sess.model, trajs, scfg, pad_id=pad, on_step=on_step)
    sess.progress.remove_task(bar)
    nll_after = policy_nll(sess.model, trajs, pad, micro=scfg.micro)
    sess.model.eval()
    log.info("warm start (sft): policy NLL %.4f -> %.4f nats/token over %d episodes x %d epochs in %.1f s",
             nll_before, nll_after, metrics.trained_trajectories, scfg.epochs, time.perf_counter() - t1)
    return {
        "method": "sft",
        "settings": {**asdict(scfg), "env": cfg.env.name, "tasks": len(tasks), "random_op": True,
                     "task_ids": [t.id for t in tasks]},
        "data": {"trajectories": len(trajs), "mean_reward": sum(rewards) / max(len(rewards), 1),
                 "policy_tokens": metrics.policy_tokens, "tokens": metrics.tokens, "dropped": metrics.dropped},
        "nll_before": nll_before, "nll_after": nll_after,
        "losses": metrics.losses, "steps": metrics.steps,
        "data_s": data_s, "train_s": metrics.wall_clock_s, "wall_clock_s": time.perf_counter() - t0,
    }
