"""Token-in/token-out with the real Qwen3 tokenizer under both template revisions."""

import copy

import pytest
from transformers import AutoTokenizer

from agentrl.chat import tito
from agentrl.chat.template import render_prompt, supports_enable_thinking
from agentrl.chat.tito import TitoMismatch, assert_tito_consistent, observation_ids, turn_format
from agentrl.envs.base import Observation, ToolCall, ToolResult
from agentrl.paths import resolve_asset

REVISIONS = ["qwen3-tokenizer", "qwen3-tokenizer-current"]


def fn(name, props, required=None):
    params = {"type": "object", "properties": {p: {"type": t} for p, t in props.items()},
              "required": required if required is not None else list(props)}
    return {"type": "function", "function": {"name": name, "description": f"The {name} tool.", "parameters": params}}


SCHEMA_SETS = {
    "edit-menu": [fn("read", {"path": "string"}), fn("edit", {"op": "string"}), fn("run_tests", {}, []),
                  fn("submit", {}, [])],
    "coding-tools": [fn("Read", {"file_path": "string"}),
                     fn("Edit", {"file_path": "string", "old_string": "string", "new_string": "string"}),
                     fn("Write", {"file_path": "string", "content": "string"}),
                     fn("Bash", {"command": "string", "timeout": "integer"}, ["command"])],
    "python-session": [fn("run_python", {"code": "string"})],
    "wordle": [fn("guess", {"word": "string"})],
}


@pytest.fixture(scope="module", params=REVISIONS)
def tok(request):
    return AutoTokenizer.from_pretrained(str(resolve_asset(request.param)))


@pytest.mark.parametrize("schemas", list(SCHEMA_SETS), ids=list(SCHEMA_SETS))
def test_startup_assertion_passes_for_every_schema_set(tok, schemas):
    obs = Observation(system="You are a coding agent. The repository is at /repo.", user="Fix `f` in f.py.",
                      tools=SCHEMA_SETS[schemas])
    fmt = assert_tito_consistent(tok, obs)
    assert tok.convert_ids_to_tokens(list(fmt.eot_ids)) == ["<|im_end|>"]
    assert tok.decode(list(fmt.stub_ids)) == "<think>\n\n</think>\n\n"


def test_prompt_is_non_thinking_with_tool_schemas(tok):
    obs = Observation("sys", "user msg", SCHEMA_SETS["wordle"])
    text = tok.decode(render_prompt(tok, obs))
    assert supports_enable_thinking(tok)
    assert text.startswith("<|im_start|>system\nsys\n\n# Tools") and '"name": "guess"' in text
    assert text.endswith("<|im_start|>user\nuser msg<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_observation_ids_two_results_and_token_limit(tok):
    call = ToolCall("guess", {"word": "crane"})
    results = [ToolResult(call, "ok", "a\nb"), ToolResult(call, "malformed", "error: bad")]
    text = tok.decode(observation_ids(results, tok))
    assert text == ("\n<|im_start|>user\n<tool_response>\na\nb\n</tool_response>\n<tool_response>\nerror: bad\n"
                    "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    cut = observation_ids(results, tok, hit_token_limit=True)
    assert tok.decode(cut) == "<|im_end|>" + text
    with pytest.raises(ValueError, match="at least one"):
        observation_ids([], tok)


def test_check_catches_a_broken_incremental_path(tok, monkeypatch):
    real = tito.observation_ids

    def drops_newline(*a, **k):  # the classic bug: forgetting the "\n" after <|im_end|>
        ids = real(*a, **k)
        return ids[1:] if not k.get("hit_token_limit") else ids

    monkeypatch.setattr(tito, "observation_ids", drops_newline)
    with pytest.raises(TitoMismatch, match="one tool result"):
        assert_tito_consistent(tok, Observation("s", "u", SCHEMA_SETS["wordle"]))


def test_check_catches_a_wrong_think_stub(tok, monkeypatch):
    real = tito.turn_format

    def no_stub(*a, **k):  # pretending nothing is dropped on re-render must fail against Qwen3's template
        f = real(*a, **k)
        return tito.TurnFormat(f.eot_text, f.eot_ids, f.header_ids, ())

    monkeypatch.setattr(tito, "turn_format", no_stub)
    with pytest.raises(TitoMismatch):
        assert_tito_consistent(tok, Observation("s", "u", SCHEMA_SETS["wordle"]))


CHATML_NO_THINKING = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>tool\n{{ m.content }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_not_hard_wired_to_qwen3(tok):
    other = copy.deepcopy(tok)
    other.chat_template = CHATML_NO_THINKING
    assert not supports_enable_thinking(other)
    fmt = assert_tito_consistent(other, Observation("", "u", SCHEMA_SETS["coding-tools"]))
    assert fmt.stub_ids == () and other.decode(list(fmt.header_ids)) == "<|im_start|>assistant\n"
    assert other.decode(observation_ids([ToolResult(ToolCall("Read", {}), "ok", "r")], other)) == (
        "\n<|im_start|>tool\nr<|im_end|>\n<|im_start|>assistant\n")


def test_missing_template_is_a_clear_error(tok):
    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        turn_format(bare)
    with pytest.raises(ValueError, match="tool schemas"):
        assert_tito_consistent(tok, Observation("s", "u", []))
