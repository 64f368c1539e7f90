import math

import numpy as np
import pytest

from agentrl.eval.noise import curve_noise_report, noise_analysis, step_noise, trend


def test_step_noise_hand_computed():
    # diffs [1, -1, 1, -1]: sample sd = sqrt(4/3); / sqrt(2)
    assert step_noise([0, 1, 0, 1, 0]) == pytest.approx(math.sqrt(4 / 3) / math.sqrt(2), abs=1e-12)
    assert step_noise([0.2, 0.4, 0.6, 0.8]) == pytest.approx(0.0, abs=1e-15)  # a pure trend: no step noise


def test_step_noise_recovers_sigma_under_a_trend():
    rng = np.random.default_rng(0)
    y = 0.01 * np.arange(20000) + rng.normal(0, 0.213, 20000)
    assert step_noise(y) == pytest.approx(0.213, rel=0.02)


def test_trend_exact_line_and_hand_case():
    t = trend([1.0, 3.0, 5.0, 7.0], x=[0, 1, 2, 3])
    assert (t.slope, t.rise, t.slope_stderr, t.t) == (2.0, 6.0, 0.0, math.inf)
    # y = [0, 1, 0, 1] on x = 0..3: Sxx = 5, Sxy = 1 -> slope 0.2, intercept 0.2; residuals [-.2, .6, -.6, .2], SSE 0.8
    t = trend([0.0, 1.0, 0.0, 1.0])
    assert t.slope == pytest.approx(0.2) and t.intercept == pytest.approx(0.2)
    se = math.sqrt(0.8 / 2 / 5)
    assert t.slope_stderr == pytest.approx(se) and t.t == pytest.approx(0.2 / se)
    assert t.rise == pytest.approx(0.6) and t.rise_stderr == pytest.approx(3 * se)
    assert t.residual_sd == pytest.approx(math.sqrt(0.4))


def test_writeup_shaped_synthetic_series():
    """42 noisy train points (sd 0.213, rise ~0.09) vs 10 eval points (sd 0.027, rise ~0.095)."""
    rng = np.random.default_rng(4)
    steps = np.arange(42)
    train = 0.5 + 0.092 / 41 * steps + rng.normal(0, 0.213, 42)
    ev_steps = np.linspace(0, 41, 10)
    ev = 0.541 + 0.095 / 41 * ev_steps + rng.normal(0, 0.027, 10)
    rep = noise_analysis(train, ev, train_steps=steps, eval_steps=ev_steps)
    assert rep["train"]["step_noise"] == pytest.approx(0.213, rel=0.35)
    assert rep["eval"]["step_noise"] == pytest.approx(0.027, rel=0.6)
    assert rep["noise_ratio"] > 3 and abs(rep["eval"]["t"]) > abs(rep["train"]["t"])
    assert rep["train"]["n"] == 42 and rep["eval"]["diff_sd"] == pytest.approx(rep["eval"]["step_noise"] * math.sqrt(2))


def test_short_curves_and_bad_input():
    rep = noise_analysis([0.1, 0.2], [0.3, 0.4, 0.2])
    assert rep["train"] == {"n": 2} and type(rep["train"]["n"]) is int and "noise_ratio" not in rep
    with pytest.raises(ValueError, match="step_noise"):
        step_noise([1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        curve_noise_report([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="constant"):
        trend([1.0, 2.0, 3.0], x=[1, 1, 1])


def test_eval_sampling_noise_hand_computed_and_simulated():
    from agentrl.eval.noise import eval_sampling_noise

    # p = [0.5, 0.25], n = [4, 8]: sqrt(0.25/4 + 0.1875/8) / 2
    assert eval_sampling_noise([2, 2], [4, 8]) == pytest.approx(math.sqrt(0.0625 + 0.0234375) / 2, abs=1e-15)
    assert eval_sampling_noise([0, 8], 8) == 0.0
    rng = np.random.default_rng(0)
    p = np.array([2, 8, 14, 5]) / 16
    sims = rng.binomial(16, p, size=(20000, 4)).mean(axis=1) / 16
    assert eval_sampling_noise(np.round(p * 16).astype(int), 16) == pytest.approx(sims.std(), rel=0.03)
