"""The GRPO loop: rollouts -> environment rewards -> group advantages -> clipped token-mean updates.

Wires the stages together and owns the run's schedule (evaluations, checkpoints, results file).
Not the maths (advantages.py, loss.py, update.py), not the sampler (agentrl.rollout), not the state
(agentrl.rl.session).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.eval.bootstrap import BootstrapConfig
from agentrl.eval.evaluate import episode_record, evaluate, mean_stats
from agentrl.eval.noise import run_noise
from agentrl.eval.report import EvalReport, paired_difference
from agentrl.report.trackers import eval_metrics, step_metrics
from agentrl.rl.batch import collate
from agentrl.rl.config import RLConfig
from agentrl.rl.health import step_warnings
from agentrl.rl.offpolicy import correct_stale_batch
from agentrl.rl.scoring import episode_advantages, outcome_metrics
from agentrl.rl.session import RunSession
from agentrl.rollout.trace import expand_rows
from agentrl.rollout.trajectory import Trajectory
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
    return random.Random(f"{cfg.run.seed}:{phase}:{step}").randrange(2**31)


@dataclass
class Collected:
    """One step's rollouts, scored: the episodes, their training rows and the rows' advantages.

    Attributes:
        step, version: the step they are for and the policy version that sampled them.
        episodes: one Trajectory per episode (in task order).
        rows: every training row (an episode of agentrl's own driver is one row; a black-box episode
            may have several: agentrl.rollout.trace.expand_rows).
        advantages: [len(rows)] the episode advantage of each row.
        adv_stats: agentrl.rl.scoring.episode_advantages' statistics; rollout_s: seconds sampling took.
    """

    step: int
    version: int
    episodes: list[Trajectory]
    rows: list[Trajectory]
    advantages: list[float]
    adv_stats: dict[str, float]
    rollout_s: float


def collect_step(sess: RunSession, step: int, *, version: int | None = None, policy: Any = None) -> Collected:
    """Sample and score the B*G episodes of `step` (tasks and seed from (seed, step)).

    Args:
        version: the policy version sampling them (default `step`: on-policy).
        policy: a RolloutPolicy other than the learner's (asynchronous training).
    """
    cfg = sess.cfg
    version = step if version is None else version
    t0 = time.perf_counter()
    tasks = step_tasks(sess.tasks.train, cfg.sampling.prompts_per_step, cfg.sampling.group_size, cfg.run.seed, step)
    trajs = sess.rollout(tasks, seed=_seed(cfg, "train", step), group_ids=[i // cfg.sampling.group_size for i in range(len(tasks))],
                         label=f"step {step} rollouts", policy_version=version, policy=policy)
    adv, adv_stats = episode_advantages(trajs, cfg.update.adv_mode, mask_truncated=cfg.update.mask_truncated)
    rows, row_adv = expand_rows(trajs, adv.tolist())
    return Collected(step, version, trajs, rows, row_adv, adv_stats, time.perf_counter() - t0)


def learn_step(sess: RunSession, col: Collected, *, wait_s: float = 0.0) -> dict[str, float]:
    """The update on `col` (truncated-IS corrected when it was sampled by older weights) and the step's
    metrics (reward, pass rate, zero-std groups, loss, entropy, clip fraction, sampler-trainer gap, KL,
    grad norm, tokens/s, peak memory, tool statistics, seconds, unscorable episodes and end-reason
    fractions, staleness and IS ratios). Rewards and pass rate are over scorable episodes."""
    cfg, step, trajs = sess.cfg, col.step, col.episodes
    staleness = col.step - col.version
    adv_stats = dict(col.adv_stats)
    scored = [float(tr.reward) for tr in trajs if tr.reward is not None]
    batch = collate(col.rows, sess.pad_id, advantages=col.advantages)
    t1 = time.perf_counter()
    sess.model.train()
    batch, is_stats = correct_stale_batch(sess.model, batch, cfg, staleness)
    upd = sess.update(batch, group_ids=[r.group_id for r in col.rows],
                      generator=torch.Generator().manual_seed(_seed(cfg, "shuffle", step)),
                      minibatches=min(cfg.update.minibatches, batch.num_rows))
    t_upd = time.perf_counter() - t1
    if step == 0:
        for tr in trajs[:: cfg.sampling.group_size]:
            rec = episode_record(tr)
            sess.results.add_transcript("train_step0", tr.task_id, tr.transcript, step=0, reward=tr.reward,
                                        end_reason=rec["end_reason"], turns=rec["turns"], write=False)
    sampled = sum(tr.num_policy_tokens for tr in col.rows)
    return {
        "reward_mean": adv_stats.pop("reward_mean"),
        "reward_std": adv_stats.pop("reward_std"),
        "pass_rate": sum(r >= 1.0 for r in scored) / len(scored) if scored else float("nan"),
        **{f"adv/{k}": float(v) for k, v in adv_stats.items() if k != "unscorable"},
        **outcome_metrics(trajs, _end_reasons(cfg)),
        **{k: float(v) for k, v in upd.items()},
        **{f"tools/{k}": v for k, v in mean_stats(trajs).items()},
        **is_stats,
        "rollout/episodes": float(len(trajs)),
        "rollout/rows": float(len(col.rows)),
        "rollout/sampled_tokens": float(sampled),
        "rollout/tokens_per_s": sampled / col.rollout_s if col.rollout_s > 0 else float("nan"),
        "async/staleness": float(staleness),
        "async/wait_s": wait_s,
        "time/rollout_s": col.rollout_s,
        "time/update_s": t_upd,
        "time/step_s": col.rollout_s + t_upd if not cfg.async_rl.enabled else wait_s + t_upd,
    }


def _end_reasons(cfg: RLConfig) -> tuple[str, ...]:
    from agentrl.envs import get_spec

    return () if cfg.agent.name else tuple(get_spec(cfg.env.name).all_end_reasons())


def train_step(sess: RunSession, step: int) -> dict[str, float]:
    """One synchronous GRPO step: `collect_step` then `learn_step` (B groups of G episodes, rewards from
    the env, advantages, the update). Returns the step's scalar metrics (see learn_step)."""
    return learn_step(sess, collect_step(sess, step))


