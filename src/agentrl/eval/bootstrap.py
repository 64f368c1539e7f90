"""Task-level bootstrap intervals for pass@1 and paired before/after differences. Not the eval runner.

Method: the nonparametric percentile bootstrap (Efron & Tibshirani 1993, ch. 13) with TASKS as the
resampling unit (tasks are the independent draws; a task's episodes are correlated), vectorised with a
seeded numpy Generator (PCG64). pass@1 is the macro mean over tasks of successes/trials. For the
paired difference, the same resampled task indices are used for before and after.

When every resample must give the point itself (one task, or every task with the same rate or the same
difference), the bootstrap says nothing about the spread: the interval is reported as undefined with the
reason (`Interval.undefined`, lo = hi = None), never as a zero-width interval that reads as certainty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BootstrapConfig:
    """How every interval of a run is computed (one place: built once from RLConfig's n_boot/alpha/seed).

    Attributes:
        n_boot: resamples (>= 1). alpha: 1 - interval level, in (0, 1). seed: numpy Generator seed.
    """

    n_boot: int = 10000
    alpha: float = 0.05
    seed: int | None = 0

    def __post_init__(self) -> None:
        if isinstance(self.n_boot, bool) or not isinstance(self.n_boot, int) or self.n_boot < 1 \
                or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"BootstrapConfig: need an integer n_boot >= 1 and 0 < alpha < 1, got "
                             f"n_boot={self.n_boot!r}, alpha={self.alpha!r}")


@dataclass(frozen=True)
class Interval:
    """A mean over tasks with its (1 - alpha) percentile bootstrap interval.

    Attributes:
        mean: the point estimate (None only when no task could be scored).
        lo, hi: the alpha/2 and 1 - alpha/2 quantiles of the resampled means; None when undefined.
        undefined: why there is no interval (e.g. "one task"), or None when lo/hi are set.
        n_tasks: tasks the mean is over. alpha, n_boot, seed: as BootstrapConfig.
    """

    mean: float | None
    lo: float | None
    hi: float | None
    n_tasks: int
    alpha: float
    n_boot: int
    seed: int | None
    undefined: str | None = None

    @property
    def defined(self) -> bool:
        return self.undefined is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Interval:
        """Rebuild from `to_dict()` (or a results file's interval record; n_tasks may be absent there)."""
        return cls(mean=d["mean"], lo=d.get("lo"), hi=d.get("hi"), n_tasks=int(d.get("n_tasks", 0)),
                   alpha=float(d["alpha"]), n_boot=int(d["n_boot"]), seed=d.get("seed"),
                   undefined=d.get("undefined"))

    def describe(self, *, signed: bool = False) -> str:
        """ "0.500 [0.250, 0.750]" or "0.500 [n/a: one task]" (signed: "+0.125 [...]")."""
        return format_interval(self.to_dict(), signed=signed)


def format_interval(iv: dict[str, Any] | None, *, signed: bool = False, digits: int = 3) -> str:
    """One interval record (Interval.to_dict() or a results file's) as text; an undefined interval reads
    "n/a: <reason>", a missing or non-finite number reads "n/a"."""
    iv = iv or {}
    spec = f"{'+' if signed else ''}.{digits}f"

    def num(v: Any) -> str:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
        return format(float(v), spec) if ok else "n/a"

    if iv.get("undefined"):
        return f"{num(iv.get('mean'))} [n/a: {iv['undefined']}]"
    return f"{num(iv.get('mean'))} [{num(iv.get('lo'))}, {num(iv.get('hi'))}]"


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


def _config(n_boot: int, alpha: float, seed: int | None, name: str) -> BootstrapConfig:
    try:
        return BootstrapConfig(n_boot=n_boot, alpha=alpha, seed=seed)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def bootstrap_mean(values: np.ndarray, boot: BootstrapConfig, *, what: str = "rate") -> Interval:
    """Mean of per-task `values` [T] with the percentile interval of the mean over task resamples.

    The interval is undefined (lo = hi = None, `undefined` says why) for one task, or when every task has
    the same value (every resample's mean is then the point). `what` names the value in that reason.
    """
    values = np.asarray(values, dtype=np.float64)
    point = float(values.mean())
    common = dict(mean=point, n_tasks=int(values.size), alpha=boot.alpha, n_boot=boot.n_boot, seed=boot.seed)
    if values.size == 1:
        return Interval(lo=None, hi=None, undefined="one task: a task-level bootstrap needs at least 2 tasks",
                        **common)
    if np.allclose(values, values[0], rtol=0.0, atol=1e-12):  # equal up to rounding of count ratios
        return Interval(lo=None, hi=None, undefined=f"every task has the same {what} ({values[0]:g}): "
                        "resampling tasks cannot vary the mean", **common)
    rng = np.random.default_rng(boot.seed)
    idx = rng.integers(0, values.size, size=(boot.n_boot, values.size))  # [n_boot, T]
    lo, hi = np.quantile(values[idx].mean(axis=1), [boot.alpha / 2, 1 - boot.alpha / 2])
    return Interval(lo=float(lo), hi=float(hi), **common)


def pass_at_1_ci(
    successes: Sequence[int] | np.ndarray,
    trials: Sequence[int] | np.ndarray | int,
    *,
    n_boot: int = 10000,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> Interval:
    """pass@1 over tasks with a task-level percentile bootstrap interval.

    Args:
        successes: [T] successful episodes per task (ints).
        trials: [T] episodes per task (or one int for all), each >= 1.
        n_boot: bootstrap resamples; alpha: 1 - interval level; seed: numpy Generator seed.

    Returns:
        Interval with mean = (1/T) sum_t successes_t / trials_t and [lo, hi] the alpha/2 and 1 - alpha/2
        quantiles (numpy's linear interpolation) of the resampled means; undefined (with the reason) for
        T = 1 or when all per-task rates are equal.

    Raises:
        ValueError: empty input, mismatched lengths, counts outside [0, trials], bad n_boot/alpha.
    """
    boot = _config(n_boot, alpha, seed, "pass_at_1_ci")
    return bootstrap_mean(_rates(successes, trials, "pass_at_1_ci"), boot, what="rate")


def paired_diff_ci(
    before_succ: Sequence[int] | np.ndarray,
    after_succ: Sequence[int] | np.ndarray,
    trials: Sequence[int] | np.ndarray | int,
    trials_after: Sequence[int] | np.ndarray | int | None = None,
    *,
    n_boot: int = 10000,
    alpha: float = 0.05,
    seed: int | None = 0,
) -> Interval:
    """Paired difference of pass@1 (after - before) with a paired task-level bootstrap interval.

    Args:
        before_succ, after_succ: [T] per-task successes, the same tasks in the same order.
        trials: [T] (or int) episodes per task before; trials_after: the same after (default: `trials`).

    Returns:
        Interval of diff = mean_t (after_t/n'_t - before_t/n_t); the interval resamples tasks jointly, so
        task difficulty cancels; undefined (with the reason) for one task or when every task's
        difference is equal.

    Raises:
        ValueError: as pass_at_1_ci, or before/after of different lengths.
    """
    boot = _config(n_boot, alpha, seed, "paired_diff_ci")
    b = np.asarray(before_succ)
    a = np.asarray(after_succ)
    if b.shape != a.shape:
        raise ValueError(f"paired_diff_ci: before and after must cover the same tasks; got {b.shape} and {a.shape}")
    rb = _rates(b, trials, "paired_diff_ci")
    ra = _rates(a, trials if trials_after is None else trials_after, "paired_diff_ci")
    return bootstrap_mean(ra - rb, boot, what="difference")
