"""Task-level bootstrap intervals for pass@1 and paired before/after differences. Not the eval runner.

Method: the nonparametric percentile bootstrap (Efron & Tibshirani 1993, ch. 13) with TASKS as the
resampling unit (tasks are the independent draws; a task's episodes are correlated), vectorised with a
seeded numpy Generator (PCG64). pass@1 is the macro mean over tasks of successes/trials. For the
paired difference, the same resampled task indices are used for before and after. When every bootstrap
statistic is identical (one task, or all tasks scoring the same), the interval is exactly the point.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _rates(successes: Sequence[int] | np.ndarray, trials: Sequence[int] | np.ndarray | int,
           name: str) -> np.ndarray:
    """[T] per-task success rates; ValueError naming `name` for malformed counts."""
    s = np.asarray(successes)
    n = np.asarray(trials)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"{name}: successes must be a non-empty 1-D sequence of per-task counts, got shape {s.shape}")
    if n.ndim == 0:
        n = np.full(s.shape, n)
    if n.shape != s.shape:
        raise ValueError(f"{name}: trials must be one int or one count per task ({s.size}), got shape {n.shape}")
    if not (np.issubdtype(s.dtype, np.integer) or np.all(s == np.round(s))) or \
            not (np.issubdtype(n.dtype, np.integer) or np.all(n == np.round(n))):
        raise ValueError(f"{name}: successes and trials must be integer counts, got {s.tolist()} / {n.tolist()}")
    if (n < 1).any() or (s < 0).any() or (s > n).any():
        raise ValueError(f"{name}: need trials >= 1 and 0 <= successes <= trials per task; got successes "
                         f"{s.tolist()} and trials {n.tolist()}")
    return s.astype(np.float64) / n.astype(np.float64)


def _check(n_boot: int, alpha: float, name: str) -> None:
    if n_boot < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"{name}: need n_boot >= 1 and 0 < alpha < 1, got n_boot={n_boot}, alpha={alpha}")


def _percentile_ci(values: np.ndarray, n_boot: int, alpha: float, seed: int | None) -> tuple[float, float, float]:
    """Mean of `values` [T] and the percentile interval of the mean over task resamples."""
    point = float(values.mean())
    if np.all(values == values[0]):  # degenerate: every resample's mean equals the point
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))  # [n_boot, T]
    boots = values[idx].mean(axis=1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return point, float(lo), float(hi)


def pass_at_1_ci(
    successes: Sequence[int] | np.ndarray,
    trials: Sequence[int] | np.ndarray | int,
    *,
    n_boot: int = 10000,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """pass@1 over tasks with a task-level percentile bootstrap interval.

    Args:
        successes: [T] successful episodes per task (ints).
        trials: [T] episodes per task (or one int for all), each >= 1.
        n_boot: bootstrap resamples; alpha: 1 - interval level; seed: numpy Generator seed.

    Returns:
        (mean, lo, hi): mean = (1/T) sum_t successes_t / trials_t; [lo, hi] the alpha/2 and 1 - alpha/2
        quantiles (numpy's linear interpolation) of the resampled means; lo = mean = hi when all
        per-task rates are equal (including T = 1).

    Raises:
        ValueError: empty input, mismatched lengths, counts outside [0, trials], bad n_boot/alpha.
    """
    _check(n_boot, alpha, "pass_at_1_ci")
    rates = _rates(successes, trials, "pass_at_1_ci")
    return _percentile_ci(rates, n_boot, alpha, seed)


def paired_diff_ci(
    before_succ: Sequence[int] | np.ndarray,
    after_succ: Sequence[int] | np.ndarray,
    trials: Sequence[int] | np.ndarray | int,
    trials_after: Sequence[int] | np.ndarray | int | None = None,
    *,
    n_boot: int = 10000,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """Paired difference of pass@1 (after - before) with a paired task-level bootstrap interval.

    Args:
        before_succ, after_succ: [T] per-task successes, the same tasks in the same order.
        trials: [T] (or int) episodes per task before; trials_after: the same after (default: `trials`).

    Returns:
        (diff, lo, hi): diff = mean_t (after_t/n'_t - before_t/n_t); the interval resamples tasks jointly,
        so task difficulty cancels; degenerate (lo = diff = hi) when every task's difference is equal.

    Raises:
        ValueError: as pass_at_1_ci, or before/after of different lengths.
    """
    _check(n_boot, alpha, "paired_diff_ci")
    b = np.asarray(before_succ)
    a = np.asarray(after_succ)
    if b.shape != a.shape:
        raise ValueError(f"paired_diff_ci: before and after must cover the same tasks; got {b.shape} and {a.shape}")
    rb = _rates(b, trials, "paired_diff_ci")
    ra = _rates(a, trials if trials_after is None else trials_after, "paired_diff_ci")
    return _percentile_ci(ra - rb, n_boot, alpha, seed)
