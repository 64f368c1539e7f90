"""Bundled chat templates and `--chat-template NAME|PATH`: give a tokenizer a tool-calling template.

Not rendering (agentrl.chat.template) and not the start-up check (agentrl.chat.tito, which checks a
replaced template exactly as it checks a model's own). A model whose template knows no tools
(SmolLM2's ChatML, most base-model chat templates) gets the bundled "chatml-tools" template: ChatML
with Hermes / Qwen2.5-style `<tool_call>` JSON, the format agentrl.chat.parse reads.

"qwen2.5-tools" is Qwen2.5-Instruct's own template. Qwen2.5-Coder-Instruct ships the same template with
one difference: its tool instruction shows the call as `{{"name": <function-name>, ...}}` (doubled
braces, printed literally), and the raw Coder models copy it. On the H200, raw Qwen2.5-Coder-1.5B-Instruct
on MBPP (python-session) wrote 2.5 tool calls per episode of which 1.5 were `{{...}}` bad JSON
(results/coder/README.md); `--chat-template qwen2.5-tools` renders the single-brace instruction and is
also a template TRL's GRPOTrainer recognises.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

BUNDLED = {"chatml-tools": "chatml-tools.jinja", "qwen2.5-tools": "qwen2.5-tools.jinja"}


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template's source and where it came from.

    Attributes:
        name: the bundled name ("chatml-tools"), or the path it was read from.
        source: the Jinja text.
        sha256: hex sha256 of `source` (UTF-8), recorded in results files.
    """

    name: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def describe(self) -> dict[str, str]:
        """JSON-ready record for results files: name, sha256 and the full source."""
        return {"name": self.name, "sha256": self.sha256, "source": self.source}


def bundled_template(name: str) -> ChatTemplate:
    """The bundled template `name` (one of BUNDLED).

    Raises:
        ValueError: unknown name (the known ones are listed).
    """
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled chat template {name!r}; expected one of {', '.join(BUNDLED)} or a path")
    return ChatTemplate(name, resources.files("agentrl.chat").joinpath("templates", BUNDLED[name]).read_text())


def resolve_chat_template(name_or_path: str) -> ChatTemplate:
    """`--chat-template` value -> ChatTemplate: a bundled name, a .jinja file, or a tokenizer_config.json
    (its "chat_template" string).

    Raises:
        FileNotFoundError: a path that does not exist; ValueError: unknown name, empty template, a file
        that is not UTF-8, or a JSON file that does not parse or has no string "chat_template".
    """
    if name_or_path in BUNDLED:
        return bundled_template(name_or_path)
    p = Path(name_or_path).expanduser()
    if (p.suffix or "/" in name_or_path) and p.exists() and not p.is_file():  # a directory, /dev/zero, a FIFO
        raise ValueError(f"--chat-template {name_or_path!r} is not a regular file; expected a .jinja or .json file")
    if not p.is_file():
        if p.suffix or "/" in name_or_path:
            raise FileNotFoundError(f"--chat-template {name_or_path!r}: no such file")
        return bundled_template(name_or_path)  # raises naming the bundled ones
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM would be rendered into every prompt
    except UnicodeDecodeError as e:
        raise ValueError(f"--chat-template {str(p)!r}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if p.suffix == ".json":
        import json

        from agentrl.preflight import loads_json

        try:
            data = loads_json(text, f"--chat-template {str(p)!r}")
        except json.JSONDecodeError as e:
            raise ValueError(f"--chat-template {str(p)!r}: not valid JSON ({e})") from None
        tpl = data.get("chat_template") if isinstance(data, dict) else None
        if not isinstance(tpl, str):
            raise ValueError(f"--chat-template {str(p)!r}: JSON file without a string 'chat_template'")
        text = tpl
    if not text.strip():
        raise ValueError(f"--chat-template {str(p)!r} is empty")
    return ChatTemplate(str(p), text)


def apply_chat_template(tokenizer: Any, name_or_path: str) -> ChatTemplate:
    """Replace `tokenizer.chat_template` with `--chat-template name_or_path` (in place), so that every
    rendering uses it and `tokenizer.save_pretrained` writes it (chat_template.jinja) beside the
    weights: a checkpoint or SFT output reloads with the same template.

    Raises:
        as resolve_chat_template.
    """
    tpl = resolve_chat_template(name_or_path)
    tokenizer.chat_template = tpl.source
    return tpl


def tokenizer_template(tokenizer: Any, name: str = "model") -> ChatTemplate:
    """The template a tokenizer renders with now (its own or an applied one), as a ChatTemplate."""
    from agentrl.chat.template import chat_template_of

    return ChatTemplate(name, chat_template_of(tokenizer))
