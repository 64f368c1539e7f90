"""Tool-call parsing: the crafted completions of issue 5 parse to the right calls and classes."""

import json

import pytest

from agentrl.chat.parse import parse_tool_calls


def block(obj) -> str:
    return "<tool_call>\n" + json.dumps(obj, ensure_ascii=False) + "\n</tool_call>"


def test_multiple_calls_in_order_with_hard_arguments():
    code = 'def f(s):\n    return s.replace("\\\\", "/") + "é ✓ 日本"\n'
    a = {"name": "Read", "arguments": {"file_path": "/repo/f.py"}}
    b = {"name": "Edit", "arguments": {"file_path": "/repo/f.py", "old_string": 'x = "a"', "new_string": code}}
    text = "I'll read then edit.\n" + block(a) + "\n" + block(b)
    calls, final = parse_tool_calls(text)
    assert [c.name for c in calls] == ["Read", "Edit"]
    assert calls[1].arguments["new_string"] == code  # quotes, backslashes, unicode, newlines survive
    assert all(c.malformed is None for c in calls)
    assert calls[0].raw == block(a) and final == "I'll read then edit."


def test_literal_newline_inside_string_is_accepted():
    text = '<tool_call>\n{"name": "Read", "arguments": {"file_path": "a\nb"}}\n</tool_call>'
    (call,), _ = parse_tool_calls(text)
    assert call.malformed is None and call.arguments == {"file_path": "a\nb"}


@pytest.mark.parametrize(
    "body, cls",
    [
        ('{"name": "Read", "arguments": {"file_path": "x"}', "bad_json"),
        ('{"name": "Read", "arguments": {"file_path": "x"}} {"name": "Read"}', "bad_json"),
        ('["Read", {"file_path": "x"}]', "not_a_call"),
        ('{"arguments": {"file_path": "x"}}', "not_a_call"),
        ('{"name": "Read", "arguments": [1]}', "not_a_call"),
        ('{"name": "Read"}', "not_a_call"),
    ],
)
def test_malformed_json_classes(body, cls):
    (call,), final = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>")
    assert call.malformed.startswith(cls) and call.raw.endswith("</tool_call>") and final == ""


def test_cut_off_vs_missing_close_tag():
    text = 'Ok.\n<tool_call>\n{"name": "Edit", "arguments": {"file_path": "/repo/f.py", "old_str'
    (call,), final = parse_tool_calls(text, hit_token_limit=True)
    assert call.malformed.startswith("cut_off") and call.raw == text[4:] and final == "Ok."
    done = block({"name": "Read", "arguments": {"file_path": "x"}})[: -len("</tool_call>")]
    (call,), _ = parse_tool_calls(done, hit_token_limit=False)
    assert call.malformed.startswith("missing_close_tag")
    assert call.name == "Read" and call.arguments == {"file_path": "x"}  # parsed, but still malformed


def test_text_after_call_and_final_answer():
    calls, final = parse_tool_calls(block({"name": "Read", "arguments": {"file_path": "x"}}) + "\nNow I wait.")
    assert len(calls) == 1 and final == "Now I wait."
    calls, final = parse_tool_calls("  The tests pass; the fix is in f.py.\n")
    assert calls == [] and final == "The tests pass; the fix is in f.py."


def test_arguments_as_json_string_are_decoded():
    (call,), _ = parse_tool_calls(block({"name": "Read", "arguments": json.dumps({"file_path": "x"})}))
    assert call.malformed is None and call.arguments == {"file_path": "x"}


HOSTILE_BODIES = {
    "deep_array": "[" * 100_000,
    "deep_closed_array": "[" * 5000 + "]" * 5000,
    "deep_object": '{"a":' * 5000,
    "deep_arguments": '{"name": "Read", "arguments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
    "huge_int": '{"name": "Read", "arguments": {"x": ' + "9" * 5000 + "}}",
    "huge_int_in_string_args": json.dumps({"name": "Read", "arguments": '{"x": ' + "9" * 5000 + "}"}),
    "deep_string_args": json.dumps({"name": "Read", "arguments": "[" * 5000}),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_BODIES))
@pytest.mark.parametrize("closed", [True, False])
def test_hostile_json_never_raises_and_is_malformed(kind, closed):
    text = "<tool_call>" + HOSTILE_BODIES[kind] + ("</tool_call>" if closed else "")
    for cut in (True, False):
        calls, _ = parse_tool_calls(text, hit_token_limit=cut)
        assert len(calls) == 1 and calls[0].malformed, (kind, closed, cut)
        if closed:
            assert calls[0].malformed.startswith(("bad_json", "not_a_call")), calls[0].malformed


def test_oversize_body_is_bad_json_without_decoding():
    body = json.dumps({"name": "Read", "arguments": {"file_path": "x" * 100}})
    calls, _ = parse_tool_calls(f"<tool_call>{body}</tool_call>", max_body_chars=50)
    assert calls[0].malformed.startswith("bad_json") and "exceeds the 50 limit" in calls[0].malformed
    calls, _ = parse_tool_calls(f"<tool_call>{body}</tool_call>", max_body_chars=len(body))
    assert calls[0].malformed is None
    with pytest.raises(ValueError, match="max_body_chars"):
        parse_tool_calls("x", max_body_chars=0)
