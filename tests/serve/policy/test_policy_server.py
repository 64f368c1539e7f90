"""The OpenAI-compatible policy server with tiny-qwen3 and the real Qwen3 template, over loopback HTTP."""

import http.client
import json
import re
import threading
import time

import openai
import pytest

from agentrl.rollout.hf_sampler import Sample, SamplingConfig
from agentrl.serve.policy.app import ServerThread
from agentrl.serve.policy.server import PolicyServer, RolloutBudget

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
GOOD = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
BAD = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call>'


@pytest.fixture(scope="module")
def policy():
    from agentrl.models.load import load_policy

    return load_policy("tiny-qwen3")


class Scripted:
    """A SampleFn that writes `text` (real tokenizer ids + end-of-turn) and counts batch sizes."""

    def __init__(self, tok, text=GOOD):
        self.tok, self.text, self.batches = tok, text, []
        self.eot = tok.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, contexts, budgets):
        self.batches.append(len(contexts))
        ids = self.tok(self.text, add_special_tokens=False)["input_ids"] + [self.eot]
        return [Sample(tuple(ids), tuple(-0.25 for _ in ids), False) for _ in contexts]


@pytest.fixture()
def served(policy):
    model, tok = policy
    script = Scripted(tok)
    srv = PolicyServer(model, tok, sampler=script, sampling=SamplingConfig(max_new_tokens=32), max_context_tokens=2048,
                       max_request_bytes=200_000, budget=RolloutBudget(max_calls=4), batch_wait_s=0.05)
    with ServerThread(srv) as http_:
        yield srv, http_, script
    srv.close()


def client(http_, key):
    return openai.OpenAI(base_url=http_.base_url, api_key=key, max_retries=0, timeout=60)


def raw(http_, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=60)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def test_models_and_non_streaming_tool_call(served):
    srv, http_, _ = served
    srv.open_rollout("r1")
    c = client(http_, "r1")
    assert [m.id for m in c.models.list().data] == ["agentrl-policy"]
    r = c.chat.completions.create(model="any", messages=[{"role": "user", "content": "list files"}], tools=TOOLS,
                                  temperature=0.3, top_p=0.5)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.tool_calls[0].function.name == "bash"
    assert json.loads(ch.message.tool_calls[0].function.arguments) == {"command": "ls -la"}
    tr = srv.trace("r1")
    (call,) = tr.calls
    assert call.overridden == {"temperature": 0.3, "top_p": 0.5}  # recorded, not applied
    assert len(call.completion_ids) == len(call.logprobs) == r.usage.completion_tokens
    assert len(call.prompt_ids) == r.usage.prompt_tokens and call.finish_reason == "tool_calls"


def test_streaming_reassembles_the_same_reply_and_usage(served):
    srv, http_, _ = served
    srv.open_rollout("r2")
    chunks = list(client(http_, "r2").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=True,
        stream_options={"include_usage": True}))
    calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["bash"]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens == len(srv.trace("r2").calls[0].completion_ids)


def test_malformed_call_comes_back_as_text(served):
    srv, http_, script = served
    script.text = "Trying. " + BAD
    srv.open_rollout("r3")
    r = client(http_, "r3").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    msg = r.choices[0].message
    assert not msg.tool_calls and r.choices[0].finish_reason == "stop"
    assert BAD.strip() in msg.content


def test_second_turn_extends_the_first_token_for_token(served):
    srv, http_, _ = served
    srv.open_rollout("r4")
    c = client(http_, "r4")
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    r1 = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    m1 = r1.choices[0].message
    msgs += [m1.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": m1.tool_calls[0].id, "content": "a.py"}]
    c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    a, b = srv.trace("r4").calls
    assert b.extends_call == 0
    assert b.prompt_ids[: len(a.prompt_ids) + len(a.completion_ids)] == a.prompt_ids + a.completion_ids
    # an edited history is rendered afresh
    msgs[1] = {"role": "user", "content": "go (edited)"}
    c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert srv.trace("r4").calls[2].extends_call == -1


def test_concurrent_rollouts_are_batched(served):
    srv, http_, script = served
    for k in range(4):
        srv.open_rollout(f"g{k}")
    script.batches.clear()
    threads = [threading.Thread(target=lambda k=k: client(http_, f"g{k}").chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"task {k}"}], tools=TOOLS)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(script.batches) == 4 and max(script.batches) > 1
    assert all(len(srv.trace(f"g{k}").calls) == 1 for k in range(4))