def run_warm_start(sess: RunSession) -> dict[str, Any] | None:
    """The run's `--warm-start` on the policy (agentrl.rl.warm_start's registry; None for "none"), recorded as
    the results file's `warm_start` section. Runs before the "before" evaluation, which thus measures the
    warm-started model: the paired difference is GRPO's gain over the warm start."""
    if sess.cfg.warm_start.method == "none":
        return None
    from agentrl.rl.warm_start import warm_start_fn

    summary = warm_start_fn(sess.cfg.warm_start.method)(sess)
    sess.results.set("warm_start", summary)
    return summary


def bootstrap_config(cfg: RLConfig) -> BootstrapConfig:
    """The run's one interval setting (n_boot, alpha, seed): every evaluation and paired difference uses it."""
    return cfg.eval.bootstrap(cfg.run.seed)


def run_eval(sess: RunSession, label: str, step: int) -> EvalReport:
    """Evaluate the fixed held-out set (eval_n episodes per task) and record it in the results file, with one
    transcript per task (kind `heldout_<label>`) for the "before", "after" and `agentrl eval`'s "eval"."""
    cfg = sess.cfg
    phase = "evaluation" if label == "eval" else f"eval {label}"  # `agentrl eval`'s one evaluation
    rep = evaluate(lambda ts: sess.rollout(ts, seed=_seed(cfg, "eval", step), label=phase,
                                           policy_version=step),
                   sess.tasks.heldout, cfg.eval.n, bootstrap_config(cfg))
    if label in ("before", "after", "eval"):
        for tid, text in rep.transcripts.items():
            ep = rep.episodes.get(tid, {})
            sess.results.add_transcript(f"heldout_{label}", tid, text, step=step, reward=ep.get("reward"),
                                        end_reason=ep.get("end_reason"), turns=ep.get("turns"), write=False)
    ev = sess.results.add_evaluation(label, step=step, report=rep)
    if sess.tracker is not None and label != "after":  # "after" is logged with its paired difference
        sess.tracker.log(eval_metrics(ev), step)
    name = "evaluation" if label == "eval" else f"evaluation {label:<7}"
    log.info("%s at step %d: pass@1 %s  successes per task %s (of %s)%s", name, step,
             rep.pass_at_1.describe(), rep.successes, _trials_text(rep.trials),
             f"  unscorable episodes {rep.unscorable}" if rep.unscorable else "")
    log.info("%s end reasons: %s", name, ", ".join(f"{k} {v}" for k, v in rep.end_reasons.items()))
    return rep


