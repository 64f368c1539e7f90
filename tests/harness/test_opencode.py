"""opencode run untouched against the policy server: config, launch, episodes scored by hidden tests,
unscorable harness failures. Needs the opencode binary (scripts/setup.sh installs it where npm exists)."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentrl.harness.episode import AgentConfig, BlackBoxRunner, task_message
from agentrl.harness.opencode import (
    INNER_PORT,
    PROVIDER_ID,
    TOOLS,
    build_launch,
    bwrap_usable,
    find_opencode,
    opencode_config,
)
from agentrl.rollout.hf_sampler import Sample, SamplingConfig
from agentrl.serve.policy.server import PolicyServer, RolloutBudget

try:
    find_opencode()
    HAVE_OPENCODE = True
except FileNotFoundError:
    HAVE_OPENCODE = False
needs_opencode = pytest.mark.skipif(not HAVE_OPENCODE, reason="opencode not installed (scripts/setup.sh needs npm)")


def test_config_is_an_openai_compatible_provider_with_four_tools():
    cfg = opencode_config("http://127.0.0.1:9/v1", "ro-1", context_tokens=4096, output_tokens=128)
    assert PROVIDER_ID != "openai" and cfg["enabled_providers"] == [PROVIDER_ID]
    prov = cfg["provider"][PROVIDER_ID]
    assert prov["npm"] == "@ai-sdk/openai-compatible" and prov["options"]["apiKey"] == "ro-1"
    (model,) = prov["models"].values()
    assert model["temperature"] is True and model["tool_call"] is True
    assert cfg["autoupdate"] is False and cfg["share"] == "disabled" and cfg["lsp"] is False
    assert cfg["permission"] == {"*": "deny", **{t: "allow" for t in ("bash", "edit", "read", "write")}}
    assert set(TOOLS) == {"bash", "edit", "read", "write"}


def test_bwrap_launch_has_no_network_but_the_relay(tmp_path):
    launch = build_launch("/usr/bin/true", workdir=str(tmp_path / "w"), home=str(tmp_path / "h"), message="m",
                          title="t", config={}, isolation="bwrap", uds=str(tmp_path / "s" / "p.sock"))
    argv = launch.argv
    assert argv[0] == "bwrap" and "--unshare-net" in argv and "--unshare-pid" in argv
    assert argv[argv.index("--chdir") + 1] == str(tmp_path / "w")
    tail = argv[argv.index("--", argv.index("--chdir")) + 1:]
    assert tail[4:7] == [str(INNER_PORT), str(tmp_path / "s" / "p.sock"), "--"]
    assert tail[7:11] == ["/usr/bin/true", "run", "--format", "json"]
    assert "--title" in tail and json.loads(launch.env["OPENCODE_CONFIG_CONTENT"]) == {}
    assert launch.env["OPENCODE_DISABLE_AUTOUPDATE"] == "1" and launch.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    with pytest.raises(ValueError, match="unix socket"):
        build_launch("/usr/bin/true", workdir="w", home="h", message="m", title="t", config={}, isolation="bwrap",
                     uds=None)


def test_missing_binary_is_named():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_opencode("/nonexistent/opencode")


@pytest.fixture(scope="module")
def policy():
    from agentrl.models.load import load_policy

    return load_policy("tiny-qwen3")


@pytest.fixture(scope="module")
def task():
    from agentrl.tasks import make_tasks

    return make_tasks(1, seed=3, split="train")[0]


def writer(tok, task):
    """A scripted policy: first turn writes the reference solution with opencode's write tool, then ends."""
    eot = tok.convert_tokens_to_ids("<|im_end|>")

    def sample(contexts, budgets):
        out = []
        for c in contexts:
            text = tok.decode(c)
            where = re.search(r"Working directory: (\S+)", text)
            if "<tool_response>" in text or where is None:
                reply = "Fixed."
            else:
                args = {"filePath": f"{where.group(1)}/{task.source_file}", "content": task.reference}
                reply = "<tool_call>\n" + json.dumps({"name": "write", "arguments": args}) + "\n</tool_call>"
            ids = tok(reply, add_special_tokens=False)["input_ids"] + [eot]
            out.append(Sample(tuple(ids), tuple(-0.5 for _ in ids), False))
        return out
    return sample


