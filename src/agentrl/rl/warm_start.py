"""Warm starts: what runs on the policy before the first held-out evaluation (`RLConfig.warm_start.method`).

Not the warm starts themselves: the built-in "sft" is listed by import path
("agentrl.sft.warm_start:sft_warm_start", resolved when a run first uses it: the layering rule keeps rl/
from importing sft, and nothing registers itself on import); others are added with register_warm_start.

A warm start is called as `fn(sess)` with the open agentrl.rl.session.RunSession (its model is trained
in place) and returns a JSON-ready summary, stored as the results file's `warm_start` section. A `check`
(optional) is called as `check(cfg)` before anything is written and raises ValueError when the warm
start cannot run that config (e.g. an environment without a scripted expert).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.registry import Registry, resolve

WarmStart = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class WarmStartSpec:
    """A registered warm start: `fn(sess)` and its optional `check(cfg)` (module docstring)."""

    name: str
    fn: WarmStart | str
    check: Callable[[Any], None] | str | None = None


_WARM_STARTS: Registry[WarmStartSpec] = Registry("a registered warm start", (
    WarmStartSpec("sft", "agentrl.sft.warm_start:sft_warm_start", check="agentrl.sft.warm_start:check_sft_warm_start"),
), hint="add one with agentrl.rl.warm_start.register_warm_start")


def register_warm_start(name: str, fn: WarmStart | str, check: Callable[[Any], None] | str | None = None) -> None:
    """Make `--warm-start name` (RLConfig.warm_start.method) run `fn(sess)` before the first evaluation (module docstring); `fn`
    and `check` may be "module:attr" references (agentrl.registry.resolve)."""
    if not name or name == "none":
        raise ValueError(f"a warm start needs a name other than '' and 'none', got {name!r}")
    _WARM_STARTS.register(WarmStartSpec(name, fn, check))


def warm_start_fn(name: str) -> WarmStart:
    """The registered warm start `name`.

    Raises:
        ValueError: nothing registered under `name` (lists what is, and how to register "sft").
    """
    return resolve(_WARM_STARTS.lookup(name, flag="--warm-start").fn)


def check_warm_start(cfg: Any) -> None:
    """Before a run: `cfg.warm_start.method` is "none", or registered and its check accepts `cfg` (ValueError if not)."""
    if cfg.warm_start.method == "none":
        return
    spec = _WARM_STARTS.lookup(cfg.warm_start.method, flag="--warm-start")
    if spec.check is not None:
        resolve(spec.check)(cfg)
