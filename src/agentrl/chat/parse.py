"""Parse `<tool_call>{json}</tool_call>` blocks (Qwen3 / Hermes format) out of sampled text.

Not the executor: environments run the calls. Not the schema registry: `check_call` validates a
parsed call against the tool schemas an environment publishes (unknown tool, bad arguments).

Malformed classes (stored in `ToolCall.malformed`, the raw text is always kept):
    "bad_json"          the block's body is not one JSON value;
    "not_a_call"        JSON parses but is not an object with a string "name" and an object "arguments";
    "cut_off"           the turn hit the token limit inside an open `<tool_call>` block;
    "missing_close_tag" an open `<tool_call>` block without `</tool_call>` in a turn that ended normally;
    "too_many_calls"    a call beyond `max_calls` in one turn;
    "unknown_tool" / "bad_arguments"  (from `check_call`) the name or the arguments do not match a schema.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from agentrl.envs.base import ToolCall

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK_RE = re.compile(re.escape(OPEN_TAG) + r"(.*?)(" + re.escape(CLOSE_TAG) + r"|$)", re.DOTALL)


MAX_CALL_BODY_CHARS = 1 << 20
"""Longest call body (characters between the tags) that is JSON-decoded; longer bodies are "bad_json".

Bounds parser work and memory per call; 1 Mi characters is ~250k tokens, far above any real call."""


def _loads(text: str) -> Any:
    """json.loads that turns ANY failure into a ValueError with a short reason.

    Model output is hostile input: besides JSONDecodeError, decoding can raise RecursionError (deeply
    nested arrays/objects), ValueError (an integer over sys.get_int_max_str_digits() digits), MemoryError,
    or anything else; none of these may escape the parser and end a training run.
    """
    try:
        # strict=False accepts literal control characters (a raw newline) inside strings: unambiguous,
        # and models trained on tojson output still emit them in long code arguments.
        return json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        raise ValueError(f"{e.msg} at char {e.pos}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - ValueError (huge int), MemoryError, ...: all mean "not usable JSON"
        raise ValueError(f"{type(e).__name__}: {str(e)[:200]}") from None


def _decode_call(body: str, max_body_chars: int = MAX_CALL_BODY_CHARS) -> tuple[str, dict[str, Any], str | None]:
    """JSON body of one block -> (name, arguments, malformed reason or None). Never raises."""
    if len(body) > max_body_chars:
        return "", {}, f"bad_json: call body of {len(body)} characters exceeds the {max_body_chars} limit"
    try:
        obj = _loads(body.strip())
    except ValueError as e:
        return "", {}, f"bad_json: {e}"
    if not isinstance(obj, dict):
        return "", {}, f"not_a_call: expected a JSON object, got {type(obj).__name__}"
    name, args = obj.get("name"), obj.get("arguments")
    if isinstance(args, str):  # OpenAI style: arguments as a JSON-encoded string
        try:
            args = _loads(args)
        except ValueError:
            pass
    if not isinstance(name, str) or not name:
        return "", args if isinstance(args, dict) else {}, "not_a_call: missing string field 'name'"
    if not isinstance(args, dict):
        return name, {}, "not_a_call: field 'arguments' must be a JSON object"
    return name, args, None


def parse_tool_calls(
    text: str, *, max_calls: int = 4, hit_token_limit: bool = False, max_body_chars: int = MAX_CALL_BODY_CHARS
) -> tuple[list[ToolCall], str]:
    """Split one assistant turn into tool calls and the remaining (final-answer) text.

    Args:
        text: the decoded turn, without the end-of-turn token.
        max_calls: calls allowed per turn; later calls are returned marked "too_many_calls".
        hit_token_limit: the turn ended at max_new_tokens (an unclosed block is then "cut_off").
        max_body_chars: bodies longer than this are not decoded and are marked "bad_json".

    Returns:
        (calls in order of appearance, the text outside all blocks, stripped). A turn whose
        call list is empty is a final answer. Every call keeps its exact `raw` text. Undecodable
        bodies of any kind (bad syntax, deep nesting, huge integers, oversize) become "bad_json" calls.

    Raises:
        ValueError: max_calls < 1 or max_body_chars < 1 (caller bugs, not model output).
    """
    if max_calls < 1:
        raise ValueError(f"max_calls must be >= 1, got {max_calls}")
    if max_body_chars < 1:
        raise ValueError(f"max_body_chars must be >= 1, got {max_body_chars}")
    calls: list[ToolCall] = []
    outside: list[str] = []
    pos = 0
    for m in _BLOCK_RE.finditer(text):
        outside.append(text[pos : m.start()])
        pos = m.end()
        body, closed = m.group(1), bool(m.group(2))
        name, args, why = _decode_call(body, max_body_chars)
        if not closed:
            why = "cut_off: the turn hit the token limit inside the call" if hit_token_limit else (
                "missing_close_tag: no </tool_call> after the call" + (f" ({why})" if why else "")
            )
        elif len(calls) >= max_calls:
            why = f"too_many_calls: at most {max_calls} calls per turn"
        calls.append(ToolCall(name=name, arguments=args, raw=m.group(0), malformed=why))
    outside.append(text[pos:])
    return calls, "".join(outside).strip()


def check_call(call: ToolCall, tools: list[dict[str, Any]]) -> ToolCall:
    """Validate a parsed call against chat-template tool schemas.

    Args:
        call: a call from `parse_tool_calls` (already-malformed calls are returned unchanged).
        tools: `[{"type": "function", "function": {"name", "description", "parameters"}}]`.

    Returns:
        The call, or a copy marked "unknown_tool" / "bad_arguments" (JSON Schema, via jsonschema).
    """
    if call.malformed:
        return call
    by_name = {t.get("function", t).get("name"): t.get("function", t) for t in tools}
    spec = by_name.get(call.name)
    if spec is None:
        known = ", ".join(sorted(str(n) for n in by_name))
        return _mark(call, f"unknown_tool: {call.name!r} is not one of [{known}]")
    schema = spec.get("parameters") or {"type": "object"}
    try:
        jsonschema.validate(call.arguments, schema)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "arguments"
        return _mark(call, f"bad_arguments: {where}: {e.message}")
    except jsonschema.SchemaError:
        raise  # the environment published a broken schema: a bug to surface, not the model's fault
    except Exception as e:  # noqa: BLE001 - e.g. RecursionError on pathologically nested arguments
        return _mark(call, f"bad_arguments: arguments could not be validated ({type(e).__name__})")
    return call


def _mark(call: ToolCall, why: str) -> ToolCall:
    return ToolCall(name=call.name, arguments=call.arguments, raw=call.raw, malformed=why)
