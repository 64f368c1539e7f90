"""`agentrl serve` through OpenEnv's own clients and raw HTTP/WebSocket: episodes, routes, and bad input.

Every server here is a real uvicorn + OpenEnv app on 127.0.0.1 (agentrl.serve.env.app
.BackgroundServer); episodes run in the real sandbox. Bad input must never take the server down or
touch another session: after each abuse a second, untouched session finishes its episode.
"""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("openenv")
requests = pytest.importorskip("requests")
from websockets.sync.client import connect  # noqa: E402

from agentrl.serve.env.app import BackgroundServer, EnvServerConfig  # noqa: E402


def _ws(url: str, query: str = ""):
    return connect(url.replace("http://", "ws://") + "/ws" + query, open_timeout=10, max_size=2**24)


def _send(ws, msg: dict | str, timeout: float = 60.0) -> dict:
    ws.send(msg if isinstance(msg, str) else json.dumps(msg))
    return json.loads(ws.recv(timeout=timeout))


@pytest.fixture(scope="module")
def mbpp_server():
    cfg = EnvServerConfig(env="python-session", tasks="mbpp", train_size=3, eval_size=3, port=0,
                          max_concurrent_envs=6)
    with BackgroundServer(cfg) as url:
        yield url


@pytest.fixture(scope="module")
def reference():
    from agentrl.tasks.mbpp import load_mbpp

    task = load_mbpp(split="test")[0]
    return task.id, task.reference


def _episode_ok(url: str, task_id: str, code: str) -> float:
    """A full episode through OpenEnv's own GenericEnvClient (untyped, unchanged); returns the reward."""
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(task_id=task_id)
        assert first.observation["task_id"] == task_id and first.observation["tools"]
        step = env.step({"calls": [{"name": "run_python", "arguments": {"code": code}}]})
        assert step.observation["results"][0]["status"] == "ok" and not step.done
        end = env.step({"final_answer": "done"})
        assert end.done and end.observation["end_reason"] == "final_answer"
        return end.reward


def test_generic_openenv_client_runs_an_episode_with_hidden_test_reward(mbpp_server, reference):
    task_id, code = reference
    assert _episode_ok(mbpp_server, task_id, code) == pytest.approx(1.0)
    assert _episode_ok(mbpp_server, task_id, "def nothing():\n    pass\n") == pytest.approx(0.0)


def test_typed_client_remote_env_and_state(mbpp_server, reference):
    from agentrl.envs.base import ToolCall
    from agentrl.envs.registry import make_env
    from agentrl.serve.env.client import AgentrlEnvClient, RemoteEnv, fetch_tasks, stub_task
    from agentrl.serve.env.types import AgentrlAction, ToolCallModel

    task_id, code = reference
    with AgentrlEnvClient(base_url=mbpp_server).sync() as client:
        obs = client.reset(task_id=task_id, episode_id="ep-1").observation
        assert obs.tools == make_env("python-session").tools()
        client.step(AgentrlAction(calls=[ToolCallModel(name="run_python", arguments={"code": "x = 41"})]))
        state = client.state()
        assert (state.episode_id, state.step_count, state.task_id, state.done) == ("ep-1", 1, task_id, False)
        out = client.step(AgentrlAction(calls=[ToolCallModel(name="run_python", arguments={"code": "print(x + 1)"})]))
        assert out.observation.results[0].content == "42"  # the session persists across steps
    held = fetch_tasks(mbpp_server, "heldout")
    assert [t["id"] for t in held][0] == task_id and "hidden_tests" not in held[0]
    env = RemoteEnv(mbpp_server)
    try:
        env.reset(stub_task(held[0]))
        res = env.step([ToolCall("run_python", {"code": code})])
        assert res.results[0].status == "ok" and not res.done
        end = env.final_answer("done")
        assert end.done and end.terminated and env.reward() == pytest.approx(1.0) and env.stats()["cells"] == 1
    finally:
        env.close()


def test_http_routes(mbpp_server):
    base = mbpp_server
    assert requests.get(f"{base}/health", timeout=10).json()["status"] == "healthy"
    schema = requests.get(f"{base}/schema", timeout=10).json()
    assert {"calls", "final_answer", "truncate"} <= set(schema["action"]["properties"])
    assert "results" in schema["observation"]["properties"] and "turns" in schema["state"]["properties"]
    reset = requests.post(f"{base}/reset", json={"split": "heldout", "index": 1}, timeout=30)
    assert reset.status_code == 200 and reset.json()["observation"]["system"]
    # OpenEnv's HTTP /step is stateless (a fresh environment per request): a clear 409, not a 500
    step = requests.post(f"{base}/step", json={"action": {"final_answer": "x"}}, timeout=30)
    assert step.status_code == 409 and "reset" in step.json()["detail"]
    bad = requests.post(f"{base}/reset", json={"task_id": "no-such-task"}, timeout=30)
    assert bad.status_code == 400 and "unknown task_id" in bad.json()["detail"]
    assert requests.get(f"{base}/state", timeout=10).status_code == 200
    malformed = requests.post(f"{base}/step", json={"action": {"calls": "nope"}}, timeout=30)
    assert malformed.status_code == 422