def test_bad_requests_get_4xx_with_a_message_and_disturb_nothing(served):
    srv, http_, _ = served
    srv.open_rollout("ok")
    auth = {"Authorization": "Bearer ok"}
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
    cases = {
        "malformed json": (b'{"messages": [', auth, 400, "not valid JSON"),
        "unknown rollout": (body, {"Authorization": "Bearer nope"}, 404, "unknown rollout"),
        "no key": (body, {}, 401, "no rollout id"),
        "oversized": (json.dumps({"messages": [{"role": "user", "content": "x" * 300_000}]}).encode(), auth, 413,
                      "exceeds"),
        "bad role": (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), auth, 400, "role"),
        "too long for the context": (json.dumps({"messages": [{"role": "user", "content": "word " * 3000}]}).encode(),
                                     auth, 400, "context"),
        "image part": (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(),
                       auth, 400, "not supported"),
    }
    for what, (data, headers, status, needle) in cases.items():
        got, resp = raw(http_, "POST", "/v1/chat/completions", data, headers)
        assert got == status, what
        assert needle in json.loads(resp)["error"]["message"], what
    assert srv.trace("ok").calls == ()  # none of them was recorded or sampled
    got, resp = raw(http_, "POST", "/v1/chat/completions", body, auth)
    assert got == 200 and json.loads(resp)["choices"][0]["message"]["role"] == "assistant"


def test_client_disconnecting_mid_stream_disturbs_nothing(served):
    srv, http_, _ = served
    srv.open_rollout("dc")
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}], "tools": TOOLS})
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=60)
    conn.request("POST", "/r/dc/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.read(6) == b"data: "
    conn.sock.close()  # hang up mid-stream
    conn.close()
    time.sleep(0.2)
    r = client(http_, "dc").chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}], tools=TOOLS)
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(srv.trace("dc").calls) == 2  # the abandoned call was sampled, so it stays recorded


def test_budget_is_enforced_by_the_server(served):
    srv, http_, _ = served
    srv.open_rollout("b", RolloutBudget(max_calls=1))
    c = client(http_, "b")
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    with pytest.raises(openai.RateLimitError, match="max_calls"):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    tr = srv.trace("b")
    assert tr.budget_exceeded == "max_calls" and tr.refused == 1 and len(tr.calls) == 1


def test_rollout_routes_open_trace_close(served):
    srv, http_, _ = served
    assert raw(http_, "POST", "/rollouts/x1", json.dumps({"max_calls": 2}).encode())[0] == 200
    assert raw(http_, "POST", "/rollouts/x1")[0] == 400  # already open
    client(http_, "x1").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    status, data = raw(http_, "GET", "/rollouts/x1/trace")
    assert status == 200 and len(json.loads(data)["calls"]) == 1
    assert not json.loads(data)["calls"][0]["has_tools"]
    assert raw(http_, "DELETE", "/rollouts/x1")[0] == 200
    assert raw(http_, "DELETE", "/rollouts/x1")[0] == 404


def test_real_sampler_records_its_logprobs(policy):
    import torch

    model, tok = policy
    torch.manual_seed(0)
    srv = PolicyServer(model, tok, sampling=SamplingConfig(max_new_tokens=8), auto_open=True)
    with ServerThread(srv) as http_:
        r = client(http_, "any-key").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], tools=TOOLS, stream=True)
        assert any(ch.choices and ch.choices[0].finish_reason for ch in r)
    (call,) = srv.trace("any-key").calls
    srv.close()
    assert 1 <= len(call.completion_ids) <= 8 and len(call.logprobs) == len(call.completion_ids)
    assert all(lp <= 0.0 for lp in call.logprobs)
    # the recorded log-probs are the policy's own (temperature 1): recompute them with a forward pass
    ids = torch.tensor([list(call.prompt_ids) + list(call.completion_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, len(call.prompt_ids) - 1:-1].float(), -1)
    want = logp.gather(-1, torch.tensor(call.completion_ids)[:, None]).squeeze(-1)
    assert torch.allclose(want, torch.tensor(call.logprobs), atol=1e-3)


def test_a_failing_sampler_is_a_500_that_marks_the_rollout_and_the_server_lives_on(policy):
    model, tok = policy
    calls = {"n": 0}

    def flaky(contexts, budgets):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return Scripted(tok)(contexts, budgets)

    srv = PolicyServer(model, tok, sampler=flaky)
    srv.open_rollout("f")
    srv.open_rollout("g")
    with ServerThread(srv) as http_:
        with pytest.raises(openai.InternalServerError, match="simulated"):
            client(http_, "f").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert srv.stop_reason("f") == "policy_error" and srv.stop_reason("g") == ""
        r = client(http_, "g").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                      tools=TOOLS)
        assert r.choices[0].finish_reason == "tool_calls"
    assert "simulated" in srv.close_rollout("f").failed
    srv.close()


