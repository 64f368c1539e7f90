"""ensure_tool_call_parser: TRL's response parser for chat templates TRL does not know by heart.

TRL 1.16 picks its tool-call parser by comparing the chat template with its shipped ones character for
character. Qwen2.5-Coder-Instruct's own template differs from Qwen2.5-Instruct's in one line (the
instruction's example call is written `{{"name": ...}}`), so GRPOTrainer refused it ("Unrecognized chat
template"); its calls are the same ChatML `<tool_call>` JSON, which the fallback checks by rendering one.
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("trl")

from scripted_policy import qwen3_tokenizer  # noqa: E402
from trl.chat_template_utils import add_response_schema, parse_response, qwen2_5_chat_template  # noqa: E402

from agentrl.integrations.trl import ensure_tool_call_parser  # noqa: E402

# Qwen2.5-Coder-Instruct's template: Qwen2.5's with the example call's braces doubled (as in its GGUF file).
_CODER_LINE = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'


def _coder_template() -> str:
    assert _CODER_LINE in qwen2_5_chat_template
    return qwen2_5_chat_template.replace(_CODER_LINE, "{" + _CODER_LINE + "}")


def _tokenizer(template: str):
    """A private copy: the loader caches tokenizers, and GRPOTrainer (other tests) sets a parser on its own."""
    tok = copy.deepcopy(qwen3_tokenizer())
    for attr in ("response_template", "response_schema"):
        if getattr(tok, attr, None) is not None:
            setattr(tok, attr, None)
    tok.chat_template = template
    return tok


def test_coder_template_gets_the_hermes_parser_and_parses_a_sampled_call():
    tok = _tokenizer(_coder_template())
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(_tokenizer(_coder_template()))  # what GRPOTrainer did with it
    assert ensure_tool_call_parser(tok) == "hermes"
    prefix = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    text = 'Let me check.\n<tool_call>\n{"name": "run_python", "arguments": {"code": "print(2)"}}\n</tool_call><|im_end|>'
    msg = parse_response(tok, tok(text)["input_ids"], prefix=tok(prefix)["input_ids"])
    assert msg["content"] == "Let me check."
    assert msg["tool_calls"] == [{"type": "function", "function": {"name": "run_python",
                                                                    "arguments": {"code": "print(2)"}}}]
    assert ensure_tool_call_parser(tok) == "preset"  # a second call changes nothing


def test_a_template_trl_knows_keeps_trls_own_parser():
    assert ensure_tool_call_parser(_tokenizer(qwen2_5_chat_template)) == "trl"


def test_a_template_with_another_call_format_is_refused_with_a_clear_error():
    other = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}"
             "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }}({{ c.function.arguments | tojson }})"
             "{% endfor %}\n{% endfor %}")
    with pytest.raises(ValueError, match="does not render tool calls as ChatML <tool_call>"):
        ensure_tool_call_parser(_tokenizer(other))
