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


def _post(served, body: bytes | str, token: str) -> tuple[int, bytes]:
    """POST `body` to the served policy's chat completions as rollout `token`: (status, raw reply)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "9" * 200_000},
    {"messages": [{"role": "user", "content": [{"type": "x" * 200_000}]}]},
])
def test_policy_refusals_do_not_echo_a_huge_client_value(served, body):
    status, data = _post(served, json.dumps(body), "r")
    assert status == 400 and len(data) < 1000, (status, len(data))


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
    status, data = _post(served, raw.encode("ascii"), "surrogates")
    body = json.loads(data)
    assert status == 400 and "lone surrogate" in body["error"]["message"], (status, body)
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
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    status, data = _post(served, json.dumps(body), "typed")
    assert status == 400 and named in json.loads(data)["error"]["message"], (status, data[:300])
    assert len(data) < 1000


@pytest.mark.parametrize("role", [[], ["user"], {}, {"user": 1}])
def test_a_role_that_is_a_list_or_an_object_is_a_400(served, role):
    """`role in ROLES` raised TypeError (unhashable) for these: a 500 "sampling failed: TypeError"."""
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": role, "content": "x"}], "max_tokens": 2}
    status, data = _post(served, json.dumps(body), "role")
    assert status == 400, (status, data[:300])
    assert json.loads(data)["error"]["message"].startswith("messages[1]: expected an object with role one of")


_HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("temperature", -1, "'temperature' must be a number in [0, 2]"),
    ("temperature", "hot", "'temperature' must be a number in [0, 2], got str"),
    ("temperature", True, "got bool"),
    ("top_p", 7, "'top_p' must be a number in [0, 1]"),
    ("top_k", 2.5, "'top_k' must be an integer >= -1"),
    ("presence_penalty", 3.0, "[-2, 2]"),
    ("repetition_penalty", 0, "a positive number"),
    ("n", 3, "'n' must be 1 (the server samples one choice per request)"),
    ("seed", 1 << 70, "a 64-bit integer"),
    ("stop", 5, "'stop' must be a string or a list of strings"),
    ("stop", ["a", 1], "'stop' must be a string or a list of strings"),
    ("logit_bias", {"abc": 1}, "token ids to numbers in [-100, 100]"),
    ("logit_bias", {"12": 500}, "token ids to numbers in [-100, 100]"),
])
def test_sampling_fields_of_the_wrong_type_or_range_are_a_400(field, value, says):
    """A client's sampling field outside what OpenAI's API takes is refused, naming it (it used to pass and be
    replaced by the trainer's settings without a word); valid values are still recorded as overridden."""
    from agentrl.serve.policy.chat_format import RequestError, parse_request

    with pytest.raises(RequestError) as e:
        parse_request({"messages": _HI, field: value})
    assert e.value.status == 400 and says in str(e.value.body()["error"]["message"])


def test_valid_sampling_fields_are_recorded_as_overridden():
    from agentrl.serve.policy.chat_format import parse_request

    req = parse_request({"messages": _HI, "temperature": 0.2, "top_p": 0.9, "top_k": 40, "n": 1, "seed": 7,
                         "stop": ["\n\n"], "logit_bias": {"42": -100}, "frequency_penalty": None})
    assert req.overridden == {"temperature": 0.2, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n\n"],
                              "logit_bias": {"42": -100}}
    assert parse_request({"messages": _HI, "temperature": 1, "stop": "END"}).overridden == {"stop": "END"}


def test_a_bad_sampling_field_through_the_server_is_a_400(served):
    status, data = _post(served, json.dumps({"messages": _HI, "temperature": "hot"}), "sampling")
    body = json.loads(data)
    assert status == 400 and "'temperature' must be" in body["error"]["message"], (status, body)
