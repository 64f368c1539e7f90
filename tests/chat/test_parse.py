"""Tool-call parsing: the crafted completions of issue 5 parse to the right calls and classes."""

import json

import pytest

from agentrl.chat.parse import check_call, parse_tool_calls

TOOLS = [
    {"type": "function", "function": {"name": "Read", "description": "read", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"],
        "additionalProperties": False}}},
    {"type": "function", "function": {"name": "Edit", "description": "edit", "parameters": {
        "type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"},
                                         "new_string": {"type": "string"}},
        "required": ["file_path", "old_string", "new_string"]}}},
]


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
    assert [check_call(c, TOOLS).malformed for c in calls] == [None, None]


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
    assert check_call(call, TOOLS) is call  # already malformed: unchanged


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


def test_max_calls_marks_extra_calls():
    text = "\n".join(block({"name": "Read", "arguments": {"file_path": str(i)}}) for i in range(6))
    calls, _ = parse_tool_calls(text, max_calls=4)
    assert [c.malformed is None for c in calls] == [True] * 4 + [False] * 2
    assert calls[5].malformed.startswith("too_many_calls") and calls[5].arguments == {"file_path": "5"}
    with pytest.raises(ValueError, match="max_calls"):
        parse_tool_calls("", max_calls=0)


def test_schema_checks():
    (unknown,), _ = parse_tool_calls(block({"name": "Grep", "arguments": {}}))
    assert check_call(unknown, TOOLS).malformed.startswith("unknown_tool: 'Grep'")
    (bad,), _ = parse_tool_calls(block({"name": "Read", "arguments": {"file_path": 3}}))
    assert check_call(bad, TOOLS).malformed.startswith("bad_arguments: file_path")
    (extra,), _ = parse_tool_calls(block({"name": "Read", "arguments": {"file_path": "a", "x": 1}}))
    assert check_call(extra, TOOLS).malformed.startswith("bad_arguments")
    (missing,), _ = parse_tool_calls(block({"name": "Edit", "arguments": {"file_path": "a"}}))
    assert "old_string" in check_call(missing, TOOLS).malformed


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