def looper(tok):
    """A scripted policy that never stops calling bash."""
    ids = tok('<tool_call>\n{"name": "bash", "arguments": {"command": "ls", "description": "ls"}}\n</tool_call>',
              add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
    return lambda contexts, budgets: [Sample(tuple(ids), tuple(-0.5 for _ in ids), False) for _ in contexts]


@needs_opencode
@pytest.mark.slow
def test_episodes_are_scored_on_the_final_workspace_even_over_their_call_budget(policy, task):
    from agentrl.sandbox import Sandbox

    model, tok = policy
    fixed = PolicyServer(model, tok, sampler=writer(tok, task), sampling=SamplingConfig(max_new_tokens=512))
    loop = PolicyServer(model, tok, sampler=looper(tok), sampling=SamplingConfig(max_new_tokens=64))
    with Sandbox() as sb, BlackBoxRunner(fixed, sb, AgentConfig(timeout_s=150)) as ok, \
            BlackBoxRunner(loop, sb, AgentConfig(timeout_s=150, budget=RolloutBudget(max_calls=2))) as over:
        with ThreadPoolExecutor(2) as pool:  # two harnesses at once against two servers
            good_f, bad_f = pool.submit(ok.run, [task]), pool.submit(over.run, [task])
            (good,), (bad,) = good_f.result(), bad_f.result()
        assert ok.describe()["isolation"] == ("bwrap" if bwrap_usable() else "none")
    fixed.close()
    loop.close()
    assert good.reward == 1.0 and good.end_reason == "harness_exit", good.harness.stderr_tail
    assert good.final_source == task.reference
    assert [len(r.calls) for r in good.rows] == [2]  # write, then the final answer, continuing one row
    assert good.rows[0].num_policy_tokens == sum(len(c.completion_ids) for c in good.trace.calls)
    assert good.harness_overhead_s > 0
    assert bad.reward == 0.0 and bad.end_reason == "budget_max_calls"  # graded: the looper never wrote the fix
    assert bad.trace.budget_exceeded == "max_calls" and len(bad.trace.calls) == 2


def test_task_message_names_the_files(task):
    msg = task_message(task)
    assert task.source_file in msg and task.entry in msg


def test_an_interrupted_run_kills_its_harnesses_instead_of_waiting_for_them(policy, task, tmp_path):
    """Ctrl-C / SIGTERM (the trainer turns it into an exception) in the thread waiting on `run` kills every
    running harness at once; it does not wait out their 300 s limit (a `timeout`-bounded job would overrun)."""
    import os
    import signal
    import threading
    import time

    from agentrl.sandbox import Sandbox

    hang = tmp_path / "hang.sh"  # a harness that never finishes on its own
    hang.write_text("#!/bin/sh\nsleep 300\n")
    hang.chmod(0o755)
    model, tok = policy
    server = PolicyServer(model, tok, sampler=looper(tok))
    cfg = AgentConfig(timeout_s=300, isolation="none", binary=str(hang), workers=3)
    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGUSR1, handler)  # as the trainer turns SIGTERM into Terminated
    try:
        with Sandbox() as sb, BlackBoxRunner(server, sb, cfg) as runner:
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            t0 = time.monotonic()
            with pytest.raises(Stop):
                runner.run([task, task, task])
            waited = time.monotonic() - t0
    finally:
        signal.signal(signal.SIGUSR1, previous)
        server.close()
    assert waited < 60, f"run() returned {waited:.0f} s after the interrupt: it waited for the harnesses"
    assert runner._interrupted.is_set()
