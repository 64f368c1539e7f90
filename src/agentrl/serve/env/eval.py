"""`agentrl eval --env-url URL --models A B ...`: several models on the same held-out tasks of one served environment.

The write-up's eval script's job: every model plays the same held-out problems through the same
`agentrl serve` server (the environment scores them: for MBPP the fraction of hidden tests passed),
in one pass, one table: mean reward and pass@1 per model with task-level bootstrap intervals, and the
paired difference of each model against the first (tasks resampled jointly, so problem difficulty
cancels). Episodes are agentrl's own rollouts (token-in/token-out, the model's chat template) over
`RemoteEnv` sessions. Not the server, not the statistics (agentrl.eval.bootstrap).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("agentrl.serve")


@dataclass
class ModelScore:
    """One model's held-out result.

    Attributes:
        model: the model as given.
        mean_reward: Interval (agentrl.eval.bootstrap) of the mean over tasks of each task's mean reward.
        pass_at_1: Interval of the mean over tasks of each task's solved fraction (reward >= 1).
        diff_vs_first: Interval of the paired difference of mean reward against the first model (None
            for the first itself).
        pass_diff_vs_first: the same for pass@1 (each task's solved fraction): the figure the write-up's
            "0.518 -> 0.582" compares; mean reward also credits partly passing hidden tests.
        per_task_reward: task id -> mean reward over its scorable episodes.
        per_task_solved: task id -> fraction of its scorable episodes with reward >= 1.
        unscorable: episodes without a reward (sandbox failures); excluded from the means.
        end_reasons: end reason -> episode count.
    """

    model: str
    mean_reward: Any = None
    pass_at_1: Any = None
    diff_vs_first: Any = None
    pass_diff_vs_first: Any = None
    per_task_reward: dict[str, float] = field(default_factory=dict)
    per_task_solved: dict[str, float] = field(default_factory=dict)
    unscorable: int = 0
    end_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (intervals as Interval.to_dict())."""
        out = asdict(self)
        for k in ("mean_reward", "pass_at_1", "diff_vs_first", "pass_diff_vs_first"):
            iv = getattr(self, k)
            out[k] = iv.to_dict() if iv is not None else None
        return out


def _rollouts(cfg: Any, url: str, env_name: str, model_name: str, tasks: list, concurrency: int) -> list:
    """eval_n episodes per task of `model_name` over RemoteEnv sessions, `concurrency` at a time."""
    from agentrl.models.device import resolve_device
    from agentrl.rollout.driver import RolloutConfig, run_episodes
    from agentrl.serve.env.client import RemoteEnv

    policy = dataclasses.replace(cfg.policy, model=model_name)
    model, tok = policy.load(resolve_device(policy.device), seed=cfg.run.seed)
    rcfg = RolloutConfig(sampling=cfg.sampling.sampler_config(), max_context_tokens=cfg.sampling.max_context_tokens)
    episodes = [t for t in tasks for _ in range(cfg.eval.n)]
    out = []
    for start in range(0, len(episodes), concurrency):
        chunk = episodes[start:start + concurrency]
        envs = [RemoteEnv(url, name=env_name) for _ in chunk]
        try:
            out += run_episodes(model, tok, list(zip(envs, chunk, strict=True)), cfg=rcfg, seed=cfg.run.seed + start)
        finally:
            for e in envs:
                e.close()
        log.warning("%s: %d/%d episodes", model_name, len(out), len(episodes))
    del model
    return out


def _score(model_name: str, trajs: list, task_ids: list[str]) -> ModelScore:
    by_task: dict[str, list] = {t: [] for t in task_ids}
    score = ModelScore(model=model_name)
    for tr in trajs:
        by_task[tr.task_id].append(tr)
        score.end_reasons[tr.end_reason or "?"] = score.end_reasons.get(tr.end_reason or "?", 0) + 1
        score.unscorable += tr.reward is None
    for tid, group in by_task.items():
        scored = [tr.reward for tr in group if tr.reward is not None]
        if scored:
            score.per_task_reward[tid] = sum(scored) / len(scored)
            score.per_task_solved[tid] = sum(r >= 1.0 for r in scored) / len(scored)
    return score


def score_models(scores: list[ModelScore], *, n_boot: int, alpha: float, seed: int | None) -> list[str]:
    """Fill each score's intervals (task-level percentile bootstrap, agentrl.eval.bootstrap.bootstrap_mean)
    and its paired difference against the first model, over the tasks every model could score; returns
    those task ids (the comparison's common set).

    Raises:
        ValueError: no task was scorable for every model, or bad n_boot/alpha.
    """
    import numpy as np

    from agentrl.eval.bootstrap import BootstrapConfig, bootstrap_mean

    boot = BootstrapConfig(n_boot=n_boot, alpha=alpha, seed=seed)
    common = [t for t in scores[0].per_task_reward if all(t in s.per_task_reward for s in scores)]
    if not common:
        raise ValueError("no held-out task was scorable for every model; nothing to compare")
    first = np.array([scores[0].per_task_reward[t] for t in common])
    first_solved = np.array([scores[0].per_task_solved[t] for t in common])
    for i, s in enumerate(scores):
        rewards = np.array([s.per_task_reward[t] for t in common])
        solved = np.array([s.per_task_solved[t] for t in common])
        s.mean_reward = bootstrap_mean(rewards, boot, what="mean reward")
        s.pass_at_1 = bootstrap_mean(solved, boot, what="pass rate")
        s.diff_vs_first = None if i == 0 else bootstrap_mean(rewards - first, boot, what="difference")
        s.pass_diff_vs_first = None if i == 0 else bootstrap_mean(solved - first_solved, boot, what="difference")
    return common


def render_table(scores: list[ModelScore], n_tasks: int, eval_n: int, alpha: float) -> str:
    """The comparison as a plain-text table (one row per model; an undefined interval reads n/a: why)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    level = f"{100 * (1 - alpha):g}%"
    table = Table(title=f"held-out: {n_tasks} tasks x {eval_n} episodes, {level} task-level bootstrap intervals; "
                        f"differences paired by task against the first model, {scores[0].model}")
    for col in ("model", "mean reward", "pass@1", "mean reward vs first", "pass@1 vs first", "unscorable"):
        table.add_column(col, no_wrap=True)
    for s in scores:
        diff = "-" if s.diff_vs_first is None else s.diff_vs_first.describe(signed=True)
        pdiff = "-" if s.pass_diff_vs_first is None else s.pass_diff_vs_first.describe(signed=True)
        cells = (s.model, s.mean_reward.describe(), s.pass_at_1.describe(), diff, pdiff, str(s.unscorable))
        table.add_row(*(escape(c) for c in cells))  # "[n/a: ...]" is text, not rich markup
    console = Console(width=400, record=True, force_terminal=False)
    with console.capture() as cap:
        console.print(table)
    return cap.get()


def eval_served(cfg: Any, url: str, models: list[str], concurrency: int = 16) -> dict[str, Any]:
    """Score `models` on the server's held-out split (first `cfg.eval.size` tasks, 0 = all), `cfg.eval.n`
    episodes each, print the table and write `<cfg.run.out>/served_eval.json` and each model's episodes as
    `<cfg.run.out>/transcripts/<i>.jsonl` (i: the model's position in `models`).

    Args:
        cfg: an agentrl.rl.RLConfig (sampling, context budget, dtype, device, seed, n_boot, alpha, out).
        url: the `agentrl serve` server; models: model names or paths, the first is the baseline.
        concurrency: episodes (server sessions) at a time.

    Raises:
        ValueError: no models, a bad concurrency, or no task scorable for every model.
        ConnectionError: the server cannot be reached.
    """
    from agentrl.serve.env.app import require_openenv

    require_openenv()
    from agentrl.serve.env.client import fetch_tasks, server_info, stub_task

    if not models:
        raise ValueError("--models needs at least one model")
    if concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
    env_name = server_info(url)["env"]
    specs = fetch_tasks(url, "heldout")[: cfg.eval.size or None]
    if not specs:
        raise ValueError(f"{url}: the held-out split is empty")
    check_model_paths(models, cfg.policy.allow_download)
    tasks = [stub_task(s) for s in specs]
    ids = [t.id for t in tasks]
    head = {"env_url": url, "env": env_name, "tasks": ids, "eval_n": cfg.eval.n, "alpha": cfg.eval.alpha,
            "n_boot": cfg.eval.n_boot, "seed": cfg.run.seed}
    path = Path(cfg.run.out) / "served_eval.json"
    scores: list[ModelScore] = []
    for i, m in enumerate(models):  # each model's score is on disk before the next loads: a later failure loses none
        trajs = _rollouts(cfg, url, env_name, m, tasks, concurrency)
        _write_transcripts(path.parent / "transcripts" / f"{i}.jsonl", m, trajs)
        scores.append(_score(m, trajs, ids))
        if len(scores) < len(models):
            _write_json(path, head | {"complete": False, "models": [s.to_dict() for s in scores]})
    common = score_models(scores, n_boot=cfg.eval.n_boot, alpha=cfg.eval.alpha, seed=cfg.run.seed)
    table = render_table(scores, len(common), cfg.eval.n, cfg.eval.alpha)
    print(table)
    result = head | {"complete": True, "compared_tasks": common, "models": [s.to_dict() for s in scores]}
    _write_json(path, result)
    print(f"results: {path}")
    return result


def check_model_paths(models: list[str], allow_download: bool = False) -> None:
    """Refuse, before any model is loaded, a list naming a model that cannot be found (every one named).

    The loader's own rule (agentrl.models.load.model_not_found): a path must exist, and without downloads any
    other name must be a preset, a fetched model, a folder here or a repo id in the local HF cache. Scoring
    several models takes minutes per model, so a typo in the last one must not cost the first ones' rollouts.

    Raises:
        FileNotFoundError: one or more models are missing.
    """
    from agentrl.models.load import model_kinds, model_not_found_reason

    reasons = [r for m in models if (r := model_not_found_reason(m, allow_download))]
    if reasons:
        raise FileNotFoundError(f"models not found (checked before any rollout): {'; '.join(reasons)}. {model_kinds()}")


def _write_transcripts(path: Path, model: str, trajs: list) -> None:
    """One JSON line per episode of `model`: task, reward, end reason and the rendered transcript (what the
    policy wrote and the environment answered), so a served evaluation can be read, not only counted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for tr in trajs:
            f.write(json.dumps({"model": model, "task_id": tr.task_id, "reward": tr.reward,
                                "end_reason": tr.end_reason, "transcript": tr.transcript}, default=_json_default) + "\n")


def _write_json(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, default=_json_default))
    tmp.replace(path)


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)
