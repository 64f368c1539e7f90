"""Tool observations are capped per call to a model-sized budget, head and tail kept around a visible mark."""

import pytest

from agentrl.envs import ToolCall, make_env
from agentrl.envs.toolenv import DEFAULT_MAX_OBSERVATION_CHARS, cap_observation


def test_cap_keeps_head_and_tail_and_says_how_much_was_cut():
    text = "".join(f"line {i}\n" for i in range(2000))  # 19,780 characters
    capped, cut = cap_observation(text, 1000)
    assert len(capped) <= 1000 and cut == len(text) - (len(capped) - len(f"\n[... {cut} characters cut ...]\n"))
    assert capped.startswith("line 0\nline 1\n") and capped.endswith("line 1999\n")
    assert f"[... {cut} characters cut ...]" in capped
    head, tail = capped.split(f"\n[... {cut} characters cut ...]\n")
    assert text.startswith(head) and text.endswith(tail) and len(head) + len(tail) + cut == len(text)


@pytest.mark.parametrize("limit", [None, 0, 50])
def test_short_text_or_no_cap_is_unchanged(limit):
    assert cap_observation("short output", limit) == ("short output", 0)


def test_environment_caps_each_observation_and_counts_it(sandbox, minmax_task):
    env = make_env("coding-tools", sandbox=sandbox, max_observation_chars=300)
    env.reset(minmax_task)
    big = "x = 1\n" * 400  # 2,400 characters
    res = env.step([ToolCall("Write", {"file_path": "/repo/big.py", "content": big}),
                    ToolCall("Read", {"file_path": "/repo/big.py"})])
    write, read = res.results
    assert len(read.content) <= 300 and "characters cut ...]" in read.content
    assert read.content.startswith("     1\tx = 1") and read.content.rstrip().endswith("400\tx = 1")
    assert write.content == cap_observation(write.content, 300)[0]  # short: untouched
    s = env.stats()
    assert s["observations_capped"] == 1 and s["observation_chars_cut"] > 2000
    assert make_env("coding-tools").max_observation_chars == DEFAULT_MAX_OBSERVATION_CHARS == 4000


def test_the_cap_is_separate_from_the_sandbox_byte_cap(sandbox, minmax_task):
    """The sandbox captures far more than the model is shown; the environment applies the model's budget."""
    env = make_env("coding-tools", sandbox=sandbox, max_observation_chars=500)
    env.reset(minmax_task)
    env.step([ToolCall("Write", {"file_path": "/repo/loud.py", "content": "print('y' * 20000)\n"})])
    (r,) = env.step([ToolCall("Bash", {"command": "python loud.py"})]).results
    assert r.status == "ok" and len(r.content) <= 500 and "characters cut ...]" in r.content
    assert sandbox.limits.max_output_bytes > 20000
