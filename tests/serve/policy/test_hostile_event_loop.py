"""Issue 25, kind 1: no request holds the policy server's event loop (real uvicorn on 127.0.0.1).

A multi-MB prompt is decoded, rendered and tokenized off the loop, so `/health` and a small completion
sent while it is in flight answer at once; a prompt that cannot fit the context is refused before the
template runs.
"""

import http.client
import json
import random
import statistics
import threading
import time

import pytest

from agentrl.rollout.hf_sampler import Sample, SamplingConfig
from agentrl.serve.policy.app import ServerThread
from agentrl.serve.policy.server import PolicyServer


@pytest.fixture(scope="module")
def policy():
    from agentrl.models.load import load_policy

    return load_policy("tiny-qwen3")


def _sampler(tok):
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    ids = tok("ok", add_special_tokens=False)["input_ids"] + [eot]
    return lambda contexts, budgets: [Sample(tuple(ids), tuple(-0.5 for _ in ids), False) for _ in contexts]


def _prompt(n_words: int) -> str:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    return " ".join(rng.choice(words) for _ in range(n_words))


def _call(port, method, path, body=None, key="probe"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.monotonic()
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return time.monotonic() - t0, r.status, data


def test_a_multi_mb_prompt_does_not_hold_health_or_a_small_completion(policy):
    model, tok = policy
    srv = PolicyServer(model, tok, sampler=_sampler(tok), sampling=SamplingConfig(max_new_tokens=4),
                       max_context_tokens=50_000_000, max_request_bytes=64 << 20, auto_open=True, batch_wait_s=0.0)
    big = _prompt(400_000)  # about 2.6 MB: seconds of template + tokenizer work
    assert len(big) > 2_000_000
    try:
        with ServerThread(srv) as http_:
            out = {}
            th = threading.Thread(target=lambda: out.setdefault("big", _call(
                http_.port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": big}]},
                key="big")))
            health, small = [], []
            th.start()
            time.sleep(0.3)  # the body is sent and being worked on
            k = 0
            while th.is_alive() or k < 2:
                dt, status, _ = _call(http_.port, "GET", "/health")
                assert status == 200
                health.append(dt)
                dt, status, body = _call(http_.port, "POST", "/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "hi"}]}, key=f"small-{k}")
                assert status == 200, body
                small.append(dt)
                k += 1
                time.sleep(0.05)
            th.join()
            big_s, status, body = out["big"]
    finally:
        srv.close()
    assert status == 200, body[:300]
    during = len(health)
    # Before the fix the first probe waited for the whole big request (several seconds).
    assert big_s > 0.5, big_s
    assert statistics.median(health) < 0.1, (health, big_s)
    assert statistics.median(small) < 0.1, (small, big_s)
    assert max(health) < big_s / 3 and max(small) < big_s / 3, (health, small, big_s)
    assert during >= 3, (during, big_s)


def test_a_prompt_that_cannot_fit_is_refused_before_the_template(policy):
    model, tok = policy
    srv = PolicyServer(model, tok, sampler=_sampler(tok), max_context_tokens=2048, max_request_bytes=64 << 20,
                       auto_open=True)
    big = _prompt(500_000)
    try:
        with ServerThread(srv) as http_:
            dt, status, body = _call(http_.port, "POST", "/v1/chat/completions",
                                     {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": big}]})
    finally:
        srv.close()
    err = json.loads(body)["error"]
    assert status == 400 and err["code"] == "context_length_exceeded"
    assert f"{len(big) + 1} characters" in err["message"] and "2048-token context" in err["message"]
    assert dt < 2.0, dt  # the template + tokenizer path takes several seconds for this prompt


def test_the_early_bound_never_refuses_a_prompt_that_fits(policy):
    """The bound is a floor: a prompt of one long token repeated (the most characters per token) that
    fits the context still reaches the template and is answered."""
    model, tok = policy
    vocab = tok.get_vocab()
    longest = max((t for t in vocab if t.isascii() and t.isalnum()), key=len)
    text = tok.convert_tokens_to_string([longest]) * 200
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    srv = PolicyServer(model, tok, sampler=_sampler(tok), max_context_tokens=n + 64, auto_open=True)
    try:
        with ServerThread(srv) as http_:
            _, status, body = _call(http_.port, "POST", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": text}]})
    finally:
        srv.close()
    assert status == 200, body[:300]