def _trials_text(trials: list[int]) -> str:
    return str(trials[0]) if len(set(trials)) == 1 else str(trials)


def record_paired_difference(sess: RunSession, after: EvalReport, step: int | None = None) -> None:
    """after - before on the held-out set (the "before" report read back from the results file, so a
    resumed run pairs with the evaluation it made before the interruption), logged, recorded and
    sent to the tracker at global step `step` (default: cfg.run.steps)."""
    before = EvalReport.from_dict(sess.results.evaluation("before"))
    paired = paired_difference(before, after, bootstrap_config(sess.cfg))
    rec = sess.results.add_paired_difference(paired)
    if sess.tracker is not None:
        sess.tracker.log(eval_metrics(sess.results.evaluation("after"), rec),
                         sess.cfg.run.steps if step is None else step)
    log.info("paired difference after - before: %s over %d tasks", paired.diff.describe(signed=True),
             len(paired.task_ids))


def skipped_update_reason(m: dict[str, float]) -> str | None:
    """Why a step's update trained no token, in words (None when it trained): every group had zero
    reward spread, or no row had a nonzero advantage."""
    if m.get("tokens_trained", 1.0) != 0.0:
        return None
    groups, zero = m.get("adv/num_groups"), m.get("adv/frac_zero_std")
    if groups and zero == 1.0:
        return f"all {int(groups)} groups have zero reward spread"
    return "no episode had a nonzero advantage"


def _log_step(step: int, m: dict[str, float]) -> None:
    head = (f"step {step}  reward {m['reward_mean']:.3f}  pass {m['pass_rate']:.3f}  "
            f"zero-std {m.get('adv/frac_zero_std', float('nan')):.2f}  unscorable {m.get('rollout/unscorable', 0):.0f}")
    times = f"{m['time/step_s']:.1f}s (rollout {m['time/rollout_s']:.1f}s, update {m['time/update_s']:.1f}s)"
    skipped = skipped_update_reason(m)
    if skipped:
        log.info("%s  update skipped: %s  %s", head, skipped, times)
    else:
        log.info("%s  loss %.4f  entropy %.3f  clip %.3f  gnorm %.3f  %s", head, m.get("loss", float("nan")),
                 m.get("entropy", float("nan")), m.get("clip_frac", float("nan")), m.get("grad_norm", float("nan")),
                 times)
    ends = {k.removeprefix("rollout/end_reason/"): v for k, v in m.items() if k.startswith("rollout/end_reason/") and v}
    log.info("step %d  end reasons: %s", step, ", ".join(f"{k} {v:.2f}" for k, v in ends.items()) or "none")


