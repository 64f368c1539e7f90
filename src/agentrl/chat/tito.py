"""Token-in/token-out: observation token ids from the template's own rendering, and the start-up check.

Not the sampler or the driver (agentrl.rollout). Sampled ids are never re-tokenized; this module only
produces the ids appended *after* a sampled turn, and asserts at start-up that prompt + sampled turns +
observations equal the template's rendering of the same conversation.

Traps handled (all read from renderings, none hard-wired):
  * the end-of-turn marker (Qwen3 `<|im_end|>`) and the glue after it (`\\n`) come from the template;
  * a turn cut at the token limit has no end-of-turn token, so its observation starts with one;
  * templates that re-render history without the empty think block the generation prompt inserted
    (Qwen3 drops `<think>\\n\\n</think>\\n\\n` from earlier assistant turns) differ from the
    incremental path only by that block; the check allows exactly that difference and nothing else;
  * thinking mode (`enable_thinking=True`): the generation prompt has no think block, the policy writes
    its own `<think>...</think>` each turn, and the template keeps it (Qwen3, for turns after the last
    user message) or drops it from history turns; the sampled block stays in the row either way (the
    row is never re-rendered), and the check allows a template's dropping of a history turn's block only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentrl.chat.template import encode, observation_messages, render_prompt, render_text, tool_messages
from agentrl.envs.base import Observation, ToolCall, ToolResult

_MARK = "\u2063AGENTRL_TURN_MARK\u2063"  # invisible separators: cannot merge with template text


@dataclass(frozen=True)
class TurnFormat:
    """What the template wraps around one assistant turn, as token ids.

    Attributes:
        eot_ids: the end-of-turn token(s) the assistant emits (the sampler stops on the first).
        header_ids: what the generation prompt appends for a new assistant turn (incl. any think stub).
        stub_ids: the part of `header_ids` that history re-rendering may drop (empty if none).
        think_ids: (open, close) ids of the template's think tags (Qwen3 `<think>`, `</think>`), read off
            its non-thinking stub; () when the template has no thinking switch.
    """

    eot_text: str
    eot_ids: tuple[int, ...]
    header_ids: tuple[int, ...]
    stub_ids: tuple[int, ...]
    think_ids: tuple[int, ...] = ()


def turn_format(tokenizer: Any, *, enable_thinking: bool = False) -> TurnFormat:
    """Read the end-of-turn marker and the assistant header off the template.

    Raises:
        ValueError: the template does not render an assistant message's content, or does not close an
            assistant turn with a special token.
    """
    user = [{"role": "user", "content": "x"}]
    closed = render_text(tokenizer, user + [{"role": "assistant", "content": _MARK}], None, add_generation_prompt=False)
    if _MARK not in closed:
        raise ValueError("chat template does not render an assistant message's content (a user + assistant "
                         f"conversation renders as {closed[:120]!r}); pass a chat template that does, e.g. "
                         "--chat-template chatml-tools")
    after = closed.split(_MARK, 1)[1]
    special = sorted(tokenizer.all_special_tokens + list(tokenizer.get_added_vocab()), key=len, reverse=True)
    eot = next((s for s in special if s and after.startswith(s)), None)
    if eot is None:
        raise ValueError(f"chat template ends an assistant turn with {after!r}, not with a special token")
    plain = render_text(tokenizer, user, None, add_generation_prompt=True, enable_thinking=True)
    gen = render_text(tokenizer, user, None, add_generation_prompt=True, enable_thinking=enable_thinking)
    base = render_text(tokenizer, user, None, add_generation_prompt=False)
    stub = gen[len(plain) :] if gen.startswith(plain) else ""
    if not gen.startswith(base):
        raise ValueError("chat template's generation prompt does not extend the rendered conversation")
    off = render_text(tokenizer, user, None, add_generation_prompt=True, enable_thinking=False)
    off_stub = [i for i in encode(tokenizer, off[len(plain) :] if off.startswith(plain) else "")
                if tokenizer.decode([i]).strip()]  # the stub's tags, without its whitespace
    return TurnFormat(
        eot_text=eot,
        eot_ids=tuple(encode(tokenizer, eot)),
        header_ids=tuple(encode(tokenizer, gen[len(base) :])),
        stub_ids=tuple(encode(tokenizer, stub)),
        think_ids=(off_stub[0], off_stub[-1]) if len(off_stub) >= 2 else (),
    )


def observation_ids(
    results: list[ToolResult] | tuple[ToolResult, ...],
    tokenizer: Any,
    *,
    tools: list[dict[str, Any]] | None = None,
    hit_token_limit: bool = False,
    enable_thinking: bool = False,
    fmt: TurnFormat | None = None,
) -> list[int]:
    """Token ids appended after a sampled assistant turn that made tool calls.

    The ids are the template's own rendering of: the end-of-turn glue, the tool-response block(s)
    (several results render as consecutive blocks in one message where the template does so), and
    the next assistant header. They are cut from a rendering of
    [user, assistant(MARK), tool results...] right after the assistant's end-of-turn token.

    Args:
        results: the turn's tool results, in call order (at least one).
        tokenizer: an HF tokenizer with a chat template.
        tools: the environment's tool schemas (rendered as the real conversation has them).
        hit_token_limit: the turn has no end-of-turn token; prepend it.
        fmt: a cached `turn_format(tokenizer)`.

    Returns:
        list[int] of token ids; policy mask 0.

    Raises:
        ValueError: no results, or the rendering does not contain the assistant turn intact.
    """
    if not results:
        raise ValueError("observation_ids needs at least one tool result")
    return between_turns_ids(tool_messages(results), tokenizer, tools=tools, hit_token_limit=hit_token_limit,
                             enable_thinking=enable_thinking, fmt=fmt)


def between_turns_ids(
    messages: list[dict[str, Any]],
    tokenizer: Any,
    *,
    tools: list[dict[str, Any]] | None = None,
    hit_token_limit: bool = False,
    enable_thinking: bool = False,
    fmt: TurnFormat | None = None,
) -> list[int]:
    """Token ids between two assistant turns: end-of-turn glue, `messages` (tool results, or any
    non-assistant messages), and the next assistant header; the general form of `observation_ids`.

    Raises:
        ValueError: the rendering does not contain the assistant turn intact, or does not close it
            with the end-of-turn token.
    """
    fmt = fmt or turn_format(tokenizer, enable_thinking=enable_thinking)
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARK}] + list(messages)
    full = render_text(tokenizer, msgs, tools, add_generation_prompt=True, enable_thinking=enable_thinking)
    if full.count(_MARK) != 1:
        raise ValueError("chat template did not render the assistant turn verbatim; cannot cut observations")
    after = encode(tokenizer, full.split(_MARK, 1)[1])
    n = len(fmt.eot_ids)
    if tuple(after[:n]) != fmt.eot_ids:
        raise ValueError("chat template does not close the assistant turn with its end-of-turn token")
    return after if hit_token_limit else after[n:]


def assistant_message(calls: list[ToolCall] | tuple[ToolCall, ...] = (), content: str = "") -> dict[str, Any]:
    """An assistant chat message carrying `calls` as structured `tool_calls` (HF / OpenAI form), so the
    template itself writes the call text (Qwen3: `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`)."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                             for c in calls]
    return msg


