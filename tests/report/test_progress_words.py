"""Progress that says what happened: a phase stopped by Ctrl-C or an error ends "[interrupted]" / "[failed]",
never "[done]"; per-turn progress prints as a fraction; a tracker says where its files are."""

import logging

import pytest

from agentrl.report.log import LineProgress, end_phase
from agentrl.report.trackers import open_tracker, tracker_location


@pytest.mark.parametrize("error, word", [(None, "[done]"), (KeyboardInterrupt(), "[interrupted]"),
                                         (ValueError("bad"), "[failed]")])
def test_a_phase_ends_with_the_word_of_how_it_ended(caplog, error, word):
    caplog.set_level(logging.INFO, logger="agentrl.progress")
    with LineProgress(interval_s=3600) as bars:
        tid = bars.add_task("evaluation", total=3, unit="episodes")
        bars.update(tid, completed=4 / 3)
        assert "evaluation: 1.3/3 episodes (44%)" in bars.line(tid)
        end_phase(bars, tid, error)
    last = caplog.records[-1].getMessage()
    assert last.endswith(word) and ("[done]" not in last or error is None)


def test_tensorboard_says_where_its_event_files_are(tmp_path, caplog):
    pytest.importorskip("tensorboard")
    caplog.set_level(logging.INFO, logger="agentrl.trackers")
    tracker = open_tracker("tensorboard", tmp_path, config={"lr": 1.0})
    tracker.log({"train/reward": 0.5}, 1)
    tracker.finish()
    where = tmp_path / "tensorboard"
    assert f"tensorboard: event files in {where} (view: tensorboard --logdir {where})" in caplog.text
    assert list(where.glob("events.out.tfevents.*"))
    assert str(tmp_path / "wandb") in tracker_location("wandb", tmp_path)
