"""The GRPO loop: rollouts -> environment rewards -> group advantages -> clipped token-mean updates.

Wires the stages together and owns the run's schedule (evaluations, checkpoints, results file).
Not the maths (advantages.py, loss.py, update.py), not the sampler (agentrl.rollout), not the state
(agentrl.rl.session).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl.eval.bootstrap import BootstrapConfig
from agentrl.eval.evaluate import evaluate, mean_stats
from agentrl.eval.noise import run_noise
from agentrl.eval.report import EvalReport, paired_difference
from agentrl.rl.batch import collate
from agentrl.rl.config import RLConfig
from agentrl.rl.scoring import episode_advantages, outcome_metrics
from agentrl.rl.session import RunSession
from agentrl.rl.update import minibatch_step
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")


def step_tasks(train_tasks: Sequence[Task], prompts_per_step: int, group_size: int, seed: int, step: int) -> list[Task]:
    """The episodes of one step: `prompts_per_step` distinct tasks drawn by a (seed, step)-seeded RNG
    (so a resumed run draws the same ones), each repeated `group_size` times consecutively.

    Returns: [min(prompts_per_step, len(train_tasks)) * group_size] tasks; group g = rows g*G .. g*G+G-1.
    """
    rng = random.Random(f"{seed}:step:{step}")
    chosen = rng.sample(list(train_tasks), min(prompts_per_step, len(train_tasks)))
    return [t for t in chosen for _ in range(group_size)]


def _seed(cfg: RLConfig, phase: str, step: int) -> int:
    """A sampling seed per (run seed, phase, step): reproducible and unchanged by --resume."""
    return random.Random(f"{cfg.seed}:{phase}:{step}").randrange(2**31)


def train_step(sess: RunSession, step: int) -> dict[str, float]:
    """One GRPO step: B groups of G episodes, rewards from the env, advantages, the update.

    Returns the step's scalar metrics (reward, pass rate, zero-std groups, loss, entropy, clip
    fraction, sampler-trainer gap, KL, grad norm, tokens/s, peak memory, tool statistics, seconds,
    unscorable episodes and end-reason fractions). Rewards and pass rate are over scorable episodes.
    """
    from agentrl.envs import get_spec

    cfg = sess.cfg
    t0 = time.perf_counter()
    tasks = step_tasks(sess.tasks.train, cfg.prompts_per_step, cfg.group_size, cfg.seed, step)
    trajs = sess.rollout(tasks, seed=_seed(cfg, "train", step), group_ids=[i // cfg.group_size for i in range(len(tasks))],
                         label=f"step {step} rollouts", policy_version=step)
    t_roll = time.perf_counter() - t0
    adv, adv_stats = episode_advantages(trajs, cfg.adv_mode, mask_truncated=cfg.mask_truncated)
    scored = [float(tr.reward) for tr in trajs if tr.reward is not None]
    batch = collate(trajs, sess.pad_id, advantages=adv)
    t1 = time.perf_counter()
    sess.model.train()
    upd = minibatch_step(sess.model, sess.optimizer, batch, cfg, ref_model=sess.ref_model,
                         generator=torch.Generator().manual_seed(_seed(cfg, "shuffle", step)))
    t_upd = time.perf_counter() - t1
    if step == 0:
        for tr in trajs[:: cfg.group_size]:
            sess.results.add_transcript("train_step0", tr.task_id, tr.transcript, step=0, reward=tr.reward, write=False)
    sampled = sum(tr.num_policy_tokens for tr in trajs)
    return {
        "reward_mean": adv_stats.pop("reward_mean"),
        "reward_std": adv_stats.pop("reward_std"),
        "pass_rate": sum(r >= 1.0 for r in scored) / len(scored) if scored else float("nan"),
        **{f"adv/{k}": float(v) for k, v in adv_stats.items() if k != "unscorable"},
        **outcome_metrics(trajs, get_spec(cfg.env).all_end_reasons()),
        **{k: float(v) for k, v in upd.items()},
        **{f"tools/{k}": v for k, v in mean_stats(trajs).items()},
        "rollout/episodes": float(len(trajs)),
        "rollout/sampled_tokens": float(sampled),
        "rollout/tokens_per_s": sampled / t_roll if t_roll > 0 else float("nan"),
        "time/rollout_s": t_roll,
        "time/update_s": t_upd,
        "time/step_s": time.perf_counter() - t0,
    }


def bootstrap_config(cfg: RLConfig) -> BootstrapConfig:
    """The run's one interval setting (n_boot, alpha, seed): every evaluation and paired difference uses it."""
    return BootstrapConfig(n_boot=cfg.n_boot, alpha=cfg.alpha, seed=cfg.seed)


