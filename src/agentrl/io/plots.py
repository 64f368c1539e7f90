"""PNG plots of a results file (matplotlib, Agg backend). Not the summary table or the results file."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finite(value: Any) -> bool:
    """True for a real, finite int/float (not bool, None, NaN or inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _series(steps: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key`, skipping steps where it is absent, None, NaN or inf."""
    pts = [(s["step"], float(s[key])) for s in steps if _finite(s.get("step")) and _finite(s.get(key))]
    return [p[0] for p in pts], [p[1] for p in pts]


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def plot_train_reward(results: dict[str, Any], path: Path) -> Path | None:
    """Reward mean per step with a +-1 std band, plus pass rate and the zero-std-group fraction."""
    steps = results.get("steps") or []
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
    for keys, style in ((("pass_rate",), "--"), (("adv/frac_zero_std", "frac_zero_std"), ":")):
        for key in keys:  # the trainer logs "adv/frac_zero_std"; older files and tests use the bare name
            xk, yk = _series(steps, key)
            if xk:
                ax.plot(xk, yk, style, label=key)
                break
    ax.set(xlabel="step", ylabel="reward", title="training reward")
    ax.legend()
    return _save(fig, path)


def plot_eval_curve(results: dict[str, Any], path: Path) -> Path | None:
    """Held-out pass@1 per evaluation step with its bootstrap interval as a band; where the interval is
    undefined (one task, every task at the same rate) the band has a gap and the point is marked "n/a"."""
    evs = [e for e in results.get("evaluations") or []
           if _finite(e.get("step")) and _finite((e.get("pass_at_1") or {}).get("mean"))]
    evs = sorted(evs, key=lambda e: (e["step"], str(e.get("label"))))
    if not evs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    x = [e["step"] for e in evs]
    ivs = [e["pass_at_1"] for e in evs]
    ax.plot(x, [iv["mean"] for iv in ivs], marker="o", label="pass@1")
    band = [(iv.get("lo"), iv.get("hi")) if _finite(iv.get("lo")) and _finite(iv.get("hi")) else (math.nan,) * 2
            for iv in ivs]
    if any(math.isfinite(lo) for lo, _ in band):
        ax.fill_between(x, [lo for lo, _ in band], [hi for _, hi in band], alpha=0.25,
                        label=_band_label(ivs[0].get("alpha")))
    for xi, iv, (lo, _) in zip(x, ivs, band, strict=True):
        if not math.isfinite(lo):
            ax.annotate("interval n/a", (xi, iv["mean"]), textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set(xlabel="step", ylabel="held-out pass@1", title="held-out evaluation", ylim=(-0.02, 1.02))
    ax.legend()
    return _save(fig, path)


def _band_label(alpha: Any) -> str:
    return f"{100 * (1 - alpha):.0f}% task bootstrap" if _finite(alpha) else "task bootstrap"


def plot_entropy(results: dict[str, Any], path: Path) -> Path | None:
    """Policy entropy on trained policy tokens and the sampler NLL (entropy estimate on all tokens)."""
    curves = [(k, *_series(results.get("steps") or [], k)) for k in ("entropy", "sampler_nll")]
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
    by_label = {e.get("label"): e.get("tool_stats") or {} for e in results.get("evaluations") or []}
    b = {k: float(v) for k, v in by_label.get(before, {}).items() if _finite(v)}
    a = {k: float(v) for k, v in by_label.get(after, {}).items() if _finite(v)}
    keys = sorted(set(b) | set(a))
    if not keys:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.4, 0.5 * len(keys) + 2), 4.4))
    idx = range(len(keys))
    ax.bar([i - 0.2 for i in idx], [b.get(k, 0.0) for k in keys], width=0.4, label=before)
    ax.bar([i + 0.2 for i in idx], [a.get(k, 0.0) for k in keys], width=0.4, label=after)
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
