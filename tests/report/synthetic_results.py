"""Shared builders for agentrl.report tests: a synthetic results file shaped like the tools lab's."""

import numpy as np

from agentrl.eval.bootstrap import BootstrapConfig
from agentrl.eval.noise import run_noise
from agentrl.eval.report import EvalReport, TaskResult, paired_difference, report_from_counts
from agentrl.report.results import RunResults
from agentrl.rl.config import RLConfig

BEFORE = [1, 0, 0, 0, 2, 1, 0, 0, 4, 0]
AFTER = [8, 8, 1, 2, 8, 8, 0, 0, 4, 0]


def counts_report(ids, successes, trials, *, n_boot=2000, seed=0, tool_stats=None, family="f"):
    """An EvalReport of per-task counts (every episode scorable), its interval from one BootstrapConfig."""
    tasks = [TaskResult(t, family, trials, trials, s) for t, s in zip(ids, successes, strict=True)]
    return report_from_counts(tasks, BootstrapConfig(n_boot=n_boot, seed=seed), tool_stats=tool_stats)


def record_paired(res, *, n_boot=2000, seed=0):
    """The after - before difference of a RunResults' "before" and "after" evaluations, recorded in it."""
    before, after = (EvalReport.from_dict(res.evaluation(k)) for k in ("before", "after"))
    return res.add_paired_difference(paired_difference(before, after, BootstrapConfig(n_boot=n_boot, seed=seed)))


def record_noise(res):
    res.set("noise", run_noise(res.data["steps"], res.data["evaluations"]))


def build_synthetic(path, n_steps=6):
    """A results file shaped like the tools lab's: before/after evals, an eval curve, per-step metrics."""
    cfg = RLConfig.from_flat(steps=n_steps, eval_every=2)
    res = RunResults(path, cfg.to_flat(), seed=cfg.run.seed)
    ids = [f"task{i}" for i in range(10)]
    res.add_evaluation("before", step=0, report=counts_report(
        ids, BEFORE, 8, tool_stats={"edit_missing_old_string": 0.30, "write": 0.46, "bash": 0.2}))
    rng = np.random.default_rng(0)
    for step in range(n_steps):
        r = float(np.clip(0.1 + 0.07 * step + rng.normal(0, 0.05), 0, 1))
        res.add_step(step, {"reward_mean": r, "reward_std": 0.3, "pass_rate": r, "frac_zero_std": 0.25,
                            "entropy": 0.18 - 0.01 * step, "sampler_nll": 0.2, "clip_frac": 0.01,
                            "grad_norm": 0.5, "kl_sampler": 1e-4, "peak_memory_bytes": 1.4e10,
                            "kl_ref": float("nan")})
        if step % 2 == 1:
            mid = [min(8, b + (a - b) * (step + 1) // n_steps) for b, a in zip(BEFORE, AFTER, strict=True)]
            res.add_evaluation("curve", step=step + 1, report=counts_report(ids, mid, 8))
    res.add_evaluation("after", step=n_steps, report=counts_report(
        ids, AFTER, 8, tool_stats={"edit_missing_old_string": 0.0, "write": 0.0, "bash": 0.0}))
    record_paired(res)
    res.add_transcript("heldout_before", "task0", "<|im_start|>user ...", reward=0.0)
    res.set("tool_schemas", [{"type": "function", "function": {"name": "Read", "parameters": {}}}])
    res.set("sandbox", {"backend": "rlimit", "timeout_s": 10.0, "memory_bytes": 2**30})
    record_noise(res)
    res.finish(wall_clock_s=12.5)
    return res


def warm_start_record(n_steps=6):
    """A warm_start section shaped like agentrl.sft.warm_start.sft_warm_start's (2 epochs x 3 steps)."""
    steps = [{"step": i, "epoch": i // 3, "loss": 2.5 - 0.3 * i, "grad_norm": 1.0, "lr": 1e-3, "policy_tokens": 40,
              "tokens": 300, "wall_clock_s": 0.5 * (i + 1)} for i in range(n_steps)]
    return {"method": "sft", "settings": {"epochs": 2, "lr": 1e-3, "batch": 4, "micro": 4, "warmup_steps": 1,
                                          "env": "edit-menu", "tasks": 12, "random_op": True,
                                          "task_ids": [f"minmax-{i}" for i in range(12)]},
            "data": {"trajectories": 12, "mean_reward": 0.25, "policy_tokens": 480, "tokens": 3600, "dropped": 0},
            "nll_before": 2.71828, "nll_after": 0.91234, "losses": [s["loss"] for s in steps], "steps": steps,
            "data_s": 4.0, "train_s": 3.0, "wall_clock_s": 9.5}
