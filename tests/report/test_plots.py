"""Plots: titles, axis labels with units, integer steps, no offset axes, the trainer's own entropy,
tool statistics split by kind, one plots folder."""

import pytest
from synthetic_results import build_synthetic, warm_start_record

from agentrl.report import plots
from agentrl.report.results import validate_results
from agentrl.report.schema import dedupe_stats


@pytest.fixture
def figures(monkeypatch):
    """Every figure plot_results saves, kept open for inspection."""
    seen = {}
    real = plots._save

    def keep(fig, path, title):
        seen[path.name] = fig
        fig.suptitle(title)
        fig.savefig(path, dpi=40)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    yield seen
    for fig in seen.values():
        plots._plt().close(fig)
    assert real is not None


def test_every_figure_has_titles_labels_and_integer_steps(tmp_path, figures):
    res = build_synthetic(tmp_path / "r.json")
    res.set("warm_start", warm_start_record())  # a run with a warm start has every plot
    res.write()
    data = validate_results(res.path)
    written = plots.plot_results(data, tmp_path / "plots")
    assert sorted(p.name for p in written) == sorted(plots.PLOTS)
    for name, fig in figures.items():
        assert fig._suptitle is not None and fig._suptitle.get_text(), name
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel(), (name, ax.get_title())
            if name != "tool_stats.png":
                assert ax.get_ylabel(), (name, ax.get_title())
                locs = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
                assert locs and all(float(t).is_integer() for t in locs), (name, locs)
                assert ax.yaxis.get_major_formatter().get_offset() == "", name  # no offset axis


def test_entropy_is_the_trainers_own_and_starts_at_zero(tmp_path, figures):
    steps = [{"step": i, "reward_mean": 0.0, "entropy": None, "sampler_nll": 11.9 + 0.001 * i} for i in range(3)]
    assert plots.plot_entropy({"steps": steps}, tmp_path / "e.png") is None  # sampler_nll is not entropy
    steps = [{"step": i, "entropy": 1.2 + 0.003 * i} for i in range(3)]
    plots.plot_entropy({"steps": steps}, tmp_path / "e.png")
    ax = figures["e.png"].axes[0]
    assert ax.get_ylim()[0] == 0 and "nats" in ax.get_ylabel()
    assert [line.get_ydata().tolist() for line in ax.get_lines()] == [[s["entropy"] for s in steps]]


def test_tool_statistics_are_split_by_kind():
    before = {"turns": 4.0, "tool_calls": 3.0, "policy_tokens": 256.0, "hidden_pass_fraction": 0.5, "edits": 0.0}
    after = {"turns": 3.0, "tool_calls": 2.0, "policy_tokens": 120.0, "hidden_pass_fraction": 0.75, "edits": 0.0}
    panels = plots.tool_stat_panels(before, after)
    assert [(t, names) for t, _, names in panels] == [
        ("counts", ["tool_calls", "turns"]), ("fractions", ["hidden_pass_fraction"]), ("tokens", ["policy_tokens"])]
    # older files carry each call counter twice: the legacy twin is dropped, a lone legacy name kept
    assert dedupe_stats({"calls": 3, "tool_calls": 3, "calls_ok": 1, "tools/calls": 2, "tools/tool_calls": 2}) == {
        "tool_calls": 3, "calls_ok": 1, "tools/tool_calls": 2}


def test_a_plot_without_data_leaves_no_stale_copy(tmp_path):
    data = validate_results(build_synthetic(tmp_path / "r.json").path)
    out = tmp_path / "plots"
    plots.plot_results(data, out)
    for s in data["steps"]:
        s["entropy"] = None
    names = {p.name for p in plots.plot_results(data, out)}
    assert "entropy.png" not in names and not (out / "entropy.png").exists()
    assert plots.plots_dir(tmp_path / "run") == tmp_path / "run" / "plots"


def test_wilson_interval():
    lo, hi = plots.wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert plots.wilson(0, 10)[0] == 0.0 and plots.wilson(10, 10)[1] == 1.0


def test_an_interval_that_leaves_out_its_mean_is_drawn_not_refused(tmp_path, figures):
    """A percentile interval need not contain its point estimate (validate_results takes such a file):
    matplotlib refused the negative bar ("'yerr' must not contain negative values"), so `agentrl report`
    failed and a finished run lost every plot and its HTML page."""
    res = build_synthetic(tmp_path / "r.json")
    res.data["evaluations"][0]["pass_at_1"].update(mean=0.05, lo=0.1, hi=0.3)  # mean below its interval
    res.data["evaluations"][-1]["pass_at_1"].update(mean=0.9, lo=0.5, hi=0.8)  # and above it
    res.write()
    data = validate_results(res.path)
    assert "eval_curve.png" in {p.name for p in plots.plot_results(data, tmp_path / "plots")}
    ax = figures["eval_curve.png"].axes[0]
    bars = [c for c in ax.collections if type(c).__name__ == "LineCollection"][0].get_segments()
    spans = {(round(float(b[0][1]), 6), round(float(b[1][1]), 6)) for b in bars}
    assert {(0.05, 0.3), (0.5, 0.9)} <= spans  # [mean, hi] and [lo, mean]: each bar reaches its mean
