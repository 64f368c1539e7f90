"""Issue 25, the same kinds found elsewhere: error messages that quoted task data or echoed a client's
value whole, and a request-size check that parsed on the event loop."""

from __future__ import annotations

import json

import pytest

from agentrl.sandbox.api import TestJob


def test_a_wrongly_typed_test_job_names_the_type_not_the_hidden_tests():
    secret = "assert solve(17) == 'the hidden answer'"
    with pytest.raises(TypeError) as e:
        TestJob(files={"m.py": "x = 1"}, module="m", tests=secret)
    assert "str of length" in str(e.value) and "hidden answer" not in str(e.value)
    with pytest.raises(TypeError) as e:
        TestJob(files={"m.py": "x = 1"}, module="m", tests=(), setup=[secret])
    assert "hidden answer" not in str(e.value)


@pytest.fixture(scope="module")
def served():
    from agentrl.models.load import load_policy
    from agentrl.serve.policy.app import ServerThread
    from agentrl.serve.policy.server import PolicyServer

    model, tok = load_policy("tiny-qwen3")
    srv = PolicyServer(model, tok, sampler=lambda c, b: [], auto_open=True)
    with ServerThread(srv) as http_:
        yield http_
    srv.close()


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "9" * 200_000},
    {"messages": [{"role": "user", "content": [{"type": "x" * 200_000}]}]},
])
def test_policy_refusals_do_not_echo_a_huge_client_value(served, body):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Authorization": "Bearer r", "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    assert r.status == 400 and len(data) < 1000, (r.status, len(data))


def test_rollout_budget_errors_are_bounded():
    from agentrl.serve.policy.server import RolloutBudget

    with pytest.raises(ValueError) as e:
        RolloutBudget.from_json({"max_calls": "x" * 60_000})
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("raw", [
    '{"messages": [{"role": "user", "content": "hi \\udcff"}]}',        # the tokenizer raised TypeError: a 500
    '{"messages": [{"role": "user", "content": "hi"}], "model": "\\ud800"}',  # sampled, then no reply: a 500
    '{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "R\\udfff", '
    '"arguments": "{}"}}]}, {"role": "user", "content": "go"}]}',
    '{"messages": [{"role": "user", "content": "hi"}], "k\\udcff": 1}',
])
def test_lone_surrogates_in_a_request_are_a_400_naming_where(served, raw):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", body=raw.encode("ascii"),
                 headers={"Authorization": "Bearer surrogates", "Content-Type": "application/json"})
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    assert r.status == 400 and "lone surrogate" in body["error"]["message"], (r.status, body)
    assert body["error"]["message"].encode("utf-8")


def test_loads_strict_names_the_lone_surrogate_and_keeps_pairs():
    from agentrl.serve.policy.chat_format import _arguments, loads_strict

    assert loads_strict('"\\ud83d\\ude00"') == "\U0001F600"  # a pair is one character, not a surrogate
    with pytest.raises(ValueError, match=r"a\[1\]\.b\\udcff holds a lone surrogate"):
        loads_strict('{"a": ["x", {"b\\udcff": 1}]}')
    assert _arguments('{"x": "\\udcff"}') == '{"x": "\\udcff"}'  # kept as the text it was, not decoded


@pytest.mark.parametrize("extra, named", [
    ({"stream": "false"}, "'stream' must be true or false"),   # was a stream: bool("false") is True
    ({"stream": 1}, "'stream' must be true or false"),
    ({"stream": True, "stream_options": 5}, "'stream_options' must be an object"),
    ({"stream": True, "stream_options": {"include_usage": "no"}}, "'include_usage' must be true or false"),
    ({"model": 5}, "'model' must be a string"),                # was echoed back as "5"
    ({"model": {"id": "x"}}, "'model' must be a string"),
    ({"model": "m" * 100_000}, "'model' must be a string of at most 256"),  # was echoed in every chunk
])
def test_wrongly_typed_stream_and_model_fields_are_a_400(served, extra, named):
    import http.client

    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Authorization": "Bearer typed", "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    assert r.status == 400 and named in json.loads(data)["error"]["message"], (r.status, data[:300])
    assert len(data) < 1000
