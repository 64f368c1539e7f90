"""`agentrl serve-policy` as a real process on loopback, answering the openai client."""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import openai
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serve_policy_command_answers_and_records_traces():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "serve-policy", "--model", "tiny-qwen3", "--port",
                             str(port), "--max-new-tokens", "6", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert json.load(r)["status"] == "ok"
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.5)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="run-7", max_retries=0, timeout=60)
        r = c.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert r.usage.completion_tokens <= 4
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rollouts/run-7/trace", timeout=10) as t:
            trace = json.load(t)
        assert len(trace["calls"]) == 1 and len(trace["calls"][0]["logprobs"]) == r.usage.completion_tokens
    finally:
        proc.terminate()
        proc.wait(30)
