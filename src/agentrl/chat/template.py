"""Render prompts with the tokenizer's own chat template and the environment's tool schemas.

Not token-in/token-out bookkeeping (agentrl.chat.tito) and not tool-call parsing (agentrl.chat.parse).
Nothing here is specific to Qwen3: whether the template knows `enable_thinking` is read from the
template source, and the end-of-turn marker is read from a rendering.
"""

from __future__ import annotations

from typing import Any

from agentrl.envs.base import Observation, ToolResult


def chat_template_of(tokenizer: Any) -> str:
    """The tokenizer's chat template source.

    Raises:
        ValueError: the tokenizer has no chat template (naming the tokenizer).
    """
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):  # several named templates: the default one renders chats
        tpl = tpl.get("default")
    if not tpl:
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise ValueError(
            f"tokenizer {name!r} has no chat template (tokenizer_config.json 'chat_template' or "
            "chat_template.jinja expected); agentrl renders prompts only with the model's own template"
        )
    return tpl


def supports_enable_thinking(tokenizer: Any) -> bool:
    """True if the template reads an `enable_thinking` variable (Qwen3-style thinking switch)."""
    return "enable_thinking" in chat_template_of(tokenizer)


def template_kwargs(tokenizer: Any, enable_thinking: bool = False) -> dict[str, Any]:
    """Extra template variables: `enable_thinking` only where the template reads it."""
    return {"enable_thinking": enable_thinking} if supports_enable_thinking(tokenizer) else {}


def observation_messages(obs: Observation) -> list[dict[str, Any]]:
    """The reset observation as chat messages: [system (if any), user]."""
    msgs = [{"role": "system", "content": obs.system}] if obs.system else []
    return msgs + [{"role": "user", "content": obs.user}]


def tool_messages(results: list[ToolResult] | tuple[ToolResult, ...]) -> list[dict[str, Any]]:
    """Tool results as `role: tool` messages, in call order (one message per result)."""
    return [{"role": "tool", "name": r.call.name or "invalid", "content": r.content} for r in results]


def render_text(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    add_generation_prompt: bool,
    enable_thinking: bool = False,
) -> str:
    """Render messages (and tool schemas) to text with the tokenizer's chat template.

    Raises:
        ValueError: no chat template (see `chat_template_of`), or the template does not compile or fails
            while rendering (a Jinja error: its kind, line and message, one line).
    """
    from jinja2.exceptions import TemplateError

    chat_template_of(tokenizer)
    try:
        return tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **template_kwargs(tokenizer, enable_thinking),
        )
    except TemplateError as e:
        line = getattr(e, "lineno", None)
        where = f" at line {line}" if line else ""
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(f"chat template of {name!r} (its own, or --chat-template's) cannot render: "
                         f"{type(e).__name__}{where}: {e}") from None


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of rendered text; the template already wrote every special token (no BOS added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_prompt(tokenizer: Any, obs: Observation, *, enable_thinking: bool = False) -> list[int]:
    """[P] token ids of the prompt: system, user, tool schemas, and the assistant header.

    In non-thinking mode (default) templates that support it append their empty think block to
    the header (Qwen3: `<think>\\n\\n</think>\\n\\n`), so the policy answers directly.
    """
    text = render_text(
        tokenizer, observation_messages(obs), obs.tools, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    return encode(tokenizer, text)