def test_unknown_session_is_refused_and_harms_nothing(mbpp_server, reference):
    with _ws(mbpp_server, "?session_id=does-not-exist") as ws:
        err = json.loads(ws.recv(timeout=30))
        assert err["type"] == "error" and "Unknown session_id" in err["data"]["message"]
    assert _episode_ok(mbpp_server, *reference) == pytest.approx(1.0)


def test_malformed_actions_and_wrong_types_answer_errors_in_session(mbpp_server, reference):
    task_id, code = reference
    with _ws(mbpp_server) as ws:
        assert _send(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert _send(ws, {"type": "warp"})["data"]["code"] == "UNKNOWN_TYPE"
        early = _send(ws, {"type": "step", "data": {"final_answer": "x"}})
        assert early["type"] == "error" and "step before reset" in early["data"]["message"]
        assert "task_id must be a string" in _send(ws, {"type": "reset", "data": {"task_id": 5}})["data"]["message"]
        assert "unknown reset parameter" in _send(ws, {"type": "reset", "data": {"colour": "red"}})["data"]["message"]
        assert "out of range" in _send(ws, {"type": "reset", "data": {"split": "heldout", "index": 99}})["data"]["message"]
        assert _send(ws, {"type": "reset", "data": {"task_id": task_id}})["type"] == "observation"
        for bad in ({"calls": "x"}, {}, {"calls": [{"name": "run_python"}], "final_answer": "y"},
                    {"calls": [{"name": "run_python", "extra": 1}]}, {"truncate": ""}):
            resp = _send(ws, {"type": "step", "data": bad})
            assert resp["type"] == "error" and resp["data"]["code"] == "VALIDATION_ERROR", bad
        # a wrong argument type reaches the environment, which answers a malformed call (schema check)
        typed = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": 5}}]}})
        assert typed["data"]["observation"]["results"][0]["status"] == "malformed"
        unknown = _send(ws, {"type": "step", "data": {"calls": [{"name": "rm_rf", "arguments": {}}]}})
        assert unknown["data"]["observation"]["results"][0]["status"] == "malformed"
        ok = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": code}}]}})
        assert ok["data"]["observation"]["results"][0]["status"] == "ok"
        end = _send(ws, {"type": "step", "data": {"final_answer": "done"}})
        assert end["data"]["done"] and end["data"]["reward"] == pytest.approx(1.0)
        after = _send(ws, {"type": "step", "data": {"final_answer": "again"}})
        assert after["type"] == "error" and "episode has ended" in after["data"]["message"]


def test_oversized_actions(mbpp_server, reference):
    with _ws(mbpp_server) as ws:
        _send(ws, {"type": "reset", "data": {"task_id": reference[0]}})
        big = _send(ws, {"type": "step", "data": {"final_answer": "x" * 1_100_000}})
        assert big["data"]["code"] == "VALIDATION_ERROR"
        many = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": "1"}}] * 65}})
        assert many["data"]["code"] == "VALIDATION_ERROR"
    with _ws(mbpp_server) as ws:  # past the server's message limit: only this connection is closed
        ws.send(json.dumps({"type": "step", "data": {"final_answer": "y" * (5 * 1024 * 1024)}}))
        with pytest.raises(Exception):  # noqa: B017 - websockets raises ConnectionClosed (1009)
            ws.recv(timeout=30)
    assert _episode_ok(mbpp_server, *reference) == pytest.approx(1.0)


def test_client_disconnecting_mid_step_frees_its_session(mbpp_server, reference):
    slow = "import time\ntime.sleep(1.5)\nprint('late')"
    for _ in range(3):
        ws = _ws(mbpp_server)
        _send(ws, {"type": "reset", "data": {"task_id": reference[0]}})
        ws.send(json.dumps({"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": slow}}]}}))
        ws.close()
    time.sleep(2.5)  # the abandoned steps finish; their sessions are destroyed
    assert _episode_ok(mbpp_server, *reference) == pytest.approx(1.0)
    with _ws(mbpp_server) as ws:  # capacity is back: all six sessions can be opened
        extra = [_ws(mbpp_server) for _ in range(5)]
        try:
            for s in [ws, *extra]:
                assert _send(s, {"type": "reset", "data": {}})["type"] == "observation"
        finally:
            for s in extra:
                s.close()


