"""PNG plots of a results file (matplotlib, Agg backend). Not the summary table, the HTML page or the file.

Every figure has a title, axis labels with units (words, not snake_case), and integer step ticks; a step
without a value (a skipped update, a missing metric) is a gap in the line, never a straight segment across
it. Figures are PAGE_WIDTH_IN wide, so the HTML report shows them at the page's width without blur.
`plot_results` draws them all into one folder (`<out>/plots/`, for `agentrl train` and `agentrl report` alike).
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

from agentrl.report.readable import label as readable_label
from agentrl.report.schema import dedupe_stats, stat_description

BEFORE_COLOR, AFTER_COLOR = "#8c8c8c", "#1f77b4"
PAGE_WIDTH_IN, DPI = 12.0, 110  # 1,320 px: the report's content width (agentrl.report.html)
SKIPPED_COLOR = "#e5e7eb"
# an evaluation's label as a legend entry
EVAL_WORDS = {"before": "before training", "after": "after training", "eval": "evaluation"}


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


def gapped_series(steps: list[dict[str, Any]], key: str, *, skip: Any = None) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over every step, NaN where the value is absent, None, NaN or inf, or where
    `skip(step_record)` is true, so matplotlib breaks the line there instead of drawing across the gap.
    ([], []) when no step has a value."""
    x, y = [], []
    for s in steps:
        if not _finite(s.get("step")):
            continue
        ok = _finite(s.get(key)) and not (skip is not None and skip(s))
        x.append(s["step"])
        y.append(float(s[key]) if ok else math.nan)
    return (x, y) if any(math.isfinite(v) for v in y) else ([], [])


def _skipped_update(step: dict[str, Any]) -> bool:
    """The step's update trained no token (every group had zero reward spread): its loss, gradient norm and
    entropy are 0 by construction, not measurements."""
    return step.get("tokens_trained") == 0


def _shade_skipped(ax: Any, steps: list[dict[str, Any]]) -> None:
    """Grey bands over the steps whose update was skipped (the first one labelled, for a legend)."""
    first = True
    for s in steps:
        if _skipped_update(s) and _finite(s.get("step")):
            ax.axvspan(s["step"] - 0.5, s["step"] + 0.5, color=SKIPPED_COLOR, zorder=0,
                       label="update skipped (no reward spread)" if first else None)
            first = False


def _first_series(steps: list[dict[str, Any]], *keys: str) -> tuple[list[int], list[float]]:
    """The series of the first of `keys` that has data (the trainer writes "adv/frac_zero_std"; older
    files the bare name)."""
    for key in keys:
        x, y = _series(steps, key)
        if x:
            return x, y
    return [], []