def train(cfg: RLConfig, *, sampler: Any = None,
          open_session: Callable[..., AbstractContextManager[RunSession]] | None = None) -> Path:
    """Run GRPO per `cfg` and return the results JSON path.

    Order: the warm start (`cfg.warm_start.method`, e.g. SFT on scripted experts), held-out evaluation
    ("before"), `cfg.run.steps` GRPO steps (an eval-curve point every
    `cfg.eval.every` steps, a checkpoint every `cfg.run.checkpoint_every`), held-out evaluation ("after"),
    the paired after-before difference with its task-level bootstrap interval, the noise analysis,
    plots. The results file is rewritten after every step, so a crash loses at most the current step.

    Args:
        sampler: optional token-level sampler (agentrl.rollout.driver.SampleFn) used instead of HF
            generate, e.g. a client of an inference server that returns ids and log-probs.
        open_session: opens the run's session, `open_session(cfg, sampler=sampler)` (default
            RunSession.open; agentrl.scale's data-parallel and rollout-worker strategies pass theirs and
            reuse this schedule; only the main process writes results, plots and checkpoints).

    Raises:
        FileNotFoundError / ValueError: missing model or data, invalid config (before any work).
    """
    with (open_session or RunSession.open)(cfg, sampler=sampler) as sess:
        if not any(e["label"] == "before" for e in sess.results.data["evaluations"]):
            run_warm_start(sess)  # a resumed run's checkpoint already holds the warm-started weights
            run_eval(sess, "before", 0)
        steps_bar = sess.progress.add_task("training steps", total=cfg.run.steps, completed=sess.start_step,
                                           unit="steps")
        steps = _async_steps(sess) if cfg.async_rl.enabled else _sync_steps(sess)
        done, t_train = sess.start_step, time.perf_counter()
        for step, metrics in steps:
            sess.results.add_step(step, metrics)
            for warning in step_warnings(sess.results.data["steps"][:-1], metrics, step=step):
                log.warning("run health: %s", warning["message"])
                sess.results.add_warning(warning)
            sess.tracker.log(step_metrics(metrics), step + 1)  # global step = steps completed, as in TRL
            _log_step(step, metrics)
            sess.progress.advance(steps_bar)  # after the step's own lines: "training steps: 3/8" follows step 2
            done = step + 1
            if cfg.eval.every and done % cfg.eval.every == 0 and done < cfg.run.steps:
                run_eval(sess, f"step_{done}", done)
            over_budget = sess.decide(_over_time_budget(sess, done, time.perf_counter() - t_train))
            sess.checkpoint(done, final=over_budget)
            if over_budget:
                steps.close()  # an async producer stops here
                break
        sess.progress.remove_task(steps_bar)
        record_paired_difference(sess, run_eval(sess, "after", done), step=done)
        if len(sess.results.data["steps"]) >= 3:
            sess.results.set("noise", run_noise(sess.results.data["steps"], sess.results.data["evaluations"]))
        sess.results.set("tool_stats", {e["label"]: e["tool_stats"] for e in sess.results.data["evaluations"]})
        model_path = sess.export_model(done)
        if model_path is not None:
            sess.results.set("model_path", str(model_path))
        sess.export_merged()
        sess.results.finish("completed", wall_clock_s=time.perf_counter() - sess.t_start)
        write_plots_and_report(sess)
        return sess.results_path


def evaluate_only(cfg: RLConfig) -> tuple[EvalReport, Path]:
    """`agentrl eval`: the trainer's held-out evaluation of `cfg.policy.model` on its own (no optimizer step; the
    run folder, results file, plots and report as a run writes them). Returns (the report, results path).

    Raises: what RunSession.open raises (bad input before any work, named)."""
    cfg = cfg.replace_flat(steps=0)
    with RunSession.open(cfg, log_name="eval.log") as sess:
        rep = run_eval(sess, "eval", 0)
        sess.results.finish("completed", wall_clock_s=time.perf_counter() - sess.t_start)
        write_plots_and_report(sess)
    return rep, sess.results_path


