"""Issue 25, kinds 2 and 5, against a real `agentrl serve` app (uvicorn + OpenEnv on 127.0.0.1).

Kind 2: every reset and step parameter is checked the same way on the WebSocket, over HTTP and in the
Python client; a wrongly typed value is a worded error naming it and leaves the session as it was.
Kind 5: no error answer of the server (bad frames, bad parameters, capacity, drain, a failing factory,
HTTP errors) carries any hidden test or reference text of the served tasks.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv")
requests = pytest.importorskip("requests")
from websockets.sync.client import connect  # noqa: E402

from agentrl.serve.env.app import BackgroundServer, EnvServerConfig  # noqa: E402

BAD_RESET = [  # (parameter, wrongly typed or out-of-range value)
    ("seed", "1"), ("seed", 1.5), ("seed", True), ("seed", -1),
    ("episode_id", 7), ("episode_id", ["e"]), ("episode_id", "e" * 300),
    ("task_id", 5), ("task_id", {"id": "x"}),
    ("split", 3), ("split", ["train"]),
    ("index", "0"), ("index", 1.5), ("index", False), ("index", -1),
    ("colour", "red"),  # unknown
]
BAD_ACTION = [  # (field named in the error, action)
    ("calls", {"calls": "x"}), ("name", {"calls": [{"name": 5}]}), ("arguments", {"calls": [{"arguments": "x"}]}),
    ("raw", {"calls": [{"name": "run_python", "raw": 5}]}), ("malformed", {"calls": [{"malformed": 7}]}),
    ("final_answer", {"final_answer": 5}), ("truncate", {"truncate": 5}), ("truncate", {"truncate": ""}),
    ("extra", {"final_answer": "x", "extra": 1}), ("action", {}),
]
BAD_STEP_PARAMS = [("timeout_s", "10"), ("timeout_s", -1), ("request_id", 5), ("colour", "red")]


def _ws(url: str):
    return connect(url.replace("http://", "ws://") + "/ws", open_timeout=10, max_size=2**24)


def _send(ws, msg: dict | str, timeout: float = 60.0) -> dict:
    ws.send(msg if isinstance(msg, str) else json.dumps(msg))
    return json.loads(ws.recv(timeout=timeout))


@pytest.fixture(scope="module")
def server():
    cfg = EnvServerConfig(env="python-session", tasks="mbpp", train_size=2, eval_size=2, port=0,
                          max_concurrent_envs=2)
    bg = BackgroundServer(cfg)
    with bg as url:
        yield url, bg.served


def _state(ws) -> dict:
    st = _send(ws, {"type": "state"})
    assert st["type"] == "state", st
    return st["data"]


def test_every_bad_reset_and_step_parameter_on_the_websocket_leaves_the_session_as_it_was(server):
    url, served = server
    task = served.catalog.splits["heldout"][0]
    with _ws(url) as ws:
        first = _send(ws, {"type": "reset", "data": {"task_id": task.id, "episode_id": "ep-1", "seed": 3}})
        assert first["type"] == "observation"
        ok = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": "x = 41"}}]}})
        assert ok["type"] == "observation"
        before = _state(ws)
        assert before["episode_id"] == "ep-1" and before["step_count"] == 1 and before["task_id"] == task.id
        for name, value in BAD_RESET:
            r = _send(ws, {"type": "reset", "data": {name: value}})
            assert r["type"] == "error", (name, value, r)
            assert name in json.dumps(r["data"]), (name, value, r)  # the parameter is named
            assert _state(ws) == before, (name, value)
        for name, action in BAD_ACTION:
            r = _send(ws, {"type": "step", "data": action})
            assert r["type"] == "error" and r["data"]["code"] == "VALIDATION_ERROR", (name, r)
            assert name in json.dumps(r["data"]) or name == "action", (name, r)
            assert _state(ws) == before, name
        # the episode goes on where it was: the session's variable is still there
        again = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python",
                                                                "arguments": {"code": "print(x + 1)"}}]}})
        assert again["data"]["observation"]["results"][0]["content"].strip() == "42"


def test_every_bad_reset_and_step_parameter_over_http_is_a_4xx_naming_it(server):
    url, _ = server
    for name, value in BAD_RESET:
        r = requests.post(f"{url}/reset", json={name: value}, timeout=30)
        assert r.status_code in (400, 422), (name, value, r.status_code, r.text[:300])
        assert name in r.text, (name, value, r.text[:300])
    for name, action in BAD_ACTION:
        r = requests.post(f"{url}/step", json={"action": action}, timeout=30)
        assert r.status_code == 422, (name, r.status_code, r.text[:300])
        assert name in r.text or name == "action", (name, r.text[:300])
    for name, value in BAD_STEP_PARAMS:
        r = requests.post(f"{url}/step", json={"action": {"final_answer": "x"}, name: value}, timeout=30)
        assert r.status_code in (400, 422), (name, value, r.status_code, r.text[:300])
        assert name in r.text, (name, r.text[:300])
    assert requests.post(f"{url}/reset", json={"split": "heldout", "index": 0}, timeout=30).status_code == 200


def test_lone_surrogates_on_the_websocket_keep_the_session(server):
    """A string with a lone surrogate (an unpaired \\udcff escape) in an action: OpenEnv's validation error
    echoed it and could not be written as JSON, so the server answered "Error serializing to JSON" and closed
    the session. Now such text reads as U+FFFD (a lossy UTF-8 decode) and the call runs; a reset parameter
    with one is an error saying so (it said "a string of at most 255 characters, got str of 1 characters")."""
    url, served = server
    task = served.catalog.splits["heldout"][0]
    raw = '{"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": "print(len(\'\\udcff\'))"}}]}}'
    with _ws(url) as ws:
        assert _send(ws, {"type": "reset", "data": {"task_id": task.id}})["type"] == "observation"
        r = _send(ws, raw)
        assert r["type"] == "observation", r
        assert r["data"]["observation"]["results"][0]["content"].strip() == "1"
        r = _send(ws, '{"type": "step", "data": {"calls": [{"name": "run\\udcff"}]}}')
        assert r["type"] == "observation" and r["data"]["observation"]["results"][0]["status"] == "malformed", r
        r = _send(ws, '{"type": "reset", "data": {"episode_id": "e\\ud800"}}')
        assert r["type"] == "error" and "episode_id must be UTF-8 text" in r["data"]["message"], r
        r = _send(ws, '{"type": "step", "data": {"truncate": "\\udfff"}}')
        assert r["type"] == "observation" and r["data"]["observation"]["end_reason"] == "\ufffd", r
        assert _state(ws)["done"] is True  # the session is still open


def test_a_websocket_frame_that_is_not_a_json_object_is_an_error_frame_and_the_session_goes_on(server):
    """A frame that was an array, a string, null, JSON nested past the recursion limit or a 5,000-digit integer:
    OpenEnv's loop answered "'list' object has no attribute 'get'" (or the RecursionError's text) and closed the
    session, losing the episode."""
    url, served = server
    task = served.catalog.splits["heldout"][0]
    frames = [("[1]", "got an array"), ('"x"', "got a string"), ("null", "got null"), ("5", "got a number"),
              ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
              ('{"type": "reset", "data": {"seed": ' + "9" * 5000 + "}}", "more than 4300 digits"),
              # a lone surrogate outside `data`: OpenEnv's error echo could not be written and the session closed
              ('{"type": "state", "x": "\\udcff"}', "'x' holds a lone surrogate"),
              ('{"type": "st\\udcffate"}', "'type' holds a lone surrogate"),
              ('{"type": "step", "data": {"calls": []}, "k\\ud800": 1}', "holds a lone surrogate")]
    with _ws(url) as ws:
        assert _send(ws, {"type": "reset", "data": {"task_id": task.id}})["type"] == "observation"
        before = _state(ws)
        for frame, named in frames:
            r = _send(ws, frame)
            assert r["type"] == "error" and r["data"]["code"] == "INVALID_JSON" and named in r["data"]["message"], r
        assert _state(ws) == before
        r = _send(ws, {"type": "step", "data": {"calls": [{"name": "run_python", "arguments": {"code": "print(6*7)"}}]}})
        assert r["data"]["observation"]["results"][0]["content"].strip() == "42"


def test_a_body_nested_too_deeply_or_with_a_huge_integer_is_a_400_not_a_500(server):
    """json.loads raised RecursionError in the parameter gate: a 500 and a traceback in the server log."""
    url, _ = server
    for body in ("[" * 100_000 + "]" * 100_000, '{"seed": ' + "9" * 5000 + "}"):
        for path in ("/reset", "/step"):
            r = requests.post(f"{url}{path}", data=body, headers={"content-type": "application/json"}, timeout=30)
            assert r.status_code == 400, (path, r.status_code, r.text[:300])
            assert f"the {path[1:]} request body: JSON" in r.json()["detail"], r.text[:300]
    assert requests.get(f"{url}/health", timeout=30).status_code == 200


def test_the_python_client_checks_the_same_parameters_before_sending(server):
    from agentrl.serve.env.client import AgentrlEnvClient
    from agentrl.serve.env.types import AgentrlAction, ParameterError

    url, served = server
    task = served.catalog.splits["train"][0]
    with AgentrlEnvClient(base_url=url).sync() as env:
        env.reset(task_id=task.id, episode_id="ep-2")
        before = env.state()
        for name, value in BAD_RESET:
            with pytest.raises(ParameterError, match=name):
                env.reset(**{name: value})
            assert env.state() == before
        for name, value in BAD_STEP_PARAMS:
            with pytest.raises(ParameterError, match=name):
                env.step(AgentrlAction(final_answer="x"), **{name: value})
            assert env.state() == before
        end = env.step(AgentrlAction(final_answer="done"))
        assert end.done and env.state().episode_id == "ep-2"


# -- kind 5 ------------------------------------------------------------------------------------------
def _secrets(catalog) -> list[str]:
    """Every hidden test and reference of the served tasks, whole and line by line, less what the task
    shows anyway (its files, public tests and prompt)."""
    out = []
    for task in catalog.by_id.values():
        public = json.dumps([task.files, task.public_tests, catalog.prompts.get(task.id)])
        for text in (*task.hidden_tests, task.reference):
            for piece in [text, *text.splitlines()]:
                piece = piece.strip()
                if len(piece) >= 12 and piece not in public and json.dumps(piece)[1:-1] not in public:
                    out.append(piece)
    assert len(out) > 4
    return out


def _assert_clean(answers: list[str], secrets: list[str]) -> None:
    for text in answers:
        for s in secrets:
            assert s not in text and json.dumps(s)[1:-1] not in text, (s, text[:500])


def test_no_error_answer_carries_a_hidden_test_or_a_reference(server):
    url, served = server
    answers: list[str] = []
    with _ws(url) as ws:
        for frame in ["{not json", {"type": "warp"}, {"type": "step", "data": {"final_answer": "x"}},
                      *({"type": "reset", "data": {k: v}} for k, v in BAD_RESET),
                      {"type": "reset", "data": {"task_id": "no-such-task"}},
                      {"type": "reset", "data": {"split": "heldout", "index": 99}}]:
            answers.append(json.dumps(_send(ws, frame)))  # errors (kind 2's test checks that they are)
        _send(ws, {"type": "reset", "data": {"split": "heldout", "index": 0}})
        for _, action in BAD_ACTION:
            answers.append(json.dumps(_send(ws, {"type": "step", "data": action})))
        _send(ws, {"type": "step", "data": {"final_answer": "done"}})
        answers.append(json.dumps(_send(ws, {"type": "step", "data": {"final_answer": "again"}})))
        with _ws(url) as second, _ws(url) as third:  # max 2 sessions: the third is refused
            refused = json.loads(third.recv(timeout=10))
            assert refused["data"]["code"] == "CAPACITY_REACHED", refused
            answers.append(json.dumps(refused))
            assert _send(second, {"type": "reset", "data": {}})["type"] == "observation"
    for path, body in [("/reset", {"task_id": "no-such-task"}), ("/reset", {"index": "x"}),
                       ("/step", {"action": {"final_answer": "x"}}), ("/step", {"action": {"calls": "x"}}),
                       (f"/{served.env_name}/tasks", {"split": "nope"}),
                       (f"/{served.env_name}/task", {"split": "heldout", "index": 99})]:
        r = requests.post(url + path, json=body, timeout=30)
        assert r.status_code >= 400, (path, body)
        answers.append(r.text)
    _assert_clean(answers, _secrets(served.catalog))
    # the drain (last: it stops new sessions for good)
    assert served.registry.drain(timeout_s=5.0)
    with _ws(url) as late:
        frame = json.loads(late.recv(timeout=10))
    assert frame["type"] == "error" and "shutting down" in frame["data"]["message"], frame
    assert len(json.dumps(frame)) < 500
    r = requests.post(f"{url}/reset", json={}, timeout=30)
    assert r.status_code == 409 and "shutting down" in r.text
    _assert_clean([json.dumps(frame), r.text], _secrets(served.catalog))


def test_a_failing_factory_names_itself_not_its_arguments():
    """OpenEnv answers FACTORY_ERROR naming the factory by `__name__`, else `str(factory)`: the catalog's
    tasks (hidden tests included) went out that way."""
    from openenv.core.env_server import create_app
    from starlette.testclient import TestClient

    from agentrl.serve.env.server import SessionRegistry, TaskCatalog, make_factory
    from agentrl.serve.env.types import AgentrlAction, AgentrlObservation, AgentrlState
    from agentrl.tasks.mbpp import load_mbpp

    tasks = load_mbpp(split="test")[:3]
    catalog = TaskCatalog.from_lists(tasks[:1], tasks[1:])

    def broken_env():
        raise RuntimeError("the sandbox could not start")

    factory = make_factory(broken_env, catalog, "python-session", SessionRegistry())
    app = create_app(factory, AgentrlAction, AgentrlObservation, env_name="python-session", state_cls=AgentrlState)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        frame = ws.receive_json()
    assert frame["data"]["code"] == "FACTORY_ERROR" and "agentrl-python-session-session" in frame["data"]["message"]
    assert len(json.dumps(frame)) < 500, len(json.dumps(frame))
    _assert_clean([json.dumps(frame), str(factory), repr(catalog), *map(repr, tasks)], _secrets(catalog))


def test_an_environment_failure_message_never_quotes_hidden_data():
    from agentrl.serve.env.server import public_failure
    from agentrl.tasks.mbpp import load_mbpp

    task = load_mbpp(split="test")[0]
    leaked = AssertionError(f"failed: {task.hidden_tests[-1]}")
    assert task.hidden_tests[-1] not in public_failure(leaked, task)
    assert public_failure(leaked, task).startswith("AssertionError (message withheld")
    assert public_failure(OSError("disk full"), task) == "OSError: disk full"


def test_a_tool_name_longer_than_the_wire_takes_is_sent_clipped():
    """The chat parser keeps any name the model writes; RemoteEnv.step raised pydantic's ValidationError for one
    over MAX_NAME_CHARS (the wire's limit), so the rollout ended in env_error (an environment bug, unscorable)
    instead of a malformed unknown-tool call."""
    from agentrl.envs.base import ToolCall
    from agentrl.serve.env.types import MAX_NAME_CHARS, ToolCallModel

    wire = ToolCallModel.from_call(ToolCall("R" * (MAX_NAME_CHARS + 50), {}, raw="<tool_call>...</tool_call>"))
    assert wire.name == "R" * MAX_NAME_CHARS and wire.raw == "<tool_call>...</tool_call>"


def test_more_calls_in_a_turn_than_the_wire_takes_fail_unrun_not_the_episode():
    """A model can write more than MAX_CALLS_PER_ACTION tool calls in one turn (a few tokens each); RemoteEnv.step
    raised pydantic's ValidationError for the action, ending the rollout in env_error. The calls past the limit
    now come back "failed" unrun, as calls past an environment's own max_calls_per_turn do."""
    from agentrl.envs.base import ToolCall
    from agentrl.serve.env.client import RemoteEnv, fetch_tasks, stub_task
    from agentrl.serve.env.types import MAX_CALLS_PER_ACTION

    cfg = EnvServerConfig(env="python-session", tasks="mbpp", train_size=1, eval_size=1, port=0)
    with BackgroundServer(cfg) as url:  # a server of its own: the module's is drained by an earlier test
        env = RemoteEnv(url)
        try:
            env.reset(stub_task(fetch_tasks(url, "heldout")[0]))
            n = MAX_CALLS_PER_ACTION + 6
            res = env.step([ToolCall("run_python", {"code": f"x{i} = {i}"}) for i in range(n)])
            assert len(res.results) == n and not res.done
            assert [r.call.arguments["code"] for r in res.results] == [f"x{i} = {i}" for i in range(n)]
            assert all(r.status == "failed" and "call not run" in r.content for r in res.results[MAX_CALLS_PER_ACTION:])
            assert res.results[0].status == "ok"  # the first calls ran on the server (up to its own per-turn limit)
            assert env.final_answer("done").done
        finally:
            env.close()
