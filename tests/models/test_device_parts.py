"""scripts/device_parts.sh: a file split into parts for size-limited transfers and joined back, checked."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_parts.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_split_then_join_gives_the_file_back_and_a_damaged_part_is_named(tmp_path):
    blob = os.urandom(5 * (1 << 20) + 12345)  # 5 MiB and a bit: 3 parts of 2 MiB
    src = tmp_path / "model.gguf"
    src.write_bytes(blob)
    parts = tmp_path / "parts"
    r = _run("split", str(src), str(parts), "2")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in parts.iterdir())
    assert names == ["model.gguf.part00", "model.gguf.part01", "model.gguf.part02", "model.gguf.sha256"]
    assert (parts / "model.gguf.part00").stat().st_size == 2 << 20
    manifest = (parts / "model.gguf.sha256").read_text().splitlines()
    assert manifest[-1] == f"{hashlib.sha256(blob).hexdigest()}  model.gguf"
    out = tmp_path / "there" / "model.gguf"
    out.parent.mkdir()
    r = _run("join", str(parts), "model.gguf", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == blob and "joined 3 parts" in r.stdout
    damaged = bytearray((parts / "model.gguf.part01").read_bytes())
    damaged[7] ^= 0xFF
    (parts / "model.gguf.part01").write_bytes(bytes(damaged))
    out.unlink()
    r = _run("join", str(parts), "model.gguf", str(out))
    assert r.returncode == 2 and "model.gguf.part01: FAILED" in r.stdout + r.stderr and not out.exists()
    (parts / "model.gguf.part02").unlink()
    r = _run("join", str(parts), "model.gguf", str(out))
    assert r.returncode == 2 and "missing or damaged" in r.stderr


def test_bad_arguments_are_one_line_errors(tmp_path):
    assert "no such file" in _run("split", str(tmp_path / "nope"), str(tmp_path)).stderr
    (tmp_path / "f").write_bytes(b"x")
    assert "positive integer" in _run("split", str(tmp_path / "f"), str(tmp_path / "d"), "0").stderr
    assert "no manifest" in _run("join", str(tmp_path), "f", str(tmp_path / "o")).stderr
    assert _run("frobnicate").returncode == 2


def test_a_bundle_is_joined_unpacked_and_its_xz_files_decompressed(tmp_path):
    """scripts/device_unpack.sh, the GPU side of one bundled transfer: parts -> checked tar -> files, with each
    carried .xz decompressed (executable, as the opencode binary must be) and the parts and tar removed."""
    import lzma
    import tarfile

    stage = tmp_path / "stage"
    stage.mkdir()
    weights = os.urandom(3 << 20)
    (stage / "model.gguf").write_bytes(weights)
    binary = b"#!/bin/sh\necho opencode 1.18.33\n" * 1000
    (stage / "opencode.xz").write_bytes(lzma.compress(binary))
    bundle = tmp_path / "bundle.tar"
    with tarfile.open(bundle, "w") as tar:
        for f in sorted(stage.iterdir()):
            tar.add(f, arcname=f.name)
    parts = tmp_path / "parts"
    assert _run("split", str(bundle), str(parts), "1").returncode == 0
    dest = tmp_path / "dev"
    unpack = SCRIPT.parent / "device_unpack.sh"
    r = subprocess.run(["bash", str(unpack), str(parts), "bundle.tar", str(dest), str(tmp_path / "site")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (dest / "model.gguf").read_bytes() == weights
    assert (dest / "opencode").read_bytes() == binary and os.access(dest / "opencode", os.X_OK)
    assert not (dest / "opencode.xz").exists() and not (dest / "bundle.tar").exists()
    assert not list(parts.glob("bundle.tar.part*"))  # the parts are as large as the model: removed once joined
    (parts / "bundle.tar.part00").write_bytes(b"x")  # a lone damaged part: refused, named, nothing unpacked
    r = subprocess.run(["bash", str(unpack), str(parts), "bundle.tar", str(tmp_path / "dev2")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "bundle.tar.part" in r.stdout + r.stderr and not (tmp_path / "dev2" / "model.gguf").exists()


def test_device_bundle_refuses_a_checkout_without_its_venv(tmp_path):
    """scripts/device_bundle.sh (the whole GPU bundle; run for real on 2026-12-02: 29 parts of 41 MiB in 86 s) needs
    the checkout's .venv for the pinned model table and the checks: without it, one line and exit 2, nothing made."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    bundle = SCRIPT.parent / "device_bundle.sh"
    (repo / "scripts" / "device_bundle.sh").write_text(bundle.read_text())
    r = subprocess.run(["bash", str(repo / "scripts" / "device_bundle.sh"), "qwen2.5-coder-0.5b-instruct",
                        str(tmp_path / "work")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "run scripts/setup.sh first" in r.stderr
    assert not (tmp_path / "work").exists() and not (repo / ".xfer").exists()
