"""Issue 14.6b: `kill -9` of a real training process at several points (sampling, update, checkpoint write,
results write, and one at a random moment), then `--resume`: at most one step lost, a valid results file
after every kill, no duplicated or missing steps at the end, the wall clock summed over the parts.

Each part is a real subprocess (tiny-qwen3, edit-menu, the scripted sampler of test_trainer so rewards
vary and the update runs); a kill point is a function patched to SIGKILL its own process on its n-th call.
"""

import json
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.cli import build_parser
from agentrl.cli.flags import config_from_args
from agentrl.report.results import validate_results
from agentrl.rl.checkpoint import latest_checkpoint

STEPS = 4
CFG = dict(env="edit-menu", steps=STEPS, prompts_per_step=1, group_size=2, eval_n=1, eval_size=1, train_size=4,
           max_new_tokens=48, micro=2, minibatches=1, lr=1e-3, checkpoint_every=1, keep_checkpoints=2, n_boot=50,
           seed=5)

WRAPPER = r'''
import json, os, signal, sys
sys.path.insert(0, {tests!r})
point, nth, cfg = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
calls = {{"n": 0}}

def die_on_nth(fn):
    def wrapped(*a, **k):
        calls["n"] += 1
        if calls["n"] == nth:
            if point == "checkpoint":  # mid-write: part of the checkpoint's temp dir is on disk
                fn(*a, **k)
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*a, **k)
    return wrapped

import agentrl.report.results as results_mod
import agentrl.rl.checkpoint as ckpt_mod
import agentrl.rl.backend as backend_mod  # the local backend's update looks minibatch_step up here at each call
import test_trainer
if point == "update":
    backend_mod.minibatch_step = die_on_nth(backend_mod.minibatch_step)
elif point == "checkpoint":
    ckpt_mod.fsync_path = die_on_nth(ckpt_mod.fsync_path)
elif point == "results":  # the temp file is written, the rename into place never happens
    results_mod.os.replace = die_on_nth(results_mod.os.replace)
elif point == "sampling":
    real = test_trainer.edit_menu_sampler
    def killing(seed):
        sampler = real(seed)
        sampler.reply = die_on_nth(sampler.reply)
        return sampler
    test_trainer.edit_menu_sampler = killing
from agentrl.rl.config import RLConfig
test_trainer._run(RLConfig.from_flat(**cfg))
'''


def part(tmp_path, point, nth, resume, random_kill_s=None):
    script = tmp_path / "part.py"
    script.write_text(WRAPPER.format(tests=str(Path(__file__).parent)))
    cfg = {**CFG, "out": str(tmp_path / "run"), "resume": resume}
    proc = subprocess.Popen([sys.executable, str(script), point, str(nth), json.dumps(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if random_kill_s is not None:
        time.sleep(random_kill_s)
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def check_after_kill(out: Path, done_before: int) -> int:
    """The file is valid, its steps are 0..k-1 without gaps, and at most one step is lost against the
    latest checkpoint. Returns the number of steps the checkpoint holds."""
    data = validate_results(out / "results.json")
    steps = [s["step"] for s in data["steps"]]
    assert steps == list(range(len(steps))) and data["status"] == "running"
    ckpt = latest_checkpoint(out / "checkpoints")
    held = 0 if ckpt is None else int(json.loads((ckpt / "meta.json").read_text())["step"])
    assert held >= done_before and len(steps) - held <= 1, (steps, held)
    return held


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_minus_nine_then_resume(tmp_path):
    out = tmp_path / "run"
    # part 1 runs the "before" evaluation and two steps, and dies in the update of step 2
    rc, _ = part(tmp_path, "update", 3, resume=False)
    assert rc == -signal.SIGKILL
    held = check_after_kill(out, 2)
    parts = 1
    # then: die while writing checkpoint 3, while sampling, while writing the results file
    for point, nth in (("checkpoint", 2), ("sampling", 1), ("results", 1)):
        rc, _ = part(tmp_path, point, nth, resume=True)
        parts += 1
        assert rc == -signal.SIGKILL, (point, rc)
        held = check_after_kill(out, held)
    # one kill at a random moment, then a clean resume to the end
    rc, err = part(tmp_path, "none", 0, resume=True, random_kill_s=random.Random(0).uniform(4, 12))
    parts += 1
    if rc == -signal.SIGKILL and validate_results(out / "results.json")["status"] != "completed":
        check_after_kill(out, held)
        rc, err = part(tmp_path, "none", 0, resume=True)
        parts += 1
    elif rc == -signal.SIGKILL:  # killed after the final results write (while drawing plots): nothing lost
        rc = 0
    assert rc == 0, err[-2000:]
    data = validate_results(out / "results.json")
    assert data["status"] == "completed"
    assert [s["step"] for s in data["steps"]] == list(range(STEPS))
    assert [e["label"] for e in data["evaluations"]] == ["before", "after"] and len(data["paired"]) == 1
    # one clock per part that wrote the file (a part killed before its first write, e.g. at the "results"
    # point, has nothing to add); the run's wall clock is their sum
    clocks = data["wall_clock_parts_s"]
    assert 3 <= len(clocks) <= parts and all(t > 0 for t in clocks)
    assert data["wall_clock_s"] == pytest.approx(sum(clocks)) and data["wall_clock_s"] > clocks[-1]
    assert not list((out / "checkpoints").glob(".tmp-step_*"))  # a kill mid-checkpoint leaves nothing behind


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_interrupted_run_prints_how_to_resume(tmp_path):
    out = tmp_path / "term"
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "train", "--env", "edit-menu", "--eval-size", "1",
                             "--eval-n", "1", "--steps", "50", "--prompts-per-step", "1", "--group-size", "2",
                             "--max-new-tokens", "4", "--n-boot", "50", "--checkpoint-every", "1",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # a job a non-interactive shell starts in the background (as CI may run the suite)
                            # inherits SIGINT ignored, and Python then leaves it ignored: restore the default
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 400
    while time.time() < deadline and latest_checkpoint(out / "checkpoints") is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "to resume from step_" in text  # on the console ...
    log = (out / "train.log").read_text()  # ... and, unwrapped, in the log
    hint = next(line for line in log.splitlines() if "to resume from step_" in line)
    args = build_parser().parse_args(shlex.split(hint.split(": agentrl ", 1)[1]))
    cfg = config_from_args(args)  # the hint is the same run's config, plus --resume
    assert (cfg.run.resume, cfg.run.steps, cfg.run.out, cfg.env.name, cfg.run.checkpoint_every) == (True, 50, str(out), "edit-menu", 1)
    assert cfg.to_flat() == {**json.loads((out / "results.json").read_text())["config"], "resume": True}
