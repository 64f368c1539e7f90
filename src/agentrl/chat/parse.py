"""Parse `<tool_call>{json}</tool_call>` blocks (Qwen3 / Hermes format) out of sampled text.

Not the executor and not the schema check: environments run the calls and own every rule about them
(unknown tool, bad arguments, calls per turn: agentrl.envs.toolenv), marking a call they refuse with
the same `ToolCall.malformed` vocabulary.

A block's body ends where its JSON value ends, not at the first `</tool_call>`: a string argument
may contain the closing tag's text (see `_block_end`).

Malformed classes (stored in `ToolCall.malformed`, the raw text is always kept):
    "bad_json"          the block's body is not one JSON value;
    "not_a_call"        JSON parses but is not an object with a string "name" and an object "arguments";
    "cut_off"           the turn hit the token limit inside an open `<tool_call>` block;
    "missing_close_tag" an open `<tool_call>` block without `</tool_call>` in a turn that ended normally;
    "unknown_tool" / "bad_arguments"  (set by the environment) the name or the arguments do not match a
                        schema.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrl.envs.base import ToolCall

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # Qwen3 / DeepSeek-R1 reasoning tags
_DECODER = json.JSONDecoder(strict=False)
_SPACE = re.compile(r"\s*")


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


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, content) of one turn: a turn that opens with `<think>` has its reasoning up to `</think>`
    split off, so tool calls and the final answer are read from the content only (as vLLM's and SGLang's
    reasoning parsers do); calls written while thinking are not run. A think block that never closes
    (the turn was cut while thinking) is all reasoning. Other turns are all content. Never raises.

    Returns:
        (the think block's inner text, stripped of surrounding newlines; the text after `</think>`).
    """
    head = text.lstrip()
    if not head.startswith(THINK_OPEN):
        return "", text
    inner = head[len(THINK_OPEN) :]
    end = inner.find(THINK_CLOSE)
    if end < 0:
        return inner.strip("\n"), ""
    return inner[:end].strip("\n"), inner[end + len(THINK_CLOSE) :]


def _block_end(text: str, body_start: int) -> tuple[int, int]:
    """(end of the call body, end of the block) for a block whose body starts at `body_start`.

    The body ends where its JSON value ends (json.JSONDecoder.raw_decode), then optional whitespace and
    `</tool_call>`: a string argument may contain `</tool_call>` itself (code that writes tool calls, a
    prompt template), escaped quotes, backslashes or raw newlines, and the first closing tag in the
    text would cut it. When the body is not one JSON value, or other text follows the value, the block
    ends at the next `</tool_call>` (after the value, if one was decoded) and its body is "bad_json".
    Without a closing tag the block runs to the end of the text (body end == block end). Never raises.
    """
    search_from = body_start
    i = _SPACE.match(text, body_start).end()
    if text.startswith(("{", "["), i):
        try:
            _, j = _DECODER.raw_decode(text, i)
        except Exception:  # noqa: BLE001 - any decoding failure (syntax, depth, huge ints): bad_json below
            j = None
        if j is not None:
            k = _SPACE.match(text, j).end()
            if text.startswith(CLOSE_TAG, k):
                return k, k + len(CLOSE_TAG)
            search_from = j
    close = text.find(CLOSE_TAG, search_from)
    if close < 0:
        return len(text), len(text)
    return close, close + len(CLOSE_TAG)


def parse_tool_calls(
    text: str, *, hit_token_limit: bool = False, max_body_chars: int = MAX_CALL_BODY_CHARS
) -> tuple[list[ToolCall], str]:
    """Split one assistant turn into tool calls and the remaining (final-answer) text.

    Args:
        text: the decoded turn, without the end-of-turn token.
        hit_token_limit: the turn ended at max_new_tokens (an unclosed block is then "cut_off").
        max_body_chars: bodies longer than this are not decoded and are marked "bad_json".

    Returns:
        (calls in order of appearance, the text outside all blocks, stripped). A turn whose
        call list is empty is a final answer. Every call keeps its exact `raw` text. Undecodable
        bodies of any kind (bad syntax, deep nesting, huge integers, oversize) become "bad_json" calls.

    Raises:
        ValueError: max_body_chars < 1 (a caller bug, not model output).
    """
    if max_body_chars < 1:
        raise ValueError(f"max_body_chars must be >= 1, got {max_body_chars}")
    calls: list[ToolCall] = []
    outside: list[str] = []
    pos = 0
    while (start := text.find(OPEN_TAG, pos)) >= 0:
        outside.append(text[pos:start])
        body_end, pos = _block_end(text, start + len(OPEN_TAG))
        body, closed = text[start + len(OPEN_TAG) : body_end], pos > body_end
        name, args, why = _decode_call(body, max_body_chars)
        if not closed:
            why = "cut_off: the turn hit the token limit inside the call" if hit_token_limit else (
                "missing_close_tag: no </tool_call> after the call" + (f" ({why})" if why else "")
            )
        calls.append(ToolCall(name=name, arguments=args, raw=text[start:pos], malformed=why))
    outside.append(text[pos:])
    return calls, "".join(outside).strip()