def _style(ax: Any, *, title: str, xlabel: str, ylabel: str, int_x: bool = True, values_on: str = "y") -> None:
    """Title, axis labels, integer x (step) ticks, plain value labels (no offset, no scientific
    notation, so a 0.003 wiggle never looks like a drop) on the `values_on` axis, a light grid."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if int_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.agentrl_step_axis = True  # _save widens a step axis narrower than two steps (one evaluation, one step)
    fmt = ScalarFormatter(useOffset=False)
    fmt.set_scientific(False)
    (ax.yaxis if values_on == "y" else ax.xaxis).set_major_formatter(fmt)
    ax.grid(alpha=0.3)


def _save(fig: Any, path: Path, title: str) -> Path:
    for ax in fig.axes:  # a step axis around one x value: matplotlib's +-0.05 default shows -0.045 .. 0.045
        lo, hi = ax.get_xlim()
        if getattr(ax, "agentrl_step_axis", False) and hi - lo < 2:
            mid = round((lo + hi) / 2)
            ax.set_xlim(mid - 1, mid + 1)
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def wilson(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (Wilson 1927); (nan, nan) when n <= 0."""
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def plot_train_reward(results: dict[str, Any], path: Path) -> Path | None:
    """Three panels: reward mean with a 95% normal interval of the mean (1.96 std / sqrt(n), n = the
    step's episodes); pass rate with its 95% Wilson interval; the fraction of groups with zero reward
    spread. (Episodes of one group share a prompt, so both bands are somewhat narrower than a
    prompt-level interval would be.)"""
    steps = results.get("steps") or []
    x, y = gapped_series(steps, "reward_mean")
    if not x:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(PAGE_WIDTH_IN, 3.6))
    ax = axes[0]
    ax.plot(x, y, marker="o", color=AFTER_COLOR, label="mean")
    n = {s["step"]: s.get("rollout/episodes") for s in steps}
    xs, sd = gapped_series(steps, "reward_std")
    if xs == x and all(_finite(n.get(s)) and n[s] > 0 for s in x):
        half = [1.96 * d / math.sqrt(n[s]) for s, d in zip(x, sd, strict=True)]  # NaN where either is missing
        ax.fill_between(x, [max(0.0, m - h) if math.isfinite(m - h) else math.nan for m, h in zip(y, half, strict=True)],
                        [min(1.0, m + h) if math.isfinite(m + h) else math.nan for m, h in zip(y, half, strict=True)],
                        alpha=0.2, color=AFTER_COLOR,
                        label="95% interval of the mean")
    ax.legend(fontsize=8)
    _style(ax, title="mean reward of the step's episodes", xlabel="training step", ylabel="reward (0-1)")
    ax.set_ylim(-0.02, 1.02)
    ax = axes[1]
    xp, yp = gapped_series(steps, "pass_rate")
    if xp:
        ax.plot(xp, yp, marker="o", color="#2ca02c", label="pass rate")
        if all(_finite(n.get(s)) for s in xp):
            band = [wilson(p * n[s], n[s]) if math.isfinite(p) else (math.nan, math.nan)
                    for s, p in zip(xp, yp, strict=True)]
            ax.fill_between(xp, [b[0] for b in band], [b[1] for b in band], alpha=0.2, color="#2ca02c",
                            label="95% Wilson interval")
        ax.legend(fontsize=8)
    _style(ax, title="episodes passing every hidden test", xlabel="training step", ylabel="fraction of episodes")
    ax.set_ylim(-0.02, 1.02)
    ax = axes[2]
    xz, yz = _first_series(steps, "adv/frac_zero_std", "frac_zero_std")
    if xz:
        ax.bar(xz, yz, color="#d62728", alpha=0.7, width=0.6)
        ax.plot(xz, yz, linestyle="none", marker="_", markersize=8, color="#d62728")  # a 0 shows as a tick, not as nothing
        if all(v == 0 for v in yz if math.isfinite(v)):
            ax.text(0.5, 0.5, "none at any step:\nevery group trained", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="#555555")
    _style(ax, title="groups with zero reward spread\n(they train nothing)", xlabel="training step",
           ylabel="fraction of groups")
    ax.set_ylim(0, 1.05)
    return _save(fig, path, "training reward")


def _eval_points(results: dict[str, Any]) -> list[dict[str, Any]]:
    evs = [e for e in results.get("evaluations") or []
           if _finite(e.get("step")) and _finite((e.get("pass_at_1") or {}).get("mean"))]
    return sorted(evs, key=lambda e: (e["step"], e.get("label") != "before", str(e.get("label"))))


