"""OpenAI chat-completions wire format: request checking, message conversion, replies and stream chunks.

Not the sampler and not the rollout bookkeeping (agentrl.serve.policy.server). Requests are hostile
input: every shape error becomes a `RequestError` (an HTTP 4xx with a message), never an exception
from deep inside the template. Messages are converted to the form HF chat templates read
(`tool_calls[].function.arguments` as a dict, content parts joined to text); replies are built from the
sampled text with agentrl's tool-call parser: well-formed `<tool_call>` blocks become OpenAI
`tool_calls`, anything malformed stays in the text content, so no call is ever invented.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from agentrl.chat.parse import parse_tool_calls
from agentrl.preflight import lone_surrogate_path

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
# Client parameters that would change the sampled distribution (or its truncation) and that the trainer's
# sampler does not apply: recorded as overridden. Values equal to what the trainer does are not recorded.
NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0,
           "frequency_penalty": 0.0, "repetition_penalty": 1.0, "n": 1, "logit_bias": None, "stop": None,
           "tool_choice": "auto", "response_format": None, "seed": None}


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "invalid_request_error" if self.status < 500
                          else "server_error", "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat request in chat-template form.

    Attributes:
        messages: HF-template messages (role, content str, tool_calls with dict arguments, ...).
        tools: tool schemas `[{"type": "function", "function": {...}}]` (empty: none).
        stream: answer as server-sent events.
        include_usage: a final usage chunk was asked for (`stream_options.include_usage`).
        max_tokens: the client's completion cap (None: the server's).
        overridden: client sampling parameters replaced by the trainer's, {name: client value}.
        model: the model name the client asked for (echoed back).
        logprobs: the reply carries each sampled token's log-prob (`logprobs: true`; logprobs_content).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    overridden: dict[str, Any]
    model: str
    logprobs: bool = False


def _text(content: Any, where: str) -> str:
    """Message content (str, None, or a list of text parts) -> str."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(400, f"{where}: content part of type {repr(kind)[:80]} is not supported (text only)")
            out.append(str(part.get("text", "")))
        return "".join(out)
    raise RequestError(400, f"{where}: content must be a string, null or a list of text parts")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (RFC 8259 has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} overflows a double (RFC 8259 numbers must be finite)")
    return value


def loads_strict(raw: str | bytes) -> Any:
    """`json.loads` that accepts only RFC 8259 JSON: NaN, Infinity and numbers that overflow a double
    (1e999) raise ValueError instead of becoming floats that no strict encoder can write back (a stored
    NaN used to make every later `GET /rollouts/<id>/trace` of that rollout a 500); so does a string with a
    lone surrogate (an unpaired `\\ud800`-`\\udfff` escape), which no tokenizer or UTF-8 reply takes (a
    message's made the request a 500 "sampling failed: TypeError"; a `model` name's, a 500 after sampling)."""
    value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    where = lone_surrogate_path(value)
    if where is not None:
        raise ValueError(f"{where[:120] or 'the value'} holds a lone surrogate (an unpaired \\ud800-\\udfff "
                         "escape), which is not UTF-8 text")
    return value


def _arguments(raw: Any) -> Any:
    """OpenAI sends arguments as a JSON string; templates want the object (a non-JSON string is kept)."""
    if isinstance(raw, str):
        try:
            return loads_strict(raw)
        except (ValueError, RecursionError):
            return raw
    return raw


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise RequestError(400, f"{where}: tool_calls must be a list")
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError(400, f"{where}.tool_calls[{j}]: expected {{'function': {{'name', 'arguments'}}}}")
        out.append({"id": c.get("id"), "type": "function",
                    "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments", {}))}})
    return out