def test_flood_of_resets_and_sessions_past_capacity(mbpp_server, reference):
    with _ws(mbpp_server) as ws:
        for i in range(150):
            ws.send(json.dumps({"type": "reset", "data": {"seed": i}}))
        answers = [json.loads(ws.recv(timeout=60)) for _ in range(150)]
        assert all(a["type"] == "observation" for a in answers)
    opened, refused = [], 0
    try:
        for _ in range(10):
            s = _ws(mbpp_server)
            opened.append(s)
            try:  # a refused session gets its error frame at once, then the server closes it
                r = json.loads(s.recv(timeout=1.0))
            except TimeoutError:
                r = _send(s, {"type": "reset", "data": {}})
            if r["type"] == "error":
                assert r["data"]["code"] == "CAPACITY_REACHED" and "6" in r["data"]["message"]
                refused += 1
        assert refused == 4  # 6 sessions at most
    finally:
        for s in opened:
            s.close()
    time.sleep(0.5)
    assert _episode_ok(mbpp_server, *reference) == pytest.approx(1.0)


def test_idle_sessions_expire():
    cfg = EnvServerConfig(env="wordle", train_size=2, eval_size=2, port=0, max_concurrent_envs=1,
                          session_timeout_s=1.0)
    with BackgroundServer(cfg) as url:
        ws = _ws(url)
        assert _send(ws, {"type": "reset", "data": {}})["type"] == "observation"
        time.sleep(6.5)  # OpenEnv's reaper looks every max(timeout / 4, 5) s
        expired = _send(ws, {"type": "step", "data": {"calls": [{"name": "guess", "arguments": {"word": "crane"}}]}})
        assert expired["type"] == "error" and "closed" in expired["data"]["message"]
        with _ws(url) as fresh:  # the only slot was freed by the expiry
            assert _send(fresh, {"type": "reset", "data": {}})["type"] == "observation"
        ws.close()


def test_sigterm_drains_in_flight_step_and_exits_zero(tmp_path):
    """`agentrl serve` as a process: SIGTERM during a step lets the step answer, then exits 0."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import threading

    cmd = [sys.executable, "-m", "agentrl", "serve", "--env", "python-session", "--tasks", "mbpp",
           "--train-size", "2", "--eval-size", "2", "--port", "0", "--drain-timeout-s", "20"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = None
        deadline = time.time() + 120
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"listening on (http://\S+)", line)
            url = m.group(1) if m else None
        assert url, "the server did not report its address"
        ws = _ws(url)
        _send(ws, {"type": "reset", "data": {"split": "train", "index": 0}})
        code = "import time\ntime.sleep(2)\nprint('finished')"
        ws.send(json.dumps({"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": code}}]}}))
        threading.Timer(0.5, proc.send_signal, (signal.SIGTERM,)).start()
        answer = json.loads(ws.recv(timeout=30))
        assert answer["type"] == "observation"
        assert answer["data"]["observation"]["results"][0]["content"] == "finished"
        assert proc.wait(timeout=60) == 0
        out = proc.stdout.read()
        assert "drained and stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kw, match", [
    ({"port": -1}, "port must be in"), ({"eval_size": -1}, "eval_size must be >= 0"),
    ({"train_size": -2}, "train_size must be >= 0"), ({"max_turns": 0}, "max_turns must be >= 1"),
])
def test_run_server_checks_its_config_before_it_probes_the_port(kw, match, monkeypatch):
    """`agentrl serve --port -1` said "--host '127.0.0.1': not an address of this machine" (the port probe ran
    first); `--eval-size -1` served all held-out tasks but the last."""
    from agentrl.serve.env import app

    def never(cfg):
        raise AssertionError(f"the server was built with {kw}")

    monkeypatch.setattr(app, "build_app", never)  # a config that gets this far would start serving
    with pytest.raises(ValueError, match=match):
        app.run_server(EnvServerConfig(**{"port": 0, **kw}))


def test_a_binary_frame_is_answered_in_session_not_a_closed_session(mbpp_server, reference):
    """OpenEnv reads text frames only: a binary frame (JSON sent as bytes, or any bytes) got the error "'text'" and
    the session closed, its episode lost. Now it is an INVALID_JSON error frame that says so, and the episode goes on."""
    task_id, _ = reference
    with _ws(mbpp_server) as ws:
        assert _send(ws, {"type": "reset", "data": {"task_id": task_id}})["type"] == "observation"
        for frame in (b'{"type": "state"}', b"\xff\xfe", b""):
            ws.send(frame)
            err = json.loads(ws.recv(timeout=30))
            assert err["type"] == "error" and err["data"]["code"] == "INVALID_JSON", frame
            assert "binary frame" in err["data"]["message"] and "text frame" in err["data"]["message"]
        state = _send(ws, {"type": "state"})
        assert state["type"] == "state" and state["data"]["task_id"] == task_id
