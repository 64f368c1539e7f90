import json
import math
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from synthetic_results import AFTER, BEFORE, build_synthetic  # noqa: F401

from agentrl.report.results import RunResults, atomic_write_json, to_json_ready, validate_results


def test_builder_writes_a_valid_file(tmp_path):
    res = build_synthetic(tmp_path / "results.json")
    data = validate_results(tmp_path / "results.json")
    assert data == json.loads((tmp_path / "results.json").read_text())
    assert data["status"] == "completed" and data["steps"][0]["kl_ref"] is None  # NaN stored as null
    assert {"python", "torch", "transformers", "agentrl"} <= set(data["versions"])
    assert data["config"]["group_size"] == 8
    before, after = res.evaluation("before"), res.evaluation("after")
    assert before["pass_at_1"]["mean"] == pytest.approx(0.1) and after["pass_at_1"]["mean"] == pytest.approx(0.4875)
    assert data["paired"][0]["diff"]["mean"] == pytest.approx(0.3875)
    assert data["noise"]["train"]["n"] == 6 and "t" in data["noise"]["eval"]


def test_file_is_rewritten_after_every_step(tmp_path):
    path = tmp_path / "r.json"
    res = RunResults(path, {"a": 1}, seed=3)
    for step in range(3):
        res.add_step(step, {"reward_mean": 0.5})
        assert [s["step"] for s in validate_results(path)["steps"]] == list(range(step + 1))
    with pytest.raises(ValueError, match="not after"):
        res.add_step(1, {"reward_mean": 0.5})
    with pytest.raises(ValueError, match="numbers"):
        res.add_step(5, {"reward_mean": "high"})


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    build_synthetic(tmp_path / "r.json")
    res = RunResults.resume(tmp_path / "r.json", completed_steps=3)
    assert [s["step"] for s in res.data["steps"]] == [0, 1, 2] and res.data["status"] == "running"
    assert max(e["step"] for e in res.data["evaluations"]) <= 3
    res.add_step(3, {"reward_mean": 0.4})


def test_resume_may_change_how_the_update_runs_not_what_it_trains(tmp_path):
    """compile_layers (a boolean before 2026-12-04, "auto" by default since) changes the update's speed only."""
    RunResults(tmp_path / "r.json", {"lr": 1e-6, "compile_layers": False}, seed=0)
    res = RunResults.resume(tmp_path / "r.json", completed_steps=0, config={"lr": 1e-6, "compile_layers": "auto"})
    assert res.data["config"]["compile_layers"] == "auto"
    with pytest.raises(ValueError, match=r"differs from the stored run in \['lr'\]"):
        RunResults.resume(tmp_path / "r.json", completed_steps=0, config={"lr": 1e-5, "compile_layers": "auto"})