def convert_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI messages -> chat-template messages.

    Raises:
        RequestError(400): not a non-empty list of messages with known roles and text content.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        # a role that is a list or an object is not hashable: `in ROLES` raised TypeError, a 500 "sampling failed"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            raise RequestError(400, f"{where}: expected an object with role one of {sorted(ROLES)}")
        msg: dict[str, Any] = {"role": ROLES[m["role"]], "content": _text(m.get("content"), where)}
        if m["role"] == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
        if m["role"] == "assistant" and isinstance(m.get("reasoning_content"), str):
            msg["reasoning_content"] = m["reasoning_content"]
        if m["role"] == "tool":
            for k in ("tool_call_id", "name"):
                if isinstance(m.get(k), str):
                    msg[k] = m[k]
        out.append(msg)
    return out


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """Validate OpenAI tool schemas. Raises RequestError(400) naming the bad entry."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError(400, "'tools' must be a list")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(400, f"tools[{i}]: expected {{'type': 'function', 'function': {{'name', ...}}}}")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise RequestError(400, f"tools[{i}].function.parameters must be a JSON-schema object")
    return [{"type": "function", "function": t["function"]} for t in tools]


def _max_tokens(body: dict[str, Any]) -> int | None:
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if cap is None:
        return None
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise RequestError(400, f"max_tokens must be a positive integer, got {type(cap).__name__} {repr(cap)[:80]}")
    return cap


MAX_MODEL_NAME_CHARS = 256  # the name is echoed in every reply and stream chunk


def _flag(body: dict[str, Any], name: str) -> bool:
    """A boolean field (absent or null: false). A string such as "false" used to read as true (a stream)."""
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise RequestError(400, f"'{name}' must be true or false, got {type(value).__name__} {repr(value)[:40]}")
    return bool(value)


def _model_name(body: dict[str, Any]) -> str:
    """The `model` field: a string (absent or null: ""), echoed back. Any other type used to be echoed as
    its str() (5 as "5", an object as its Python repr)."""
    name = body.get("model")
    if name is None:
        return ""
    if not isinstance(name, str) or len(name) > MAX_MODEL_NAME_CHARS:
        got = f"str of {len(name)} characters" if isinstance(name, str) else type(name).__name__
        raise RequestError(400, f"'model' must be a string of at most {MAX_MODEL_NAME_CHARS} characters, got {got}")
    return name


# The sampling fields' types and ranges as OpenAI's API documents them (top_k, min_p, repetition_penalty as vLLM's
# server takes them): name -> (integer only, low, high, what the error says), bounds inclusive. A valid value is
# recorded as overridden (the trainer samples with its own settings); an invalid one is a 400, as those servers
# answer, instead of passing silently.
SAMPLING_FIELDS: dict[str, tuple[bool, float, float, str]] = {
    "temperature": (False, 0.0, 2.0, "a number in [0, 2]"), "top_p": (False, 0.0, 1.0, "a number in [0, 1]"),
    "top_k": (True, -1, 1 << 31, "an integer >= -1"), "min_p": (False, 0.0, 1.0, "a number in [0, 1]"),
    "presence_penalty": (False, -2.0, 2.0, "a number in [-2, 2]"),
    "frequency_penalty": (False, -2.0, 2.0, "a number in [-2, 2]"),
    "repetition_penalty": (False, 1e-9, 1e9, "a positive number"),
    "n": (True, 1, 1, "1 (the server samples one choice per request)"),
    "seed": (True, -(1 << 63), (1 << 64) - 1, "a 64-bit integer")}


def _check_sampling(body: dict[str, Any]) -> None:
    """Raise RequestError(400) for a sampling field (SAMPLING_FIELDS; null: absent) of the wrong type or out of
    its range, a `stop` that is not a string or a list of strings, or a `logit_bias` that is not an
    object of token ids to numbers in [-100, 100]. `n` must be 1: each request is one recorded call with one
    choice, so n > 1 would silently return fewer choices than asked for."""
    for name, (integer, low, high, want) in SAMPLING_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        ok_type = not isinstance(value, bool) and (isinstance(value, int) or (
            not integer and isinstance(value, float) and math.isfinite(value)))
        if not ok_type or not low <= value <= high:
            raise RequestError(400, f"'{name}' must be {want}, got {type(value).__name__} {repr(value)[:40]}")
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (
            isinstance(stop, list) and all(isinstance(x, str) for x in stop))):
        raise RequestError(400, f"'stop' must be a string or a list of strings, got {repr(stop)[:60]}")
    bias = body.get("logit_bias")
    if bias is not None and not (isinstance(bias, dict) and all(
            isinstance(k, str) and k.lstrip("-").isdigit() and not isinstance(v, bool) and isinstance(v, (int, float))
            and -100 <= v <= 100 for k, v in bias.items())):
        raise RequestError(400, "'logit_bias' must be an object of token ids to numbers in [-100, 100]")


def parse_request(body: Any) -> ChatRequest:
    """A decoded JSON body -> ChatRequest. Raises RequestError(400) with the reason: besides the messages,
    tools and max_tokens checks, `stream` and `stream_options.include_usage` not booleans, `stream_options`
    not an object, `model` not a string (or longer than MAX_MODEL_NAME_CHARS), a sampling field of the wrong
    type or range (_check_sampling)."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    _check_sampling(body)
    overridden = {k: body[k] for k, neutral in NEUTRAL.items() if k in body and body[k] != neutral
                  and body[k] is not None}
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise RequestError(400, f"'stream_options' must be an object, got {type(opts).__name__}")
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20):
        raise RequestError(400, f"'top_logprobs' must be an integer in [0, 20], got {repr(top)[:40]}")
    if top:
        raise RequestError(400, "'top_logprobs' > 0 is not served: the server records the sampled token's log-prob "
                           "only (ask with 'logprobs': true and no top_logprobs)")
    return ChatRequest(messages=convert_messages(body.get("messages")), tools=check_tools(body.get("tools")),
                       stream=_flag(body, "stream"), include_usage=_flag(opts or {}, "include_usage"),
                       max_tokens=_max_tokens(body), overridden=overridden, model=_model_name(body),
                       logprobs=_flag(body, "logprobs"))