def test_non_finite_numbers_are_refused_and_never_break_a_trace(served):
    """NaN / Infinity / 1e999 are not JSON: a 400 naming it; a NaN the model writes is served as null."""
    srv, http_, script = served
    srv.open_rollout("nan")
    auth = {"Authorization": "Bearer nan"}
    msgs = '"messages": [{"role": "user", "content": "x"}]'
    for extra, needle in [('"temperature": NaN', "NaN"), ('"top_p": -Infinity', "Infinity"),
                          ('"temperature": 1e999', "overflows")]:
        got, resp = raw(http_, "POST", "/v1/chat/completions", f'{{{msgs}, {extra}}}'.encode(), auth)
        assert got == 400, extra
        err = json.loads(resp)["error"]
        assert err["code"] == "invalid_json" and needle in err["message"], extra
    assert srv.trace("nan").calls == ()
    script.text = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls", "n": NaN}}\n</tool_call>'
    history = [{"role": "user", "content": "x"},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                   "name": "bash", "arguments": '{"command": "ls", "n": NaN}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    got, resp = raw(http_, "POST", "/v1/chat/completions",
                    json.dumps({"messages": history, "tools": TOOLS}).encode(), auth)
    assert got == 200
    call = json.loads(resp)["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "bash"
    status, data = raw(http_, "GET", "/rollouts/nan/trace")
    assert status == 200
    assert len(json.loads(data, parse_constant=lambda c: pytest.fail(f"{c} in the trace"))["calls"]) == 1


def test_bad_rollout_budgets_are_400s_that_say_which_field(served):
    srv, http_, _ = served
    cases = {'{"max_calls": "5"}': "max_calls must be an integer", '{"max_calls": true}': "max_calls must be an integer",
             '{"max_wall_s": "soon"}': "max_wall_s must be a number", '{"max_calls": 0}': "every limit must be positive",
             '{"bogus": 1}': "unknown rollout budget field(s) ['bogus']; known: max_calls", "[1]": "is a JSON object"}
    for i, (body, needle) in enumerate(cases.items()):
        status, data = raw(http_, "POST", f"/rollouts/bb{i}", body.encode())
        assert status == 400 and needle in json.loads(data)["error"]["message"], body
        assert f"bb{i}" not in srv.rollout_ids()
    assert raw(http_, "POST", "/rollouts/ok-budget", b"{}")[0] == 200  # empty: the server's own budget


def test_auto_opened_rollouts_are_capped_and_closing_one_frees_a_place(policy):
    """Each new API key auto-opens a rollout that keeps its trace until closed: past max_auto_open open rollouts
    a new key gets 429 (not unbounded memory), known keys still work, and DELETE frees a place."""
    model, tok = policy
    srv = PolicyServer(model, tok, sampler=Scripted(tok), sampling=SamplingConfig(max_new_tokens=8), auto_open=True,
                       max_auto_open=2, batch_wait_s=0.0)
    msg = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with ServerThread(srv) as http_:
        def ask(key):
            return raw(http_, "POST", "/v1/chat/completions", json.dumps(msg).encode(),
                       {"Authorization": f"Bearer {key}"})
        assert [ask(k)[0] for k in ("k1", "k2")] == [200, 200]
        status, body = ask("k3")
        assert status == 429 and json.loads(body)["error"]["code"] == "too_many_rollouts"
        assert ask("k1")[0] == 200 and sorted(srv.rollout_ids()) == ["k1", "k2"]
        assert raw(http_, "DELETE", "/rollouts/k1")[0] == 200
        assert ask("k3")[0] == 200 and raw(http_, "GET", "/health")[0] == 200
        assert raw(http_, "POST", "/rollouts/k4")[0] == 429  # an open over HTTP counts the same
        srv.open_rollout("trainer-1")  # the trainer's own opens (in process) are not capped
        assert len(srv.rollout_ids()) == 3
    srv.close()
    with pytest.raises(ValueError, match="max_auto_open"):
        PolicyServer(model, tok, max_auto_open=0)


def test_logprobs_are_served_when_asked_and_top_logprobs_is_refused(served):
    """`logprobs: true` came back null though every sampled token's log-prob is recorded; now the reply carries
    them (OpenAI's choices[].logprobs.content), streaming or not, equal to the trace's. top_logprobs > 0 cannot
    be served (only the sampled token's is recorded): a 400 saying so, not a silent empty list."""
    srv, http_, _ = served
    srv.open_rollout("lp")
    c = client(http_, "lp")
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                  logprobs=True)
    call = srv.trace("lp").calls[-1]
    got = r.choices[0].logprobs.content
    assert [x.logprob for x in got] == list(call.logprobs) == [-0.25] * len(call.completion_ids)
    assert "".join(x.token for x in got) == srv.tokenizer.decode(list(call.completion_ids), skip_special_tokens=False)
    assert bytes(got[0].bytes).decode() == got[0].token and got[0].top_logprobs == []
    plain = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    assert plain.choices[0].logprobs is None
    chunks = list(c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                            logprobs=True, stream=True))
    streamed = [x.logprob for ch in chunks if ch.choices and ch.choices[0].logprobs
                for x in ch.choices[0].logprobs.content]
    assert streamed == list(srv.trace("lp").calls[-1].logprobs)
    for top, why in ((3, "not served"), (-1, "integer in \\[0, 20\\]"), (True, "integer in \\[0, 20\\]")):
        status, body = raw(http_, "POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": top}).encode(),
            {"Authorization": "Bearer lp"})
        assert status == 400 and re.search(why, json.loads(body)["error"]["message"]), body
