import pytest

from agentrl.paths import resolve_asset, resolve_data


def test_resolves_shared_assets_and_data():
    tok = resolve_asset("qwen3-tokenizer")
    assert (tok / "tokenizer.json").is_file()
    assert resolve_data("mbpp/sanitized-mbpp.json").is_file()


def test_env_var_takes_precedence(tmp_path, monkeypatch):
    (tmp_path / "thing").mkdir()
    monkeypatch.setenv("AGENTRL_ASSETS", str(tmp_path))
    assert resolve_asset("thing") == tmp_path / "thing"


def test_missing_asset_error_names_places(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_ASSETS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="AGENTRL_ASSETS"):
        resolve_asset("no-such-asset")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_asset("x", explicit=tmp_path / "nope")
