"""--report-to: TensorBoard event files, trackio's local store and wandb offline, through their own
libraries, with TRL's metric names; nothing reaches past loopback."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from agentrl.report.trackers import REPORT_TO, eval_metrics, open_tracker, step_metrics
from agentrl.rl.config import RLConfig

STEP = {"reward_mean": 0.25, "reward_std": 0.4, "pass_rate": 0.25, "adv/frac_zero_std": 0.5, "loss": 0.01,
        "entropy": float("nan"), "clip_frac": 0.02, "tools/tool_calls": 4.0, "tools/failed_calls": 1.0,
        "tools/malformed_calls": 1.0, "tools/ok_calls": 2.0, "time/step_s": 3.5}
EVAL = {"label": "before", "step": 0, "pass_at_1": {"mean": 0.3, "lo": 0.1, "hi": 0.5},
        "tasks": [{"task_id": "a", "mean_reward": 0.5}, {"task_id": "b", "mean_reward": 0.1}],
        "tool_stats": {"turns": 3.0}}


def test_metric_names_follow_trl():
    m = step_metrics(STEP)
    assert m["train/reward"] == 0.25 and m["train/reward_std"] == 0.4 and m["train/frac_reward_zero_std"] == 0.5
    assert m["train/clip_ratio/region_mean"] == 0.02 and m["train/loss"] == 0.01 and m["time/step_s"] == 3.5
    assert "train/entropy" not in m  # NaN (a skipped update) is left out
    assert m["tools/call_frequency"] == 4.0 and m["tools/failure_frequency"] == pytest.approx(0.5)
    assert step_metrics({"tools/tool_calls": 0.0})["tools/failure_frequency"] == 0.0
    e = eval_metrics(EVAL, {"diff": {"mean": 0.2, "lo": 0.0, "hi": 0.4}})
    assert e == {"eval/pass_at_1": 0.3, "eval/pass_at_1_lo": 0.1, "eval/pass_at_1_hi": 0.5, "eval/reward": 0.3,
                 "eval/tools/turns": 3.0, "eval/paired_diff": 0.2, "eval/paired_diff_lo": 0.0,
                 "eval/paired_diff_hi": 0.4}


def test_report_to_is_a_config_flag_with_choices():
    assert RLConfig.from_flat(report_to="tensorboard").run.report_to == "tensorboard"
    with pytest.raises(ValueError, match="report_to"):
        RLConfig.from_flat(report_to="mlflow")
    with pytest.raises(ValueError, match="expected one of none, tensorboard, trackio, wandb"):
        open_tracker("mlflow", "x", config={})
    assert REPORT_TO == ("none", "tensorboard", "trackio", "wandb")


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tr = open_tracker("tensorboard", tmp_path, config={"lr": 1e-6})
    tr.log(eval_metrics(EVAL), 0)
    tr.log(step_metrics(STEP), 1)
    tr.log(step_metrics({**STEP, "reward_mean": 0.5}), 2)
    tr.finish()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"train/reward", "eval/pass_at_1", "tools/call_frequency", "tools/failure_frequency"} <= set(tags)
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("train/reward")] == [(1, 0.25), (2, 0.5)]
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("eval/pass_at_1")] == [(0, 0.3)]


# Runs in a fresh interpreter (trackio reads TRACKIO_DIR at import) with every non-loopback connect refused.
_SCRIPT = textwrap.dedent("""
    import json, socket, sys
    from pathlib import Path
    seen = []
    real = socket.socket.connect
    def connect(self, addr):
        seen.append(repr(addr))
        if self.family != socket.AF_UNIX and addr[0] not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test: refused a connection to {addr}")
        return real(self, addr)
    socket.socket.connect = connect
    from agentrl.report.trackers import open_tracker
    out, kind = Path(sys.argv[1]), sys.argv[2]
    tr = open_tracker(kind, out, config={"lr": 1e-6}, name="r1")
    tr.log({"train/reward": 0.25, "tools/call_frequency": 4.0}, 1)
    tr.log({"train/reward": 0.5, "eval/pass_at_1": 0.3}, 2)
    tr.finish()
    res = {"connects": seen}
    if kind == "trackio":
        from trackio.sqlite_storage import SQLiteStorage
        res["logs"] = [{k: v for k, v in r.items() if k != "timestamp"} for r in SQLiteStorage.get_logs("agentrl", "r1")]
    print("RESULT " + json.dumps(res))
""")


def _run_tracker(tmp_path, kind):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACKIO_", "WANDB_"))}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path), kind], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), proc.stdout


def test_trackio_local_store_reads_back(tmp_path):
    res, stdout = _run_tracker(tmp_path, "trackio")
    assert res["logs"] == [{"train/reward": 0.25, "tools/call_frequency": 4.0, "step": 1},
                           {"train/reward": 0.5, "eval/pass_at_1": 0.3, "step": 2}]
    assert (tmp_path / "trackio" / "agentrl.db").is_file()
    assert "\x1b[" not in stdout  # trackio's coloured banner stays out of the console and log files


def test_wandb_runs_offline(tmp_path):
    res, _ = _run_tracker(tmp_path, "wandb")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
