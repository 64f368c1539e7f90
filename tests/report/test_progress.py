"""Progress that works everywhere: line progress off a terminal, per-episode advances, no third-party
bars, skipped updates said in words."""

import logging
import re
import time

from agentrl.report import log as logmod
from agentrl.report.log import LineProgress, progress, quiet_third_party_progress
from agentrl.rl.trainer import _log_step, skipped_update_reason


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _logger():
    lg = logging.getLogger("agentrl.test_progress")
    lg.handlers[:] = [_Lines()]
    lg.setLevel(logging.INFO)
    lg.propagate = False
    return lg, lg.handlers[0].lines


def test_off_a_terminal_progress_is_log_lines_at_a_steady_cadence():
    assert isinstance(progress(), LineProgress)  # pytest captures stdout: not a terminal
    lg, lines = _logger()
    with LineProgress(lg, interval_s=0.2) as p:
        t = p.add_task("eval before", total=40, unit="episodes")
        for done in range(1, 11):
            p.update(t, completed=done)
            time.sleep(0.05)
        time.sleep(0.5)  # nothing finishes: the ticker still reports
        p.remove_task(t)
    assert lines[0].startswith("eval before: 0/40 episodes (0%)") and lines[0].endswith("[started]")
    assert lines[-1].startswith("eval before: 10/40 episodes (25%)") and lines[-1].endswith("[done]")
    middle = lines[1:-1]
    assert 2 <= len(middle) <= 8, lines  # about one per 0.2 s over ~1 s, not one per update
    assert all(re.search(r"\d+/40 episodes \(\d+%\), [\d.]+/s, elapsed \d+s, ETA (\d+s|\dm\d\ds|\?)", m) for m in middle)


def test_line_progress_without_total_and_duration_format():
    lg, lines = _logger()
    p = LineProgress(lg, interval_s=60)
    t = p.add_task("steps", completed=3)
    p.advance(t, 2)
    assert p.line(t).startswith("steps: 5, ")
    assert [logmod._duration(x) for x in (5, 185, 3725, float("nan"))] == ["5s", "3m05s", "1h02m", "?"]


def test_third_party_progress_bars_are_off(tmp_path, capfd):
    from agentrl.models.load import load_policy

    quiet_third_party_progress()
    model, tok = load_policy("tiny-qwen3")
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    load_policy(str(tmp_path / "m"))
    err = capfd.readouterr()
    assert "Loading weights" not in err.err + err.out and "Writing model shards" not in err.err + err.out


def test_a_skipped_update_is_said_in_words(caplog):
    m = {"reward_mean": 0.0, "pass_rate": 0.0, "adv/frac_zero_std": 1.0, "adv/num_groups": 8.0,
         "tokens_trained": 0.0, "loss": 0.0, "entropy": float("nan"), "clip_frac": float("nan"),
         "grad_norm": 0.0, "time/step_s": 3.0, "time/rollout_s": 2.0, "time/update_s": 1.0}
    assert skipped_update_reason(m) == "all 8 groups have zero reward spread"
    assert skipped_update_reason({**m, "adv/frac_zero_std": 0.5}) == "no episode had a nonzero advantage"
    assert skipped_update_reason({**m, "tokens_trained": 120.0}) is None
    with caplog.at_level(logging.INFO, logger="agentrl.train"):
        logging.getLogger("agentrl.train").propagate = True
        _log_step(0, m)
    text = caplog.text
    assert "update skipped: all 8 groups have zero reward spread" in text and "nan" not in text
