"""What the log says when a run ends early: a run stopped by Ctrl-C or `timeout` writes no report.html, so the log
names the command that draws it from the results file (a newcomer's SmolLM2 run cut by `timeout -s INT` left only
results.json and train.log, and the log did not say how to look at them)."""

from __future__ import annotations

import logging

from agentrl.report.results import RunResults
from agentrl.rl.config import RLConfig
from agentrl.rl.run_folder import record_failure


def test_an_interrupted_run_names_the_report_command(tmp_path, caplog):
    res = RunResults(tmp_path / "results.json", {"model": "m"}, seed=0)
    with caplog.at_level(logging.ERROR, logger="agentrl"):
        record_failure(res, RLConfig.from_flat(), tmp_path, KeyboardInterrupt(), 1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert any("run interrupted" in m for m in lines)
    assert any(m.endswith(f"agentrl report --html {tmp_path}") for m in lines), lines
    # Ctrl-C's exception has no message: no dangling ": " before the results path
    assert f"run interrupted: KeyboardInterrupt (results: {tmp_path / 'results.json'})" in lines, lines
    assert res.data["error"] == "KeyboardInterrupt"


def test_no_report_hint_without_a_results_file(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="agentrl"):
        record_failure(None, RLConfig.from_flat(), tmp_path, KeyboardInterrupt(), 1.0)
    assert not any("agentrl report" in r.getMessage() for r in caplog.records)


def test_an_interrupted_evaluation_is_not_told_to_pass_a_training_flag(tmp_path, caplog):
    """`agentrl eval` stopped by Ctrl-C or `timeout` logged "no checkpoint was saved, so this run cannot be resumed
    (pass --checkpoint-every N to save them)": eval takes neither flag (steps is 0 there)."""
    res = RunResults(tmp_path / "results.json", {"model": "m"}, seed=0)
    with caplog.at_level(logging.ERROR, logger="agentrl"):
        record_failure(res, RLConfig.from_flat(steps=0), tmp_path, KeyboardInterrupt(), 1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert not any("--checkpoint-every" in m or "resume" in m.replace("not resumed", "") for m in lines), lines
    assert "an evaluation is not resumed: run the same command again to evaluate from the start" in lines
    with caplog.at_level(logging.ERROR, logger="agentrl"):
        record_failure(res, RLConfig.from_flat(steps=3), tmp_path, KeyboardInterrupt(), 1.0)
    assert any("--checkpoint-every" in r.getMessage() for r in caplog.records)  # a training run still is told
