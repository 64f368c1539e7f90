"""KV kept across sampler calls: each finished row's cache, keyed by the exact token ids it holds.

Not the decode loop (agentrl.rollout.fast_sampler) and not the episode driver. The driver's next context for
an episode is its last context + the sampled turn + the template's tool-response ids (token-in/token-out),
so the row's stored KV (last context + sampled ids but the last, which was never fed) is an exact prefix of
it: the next turn prefills only the appended ids. A context that shares only the first p ids of an entry
(e.g. a group's rows on later turns share their prompt) reuses those p. Matching is on token ids, never on
text, so KV is reused only for identical ids at identical positions. Entries are tied to the weights they were computed with
(`weights_version`): any in-place change of a parameter (optimizer step, load_state_dict) drops them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

_HEAD = 8  # entries are bucketed by their first _HEAD ids (shorter entries: one bucket, always searched)


def weights_version(model: Any) -> tuple[int, ...]:
    """A tag that changes whenever a parameter is replaced or modified in place (torch's `_version`
    counter is bumped by every in-place op: optimizer steps, copy_, load_state_dict)."""
    params = list(model.parameters())
    return (len(params), sum(id(p) for p in params), sum(p._version for p in params))


@dataclass
class Entry:
    """One row's KV: per layer k/v [n_kv_heads, n_tokens, head_dim] for the tokens of `key` in order."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @property
    def tokens(self) -> int:
        return int(self.k[0].shape[1]) if self.k else 0


class PrefixStore:
    """Token-id-keyed KV entries of the last sampler call (a call's entries replace the previous call's).

    Args:
        max_tokens: cap on stored tokens summed over entries (later rows are not stored once it is reached).
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = int(max_tokens)
        self.entries: dict[tuple[int, ...], Entry] = {}
        self.pending: dict[tuple[int, ...], Entry] = {}
        self._index: dict[tuple[int, ...], list[tuple[np.ndarray, Entry]]] = {}
        self.version: tuple[int, ...] | None = None
        self._pending_tokens = 0

    def begin(self, version: tuple[int, ...]) -> None:
        """Start a call: drop everything if the weights changed since the entries were made."""
        if version != self.version:
            self.entries.clear()
        self.version = version
        self._index = {}
        for key, e in self.entries.items():
            self._index.setdefault(key[:_HEAD] if len(key) >= _HEAD else (), []).append(
                (np.asarray(key, dtype=np.int64), e))
        self.pending, self._pending_tokens = {}, 0

    def lookup(self, context: list[int]) -> tuple[int, Entry | None]:
        """(p, entry): the entry sharing the longest common prefix of ids with `context`, and its length p
        (at most len(context) - 1, so at least one token is left to prefill); (0, None) when none shares a
        token (entries sharing fewer than their first 8 ids are not searched, unless shorter than 8).
        The entry's KV for its first p tokens is that of context[:p]."""
        cands = list(self._index.get((), []))
        if len(context) > _HEAD:
            cands += self._index.get(tuple(context[:_HEAD]), [])
        if not cands:
            return 0, None
        c = np.asarray(context, dtype=np.int64)
        best, best_e = 0, None
        for key, e in cands:
            m = min(len(key), len(c) - 1)
            diff = np.flatnonzero(key[:m] != c[:m])
            p = int(diff[0]) if diff.size else m
            if p > best:
                best, best_e = p, e
        return best, best_e

    def wants(self, n_tokens: int) -> bool:
        return self._pending_tokens + n_tokens <= self.max_tokens

    def put(self, key: tuple[int, ...], entry: Entry) -> None:
        self.pending[key] = entry
        self._pending_tokens += entry.tokens

    def finish(self) -> None:
        """End a call: its rows become the entries the next call may extend."""
        self.entries, self.pending = self.pending, {}

    def clear(self) -> None:
        self._index = {}
        self.entries.clear()
        self.pending.clear()
        self._pending_tokens = 0
