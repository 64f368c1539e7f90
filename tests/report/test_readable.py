"""What a person reads: the paired interval's verdict and colour (by the interval, not the sign), min:s and GB,
labels without snake_case, and plots that leave a gap at a step without a value instead of a straight line."""

from __future__ import annotations

import math

import pytest
from synthetic_results import build_synthetic

from agentrl.report import plots
from agentrl.report.html import render_html
from agentrl.report.readable import duration, label, size, verdict, with_unit


@pytest.mark.parametrize(("diff", "text", "css"), [
    ({"mean": 0.188, "lo": 0.042, "hi": 0.375}, "learned: interval above 0", "up"),
    ({"mean": 0.042, "lo": -0.083, "hi": 0.167}, "no measurable change: interval includes 0", "flat"),
    ({"mean": 0.125, "lo": 0.0, "hi": 0.271}, "no measurable change: interval includes 0", "flat"),  # touches 0
    ({"mean": -0.2, "lo": -0.3, "hi": -0.05}, "got worse: interval below 0", "down"),
    ({"mean": -0.05, "lo": -0.2, "hi": 0.0}, "no measurable change: interval includes 0", "flat"),
    ({"mean": 0.0, "lo": None, "hi": None, "undefined": "every task at the same rate"},
     "no verdict: every task at the same rate", "na"),
    (None, "no verdict: nothing to compare", "na"),
])
def test_verdict_reads_the_interval_not_the_sign(diff, text, css):
    v = verdict(diff)
    assert (v.text, v.css) == (text, css)


def test_durations_sizes_and_units():
    assert [duration(s) for s in (0, 59.4, 59.6, 1485, 3725, None, -1, math.nan)] == \
        ["0:00", "0:59", "1:00", "24:45", "1:02:05", "n/a", "n/a", "n/a"]
    assert [size(b) for b in (512, 1_500, 1.5e6, 4.051e9, 123.4e9, 2e12, None)] == \
        ["512 B", "1.50 kB", "1.50 MB", "4.05 GB", "123 GB", "2.00 TB", "n/a"]
    assert with_unit(4.051e9, "bytes") == "4.05 GB" and with_unit(12.34, "s") == "12.3 s"
    assert with_unit(1485.0, "s") == "24:45 min" and with_unit(0.123456, "1") == "0.1235"
    assert with_unit(600, "s") == "10:00 min" and with_unit(3725, "s") == "1:02:05 h"
    assert with_unit(float("nan"), "s") == "n/a"


def test_labels_have_no_snake_case():
    assert label("tools/malformed_calls") == "malformed calls"
    assert label("time/rollout_s") == "rollout (s)" and label("peak_memory_bytes") == "peak memory (bytes)"
    assert label("kl_sampler") == "KL sampler" and label("hidden_pass_fraction") == "hidden pass fraction"
    assert label("adv/frac_zero_std") == "frac zero std"


def test_report_colours_the_paired_card_by_its_interval_and_says_the_verdict(tmp_path):
    data = build_synthetic(tmp_path / "results.json").data
    data["wall_clock_s"] = 1485.0
    data["paired"][0]["diff"].update(mean=0.042, lo=-0.083, hi=0.167)
    page = render_html(data)
    assert '<span class="flat">+0.042 [-0.083, +0.167]</span>' in page and 'class="up">+0.042' not in page
    assert "after vs before: no measurable change: interval includes 0" in page
    assert "24:45" in page and "1485 s" not in page
    data["paired"][0]["diff"].update(mean=0.188, lo=0.042, hi=0.375)
    page = render_html(data)
    assert '<span class="up">+0.188 [+0.042, +0.375]</span>' in page
    assert '<p class="verdict up">after vs before: learned: interval above 0</p>' in page


def _drawn_lines(monkeypatch, fn, results, path):
    """Run plot `fn` and return the y data of every line it drew, per axes (the real _save still runs)."""
    seen = []
    real = plots._save

    def keep(fig, p, title):
        seen.extend([[list(line.get_ydata()) for line in ax.lines] for ax in fig.axes])
        return real(fig, p, title)

    monkeypatch.setattr(plots, "_save", keep)
    assert fn(results, path) == path and path.stat().st_size > 0
    return seen


def test_a_skipped_update_is_a_gap_in_entropy_and_update_plots(tmp_path, monkeypatch):
    steps = [{"step": i, "entropy": 0.5 + 0.1 * i, "loss": 0.01 * i, "grad_norm": 1.0 + i, "tokens_trained": 100}
             for i in range(5)]
    steps[2] = {"step": 2, "entropy": 0.0, "loss": 0.0, "grad_norm": 0.0, "tokens_trained": 0}  # skipped update
    results = {"steps": steps}
    (ent,) = _drawn_lines(monkeypatch, plots.plot_entropy, results, tmp_path / "e.png")
    y = ent[0]
    assert len(y) == 5 and math.isnan(y[2]) and y[1] == pytest.approx(0.6) and y[3] == pytest.approx(0.8)
    for panel in _drawn_lines(monkeypatch, plots.plot_update, results, tmp_path / "u.png"):
        assert len(panel[0]) == 5 and math.isnan(panel[0][2]) and not math.isnan(panel[0][3])


