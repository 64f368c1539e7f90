import logging

from synthetic_results import build_synthetic, counts_report, record_noise, record_paired

from agentrl.cli import main
from agentrl.report.log import log_config, setup_logging
from agentrl.report.plots import plot_results
from agentrl.report.results import RunResults, validate_results
from agentrl.report.summary import summary_rows
from agentrl.rl.config import RLConfig


def test_plots_are_png(tmp_path):
    build_synthetic(tmp_path / "r.json")
    paths = plot_results(validate_results(tmp_path / "r.json"), tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["entropy.png", "eval_curve.png", "tool_stats.png", "train_reward.png", "update.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_plots_skip_missing_data(tmp_path):
    data = {"steps": [], "evaluations": []}
    assert plot_results(data, tmp_path) == []


def test_report_command(tmp_path, capsys):
    build_synthetic(tmp_path / "r.json")
    assert main(["report", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "pass@1 before" in out and "+0.388" in out and "0.100" in out and "noise train" in out
    assert (tmp_path / "plots" / "eval_curve.png").is_file()


def test_report_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "results file not found" in capsys.readouterr().err


def test_report_whose_output_places_are_taken_is_one_line_and_writes_nothing(tmp_path, capsys):
    build_synthetic(tmp_path / "r.json")
    (tmp_path / "plots").write_text("not a folder")
    assert main(["report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "error: plots folder" in err and "is a file; expected a directory" in err and "Traceback" not in err
    (tmp_path / "plots").unlink()
    (tmp_path / "report.html").mkdir()
    assert main(["report", "--html", str(tmp_path / "r.json")]) == 2
    assert "report.html' is a directory; expected a file there" in capsys.readouterr().err
    assert not (tmp_path / "plots").exists()  # checked before anything was drawn


def test_log_tees_to_file(tmp_path):
    logger = setup_logging(tmp_path / "train.log", console=False)
    log_config(logger, {"lr": 1e-6, "group_size": 8})
    logging.getLogger("agentrl.rl").info("step %d reward %.3f", 3, 0.5)
    setup_logging(tmp_path / "train.log", console=False)  # re-setup does not duplicate lines
    logger.info("again")
    for h in logger.handlers:
        h.flush()
    text = (tmp_path / "train.log").read_text()
    assert "group_size = 8" in text and "step 3 reward 0.500" in text and text.count("again") == 1
    setup_logging(None, console=False)


def _default_like_run(path, n_steps=3, finish=True):
    """A results file like the README's default run: constant zero reward, zero-std groups, entropy None."""
    res = RunResults(path, RLConfig.from_flat(steps=n_steps).to_flat(), seed=0)
    ids = [f"t{i}" for i in range(4)]
    res.add_evaluation("before", step=0, report=counts_report(ids, [0] * 4, 2, n_boot=200,
                                                              tool_stats={"tool_calls": 0.0, "ok_calls": float("nan")}))
    for step in range(n_steps):
        res.add_step(step, {"reward_mean": 0.0, "reward_std": 0.0, "pass_rate": 0.0, "adv/frac_zero_std": 1.0,
                            "entropy": None, "clip_frac": float("nan"), "grad_norm": 0.0, "sampler_nll": 11.9})
    if finish:
        res.add_evaluation("after", step=n_steps, report=counts_report(ids, [0] * 4, 2, n_boot=200))
        record_paired(res, n_boot=200)
        record_noise(res)
        res.finish(wall_clock_s=None)
    return res


def test_report_on_constant_reward_run_prints_na_for_missing_statistics(tmp_path, capsys):
    _default_like_run(tmp_path / "r.json")
    data = validate_results(tmp_path / "r.json")
    assert data["noise"]["train"]["rise_stderr"] is None  # the case that crashed the formatter
    rows = dict(summary_rows(data))
    assert "n/a" in rows["noise train"] and rows["last entropy"] == "n/a" and rows["last clip_frac"] == "n/a"
    assert rows["last frac_zero_std"] == "1" and rows["wall clock"] == "n/a"
    # every task at rate 0: no interval, and the table says why instead of printing [0.000, 0.000]
    same = "n/a: every task has the same rate (0): resampling tasks cannot vary the mean"
    assert rows["pass@1 before (step 0)"] == f"0.000 [{same}]  counts 0 0 0 0"
    assert rows["paired after - before"] == "+0.000 [n/a: every task has the same difference (0): resampling " \
                                            "tasks cannot vary the mean]"
    assert data["evaluations"][0]["pass_at_1"]["lo"] is None
    assert main(["report", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "noise train" in out and "n/a" in out
    assert (tmp_path / "plots" / "train_reward.png").is_file() and (tmp_path / "plots" / "eval_curve.png").is_file()


def test_report_on_interrupted_partial_file(tmp_path, capsys):
    res = _default_like_run(tmp_path / "r.json", finish=False)
    res.data["noise"] = {"train": {"step_noise": None, "n": 3}, "eval": {"n": 1.0}}
    res.finish("interrupted")
    assert main(["report", str(tmp_path / "r.json")]) == 0
    assert "interrupted" in capsys.readouterr().out


def test_summary_and_plots_tolerate_none_nan_and_empty_values(tmp_path):
    iv = {"mean": None, "lo": float("nan"), "hi": float("inf"), "alpha": None}
    data = {"status": "running", "seed": 1, "config": {}, "paired": [{"before": "b", "after": "a", "diff": iv}],
            "evaluations": [{"label": "before", "step": 0, "tasks": [], "pass_at_1": iv, "tool_stats": {"x": None}},
                            {"label": "after", "step": 1, "tasks": [], "pass_at_1": iv,
                             "tool_stats": {"x": float("nan")}}],
            "steps": [{"step": 0, "reward_mean": None, "entropy": float("nan")}, {"step": 1}],
            "noise": {"train": {"step_noise": float("nan"), "rise": None, "t": "x"}}}
    rows = dict(summary_rows(data))
    assert rows["pass@1 before (step 0)"].startswith("n/a [n/a, n/a]") and rows["paired a - b"] == "n/a [n/a, n/a]"
    assert rows["noise train"].count("n/a") == 5
    assert plot_results(data, tmp_path) == []  # no finite value anywhere: nothing to draw, no crash
    data["steps"].append({"step": 2, "reward_mean": 0.5, "reward_std": None, "entropy": 0.1})
    assert sorted(p.name for p in plot_results(data, tmp_path)) == ["entropy.png", "train_reward.png"]


def test_a_results_file_with_a_lone_surrogate_is_named_before_anything_is_written(tmp_path, capsys):
    """An unpaired \\udcff escape in a results string: `report --html` printed the table, then failed writing the
    page with "'utf-8' codec can't encode character '\\udcff' ..." (no file, no field)."""
    import json

    build_synthetic(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    data["config"]["out"] = "runs/\udcff"
    (tmp_path / "r.json").write_text(json.dumps(data))
    assert main(["report", "--html", "--no-plots", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "r.json: invalid results at config.out: a lone surrogate" in err, err
    assert not (tmp_path / "report.html").exists()


def test_config_strings_must_be_utf8_text(tmp_path, capsys):
    """`--out $'runs/\\xff'` (argv bytes) or a YAML "\\udcff" escape: the run made its folder, then failed writing
    results.json with "'utf-8' codec can't encode character"; now RLConfig names the field first."""
    import pytest

    with pytest.raises(ValueError, match=r"RLConfig\.out: expected a string of UTF-8 text, got 'runs/\\udcff'"):
        RLConfig.from_flat(out="runs/\udcff")
    (tmp_path / "c.yaml").write_text('out: "runs/\\udcff"\n')
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--print-config"]) == 2
    assert "RLConfig.out: expected a string of UTF-8 text" in capsys.readouterr().err
    assert RLConfig.from_flat(out="runs/é").run.out == "runs/é"  # non-ASCII text is fine


def test_report_on_a_run_still_going_says_so_and_a_finished_one_gives_the_verdict(tmp_path, capsys):
    """`agentrl report runs/x` while the run was going printed "status running" and "wall clock n/a s" with no word
    on what the figures are; the paired row gave the interval without the HTML report's verdict words."""
    from agentrl.report.html import render_html

    res = RunResults(tmp_path / "results.json", {"model": "m"}, seed=0)  # a run that has just started
    data = validate_results(res.path)
    rows = dict(summary_rows(data))
    assert rows["wall clock"] == "n/a (still running)"
    assert rows["note"].startswith("the run is still going: this is its results file as of ")
    assert "The run is still going: this page shows its results file as of" in render_html(data, plots=[])
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    assert "still going" in capsys.readouterr().out
    build_synthetic(tmp_path / "done.json")
    done = validate_results(tmp_path / "done.json")
    rows = dict(summary_rows(done))
    assert "note" not in rows and "still running" not in rows["wall clock"]
    assert "still going" not in render_html(done, plots=[])
    assert rows["paired after - before"].endswith("  (learned: interval above 0)"), rows["paired after - before"]


def test_train_ends_with_the_verdict_of_its_paired_interval(tmp_path, monkeypatch, capsys):
    """The last lines of `agentrl train` gave `paired after - before: +0.448 [+0.292, +0.604]` and left the reader
    to know that an interval above 0 is what learning looks like; they now say it as the HTML report does."""
    import agentrl.rl.trainer as trainer
    from agentrl.cli.train import train_single

    build_synthetic(tmp_path / "results.json")
    monkeypatch.setattr(trainer, "train", lambda cfg: tmp_path / "results.json")
    assert train_single(RLConfig.from_flat()) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("paired after - before: "))
    assert line.endswith("  (learned: interval above 0)"), line
