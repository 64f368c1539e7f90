"""Noise analysis of training curves (the TRL write-up's): step-to-step noise and slope t statistics.

Not the evaluation itself. Definitions (stated once, used everywhere):
- step-to-step noise of a series y_1..y_n: sd(y_{t+1} - y_t) / sqrt(2), sd with ddof=1. If
  y_t = mu_t + e_t with independent e_t of sd sigma and mu_t changing slowly between points,
  Var(y_{t+1} - y_t) = 2 sigma^2, so this estimates sigma, the noise of ONE point, free of the trend.
  `diff_sd` (without the sqrt(2)) is reported too, since some write-ups quote that quantity.
- trend: ordinary least squares of y on x (scipy.stats.linregress); t = slope / stderr (n - 2 dof);
  rise = slope * (x_n - x_1) with rise_stderr = stderr * (x_n - x_1), the "+0.092 +- 0.065, t 1.41"
  form of the write-up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def _series(y: Sequence[float] | np.ndarray, name: str, min_len: int) -> np.ndarray:
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim != 1 or arr.size < min_len or not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected a 1-D finite series of at least {min_len} points, got shape "
                         f"{arr.shape}" + ("" if np.isfinite(arr).all() else " with NaN/inf"))
    return arr


def step_noise(y: Sequence[float] | np.ndarray) -> float:
    """sd(first differences, ddof=1) / sqrt(2): the per-point noise sigma (see module docstring).

    Raises: ValueError for fewer than 3 points (2 differences are needed for a sample sd).
    """
    d = np.diff(_series(y, "step_noise", 3))
    return float(d.std(ddof=1) / math.sqrt(2.0))


@dataclass(frozen=True)
class Trend:
    """OLS trend of a curve. slope per x unit; rise over the whole x span; t = slope / slope_stderr."""

    n: int
    slope: float
    slope_stderr: float
    t: float
    p_value: float
    rise: float
    rise_stderr: float
    intercept: float
    residual_sd: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def trend(y: Sequence[float] | np.ndarray, x: Sequence[float] | np.ndarray | None = None) -> Trend:
    """Linear trend of y against x (default 0..n-1) with scipy.stats.linregress.

    Returns: Trend; t is +inf/-inf for a perfect non-flat line and 0 for a perfectly flat one.
    Raises: ValueError for fewer than 3 points, mismatched x, or constant x.
    """
    from scipy import stats

    yy = _series(y, "trend", 3)
    xx = np.arange(yy.size, dtype=np.float64) if x is None else _series(x, "trend (x)", 3)
    if xx.shape != yy.shape or np.all(xx == xx[0]):
        raise ValueError(f"trend: x must match y in length ({yy.size}) and not be constant, got {xx.tolist()}")
    res = stats.linregress(xx, yy)
    span = float(xx[-1] - xx[0])
    se = float(res.stderr)
    if se > 0:
        t = float(res.slope) / se
    else:
        t = 0.0 if res.slope == 0 else math.copysign(math.inf, res.slope)
    resid = yy - (res.intercept + res.slope * xx)
    return Trend(n=int(yy.size), slope=float(res.slope), slope_stderr=se, t=t, p_value=float(res.pvalue),
                 rise=float(res.slope) * span, rise_stderr=se * abs(span), intercept=float(res.intercept),
                 residual_sd=float(math.sqrt((resid ** 2).sum() / (yy.size - 2))))


def curve_noise_report(y: Sequence[float] | np.ndarray, x: Sequence[float] | np.ndarray | None = None) -> dict[str, float]:
    """Everything the write-up quotes for one curve: n, step_noise, diff_sd, and the Trend fields."""
    yy = _series(y, "curve_noise_report", 3)
    d = np.diff(yy)
    return {"step_noise": step_noise(yy), "diff_sd": float(d.std(ddof=1)), **trend(yy, x).to_dict()}


def eval_sampling_noise(successes: Sequence[int], trials: Sequence[int] | int) -> float:
    """Standard error of a fixed-task-set pass@1 from episode sampling alone (tasks held fixed):
    sqrt(sum_t p_t (1 - p_t) / n_t) / T with p_t = successes_t / trials_t (binomial per task, plug-in).

    This is the noise an eval-curve point has even if the model does not change; compare it with the
    curve's step_noise. Raises ValueError on malformed counts (as pass_at_1_ci).
    """
    from agentrl.eval.bootstrap import _rates

    p = _rates(successes, trials, "eval_sampling_noise")
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), p.shape)
    return float(math.sqrt((p * (1 - p) / n).sum()) / p.size)


def noise_analysis(train_reward: Sequence[float], eval_score: Sequence[float], *,
                   train_steps: Sequence[float] | None = None,
                   eval_steps: Sequence[float] | None = None) -> dict[str, dict[str, float] | float]:
    """Training reward vs held-out eval curve: each curve's report and their noise ratio.

    Returns:
        {"train": report, "eval": report, "noise_ratio": train step_noise / eval step_noise (inf if the
        eval curve has zero noise)}; a curve with fewer than 3 points gets {"n": k} only.
    """
    out: dict[str, dict[str, float] | float] = {}
    for key, y, x in (("train", train_reward, train_steps), ("eval", eval_score, eval_steps)):
        out[key] = curve_noise_report(y, x) if len(y) >= 3 else {"n": len(y)}
    tr, ev = out["train"], out["eval"]
    if "step_noise" in tr and "step_noise" in ev:  # type: ignore[operator]
        out["noise_ratio"] = tr["step_noise"] / ev["step_noise"] if ev["step_noise"] > 0 else math.inf  # type: ignore[index]
    return out


def run_noise(steps: Sequence[dict], evaluations: Sequence[dict], train_key: str = "reward_mean") -> dict:
    """noise_analysis of a run's curves: the per-step `train_key` of `steps` (results-file step records)
    against the held-out pass@1 of `evaluations` (records with "step" and "pass_at_1"["mean"]), each in
    step order; points whose value is missing (None) are left out.

    Returns: {"train_key": train_key, **noise_analysis(...)}.
    """
    pts = [(s["step"], s[train_key]) for s in steps if s.get(train_key) is not None]
    evs = sorted((e["step"], e["pass_at_1"]["mean"]) for e in evaluations if e["pass_at_1"].get("mean") is not None)
    rep = noise_analysis([v for _, v in pts], [v for _, v in evs], train_steps=[s for s, _ in pts],
                         eval_steps=[s for s, _ in evs])
    return {"train_key": train_key, **rep}
