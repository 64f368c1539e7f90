import logging

from conftest import build_synthetic

from agentrl.cli import main
from agentrl.io.log import log_config, setup_logging
from agentrl.io.plots import plot_results
from agentrl.io.results import validate_results


def test_plots_are_png(tmp_path):
    build_synthetic(tmp_path / "r.json")
    paths = plot_results(validate_results(tmp_path / "r.json"), tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["entropy.png", "eval_curve.png", "tool_stats.png", "train_reward.png"]
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
