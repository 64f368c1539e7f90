"""Issue 14.2: a call's end is the end of its JSON value, not the first `</tool_call>` in the text.

Argument strings carrying the closing tag's text, escaped quotes, backslashes, raw newlines or
non-ASCII parse as exactly one call with exactly the string written; the property tests render
arbitrary strings the way the real Qwen3 chat template renders a call and parse them back.
"""

import json
import unicodedata

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from agentrl.chat.parse import parse_tool_calls
from agentrl.chat.tito import assistant_message
from agentrl.envs.base import ToolCall
from agentrl.paths import resolve_asset

HARD = [
    'print("</tool_call>")',
    "x = '</tool_call>'\n</tool_call>\n<tool_call>\n{}",
    'say \\"hi\\" and "bye"',
    "C:\\\\path\\\\ \\n not a newline \\u00e9",
    "line one\nline two\n\ttabbed",
    "é ✓ 日本語 🙂 \u2028 \u0000",
    "<tool_call>{\"name\": \"Bash\"}</tool_call>",
]


def block(obj, **dumps) -> str:
    return "<tool_call>\n" + json.dumps(obj, **dumps) + "\n</tool_call>"


@pytest.mark.parametrize("value", HARD)
@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_hard_strings_parse_as_one_exact_call(value, ensure_ascii):
    call = {"name": "Write", "arguments": {"file_path": "/repo/a.py", "content": value}}
    text = "Writing it.\n" + block(call, ensure_ascii=ensure_ascii) + "\nDone."
    calls, final = parse_tool_calls(text)
    assert len(calls) == 1 and calls[0].malformed is None
    assert calls[0].arguments == call["arguments"] and calls[0].name == "Write"
    assert calls[0].raw == block(call, ensure_ascii=ensure_ascii) and final == "Writing it.\n\nDone."


def test_raw_newlines_and_closing_tag_inside_a_string():
    # a model writes a literal newline (not \n) inside the JSON string, and the tag text after it
    text = '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo \'</tool_call>\'\nls"}}\n</tool_call>'
    (call,), final = parse_tool_calls(text)
    assert call.malformed is None and call.arguments == {"command": "echo '</tool_call>'\nls"}
    assert call.raw == text and final == ""


def test_two_calls_the_first_quoting_the_closing_tag():
    a = {"name": "Write", "arguments": {"file_path": "t.txt", "content": "</tool_call><tool_call>"}}
    b = {"name": "Read", "arguments": {"file_path": "t.txt"}}
    calls, _ = parse_tool_calls(block(a) + "\n" + block(b))
    assert [(c.name, c.arguments, c.malformed) for c in calls] == [
        ("Write", a["arguments"], None), ("Read", b["arguments"], None)]


def test_broken_json_still_ends_at_the_next_closing_tag():
    text = '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a}\n</tool_call>\nafter'
    (call,), final = parse_tool_calls(text)
    assert call.malformed.startswith("bad_json") and call.raw.endswith("</tool_call>") and final == "after"
    text = block({"name": "Read", "arguments": {"file_path": "</tool_call>"}})[:-len("</tool_call>")]
    (call,), _ = parse_tool_calls(text)  # no closing tag after the value: the tag inside it does not count
    assert call.malformed.startswith("missing_close_tag") and call.arguments == {"file_path": "</tool_call>"}
    extra = '<tool_call>\n{"name": "Read", "arguments": {"file_path": "</tool_call>"}} trailing\n</tool_call>'
    (call,), final = parse_tool_calls(extra)
    assert call.malformed.startswith("bad_json") and call.raw == extra and final == ""


@pytest.fixture(scope="module", params=["qwen3-tokenizer", "qwen3-tokenizer-current"])
def tok(request):
    return AutoTokenizer.from_pretrained(str(resolve_asset(request.param)))


def template_turn(tok, calls: list[ToolCall], content: str = "") -> str:
    """The text of an assistant turn carrying `calls`, as the chat template renders it."""
    user = [{"role": "user", "content": "go"}]
    prompt = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(user + [assistant_message(calls, content)], tokenize=False)
    assert full.startswith(prompt)
    return full[len(prompt) : full.rindex("<|im_end|>")]


ARG_TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(HARD)
ARGS = st.dictionaries(st.sampled_from(["command", "content", "file_path", "old_string"]), ARG_TEXT,
                       min_size=1, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(ARGS, min_size=1, max_size=3))
def test_template_rendered_calls_parse_back(tok, args):
    calls = [ToolCall(name="Bash", arguments=a) for a in args]
    text = template_turn(tok, calls)
    parsed, _ = parse_tool_calls(text)
    assert [(c.name, c.arguments, c.malformed) for c in parsed] == [("Bash", a, None) for a in args]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arg=ARG_TEXT)
def test_sampled_token_ids_of_a_rendered_call_parse_back(tok, arg):
    """What the driver parses is the decoding of the sampled ids: tokenize the template's text and decode.
    (Qwen's tokenizer NFC-normalises text, so only NFC-stable strings survive encoding unchanged.)"""
    assume(unicodedata.normalize("NFC", arg) == arg)
    text = template_turn(tok, [ToolCall(name="Write", arguments={"content": arg})])
    decoded = tok.decode(tok(text, add_special_tokens=False)["input_ids"], skip_special_tokens=False)
    (call,), _ = parse_tool_calls(decoded)
    assert call.malformed is None and call.arguments == {"content": arg}
