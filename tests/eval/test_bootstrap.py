import numpy as np
import pytest

from agentrl.eval.bootstrap import paired_diff_ci, pass_at_1_ci

# The tools lab's held-out counts (10 tasks x 8 episodes), before and after training.
BEFORE = [1, 0, 0, 0, 2, 1, 0, 0, 4, 0]
AFTER = [8, 8, 1, 2, 8, 8, 0, 0, 4, 0]


def test_two_task_interval_is_exact():
    # resampled means of rates {0, 1}: 0 (p=1/4), 0.5 (1/2), 1 (1/4) -> 2.5% quantile 0, 97.5% quantile 1
    assert pass_at_1_ci([0, 4], 4, n_boot=4000, seed=0) == (0.5, 0.0, 1.0)


@pytest.mark.parametrize("succ,trials", [([3], [7]), ([0], 5), ([5], 5), ([2, 2, 2], 4), ([1, 2, 3], [10, 20, 30])])
def test_degenerate_interval_equals_point(succ, trials):
    mean, lo, hi = pass_at_1_ci(succ, trials)
    assert lo == mean == hi
    assert mean == pytest.approx(succ[0] / (trials[0] if isinstance(trials, list) else trials))


def test_macro_mean_over_tasks_and_seeded():
    mean, lo, hi = pass_at_1_ci([1, 3], [2, 4])
    assert mean == pytest.approx((0.5 + 0.75) / 2, abs=1e-15)
    assert pass_at_1_ci(AFTER, 8, seed=3) == pass_at_1_ci(AFTER, 8, seed=3)
    assert lo <= mean <= hi


def test_matches_writeup_and_scipy_percentile_bootstrap():
    from scipy import stats

    diff, lo, hi = paired_diff_ci(BEFORE, AFTER, 8, n_boot=20000, seed=0)
    assert diff == pytest.approx(0.3875, abs=1e-12)  # write-up: +0.388 [+0.150, +0.650]
    assert lo == pytest.approx(0.150, abs=0.03) and hi == pytest.approx(0.650, abs=0.03)
    rates = (np.array(AFTER) - np.array(BEFORE)) / 8
    ci = stats.bootstrap((rates,), np.mean, n_resamples=20000, method="percentile", random_state=1).confidence_interval
    assert lo == pytest.approx(ci.low, abs=0.02) and hi == pytest.approx(ci.high, abs=0.02)


def test_paired_interval_cancels_task_difficulty():
    before = [0, 1, 7, 8, 2, 6]
    after = [1, 2, 8, 8, 3, 7]  # +1 nearly everywhere, tasks vary a lot in difficulty
    d, lo, hi = paired_diff_ci(before, after, 8)
    _, blo, bhi = pass_at_1_ci(before, 8)
    assert d == pytest.approx(5 / 48) and 0 < lo <= d <= hi and (hi - lo) < (bhi - blo) / 3
    assert paired_diff_ci([1, 5], [3, 7], 8) == (0.25, 0.25, 0.25)  # every task +2/8: degenerate
    assert paired_diff_ci([2], [6], 8, 16) == (0.125, 0.125, 0.125)  # one task, different trials after


@pytest.mark.parametrize("call", [
    lambda: pass_at_1_ci([], 8), lambda: pass_at_1_ci([9], 8), lambda: pass_at_1_ci([1, 2], [8]),
    lambda: pass_at_1_ci([1], 0), lambda: pass_at_1_ci([0.5], 1), lambda: pass_at_1_ci([1], 2, alpha=1.5),
    lambda: paired_diff_ci([1, 2], [1], 8),
])
def test_bad_input_raises_clearly(call):
    with pytest.raises(ValueError, match="(pass_at_1_ci|paired_diff_ci): "):
        call()
