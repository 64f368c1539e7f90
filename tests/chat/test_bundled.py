"""The bundled ChatML-with-tools template and --chat-template: resolution, the start-up check, round trips."""

from __future__ import annotations

import json

import pytest
from test_tito import SCHEMA_SETS
from transformers import AutoTokenizer

from agentrl.chat.bundled import BUNDLED, apply_chat_template, bundled_template, resolve_chat_template
from agentrl.chat.parse import parse_tool_calls
from agentrl.chat.template import render_text
from agentrl.chat.tito import (
    assert_conversation_ids,
    assert_tito_consistent,
    assistant_message,
    assistant_turn_ids,
)
from agentrl.envs.base import Observation, ToolCall
from agentrl.paths import resolve_asset

# SmolLM2-135M-Instruct's own template (from its GGUF file): ChatML without any tool support.
SMOLLM2_OWN = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
               "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture
def tok():
    """The real Qwen3 tokenizer (ChatML special tokens) with its template replaced by the bundled one."""
    t = AutoTokenizer.from_pretrained(str(resolve_asset("qwen3-tokenizer")))
    apply_chat_template(t, "chatml-tools")
    return t


def obs_for(schemas):
    return Observation(system="You fix bugs.", user="Fix `f` in f.py.", tools=schemas)


@pytest.mark.parametrize("schemas", list(SCHEMA_SETS), ids=list(SCHEMA_SETS))
def test_start_up_check_passes_for_every_environment(tok, schemas):
    fmt = assert_tito_consistent(tok, obs_for(SCHEMA_SETS[schemas]))
    assert fmt.eot_text == "<|im_end|>" and fmt.stub_ids == ()
    assert tok.decode(list(fmt.header_ids)) == "<|im_start|>assistant\n"


def test_prompt_lists_tools_in_the_system_turn(tok):
    schemas = SCHEMA_SETS["coding-tools"]
    text = render_text(tok, [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "hi"}],
                       schemas, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools")
    assert [json.loads(line)["function"]["name"] for line in system.split("<tools>\n")[1].split("\n</tools>")[0]
            .splitlines()] == ["Read", "Edit", "Write", "Bash"]
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_structured_calls_render_as_parseable_tool_call_blocks(tok):
    """What the template writes for an assistant's tool_calls is what agentrl.chat.parse reads back."""
    schemas = SCHEMA_SETS["coding-tools"]
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    calls = [ToolCall("Read", {"file_path": "/repo/f.py"}, ""),
             ToolCall("Edit", {"file_path": "/repo/f.py", "old_string": 'a "<"\n', "new_string": "é\\"}, "")]
    ids = assistant_turn_ids(tok, history, assistant_message(calls), tools=schemas)
    text = tok.decode(ids)
    assert text.startswith("<tool_call>\n{\"name\": \"Read\"") and text.endswith("</tool_call><|im_end|>")
    parsed, rest = parse_tool_calls(text[: -len("<|im_end|>")])
    assert [(c.name, c.arguments) for c in parsed] == [(c.name, c.arguments) for c in calls] and not rest.strip()
    tool = [{"role": "tool", "name": "Read", "content": "1: x"}, {"role": "tool", "name": "Edit", "content": "ok"}]
    full = render_text(tok, history + [assistant_message(calls)] + tool, schemas, add_generation_prompt=True)
    assert ("<|im_start|>user\n<tool_response>\n1: x\n</tool_response>\n<tool_response>\nok\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n") in full
    prompt = tok(render_text(tok, history, schemas, add_generation_prompt=True), add_special_tokens=False).input_ids
    assert_conversation_ids(tok, history + [assistant_message(calls)], schemas, prompt + ids, [len(prompt)])


def test_a_template_without_tools_is_refused_with_the_fix(tok):
    tok.chat_template = SMOLLM2_OWN
    with pytest.raises(ValueError, match="renders no tool schemas.*--chat-template chatml-tools"):
        assert_tito_consistent(tok, obs_for(SCHEMA_SETS["wordle"]))


