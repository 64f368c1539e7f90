"""Issue 25, kind 4: remote environments shut down cleanly.

A script that ends with live `remote_trl_env_class(url)()` instances (TRL holds its environments for the
trainer's whole life) must exit within seconds, with the server still running and with it gone; a
finalizer does no network I/O and starts no thread; close() is idempotent and bounded.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("openenv")
pytest.importorskip("trl")

from agentrl.serve.env.app import BackgroundServer, EnvServerConfig  # noqa: E402

SCRIPT = textwrap.dedent("""
    import sys
    from agentrl.integrations.trl import remote_trl_env_class
    from agentrl.serve.env.client import fetch_tasks

    url = sys.argv[1]
    task_id = fetch_tasks(url, "train")[0]["id"]
    cls = remote_trl_env_class(url)
    envs = [cls() for _ in range(3)]
    for env in envs[:2]:  # two connected sessions, one instance never connected
        env.reset(prompt=[{"role": "user", "content": "play"}], task_id=task_id)
    envs[0].guess(word="crane")
    print("ready", flush=True)
    if sys.argv[2] == "wait":
        sys.stdin.readline()  # the test stops the server first
    # the script ends here with every instance alive
""")


def _cfg() -> EnvServerConfig:
    return EnvServerConfig(env="wordle", train_size=2, eval_size=2, port=0, max_concurrent_envs=8,
                           drain_timeout_s=2.0)


def _start(url: str, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, url, mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"the script did not get ready: {line!r} {proc.stderr.read()[-2000:]}")
    return proc


def _exit_time(proc: subprocess.Popen, limit_s: float = 60.0) -> float:
    t0 = time.monotonic()
    try:
        proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the script hung at exit for {limit_s} s (killed)") from None
    return time.monotonic() - t0


def test_a_script_with_live_remote_envs_exits_in_seconds_with_the_server_running():
    with BackgroundServer(_cfg()) as url:
        proc = _start(url, "exit")
        took = _exit_time(proc)
        err = proc.stderr.read()
        assert proc.returncode == 0, err[-2000:]
        assert took < 8.0, took
        deadline = time.monotonic() + 15  # the script's sessions were ended and their slots freed
        while not _all_slots_open(url, 8) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _all_slots_open(url, 8)


def _all_slots_open(url: str, n: int) -> bool:
    """True if `n` sessions (the server's maximum) can be opened at once."""
    import json

    from websockets.sync.client import connect

    opened = []
    try:
        for _ in range(n):
            ws = connect(url.replace("http://", "ws://") + "/ws", open_timeout=10)
            opened.append(ws)
            ws.send(json.dumps({"type": "state"}))
            if json.loads(ws.recv(timeout=10))["type"] != "state":
                return False
        return True
    finally:
        for ws in opened:
            ws.close()


def test_a_script_with_live_remote_envs_exits_in_seconds_when_the_server_is_gone():
    bg = BackgroundServer(_cfg())
    url = bg.__enter__()
    try:
        proc = _start(url, "wait")
    finally:
        bg.__exit__(None, None, None)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    took = _exit_time(proc)
    err = proc.stderr.read()
    assert proc.returncode == 0, err[-2000:]
    assert took < 10.0, took


def test_close_is_idempotent_and_bounded_and_the_finalizer_does_no_io():
    from agentrl.serve.env.client import RemoteEnv, fetch_tasks
    from agentrl.tasks.task import Task

    with BackgroundServer(_cfg()) as url:
        task_id = fetch_tasks(url, "train")[0]["id"]
        stub = Task(id=task_id, family="", split="", files={}, entry="", source_file="", public_tests=(),
                    hidden_tests=(), reference="")
        env = RemoteEnv(url)
        env.reset(stub)
        t0 = time.monotonic()
        env.close()
        env.close()  # a second close does nothing
        assert env.closed and time.monotonic() - t0 < 5.0
        # a finalizer starts no thread and sends nothing: count threads around a collected live instance
        live = RemoteEnv(url)
        live.reset(stub)
        before = {t.ident for t in threading.enumerate()}
        live.__del__()
        started = [t for t in threading.enumerate() if t.ident not in before]
        assert started == [] and live.closed
        del live
        gc.collect()
        gone = RemoteEnv(url)
        gone.reset(stub)
    # the server is gone: close still returns within its bound
    t0 = time.monotonic()
    gone.close(timeout_s=2.0)
    assert time.monotonic() - t0 < 4.0