def plot_eval_curve(results: dict[str, Any], path: Path) -> Path | None:
    """Held-out pass@1 per evaluation step with its task-level bootstrap interval (error bars; a band too
    from 3 evaluations on, when they make a curve), and the paired after-before difference in the title. With
    two evaluations (before and after) the points are joined by a dashed line only: nothing was measured in
    between, and a shaded band would draw an interval no evaluation gave. Where an interval is undefined (one
    task, every task at the same rate) the point has no bar and is marked "interval n/a"."""
    evs = _eval_points(results)
    if not evs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH_IN, 4.2))
    x = [e["step"] for e in evs]
    mean = [e["pass_at_1"]["mean"] for e in evs]
    ivs = [e["pass_at_1"] for e in evs]
    has = [_finite(iv.get("lo")) and _finite(iv.get("hi")) for iv in ivs]
    lo = [iv["lo"] if h else math.nan for iv, h in zip(ivs, has, strict=True)]
    hi = [iv["hi"] if h else math.nan for iv, h in zip(ivs, has, strict=True)]
    curve = len(evs) >= 3
    if any(has) and curve:
        ax.fill_between(x, lo, hi, alpha=0.2, color=AFTER_COLOR, label=_band_label(ivs[0].get("alpha")))
    # A percentile interval need not contain its point estimate (validate_results allows it), and matplotlib
    # refuses a negative bar length: "'yerr' must not contain negative values" lost every plot and the HTML page.
    yerr = [[max(0.0, m - a) if h else 0.0 for m, a, h in zip(mean, lo, has, strict=True)],
            [max(0.0, b - m) if h else 0.0 for m, b, h in zip(mean, hi, has, strict=True)]]
    label = "pass@1" if curve or not any(has) else f"pass@1, bars: {_band_label(ivs[0].get('alpha'))}"
    ax.errorbar(x, mean, yerr=yerr, marker="o", color=AFTER_COLOR, capsize=4, label=label,
                linestyle="-" if curve else "--", linewidth=1.5 if curve else 1.0)
    for e, h in zip(evs, has, strict=True):
        note = [e["label"]] if e.get("label") in ("before", "after", "eval") else []
        note += [f"{e['pass_at_1']['mean']:.2f}"] if note else []
        note += [] if h else ["interval n/a"]
        if note:
            ax.annotate("\n".join(note), (e["step"], e["pass_at_1"]["mean"]), textcoords="offset points",
                        xytext=(6, 6), fontsize=8)
    _style(ax, title=_paired_title(results), xlabel="training steps completed", ylabel="held-out pass@1 (fraction)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path, "held-out evaluation")


def _paired_title(results: dict[str, Any]) -> str:
    for p in results.get("paired") or []:
        d = p.get("diff") or {}
        if not _finite(d.get("mean")):
            continue
        if _finite(d.get("lo")) and _finite(d.get("hi")):
            level = f"{100 * (1 - d['alpha']):.0f}% " if _finite(d.get("alpha")) else ""
            return f"paired {p.get('after')} - {p.get('before')}: {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] ({level}CI)"
        return f"paired {p.get('after')} - {p.get('before')}: {d['mean']:+.3f} [interval n/a: {d.get('undefined') or '?'}]"
    return "pass@1 per evaluation"


def _band_label(alpha: Any) -> str:
    return f"{100 * (1 - alpha):.0f}% task bootstrap interval" if _finite(alpha) else "task bootstrap interval"


def plot_entropy(results: dict[str, Any], path: Path) -> Path | None:
    """The trainer's own policy entropy on trained tokens, per step, on an axis starting at 0 (no offset); a
    step whose update was skipped is a gap (shaded). None when no step trained a token (every update skipped)."""
    steps = results.get("steps") or []
    x, y = gapped_series(steps, "entropy", skip=_skipped_update)
    if not x:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH_IN, 3.4))
    _shade_skipped(ax, steps)
    ax.plot(x, y, marker="o", color="#9467bd", label="entropy")
    _style(ax, title="mean over trained policy tokens (trainer logits)", xlabel="training step",
           ylabel="entropy (nats / token)")
    top = max(v for v in y if math.isfinite(v))
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    if any(_skipped_update(s) for s in steps):
        ax.legend(fontsize=8, loc="lower left")
    return _save(fig, path, "policy entropy")


_UPDATE_PANELS = (("loss", "policy loss", "loss (token mean)"), ("grad_norm", "gradient norm before clipping", "L2 norm"),
                  ("clip_frac", "clipped tokens", "fraction of trained tokens"),
                  ("kl_sampler", "KL(sampler || trainer)", "nats / token"))


def plot_update(results: dict[str, Any], path: Path) -> Path | None:
    """Small multiples of the update's health: loss, gradient norm, clip fraction, sampler-trainer KL
    (only the panels with data; a step whose update trained no token is a gap, shaded; None when no update ran)."""
    # a skipped update (no token trained) has loss 0 and gradient norm 0 by construction: not a point
    steps = results.get("steps") or []
    panels = [(k, t, u, *gapped_series(steps, k, skip=_skipped_update)) for k, t, u in _UPDATE_PANELS]
    panels = [p for p in panels if p[3]]
    if not panels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(PAGE_WIDTH_IN, 3.4), squeeze=False)
    for ax, (_key, title, unit, x, y) in zip(axes[0], panels, strict=True):
        _shade_skipped(ax, steps)
        ax.plot(x, y, marker="o", color="#ff7f0e")
        _style(ax, title=title, xlabel="training step", ylabel=unit)
    skipped = any(_skipped_update(s) for s in steps)
    return _save(fig, path, "update" + (" (grey: update skipped, no reward spread)" if skipped else ""))


_KINDS = (("counts", "count", "per episode (mean)"), ("fractions", "1", "fraction (0-1)"),
          ("tokens", "tokens", "tokens per episode (mean)"))


def tool_stat_panels(before: dict[str, float], after: dict[str, float]) -> list[tuple[str, str, list[str]]]:
    """Tool statistics grouped by kind: [(panel title, x label, names)] for counts per episode,
    fractions and tokens; all-zero counters are left out (they say nothing)."""
    names = sorted(set(before) | set(after))
    names = [k for k in names if before.get(k, 0.0) != 0.0 or after.get(k, 0.0) != 0.0]
    out = []
    for title, unit, label in _KINDS:
        members = [k for k in names if stat_description(k)[1] == unit]
        if members:
            out.append((title, label, members))
    return out


