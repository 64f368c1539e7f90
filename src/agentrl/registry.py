"""Named registries: one table of name -> entry per kind (advantage estimators, token samplers, warm starts,
agent backends), with the lookup error and the --help text they share. Not any entry itself. A base
module: it imports nothing of agentrl, so every layer may use it.

Nothing registers itself on import. An entry that lives in a package above the registry's (the "sft"
warm start, the "opencode" agent backend) is listed by import path, `"agentrl.sft.warm_start:run"`,
and `resolve` imports it when a run first asks for it; so the Python API and the CLI see the same table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """An ordered, read-only-to-readers mapping name -> entry of one `kind` (e.g. "sampler"), filled by
    `register`. Readers use it as a Mapping (`in`, iteration in registration order, `[name]`) or
    `lookup(name, flag=...)` for the error a user should see.

    Args:
        kind: what an entry is, as the error message names it ("an advantage estimator", "a sampler").
        entries: registered at once, each under `key(entry)` (default: its `name` attribute).
        hint: appended to the unknown-name error (e.g. how entries get registered).
    """

    def __init__(self, kind: str, entries: Iterable[T] = (), *, key: Callable[[T], str] = attrgetter("name"),
                 hint: str = ""):
        self.kind, self.hint, self._key = kind, hint, key
        self._entries: dict[str, T] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: T) -> T:
        """Add (or replace) `entry` under `key(entry)`; returns it.

        Raises: ValueError: an empty name."""
        name = self._key(entry)
        if not name:
            raise ValueError(f"{self.kind}: an entry needs a non-empty name, got {name!r}")
        self._entries[name] = entry
        return entry

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, name: str, *, flag: str) -> T:
        """The entry called `name`.

        Raises: ValueError "<flag> '<name>' is not <kind>; expected one of a, b[ (hint)]"."""
        if name not in self._entries:
            known = ", ".join(self._entries) or "(none registered)"
            raise ValueError(f"{flag} {name!r} is not {self.kind}; expected one of {known}"
                             + (f" ({self.hint})" if self.hint else ""))
        return self._entries[name]

    def help(self, lead: str, describe: Callable[[T], str]) -> str:
        """`lead: describe(e1); describe(e2).`: a --help text with one entry per registered name."""
        return f"{lead}: " + "; ".join(describe(e) for e in self._entries.values()) + "."


def resolve(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    """The callable `ref` names: "package.module:attr" is imported now (its module on first use), and a
    callable is returned as it is.

    Raises:
        ValueError: a string that is not "module:attr".
        ImportError / AttributeError: the module or the attribute does not exist.
    """
    if callable(ref):
        return ref
    module, sep, attr = str(ref).partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"an entry reference must be 'package.module:attr', got {ref!r}")
    return getattr(importlib.import_module(module), attr)