def test_a_missing_metric_is_a_gap_not_a_straight_line(tmp_path, monkeypatch):
    steps = [{"step": i, "reward_mean": 0.1 * i, "reward_std": 0.1, "pass_rate": 0.1 * i, "rollout/episodes": 8}
             for i in range(4)]
    del steps[1]["reward_mean"]
    steps[1]["pass_rate"] = float("nan")
    x, y = plots.gapped_series(steps, "reward_mean")
    assert x == [0, 1, 2, 3] and math.isnan(y[1]) and y[2] == pytest.approx(0.2)
    lines = _drawn_lines(monkeypatch, plots.plot_train_reward, {"steps": steps}, tmp_path / "r.png")
    assert math.isnan(lines[0][0][1]) and math.isnan(lines[1][0][1])
    assert plots.gapped_series([{"step": 0}], "entropy") == ([], [])


def test_tool_stats_labels_are_words_and_the_legend_sits_on_its_panel(tmp_path, monkeypatch):
    results = {"evaluations": [
        {"label": "before", "tool_stats": {"malformed_calls": 0.44, "turns_cut_at_token_limit": 0.13}},
        {"label": "after", "tool_stats": {"malformed_calls": 2.04, "turns_cut_at_token_limit": 0.85}}]}
    captured = {}
    real = plots._save

    def keep(fig, p, title):
        ax = fig.axes[0]
        captured["ticks"] = [t.get_text() for t in ax.get_yticklabels()]
        captured["legend"] = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        captured["fig_legends"] = len(fig.legends)
        return real(fig, p, title)

    monkeypatch.setattr(plots, "_save", keep)
    assert plots.plot_tool_stats(results, tmp_path / "t.png") is not None
    assert all("_" not in t for t in captured["ticks"]) and "malformed calls" in captured["ticks"]
    assert captured["legend"] == ["before training", "after training"] and captured["fig_legends"] == 0


def test_one_evaluation_gets_an_integer_step_axis(tmp_path, monkeypatch):
    """An eval-only run has one point at step 0: the axis used to read -0.045 .. 0.045 'training steps'."""
    results = {"evaluations": [{"label": "eval", "step": 0, "pass_at_1": {"mean": 0.38, "lo": 0.32, "hi": 0.44,
                                                                           "alpha": 0.05}}]}
    captured = {}
    real = plots._save

    def keep(fig, p, title):
        out = real(fig, p, title)  # the widening happens inside _save
        captured["xlim"] = fig.axes[0].get_xlim()
        captured["ticks"] = [t for t in fig.axes[0].get_xticks() if captured["xlim"][0] <= t <= captured["xlim"][1]]
        return out

    monkeypatch.setattr(plots, "_save", keep)
    assert plots.plot_eval_curve(results, tmp_path / "e.png") is not None
    assert captured["xlim"] == (-1.0, 1.0)
    assert captured["ticks"] and all(float(t).is_integer() for t in captured["ticks"])


def test_zero_reward_spread_at_every_step_is_drawn_and_said(tmp_path, monkeypatch):
    """A shaped reward gives every group spread: the panel's bars are all 0 high and used to look empty (as if the
    metric were missing); now each step has a visible tick at 0 and the panel says so."""
    steps = [{"step": i, "reward_mean": 0.16, "reward_std": 0.07, "pass_rate": 0.0, "rollout/episodes": 64,
              "adv/frac_zero_std": 0.0} for i in range(5)]
    captured = {}
    real = plots._save

    def keep(fig, p, title):
        ax = fig.axes[2]
        captured["ticks"] = [list(line.get_ydata()) for line in ax.lines]
        captured["texts"] = [t.get_text() for t in ax.texts]
        return real(fig, p, title)

    monkeypatch.setattr(plots, "_save", keep)
    assert plots.plot_train_reward({"steps": steps}, tmp_path / "r.png") is not None
    assert captured["ticks"] == [[0.0] * 5]
    assert captured["texts"] == ["none at any step:\nevery group trained"]
    steps[3]["adv/frac_zero_std"] = 0.5  # some spread-less groups: no such note
    assert plots.plot_train_reward({"steps": steps}, tmp_path / "r.png") is not None
    assert captured["texts"] == [] and captured["ticks"][0][3] == 0.5


def test_the_eval_curve_shades_no_band_between_two_evaluations(tmp_path, monkeypatch):
    """Before and after only: error bars and a dashed line, no band (nothing was measured in between); from three
    evaluations on, the band of the curve."""
    from matplotlib.collections import PolyCollection

    from agentrl.report import plots

    def results(steps):
        return {"evaluations": [{"label": lab, "step": s, "tasks": [],
                                 "pass_at_1": {"mean": 0.2 + 0.1 * i, "lo": 0.1 + 0.1 * i, "hi": 0.3 + 0.1 * i,
                                               "alpha": 0.05}}
                                for i, (lab, s) in enumerate(steps)], "paired": []}

    seen = {}
    real_save = plots._save

    def keep(fig, path, title):
        seen[path.name] = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
        return real_save(fig, path, title)

    monkeypatch.setattr(plots, "_save", keep)
    assert plots.plot_eval_curve(results([("before", 0), ("after", 20)]), tmp_path / "two.png") is not None
    assert plots.plot_eval_curve(results([("before", 0), ("eval", 10), ("after", 20)]), tmp_path / "three.png")
    assert seen["two.png"] == [] and len(seen["three.png"]) == 1
