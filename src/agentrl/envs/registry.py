"""The environment registry: `make_env(name, **kwargs)` and ENV_NAMES. Not the environments themselves."""

from __future__ import annotations

from typing import Any

from agentrl.envs.base import Env

ENV_NAMES: tuple[str, ...] = ("edit-menu", "coding-tools", "python-session", "wordle")


def make_env(name: str, **kwargs: Any) -> Env:
    """A new environment by registry name; `kwargs` go to its constructor (e.g. sandbox=, max_turns=).

    Raises:
        ValueError: unknown name (lists the known ones).
    """
    if name == "edit-menu":
        from agentrl.envs.edit_menu import EditMenuEnv as cls
    elif name == "coding-tools":
        from agentrl.envs.coding_tools import CodingToolsEnv as cls
    elif name == "python-session":
        from agentrl.envs.python_session import PythonSessionEnv as cls
    elif name == "wordle":
        from agentrl.envs.wordle import WordleEnv as cls
    else:
        raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(ENV_NAMES)}")
    return cls(**kwargs)