def assistant_turn_ids(
    tokenizer: Any,
    history: list[dict[str, Any]],
    message: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = None,
    enable_thinking: bool = False,
    fmt: TurnFormat | None = None,
) -> list[int]:
    """The ids a policy would sample to write `message` as its next turn after `history`.

    Cut from the template's own renderings: render(history + [message]) minus render(history, with
    the generation prompt), up to and including the end-of-turn token. So call formatting (tool-call
    JSON, separators) and the end-of-turn token are exactly what the template expects.

    Returns:
        list[int] ending with the end-of-turn id(s); policy mask 1 on all of them.

    Raises:
        ValueError: the rendering with `message` does not extend the generation prompt, or has no
            end-of-turn marker after it.
    """
    fmt = fmt or turn_format(tokenizer, enable_thinking=enable_thinking)
    prompt = render_text(tokenizer, history, tools, add_generation_prompt=True, enable_thinking=enable_thinking)
    full = render_text(tokenizer, list(history) + [message], tools, add_generation_prompt=False,
                       enable_thinking=enable_thinking)
    if not full.startswith(prompt):
        raise ValueError("chat template renders an assistant message differently from its generation prompt; "
                         "cannot cut the turn's ids")
    end = full.find(fmt.eot_text, len(prompt))
    if end < 0:
        raise ValueError("chat template did not close the assistant message with its end-of-turn token")
    return encode(tokenizer, full[len(prompt) : end + len(fmt.eot_text)])


