"""Where shared assets and data live: resolution order for files the project never commits.

Not a downloader: `agentrl assets fetch` (agentrl.models.assets) fetches; this module only finds.
Order (docs/models.md): an explicit path, then the environment variable
(`AGENTRL_ASSETS` / `AGENTRL_DATA`), then `shared/assets|data` beside the checkout
(or beside the current directory), then (assets only) the caller's own fallbacks such as the HF cache.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]  # src/agentrl/paths.py -> repo root


def _shared_candidates(kind: str) -> list[Path]:
    """Candidate `shared/<kind>` folders beside the checkout and beside the current directory."""
    out = []
    for base in (_REPO_ROOT, Path.cwd()):
        out += [base.parent / "shared" / kind, base / "shared" / kind]
    return out


def _resolve(kind: str, env_var: str, name: str, explicit: str | os.PathLike | None) -> Path:
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"{kind} path {str(p)!r} does not exist")
        return p
    tried = []
    env = os.environ.get(env_var)
    roots = ([Path(env)] if env else []) + _shared_candidates(kind)
    for root in roots:
        p = root / name
        tried.append(str(p))
        if p.exists():
            return p
    raise FileNotFoundError(
        f"could not find {kind} {name!r}; set {env_var} or pass a path. Tried: " + ", ".join(tried)
    )


def resolve_asset(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """Find asset folder/file `name` (e.g. "qwen3-tokenizer").

    Raises:
        FileNotFoundError: naming every place looked in.
    """
    return _resolve("assets", "AGENTRL_ASSETS", name, explicit)


def resolve_data(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """Find data file `name` (e.g. "mbpp/sanitized-mbpp.json").

    Raises:
        FileNotFoundError: naming every place looked in.
    """
    return _resolve("data", "AGENTRL_DATA", name, explicit)