def plot_tool_stats(results: dict[str, Any], path: Path, before: str = "before", after: str = "after") -> Path | None:
    """Small multiples by kind (counts per episode, fractions, tokens): horizontal before/after bars of
    each tool statistic of the two held-out evaluations, each panel on its own scale."""
    by_label = {e.get("label"): dedupe_stats(e.get("tool_stats") or {}) for e in results.get("evaluations") or []}
    b = {k: float(v) for k, v in by_label.get(before, {}).items() if _finite(v)}
    a = {k: float(v) for k, v in by_label.get(after, {}).items() if _finite(v)}
    panels = tool_stat_panels(b, a)
    if not panels:
        return None
    plt = _plt()
    heights = [max(1.6, 0.42 * len(m) + 1.0) for _, _, m in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(PAGE_WIDTH_IN, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (title, label, names) in zip(axes[:, 0], panels, strict=True):
        idx = list(range(len(names)))
        for shift, values, color, lab in ((-0.2, b, BEFORE_COLOR, before), (0.2, a, AFTER_COLOR, after)):
            bars = ax.barh([i + shift for i in idx], [values.get(k, 0.0) for k in names], height=0.4, color=color,
                           label=EVAL_WORDS.get(lab, lab))
            ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
        ax.margins(x=0.12)
        ax.set_yticks(idx, [readable_label(k) for k in names], fontsize=8)
        ax.invert_yaxis()
        _style(ax, title=title, xlabel=label, ylabel="", int_x=False, values_on="x")

    # attached to the first panel, just above its top right corner (beside its title, over no bar)
    axes[0, 0].legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8, frameon=False)
    return _save(fig, path, "tool statistics, held-out tasks")


def plot_warm_start(results: dict[str, Any], path: Path) -> Path | None:
    """The supervised warm start's loss (token-mean NLL of each optimizer step's batch, nats / token) per
    SFT step, epochs marked, with the NLL over all its episodes before and after as dashed lines (the
    same quantity, so the curve should fall from the first towards the second). None without warm_start."""
    ws = results.get("warm_start") or {}
    steps = [s for s in ws.get("steps") or [] if isinstance(s, dict)]
    x, y = _series(steps, "loss")
    if not x and ws.get("losses"):  # a file with the losses list only
        x, y = [i for i, v in enumerate(ws["losses"]) if _finite(v)], [float(v) for v in ws["losses"] if _finite(v)]
    if not x:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH_IN, 3.6))
    ax.plot(x, y, marker="o", markersize=3, color="#2ca02c", label="step loss (its batch)")
    for key, color, label in (("nll_before", BEFORE_COLOR, "NLL before (all episodes)"),
                              ("nll_after", AFTER_COLOR, "NLL after (all episodes)")):
        if _finite(ws.get(key)):
            ax.axhline(ws[key], linestyle="--", color=color, label=f"{label}: {ws[key]:.3f}")
    starts = [s["step"] for a, s in itertools.pairwise(steps) if s.get("epoch") != a.get("epoch") and _finite(s.get("step"))]
    for st in starts:
        ax.axvline(st - 0.5, color="#d1d5db", linewidth=1)
    ax.set_ylim(0, max([*y, *(ws[k] for k in ("nll_before", "nll_after") if _finite(ws.get(k)))]) * 1.1)
    _style(ax, title=f"{ws.get('method', 'warm start')}: token-mean NLL of the policy tokens"
           + (" (grey lines: epoch starts)" if starts else ""), xlabel="optimizer step", ylabel="nats / token")
    ax.legend(fontsize=8)
    return _save(fig, path, "warm start")


PLOTS = {"train_reward.png": plot_train_reward, "eval_curve.png": plot_eval_curve,
         "entropy.png": plot_entropy, "update.png": plot_update, "tool_stats.png": plot_tool_stats,
         "warm_start.png": plot_warm_start}


def plots_dir(run_dir: str | os.PathLike) -> Path:
    """The one folder a run's plots go to: `<run dir>/plots` (train and report both write there)."""
    return Path(run_dir) / "plots"


def plot_results(results: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    """Draw every plot the results have data for into `out_dir`; returns the PNG paths written.

    A plot that cannot be drawn for lack of data (e.g. entropy when every update was skipped) is not
    written, and an older copy of it in `out_dir` is removed so the folder matches the results.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fn in PLOTS.items():
        p = fn(results, out / name)
        if p is None:
            (out / name).unlink(missing_ok=True)
        else:
            written.append(p)
    return written