def test_resolution_by_name_jinja_path_and_tokenizer_config(tmp_path):
    assert set(BUNDLED) == {"chatml-tools", "qwen2.5-tools"}
    src = bundled_template("chatml-tools").source
    (tmp_path / "t.jinja").write_text(src)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": src}))
    for ref in ("chatml-tools", str(tmp_path / "t.jinja"), str(tmp_path / "tokenizer_config.json")):
        t = resolve_chat_template(ref)
        assert t.source == src and len(t.sha256) == 64 and t.describe()["source"] == src
    with pytest.raises(ValueError, match="expected one of chatml-tools, qwen2.5-tools"):
        resolve_chat_template("hermes")
    with pytest.raises(FileNotFoundError, match="no such file"):
        resolve_chat_template(str(tmp_path / "missing.jinja"))
    (tmp_path / "empty.jinja").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        resolve_chat_template(str(tmp_path / "empty.jinja"))


def test_unusable_template_files_are_one_line_errors_naming_the_file(tmp_path):
    """A --chat-template file that is not UTF-8, JSON that does not parse, or JSON that is not an object:
    a ValueError naming the file (never a UnicodeDecodeError/AttributeError traceback)."""
    cases = {"bin.jinja": b"\xff\xfe{{ x }}", "bad.json": b"{bad", "list.json": b"[1, 2]",
             "str.json": b'"{{ x }}"'}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=f"--chat-template '.*{name}'"):
            resolve_chat_template(str(tmp_path / name))


@pytest.mark.parametrize("source, match", [
    ("{{ bad jinja %}", "cannot render: TemplateSyntaxError at line 1"),
    ("{% for m in messages %}{{ m.content }}", "cannot render: TemplateSyntaxError"),
    ("{{ raise_exception('no tools here') }}", "cannot render: TemplateError.*no tools here"),
    ("hello", "does not render an assistant message's content"),
    ("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}",
     "does not render an assistant message's content"),
])
def test_a_template_that_cannot_render_a_turn_is_a_value_error(tok, source, match):
    """Templates that do not compile, raise while rendering, or drop the assistant's content: a ValueError
    the CLI prints as one line (they were a Jinja traceback or an IndexError in turn_format)."""
    tok.chat_template = source
    with pytest.raises(ValueError, match=match):
        assert_tito_consistent(tok, obs_for(SCHEMA_SETS["wordle"]))


def test_the_template_travels_with_a_saved_tokenizer(tok, tmp_path):
    """Checkpoints and SFT outputs save the tokenizer: a reload renders with the same template."""
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    assert again.chat_template == bundled_template("chatml-tools").source
    assert_tito_consistent(again, obs_for(SCHEMA_SETS["python-session"]))


@pytest.mark.parametrize("schemas", list(SCHEMA_SETS), ids=list(SCHEMA_SETS))
def test_qwen25_tools_passes_the_start_up_check_and_shows_a_single_brace_call(schemas):
    """qwen2.5-tools: Qwen2.5-Instruct's template. Its instruction shows the call as JSON a model can copy
    (Qwen2.5-Coder's own shows `{{"name": ...}}`, which the raw Coder models copy as bad JSON)."""
    t = AutoTokenizer.from_pretrained(str(resolve_asset("qwen3-tokenizer")))
    apply_chat_template(t, "qwen2.5-tools")
    fmt = assert_tito_consistent(t, obs_for(SCHEMA_SETS[schemas]))
    assert fmt.eot_text == "<|im_end|>"
    text = render_text(t, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                       SCHEMA_SETS[schemas], add_generation_prompt=True)
    example = text.split("XML tags:\n<tool_call>\n")[1].split("\n</tool_call>")[0]
    assert example == '{"name": <function-name>, "arguments": <args-json-object>}'
