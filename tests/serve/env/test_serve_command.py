"""`agentrl serve-policy` as a real process on loopback, answering the openai client."""

import json
import re
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


def test_serve_on_port_0_never_logs_port_0():
    """`agentrl serve --port 0` logged `at http://127.0.0.1:0` before binding; the start line now says a free port
    is named when listening, and the listening line names the bound port, which answers."""
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "serve", "--env", "edit-menu", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "listening on" in line:
                break
        text = "".join(lines)
        assert ":0 " not in text and not text.rstrip().endswith(":0"), text
        assert "port 0: a free port, named when listening" in text
        port = int(lines[-1].rsplit(":", 1)[1])
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("field, value, named", [
    ("drain_timeout_s", float("nan"), "drain_timeout_s must be a number of seconds >= 0, got nan"),
    ("drain_timeout_s", -1.0, "drain_timeout_s must be a number of seconds >= 0, got -1.0"),
    ("max_message_bytes", 10, "max_message_bytes must be >= 1024, got 10"),
])
def test_bad_drain_timeout_and_message_size_are_refused_naming_the_value(field, value, named):
    """`agentrl serve --drain-timeout-s nan` used to pass validation, serve, and raise "cannot convert float NaN
    to integer" at SIGTERM instead of draining; the two limits shared one message that named neither value."""
    from agentrl.serve.env.app import EnvServerConfig

    with pytest.raises(ValueError, match=re.escape(named)):
        EnvServerConfig(env="edit-menu", **{field: value}).validate()
    from agentrl.cli import main

    if field == "drain_timeout_s":  # the flag is refused at parse, naming it (exit 2, as argparse's errors)
        with pytest.raises(SystemExit) as refused:
            main(["serve", "--env", "edit-menu", "--port", "0", "--drain-timeout-s", str(value)])
        assert refused.value.code == 2