def test_resume_of_a_file_without_its_before_evaluation_is_refused(tmp_path):
    """The resumed run would evaluate its trained model as "before" (and warm-start it again)."""
    build_synthetic(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    data["evaluations"] = [e for e in data["evaluations"] if e["label"] != "before"]
    data["paired"], data["noise"] = [], {}
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"holds no 'before' evaluation.*step-3 model as 'before'"):
        RunResults.resume(tmp_path / "r.json", completed_steps=3)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.pop("config"), "config"),
    (lambda d: d["evaluations"][0]["tasks"][0].update(successes=-1), "successes"),
    (lambda d: d["evaluations"][0]["tasks"][0].update(successes=9), "successes > trials"),
    (lambda d: d["steps"][1].update(step=0), "strictly increase"),
    (lambda d: d["steps"][0].update(reward_mean="x"), "steps/0/reward_mean"),
    (lambda d: d["paired"][0]["diff"].update(lo=1.0, hi=0.0), "lo <= hi"),
    (lambda d: d["paired"][0]["diff"].update(lo=None), "both be null"),
    (lambda d: d["evaluations"][0]["pass_at_1"].update(lo=None, hi=None), "undefined"),
    (lambda d: d["evaluations"][0]["pass_at_1"].update(undefined="one task"), "undefined='one task'"),
    (lambda d: d.update(status="weird"), "status"),
    (lambda d: d["steps"][0].update(reward_mean=10**400), "steps/0/reward_mean: an integer too large for a floating"),
    (lambda d: d.update(wall_clock_s=-10**400), "at wall_clock_s: an integer too large"),
    (lambda d: d["evaluations"][0]["pass_at_1"].update(mean=10**400), "evaluations/0/pass_at_1/mean: an integer"),
])
def test_validation_names_the_problem(tmp_path, mutate, match):
    build_synthetic(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    mutate(data)
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        validate_results(tmp_path / "bad.json")


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["noise"].update(eval=-1), "noise/eval: -1 is not of type 'object', 'null'"),
    (lambda d: d["noise"].update(train="x"), "noise/train: 'x' is not of type"),
    (lambda d: d["evaluations"][0]["per_family"]["f"].pop("trials"), "per_family/f: 'trials' is a required property"),
])
def test_report_of_a_section_its_readers_cannot_read_is_a_one_line_error(tmp_path, capsys, mutate, match):
    """A noise curve report that is not an object (summary: TypeError "argument of type 'int' is not iterable")
    or a per-family entry without its counts (the HTML report: KeyError 'trials') passed validation, and
    `agentrl report --html` ended in a traceback; the schema now refuses both, naming the path."""
    from agentrl.cli import main

    build_synthetic(tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    mutate(data)
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert main(["report", "--html", "--no-plots", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and err.count("\n") == 1, err


def test_report_of_a_file_with_an_integer_beyond_float_range_is_a_one_line_error(tmp_path, capsys):
    """`agentrl report` raised OverflowError ('int too large to convert to float') or numpy's isfinite TypeError
    on a results file holding a 400-digit integer where a number goes; it is now a one-line error naming it."""
    from agentrl.cli import main

    build_synthetic(tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    data["steps"][0]["loss"] = 10**400
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert main(["report", "--html", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "steps/0/loss: an integer too large" in err and "Traceback" not in err and err.count("\n") == 1


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        validate_results(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{truncated")
    with pytest.raises(ValueError, match="not valid JSON"):
        validate_results(tmp_path / "x.json")


def test_to_json_ready_scalars():
    import torch

    out = to_json_ready({"a": np.int64(3), "b": torch.tensor(0.5), "c": (1, math.inf), "d": np.float32(2.0)})
    assert out == {"a": 3, "b": 0.5, "c": [1, None], "d": 2.0}
    with pytest.raises(TypeError, match="set"):
        to_json_ready({"x": {1, 2}})


def test_atomic_write_survives_kill(tmp_path):
    """SIGKILL a process that rewrites a large file in a loop: the file is always complete JSON."""
    path = tmp_path / "big.json"
    atomic_write_json(path, {"i": -1})
    script = textwrap.dedent(f"""
        from agentrl.report.results import atomic_write_json
        i = 0
        while True:
            atomic_write_json({str(path)!r}, {{"i": i, "pad": list(range(200000))}})
            i += 1
            if i == 2:
                print("ready", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    data = json.loads(path.read_text())
    assert data["i"] >= 1 and len(data["pad"]) == 200000
    assert not [p for p in tmp_path.iterdir() if p.name != "big.json" and not p.name.endswith(".tmp")]


def test_validate_results_names_the_path_for_binary_files_and_directories(tmp_path):
    import pytest as _pt

    from agentrl.report.results import validate_results as _v

    bad = tmp_path / "r.json"
    bad.write_bytes(b"\xff\xfe{}")
    with _pt.raises(ValueError, match=r"r\.json: not UTF-8"):
        _v(bad)
    with _pt.raises(ValueError, match="is a directory"):
        _v(tmp_path)


@pytest.mark.parametrize("key,old,new", [
    ("activation_offloading", None, "auto"),  # a run stored before the setting existed (2026-12-04)
    ("activation_offloading", "off", "on"),
    ("gradient_checkpointing", False, True),  # memory_hint's advice after an out-of-memory failure, then --resume
    ("micro", 8, 4),
    ("micro_tokens", 0, 4096),
    ("logprob_chunk_rows", 1024, 256),
    ("pack_rows", True, False),
])
def test_resume_may_change_the_update_s_memory_settings(tmp_path, key, old, new):
    """The update's memory and speed knobs (the same gradient up to float rounding; the ones an out-of-memory
    failure's hint says to change before resuming) may change on --resume; a key the stored run lacks too."""
    stored = {"lr": 1e-6} if old is None else {"lr": 1e-6, key: old}
    RunResults(tmp_path / "r.json", stored, seed=0)
    res = RunResults.resume(tmp_path / "r.json", completed_steps=0, config={"lr": 1e-6, key: new})
    assert res.data["config"][key] == new