def assert_conversation_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    ids: list[int],
    turn_starts: list[int],
    *,
    enable_thinking: bool = False,
    fmt: TurnFormat | None = None,
    what: str = "conversation",
) -> None:
    """Check that incremental `ids` equal the template's rendering of the whole conversation `messages`.

    Args:
        messages: the conversation, ending with the assistant message whose turn `ids` end with.
        ids: prompt + completion ids, ending with that assistant turn's end-of-turn token.
        turn_starts: index in `ids` of the first token of each assistant turn (after its header).

    Raises:
        TitoMismatch: naming the first differing token (history think blocks that the template drops
            are allowed to differ, as in `assert_tito_consistent`).
    """
    fmt = fmt or turn_format(tokenizer, enable_thinking=enable_thinking)
    text = render_text(tokenizer, messages, tools, add_generation_prompt=False, enable_thinking=enable_thinking)
    want = encode(tokenizer, text[: text.rfind(fmt.eot_text) + len(fmt.eot_text)])
    history = [s - len(fmt.stub_ids) for s in turn_starts[:-1]]  # the last turn keeps its header as generated
    _compare(tokenizer, list(ids), history, want, fmt, what)


class TitoMismatch(AssertionError):
    """The incremental token path differs from the template's rendering of the same conversation."""


