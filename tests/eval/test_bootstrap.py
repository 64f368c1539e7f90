import numpy as np
import pytest

from agentrl.eval.bootstrap import BootstrapConfig, Interval, format_interval, paired_diff_ci, pass_at_1_ci

# The tools lab's held-out counts (10 tasks x 8 episodes), before and after training.
BEFORE = [1, 0, 0, 0, 2, 1, 0, 0, 4, 0]
AFTER = [8, 8, 1, 2, 8, 8, 0, 0, 4, 0]


def test_two_task_interval_is_exact():
    # resampled means of rates {0, 1}: 0 (p=1/4), 0.5 (1/2), 1 (1/4) -> 2.5% quantile 0, 97.5% quantile 1
    iv = pass_at_1_ci([0, 4], 4, n_boot=4000, seed=0)
    assert (iv.mean, iv.lo, iv.hi, iv.n_tasks, iv.undefined) == (0.5, 0.0, 1.0, 2, None) and iv.defined
    assert iv.describe() == "0.500 [0.000, 1.000]"


@pytest.mark.parametrize("succ,trials", [([3], [7]), ([0], 5), ([5], 5)])
def test_one_task_interval_is_undefined_not_zero_width(succ, trials):
    iv = pass_at_1_ci(succ, trials)
    n = trials[0] if isinstance(trials, list) else trials
    assert iv.mean == succ[0] / n and iv.n_tasks == 1
    assert iv.lo is None and iv.hi is None and not iv.defined
    assert iv.undefined == "one task: a task-level bootstrap needs at least 2 tasks"
    assert iv.describe() == f"{succ[0] / n:.3f} [n/a: one task: a task-level bootstrap needs at least 2 tasks]"


@pytest.mark.parametrize("succ,trials,rate", [([2, 2, 2], 4, "0.5"), ([1, 2, 3], [10, 20, 30], "0.1"),
                                              ([0, 0, 0, 0], 8, "0"), ([8, 8], 8, "1")])
def test_tasks_with_one_common_rate_give_an_undefined_interval(succ, trials, rate):
    iv = pass_at_1_ci(succ, trials)
    assert iv.mean == pytest.approx(float(rate)) and (iv.lo, iv.hi) == (None, None)
    assert iv.undefined == f"every task has the same rate ({rate}): resampling tasks cannot vary the mean"


def test_macro_mean_over_tasks_and_seeded():
    iv = pass_at_1_ci([1, 3], [2, 4])
    assert iv.mean == pytest.approx((0.5 + 0.75) / 2, abs=1e-15)
    assert pass_at_1_ci(AFTER, 8, seed=3) == pass_at_1_ci(AFTER, 8, seed=3)
    assert iv.lo <= iv.mean <= iv.hi


def test_matches_writeup_and_scipy_percentile_bootstrap():
    from scipy import stats

    iv = paired_diff_ci(BEFORE, AFTER, 8, n_boot=20000, seed=0)
    diff, lo, hi = iv.mean, iv.lo, iv.hi
    assert diff == pytest.approx(0.3875, abs=1e-12)  # write-up: +0.388 [+0.150, +0.650]
    assert lo == pytest.approx(0.150, abs=0.03) and hi == pytest.approx(0.650, abs=0.03)
    rates = (np.array(AFTER) - np.array(BEFORE)) / 8
    ci = stats.bootstrap((rates,), np.mean, n_resamples=20000, method="percentile", random_state=1).confidence_interval
    assert lo == pytest.approx(ci.low, abs=0.02) and hi == pytest.approx(ci.high, abs=0.02)


def test_paired_interval_cancels_task_difficulty():
    before = [0, 1, 7, 8, 2, 6]
    after = [1, 2, 8, 8, 3, 7]  # +1 nearly everywhere, tasks vary a lot in difficulty
    d = paired_diff_ci(before, after, 8)
    b = pass_at_1_ci(before, 8)
    assert d.mean == pytest.approx(5 / 48) and 0 < d.lo <= d.mean <= d.hi and (d.hi - d.lo) < (b.hi - b.lo) / 3


def test_undefined_paired_differences_say_why():
    same = paired_diff_ci([1, 5], [3, 7], 8)  # every task +2/8
    assert (same.mean, same.lo, same.hi) == (0.25, None, None)
    assert same.undefined == "every task has the same difference (0.25): resampling tasks cannot vary the mean"
    assert same.describe(signed=True) == "+0.250 [n/a: every task has the same difference (0.25): resampling " \
                                         "tasks cannot vary the mean]"
    one = paired_diff_ci([2], [6], 8, 16)  # one task, different trials after: 6/16 - 2/8 = 0.125
    assert (one.mean, one.lo, one.hi, one.n_tasks) == (0.125, None, None, 1) and one.undefined.startswith("one task")
    # 1/3 - 0 and 2/3 - 1/3 differ only by rounding: still one common difference
    assert paired_diff_ci([0, 1], [1, 2], 3).undefined is not None


def test_interval_records_round_trip_and_format():
    iv = pass_at_1_ci([0, 1, 4], 4, n_boot=500, seed=2)
    assert Interval.from_dict(iv.to_dict()) == iv
    assert format_interval({"mean": 0.1, "lo": None, "hi": None, "undefined": "one task"}) == "0.100 [n/a: one task]"
    assert format_interval({"mean": None, "lo": float("nan"), "hi": 2.0}, signed=True) == "n/a [n/a, +2.000]"
    assert format_interval(None) == "n/a [n/a, n/a]"
    with pytest.raises(ValueError, match="n_boot >= 1"):
        BootstrapConfig(n_boot=0)


@pytest.mark.parametrize("call", [
    lambda: pass_at_1_ci([], 8), lambda: pass_at_1_ci([9], 8), lambda: pass_at_1_ci([1, 2], [8]),
    lambda: pass_at_1_ci([1], 0), lambda: pass_at_1_ci([0.5], 1), lambda: pass_at_1_ci([1], 2, alpha=1.5),
    lambda: paired_diff_ci([1, 2], [1], 8),
])
def test_bad_input_raises_clearly(call):
    with pytest.raises(ValueError, match="(pass_at_1_ci|paired_diff_ci): "):
        call()