def run_eval(sess: RunSession, label: str, step: int) -> EvalReport:
    """Evaluate the fixed held-out set (eval_n episodes per task) and record it in the results file."""
    cfg = sess.cfg
    rep = evaluate(lambda ts: sess.rollout(ts, seed=_seed(cfg, "eval", step), label=f"eval {label}",
                                           policy_version=step),
                   sess.tasks.heldout, cfg.eval_n, bootstrap_config(cfg))
    if label in ("before", "after"):
        for tid, text in rep.transcripts.items():
            sess.results.add_transcript(f"heldout_{label}", tid, text, step=step, write=False)
    sess.results.add_evaluation(label, step=step, report=rep)
    log.info("eval %-7s step %d: pass@1 %s  successes per task %s (of %s)%s", label, step, rep.pass_at_1.describe(),
             rep.successes, _trials_text(rep.trials), f"  unscorable episodes {rep.unscorable}" if rep.unscorable else "")
    log.info("eval %-7s end reasons: %s", label, ", ".join(f"{k} {v}" for k, v in rep.end_reasons.items()))
    return rep


def _trials_text(trials: list[int]) -> str:
    return str(trials[0]) if len(set(trials)) == 1 else str(trials)


def record_paired_difference(sess: RunSession, after: EvalReport) -> None:
    """after - before on the held-out set (the "before" report read back from the results file, so a
    resumed run pairs with the evaluation it made before the interruption), logged and recorded."""
    before = EvalReport.from_dict(sess.results.evaluation("before"))
    paired = paired_difference(before, after, bootstrap_config(sess.cfg))
    sess.results.add_paired_difference(paired)
    log.info("paired difference after - before: %s over %d tasks", paired.diff.describe(signed=True),
             len(paired.task_ids))


def _log_step(step: int, m: dict[str, float]) -> None:
    log.info("step %d  reward %.3f  pass %.3f  zero-std %.2f  unscorable %d  loss %.4f  entropy %.3f  clip %.3f  "
             "gnorm %.3f  %.1fs (rollout %.1fs, update %.1fs)", step, m["reward_mean"], m["pass_rate"],
             m.get("adv/frac_zero_std", float("nan")), m.get("rollout/unscorable", 0), m.get("loss", float("nan")),
             m.get("entropy", float("nan")), m.get("clip_frac", float("nan")), m.get("grad_norm", float("nan")),
             m["time/step_s"], m["time/rollout_s"], m["time/update_s"])
    ends = {k.removeprefix("rollout/end_reason/"): v for k, v in m.items() if k.startswith("rollout/end_reason/") and v}
    log.info("step %d  end reasons: %s", step, ", ".join(f"{k} {v:.2f}" for k, v in ends.items()) or "none")


def train(cfg: RLConfig, *, sampler: Any = None) -> Path:
    """Run GRPO per `cfg` and return the results JSON path.

    Order: held-out evaluation ("before"), `cfg.steps` GRPO steps (an eval-curve point every
    `cfg.eval_every` steps, a checkpoint every `cfg.checkpoint_every`), held-out evaluation ("after"),
    the paired after-before difference with its task-level bootstrap interval, the noise analysis,
    plots. The results file is rewritten after every step, so a crash loses at most the current step.

    Args:
        sampler: optional token-level sampler (agentrl.rollout.driver.SampleFn) used instead of HF
            generate, e.g. a client of an inference server that returns ids and log-probs.

    Raises:
        FileNotFoundError / ValueError: missing model or data, invalid config (before any work).
    """
    with RunSession.open(cfg, sampler=sampler) as sess:
        if not any(e["label"] == "before" for e in sess.results.data["evaluations"]):
            run_eval(sess, "before", 0)
        steps_bar = sess.progress.add_task("training steps", total=cfg.steps, completed=sess.start_step)
        for step in range(sess.start_step, cfg.steps):
            metrics = train_step(sess, step)
            sess.progress.advance(steps_bar)
            sess.results.add_step(step, metrics)
            _log_step(step, metrics)
            done = step + 1
            if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
                run_eval(sess, f"step_{done}", done)
            sess.checkpoint(done)
        record_paired_difference(sess, run_eval(sess, "after", cfg.steps))
        if len(sess.results.data["steps"]) >= 3:
            sess.results.set("noise", run_noise(sess.results.data["steps"], sess.results.data["evaluations"]))
        sess.results.set("tool_stats", {e["label"]: e["tool_stats"] for e in sess.results.data["evaluations"]})
        sess.export_merged()
        sess.results.finish("completed", wall_clock_s=time.perf_counter() - sess.t_start)
        _plots(sess)
        return sess.results_path


def _plots(sess: RunSession) -> None:
    from agentrl.io.plots import plot_results

    try:
        paths = plot_results(sess.results.data, sess.out)
        log.info("results: %s; log: %s; plots: %s", sess.results_path, sess.out / "train.log",
                 ", ".join(p.name for p in paths))
    except Exception as e:  # noqa: BLE001 - a plotting failure must not lose a finished run
        log.warning("plots failed (%s: %s); results are in %s", type(e).__name__, e, sess.results_path)
