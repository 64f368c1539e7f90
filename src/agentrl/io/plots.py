"""PNG plots of a results file (matplotlib, Agg backend). Not the summary table or the results file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(s["step"], s[key]) for s in steps if s.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_train_reward(results: dict[str, Any], path: Path) -> Path | None:
    """Reward mean per step with a +-1 std band, plus pass rate and the zero-std-group fraction."""
    steps = results["steps"]
    x, y = _series(steps, "reward_mean")
    if not x:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(x, y, marker="o", label="reward mean")
    xs, sd = _series(steps, "reward_std")
    if xs == x:
        ax.fill_between(x, [a - b for a, b in zip(y, sd, strict=True)], [a + b for a, b in zip(y, sd, strict=True)],
                        alpha=0.2, label="+-1 std")
    for key, style in (("pass_rate", "--"), ("frac_zero_std", ":")):
        xk, yk = _series(steps, key)
        if xk:
            ax.plot(xk, yk, style, label=key)
    ax.set(xlabel="step", ylabel="reward", title="training reward")
    ax.legend()
    return _save(fig, path)


def plot_eval_curve(results: dict[str, Any], path: Path) -> Path | None:
    """Held-out pass@1 per evaluation step with its bootstrap interval as a band."""
    evs = sorted(results["evaluations"], key=lambda e: (e["step"], e["label"]))
    if not evs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    x = [e["step"] for e in evs]
    ax.plot(x, [e["pass_at_1"]["mean"] for e in evs], marker="o", label="pass@1")
    ax.fill_between(x, [e["pass_at_1"]["lo"] for e in evs], [e["pass_at_1"]["hi"] for e in evs], alpha=0.25,
                    label=f"{100 * (1 - evs[0]['pass_at_1']['alpha']):.0f}% task bootstrap")
    ax.set(xlabel="step", ylabel="held-out pass@1", title="held-out evaluation", ylim=(-0.02, 1.02))
    ax.legend()
    return _save(fig, path)


def plot_entropy(results: dict[str, Any], path: Path) -> Path | None:
    """Policy entropy on trained policy tokens and the sampler NLL (entropy estimate on all tokens)."""
    curves = [(k, *_series(results["steps"], k)) for k in ("entropy", "sampler_nll")]
    curves = [c for c in curves if c[1]]
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for key, x, y in curves:
        ax.plot(x, y, marker=".", label=key)
    ax.set(xlabel="step", ylabel="nats / token", title="policy entropy")
    ax.legend()
    return _save(fig, path)


def plot_tool_stats(results: dict[str, Any], path: Path, before: str = "before", after: str = "after") -> Path | None:
    """Grouped bars of each tool statistic (per episode) in the before and after evaluations."""
    by_label = {e["label"]: e["tool_stats"] for e in results["evaluations"]}
    b, a = by_label.get(before, {}), by_label.get(after, {})
    keys = sorted(k for k in set(b) | set(a) if b.get(k) is not None or a.get(k) is not None)
    if not keys:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.4, 0.5 * len(keys) + 2), 4.4))
    idx = range(len(keys))
    ax.bar([i - 0.2 for i in idx], [b.get(k) or 0.0 for k in keys], width=0.4, label=before)
    ax.bar([i + 0.2 for i in idx], [a.get(k) or 0.0 for k in keys], width=0.4, label=after)
    ax.set_xticks(list(idx), keys, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel="per episode", title="tool statistics, held-out")
    ax.legend()
    return _save(fig, path)


PLOTS = {"train_reward.png": plot_train_reward, "eval_curve.png": plot_eval_curve,
         "entropy.png": plot_entropy, "tool_stats.png": plot_tool_stats}


def plot_results(results: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    """Draw every plot the results have data for into `out_dir`; returns the PNG paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [fn(results, out / name) for name, fn in PLOTS.items()]
    return [p for p in written if p is not None]