@dataclass(frozen=True)
class Reply:
    """The assistant message built from one sampled completion."""

    content: str
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [dict(c) for c in self.tool_calls]
        return msg


def build_reply(text: str, *, hit_token_limit: bool, call_id_prefix: str) -> Reply:
    """Sampled text (without the end-of-turn token) -> Reply.

    Well-formed calls become OpenAI tool calls (id `{call_id_prefix}_{k}`, arguments a JSON string); the
    raw text of each well-formed call is removed from the content, malformed blocks stay in it as text.
    finish_reason: "length" when the token limit cut the turn, else "tool_calls" when a call was made,
    else "stop". How many calls a turn may make is the harness's rule, not the server's.
    """
    try:
        calls, _ = parse_tool_calls(text, hit_token_limit=hit_token_limit)
    except Exception:  # noqa: BLE001 - a parser fault on model output: the turn goes back as plain text
        calls = []
    content, out = text, []
    for k, c in enumerate(c for c in calls if not c.malformed):
        content = content.replace(c.raw, "", 1)
        out.append({"id": f"{call_id_prefix}_{k}", "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}})
    finish = "length" if hit_token_limit else ("tool_calls" if out else "stop")
    return Reply(content=content.strip(), tool_calls=tuple(out), finish_reason=finish)


def reply_key(content: Any, tool_calls: Any) -> str:
    """Canonical form of an assistant message (content text stripped, calls as name + parsed arguments),
    to recognise our own earlier reply when the harness sends it back in its history."""
    calls = []
    for c in tool_calls or ():
        fn = c.get("function", {}) if isinstance(c, dict) else {}
        calls.append([fn.get("name"), _arguments(fn.get("arguments", {}))])
    text = content if isinstance(content, str) else ""
    return json.dumps([text.strip(), calls], sort_keys=True, ensure_ascii=False, default=str)


def history_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Canonical form of a request's messages and tools (tool-call ids are left out: harnesses renumber)."""
    def strip(m: dict[str, Any]) -> dict[str, Any]:
        m = {k: v for k, v in m.items() if k != "tool_call_id"}
        if "tool_calls" in m:
            m["tool_calls"] = [{"function": c["function"]} for c in m["tool_calls"]]
        return m
    return json.dumps([[strip(m) for m in messages], tools], sort_keys=True, ensure_ascii=False, default=str)


def logprobs_content(tokens: list[str], logprobs: list[float]) -> dict[str, Any]:
    """OpenAI's `choices[].logprobs` for sampled tokens (text pieces, as decoded one by one) and their log-probs
    (nats, under the policy at the server's temperature: what the trainer records): `{"content": [{"token",
    "logprob", "bytes", "top_logprobs": []}]}`, one entry per sampled token, the end-of-turn token included."""
    return {"content": [{"token": t, "logprob": float(lp), "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                        for t, lp in zip(tokens, logprobs, strict=True)]}


def completion_body(rid: str, model: str, reply: Reply, usage: dict[str, int],
                    logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A non-streaming `chat.completion` object (`logprobs`: logprobs_content's, when the request asked)."""
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": reply.message(), "finish_reason": reply.finish_reason,
                         "logprobs": logprobs}],
            "usage": usage}


def stream_chunks(rid: str, model: str, reply: Reply, usage: dict[str, int] | None,
                  logprobs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects of one reply: role, content, one delta per tool call, the
    finish reason (carrying `logprobs`, logprobs_content's, when the request asked), and (if asked) a usage chunk
    with empty choices. The `data: [DONE]` line is the transport's."""
    base = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None, lps: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": lps}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        out.append(chunk({"content": reply.content}))
    for k, c in enumerate(reply.tool_calls):
        out.append(chunk({"tool_calls": [{"index": k, **c}]}))
    out.append(chunk({}, reply.finish_reason, logprobs))
    if usage is not None:
        out.append({**base, "choices": [], "usage": usage})
    return out