def _probe_call(tool: dict[str, Any], k: int) -> ToolCall:
    """A well-formed call of `tool` whose text has quotes, backslashes, unicode and newlines."""
    spec = tool.get("function", tool)
    props = (spec.get("parameters") or {}).get("properties") or {}
    args = {p: f'v{k} "q" \\ é\nline' for p in list(props)[:2]}
    raw = "<tool_call>\n" + json.dumps({"name": spec["name"], "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
    return ToolCall(name=spec["name"], arguments=args, raw=raw)


def _diff_message(tokenizer: Any, got: list[int], want: list[int], what: str) -> str:
    i = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    ctx = lambda ids: repr(tokenizer.decode(ids[max(0, i - 8) : i + 8]))  # noqa: E731
    return (
        f"token-in/token-out mismatch ({what}) at token {i} (lengths {len(got)} vs {len(want)}): "
        f"incremental {ctx(got)} vs template {ctx(want)}"
    )


def _think_block_len(tokenizer: Any, ids: list[int], pos: int, fmt: TurnFormat) -> int:
    """Length of the think block starting at `ids[pos]` (0 if none): the template's empty stub, or, in
    thinking mode, `<think>` ... `</think>` and the whitespace-only tokens after it."""
    s = len(fmt.stub_ids)
    if s and tuple(ids[pos : pos + s]) == fmt.stub_ids:
        return s
    if not fmt.think_ids or pos >= len(ids) or ids[pos] != fmt.think_ids[0]:
        return 0
    try:
        end = ids.index(fmt.think_ids[1], pos + 1) + 1
    except ValueError:
        return 0
    while end < len(ids) and not tokenizer.decode([ids[end]]).strip():
        end += 1
    return end - pos


def _compare(tokenizer: Any, got: list[int], history_starts: list[int], want: list[int], fmt: TurnFormat, what: str):
    """Equal, or equal once the think block of some *history* assistant turns is dropped where the
    template drops it (its empty stub, or a thinking-mode block; a block the template keeps stays)."""
    if got == want:
        return
    stripped: list[int] = []
    prev = 0
    for pos in history_starts:
        stripped += got[prev:pos]
        prev = pos
        n = _think_block_len(tokenizer, got, pos, fmt)
        if n and want[len(stripped) : len(stripped) + n] != got[pos : pos + n]:
            prev = pos + n  # the template re-renders this history turn without its think block
    stripped += got[prev:]
    if stripped != want:
        note = " (after dropping the history think blocks the template drops)" if stripped != got else ""
        raise TitoMismatch(_diff_message(tokenizer, stripped, want, what + note))


def assert_tito_consistent(tokenizer: Any, obs: Observation, *, enable_thinking: bool = False) -> TurnFormat:
    """Start-up check: the incremental token path equals the template's rendering.

    Checks, for `obs` (system, user, the environment's tool schemas): the prompt; a turn with one call
    and one result; a turn with two calls and two results (consecutive response blocks); two turns in a
    row; a turn cut at the token limit (no end-of-turn token); and a final answer after tool turns.

    Returns:
        The template's `TurnFormat` (for the sampler's stop tokens).

    Raises:
        TitoMismatch: naming the case, the first differing token and both decodings.
        ValueError: the tokenizer has no usable chat template, the template ignores the tool schemas, or
            `obs.tools` is empty.
    """
    if not obs.tools:
        raise ValueError("assert_tito_consistent needs the environment's tool schemas (obs.tools is empty)")
    fmt = turn_format(tokenizer, enable_thinking=enable_thinking)
    base = observation_messages(obs)
    render = lambda msgs, gen: encode(  # noqa: E731
        tokenizer, render_text(tokenizer, msgs, obs.tools, add_generation_prompt=gen, enable_thinking=enable_thinking)
    )
    prompt = render_prompt(tokenizer, obs, enable_thinking=enable_thinking)
    bare = encode(tokenizer, render_text(tokenizer, base, None, add_generation_prompt=True,
                                         enable_thinking=enable_thinking))
    if prompt == bare:
        raise ValueError("the chat template renders no tool schemas (the prompt is the same with and without "
                         "tools), so the model is never told its tools; pass a tool-calling template: "
                         "--chat-template chatml-tools (agentrl.chat.bundled) or a .jinja path")
    if prompt != render(base, True):
        raise TitoMismatch("render_prompt differs from the template's rendering of [system, user] + tools")
    if prompt[-len(fmt.header_ids) :] != list(fmt.header_ids):
        raise TitoMismatch("the prompt does not end with the template's assistant header")
    t0, t1 = obs.tools[0], obs.tools[min(1, len(obs.tools) - 1)]
    one = [_probe_call(t0, 1)]
    two = [_probe_call(t0, 2), _probe_call(t1, 3)]
    res = lambda calls: [ToolResult(c, "ok", f"result {i}: ok \"é\" \\\n  indented\n") for i, c in enumerate(calls)]  # noqa: E731
    # thinking mode: the policy opens every turn with its own think block (the template's canonical form)
    th = (lambda k: f"<think>\nStep {k}: \"é\" \\ check.\n</think>\n\n") if enable_thinking and fmt.think_ids else (lambda k: "")  # noqa: E731
    cases = {
        "one tool result": [(th(1) + "Reading.\n" + one[0].raw, one, False)],
        "two tool results": [(th(1) + "\n".join(c.raw for c in two), two, False)],
        "two turns": [(th(1) + one[0].raw, one, False), (th(2) + two[0].raw + "\n" + two[1].raw, two, False)],
        "turn cut at the token limit": [(th(1) + '<tool_call>\n{"name": "' + one[0].name, one, True)],
    }
    for what, turns in cases.items():
        ids, msgs, starts = list(prompt), list(base), []
        for text, calls, cut in turns:
            starts.append(len(ids) - len(fmt.stub_ids))  # where this turn's think stub (if any) begins
            ids += encode(tokenizer, text) + ([] if cut else list(fmt.eot_ids))
            ids += observation_ids(
                res(calls), tokenizer, tools=obs.tools, hit_token_limit=cut, fmt=fmt, enable_thinking=enable_thinking
            )
            msgs += [{"role": "assistant", "content": text}] + tool_messages(res(calls))
        _compare(tokenizer, ids, starts, render(msgs, True), fmt, what)
        # The final answer is the last assistant turn: the template keeps its header as generated.
        final = ids + encode(tokenizer, th(9) + "Done.") + list(fmt.eot_ids)
        text = render_text(tokenizer, msgs + [{"role": "assistant", "content": th(9) + "Done."}], obs.tools,
                           add_generation_prompt=False, enable_thinking=enable_thinking)
        want = encode(tokenizer, text[: text.rfind(fmt.eot_text) + len(fmt.eot_text)])
        _compare(tokenizer, final, starts, want, fmt, what + ", then a final answer")
    return fmt