def _over_time_budget(sess: RunSession, done: int, elapsed_s: float) -> bool:
    """True when cfg.run.max_train_s (> 0) has passed after `done` < cfg.run.steps steps: the run then stops taking
    steps, records `stopped_early` (reason, steps done of planned, seconds) and goes on to the evaluation
    after."""
    budget = sess.cfg.run.max_train_s
    if not budget or done >= sess.cfg.run.steps or elapsed_s < budget:
        return False
    sess.results.set("stopped_early", {"reason": "max_train_s", "steps_done": done, "steps_planned": sess.cfg.run.steps,
                                       "train_s": round(elapsed_s, 3), "budget_s": budget})
    log.warning("training time budget of %.0f s reached after %d of %d steps (%.0f s); evaluating now",
                budget, done, sess.cfg.run.steps, elapsed_s)
    return True


def _sync_steps(sess: RunSession) -> Iterator[tuple[int, dict[str, float]]]:
    """Steps start..cfg.steps, each rollouts then update."""
    for step in range(sess.start_step, sess.cfg.run.steps):
        yield step, train_step(sess, step)


def _async_steps(sess: RunSession) -> Iterator[tuple[int, dict[str, float]]]:
    """Steps start..cfg.steps with rollouts one step ahead (agentrl.rl.async_loop): a producer thread
    collects step k+1 with a copy of the policy while step k trains, at most cfg.async_rl.max_staleness versions
    behind; the copy gets the learner's weights before each collection. With max_staleness 0 there is no
    copy and nothing overlaps: the steps equal `_sync_steps`' exactly."""
    from agentrl.rl.async_loop import AsyncRollouts
    from agentrl.rollout.fast_sampler import CUDA_CAPTURE_LOCK

    cfg = sess.cfg
    # a separate rollout policy: a local copy (staleness > 0) or the worker processes (agentrl.scale.workers)
    policy = sess.rollout_copy() if cfg.async_rl.max_staleness > 0 or cfg.scale.rollout_workers else None

    def sync() -> None:
        if policy is not None:
            with CUDA_CAPTURE_LOCK:  # the copy allocates; a fast sampler may be capturing a graph in its thread
                sess.sync_weights(policy)

    def produce(step: int, version: int) -> Collected:
        return collect_step(sess, step, version=version, policy=policy)

    with AsyncRollouts(produce, sync, start=sess.start_step, stop=cfg.run.steps, max_staleness=cfg.async_rl.max_staleness,
                       version=sess.start_step) as loop:
        for step in range(sess.start_step, cfg.run.steps):
            t0 = time.perf_counter()
            got = loop.get(step)
            # loop.lock: the producer copies weights only between updates; CUDA_CAPTURE_LOCK: the update's
            # allocations would invalidate a CUDA graph the rollout thread's fast sampler captures meanwhile
            with loop.lock, CUDA_CAPTURE_LOCK:
                metrics = learn_step(sess, got.payload, wait_s=time.perf_counter() - t0)
            loop.publish(step + 1)
            metrics["async/producer_wait_s"] = got.wait_s
            yield step, metrics


def write_plots_and_report(sess: RunSession) -> None:
    """Plots into <out>/plots and the HTML report <out>/report.html; a failure here is logged, never
    raised (the results file is complete by now). Only the main process of a distributed run writes them."""
    if not sess.main_process:
        return
    from agentrl.report.html import write_html_report
    from agentrl.report.plots import plot_results, plots_dir

    try:
        paths = plot_results(sess.results.data, plots_dir(sess.out))
        page = write_html_report(sess.results.data, sess.out / "report.html", plots=paths)
        log.info("results: %s; log: %s; report: %s; plots in %s: %s", sess.results_path, sess.log_path,
                 page, plots_dir(sess.out), ", ".join(p.name for p in paths))
    except Exception as e:  # noqa: BLE001 - a plotting failure must not lose a finished run
        log.warning("plots/report failed (%s: %s); results are in %s", type(e).__name__, e, sess.results_path)
