"""A trimmed copy of a byte-level BPE tokenizer: only the tokens a corpus uses, the same segmentation on it.

Not a tokenizer trainer: nothing is learned. From a source HF fast tokenizer (the real Qwen3 one) and the
token ids that a corpus encodes to, this keeps those tokens, every token their BPE merges pass through
(`merge_closure`), the 256 byte-level symbols (so any text still encodes, losslessly, into shorter
pieces) and the added/special tokens (chat tokens), renumbers them (regular tokens in their original id
order, then the added tokens in theirs) and keeps the merges among kept tokens in their original order.

Why the segmentation of the corpus is unchanged: BPE merges, within each pre-tokenized word, the
lowest-ranked adjacent pair until none is left. Every merge applied to a corpus word produces a node of
the merge tree of one of the word's final tokens, and those nodes are exactly the intermediate symbols of
encoding that token's text alone, so they are all kept; the kept merges are a subset in the same order,
so at each step the pair the full tokenizer merges is still the lowest-ranked one left. Text outside the
corpus splits into smaller kept pieces (down to single bytes): `decode(encode(x)) == x` for every x.

The result is an ordinary `PreTrainedTokenizerFast` with the source's chat template, special tokens,
normalizer, pre-tokenizer and decoder, so a model with `vocab_size == len(tokenizer)` works with every
part of agentrl unchanged (the demo's model, agentrl.models.presets "demo-qwen3").
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def byte_level_alphabet() -> list[str]:
    """The 256 one-character strings byte-level BPE uses for the bytes 0..255, indexed by byte value
    (GPT-2's `bytes_to_unicode`, tokenizers' `ByteLevel.alphabet()`)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    by_byte = dict(zip(bs, cs, strict=True))
    return [chr(by_byte[b]) for b in range(256)]


def bpe_symbols(token: str, ranks: dict[tuple[str, str], int]) -> tuple[list[str], set[str]]:
    """Encode one word `token` (byte-level characters) with merge `ranks` as HF's BPE model does.

    Returns:
        (the final symbols, every symbol that existed during the merging, final ones included).
    """
    syms, seen = list(token), set(token)
    while len(syms) > 1:
        best, at = None, -1
        for i in range(len(syms) - 1):  # lowest rank, then leftmost (HF's merge queue order)
            r = ranks.get((syms[i], syms[i + 1]))
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        syms[at: at + 2] = [syms[at] + syms[at + 1]]
        seen.add(syms[at])
    return syms, seen


def merge_closure(tokens: Iterable[str], merges: list[tuple[str, str]]) -> set[str]:
    """`tokens` plus every symbol their own BPE merging passes through (module docstring).

    Raises:
        ValueError: a token that BPE does not build back from its characters with these merges (it could
            then not be the output of encoding any text).
    """
    ranks = {(a, b): i for i, (a, b) in enumerate(merges)}
    out: set[str] = set()
    for t in tokens:
        final, seen = bpe_symbols(t, ranks)
        if final != [t]:
            raise ValueError(f"token {t!r} is not built by the merges from its characters (BPE gives {final})")
        out |= seen
    return out


def _merge_pairs(raw: list[Any]) -> list[tuple[str, str]]:
    """tokenizer.json merges, either `["a b", ...]` (old format) or `[["a", "b"], ...]`, as pairs."""
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in raw]


def trimmed_vocab(tokenizer_json: dict[str, Any], used_ids: Iterable[int]) -> list[str]:
    """The regular (non-added) tokens a trimmed tokenizer keeps, in their original id order.

    Args:
        tokenizer_json: the source's parsed tokenizer.json (model type "BPE", byte-level).
        used_ids: source token ids a corpus encodes to; added-token ids among them are ignored (all
            added tokens are kept anyway).

    Raises:
        ValueError: not a BPE model, an id outside the vocabulary, or a token the merges do not build.
    """
    model = tokenizer_json["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"trimming needs a BPE tokenizer, got model type {model.get('type')!r}")
    vocab: dict[str, int] = model["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    added = {a["id"] for a in tokenizer_json.get("added_tokens", [])}
    used = set()
    for i in used_ids:
        if i in added:
            continue
        if i not in by_id:
            raise ValueError(f"token id {i} is neither in the vocabulary ({len(vocab)} tokens) nor an added token")
        used.add(by_id[i])
    alphabet = set(byte_level_alphabet())
    missing = alphabet - set(vocab)
    if missing:
        raise ValueError(f"not a byte-level BPE vocabulary: {len(missing)} of the 256 byte symbols are missing")
    keep = merge_closure(used, _merge_pairs(model["merges"])) | alphabet
    return sorted(keep, key=vocab.__getitem__)


def trimmed_tokenizer_files(source: str | os.PathLike, keep: list[str], out: str | os.PathLike) -> Path:
    """Write a trimmed tokenizer (tokenizer.json, tokenizer_config.json) of `source` into folder `out`.

    Args:
        source: folder with the source's tokenizer.json and tokenizer_config.json (chat template inside).
        keep: regular tokens to keep (`trimmed_vocab`); they get ids 0..len(keep)-1 in this order, the
            source's added tokens the ids after them, in their original order.
        out: folder to write (created).

    Returns:
        `out` as a Path.

    Raises:
        ValueError: a kept token is not in the source vocabulary, or the 256 byte symbols are not all kept.
    """
    src = Path(source)
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tc = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    unknown = [t for t in keep if t not in vocab]
    if unknown:
        raise ValueError(f"{len(unknown)} kept tokens are not in {src}'s vocabulary, e.g. {unknown[:3]}")
    if not set(byte_level_alphabet()) <= set(keep):
        raise ValueError("a trimmed byte-level tokenizer must keep all 256 byte symbols (lossless fallback)")
    new_vocab = {t: i for i, t in enumerate(keep)}
    kept = set(keep)
    tj["model"]["vocab"] = new_vocab
    tj["model"]["merges"] = [[a, b] for a, b in _merge_pairs(tj["model"]["merges"])
                             if a in kept and b in kept and a + b in kept]
    remap: dict[int, int] = {}
    for k, a in enumerate(sorted(tj.get("added_tokens", []), key=lambda a: a["id"])):
        remap[a["id"]] = len(keep) + k
        a["id"] = remap[a["id"]]
    if "added_tokens_decoder" in tc:
        tc["added_tokens_decoder"] = {str(remap[int(i)]): v for i, v in tc["added_tokens_decoder"].items()}
    dst = Path(out)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    (dst / "tokenizer_config.json").write_text(json.dumps(tc, ensure_ascii=False, indent=2), encoding="utf-8")
    return dst


def vocab_file_digest(keep: list[str]) -> str:
    """sha256 (hex) of the kept-token list, as stored beside it (detects a hand-edited or stale file)."""
    return hashlib.sha256(json.dumps(keep, ensure_ascii=False).encode("utf-8")).hexdigest()
