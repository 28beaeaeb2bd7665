"""One settings object: CLI flags > LAVA_* environment > TOML file > defaults."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from lava import cli
from lava.errors import ConfigError
from lava.settings import Settings


def test_defaults_match_what_magma_expects(monkeypatch) -> None:
    monkeypatch.delenv("LAVA_CONFIG", raising=False)
    settings = Settings.load()
    assert (settings.host, settings.port, settings.backend) == ("127.0.0.1", 8888, "local")
    assert settings.request_deadline_s < 360  # the consumers' timeout


def test_precedence(tmp_path, monkeypatch) -> None:
    config = tmp_path / "lava.toml"
    config.write_text('port = 9001\nbackend = "scripted"\nmax_tokens = 64\ntemperature = 0.2\n')
    monkeypatch.setenv("LAVA_PORT", "9002")
    monkeypatch.setenv("LAVA_MAX_TOKENS", "128")
    settings = Settings.load(config, port=9003)
    assert settings.port == 9003  # flag beats env and file
    assert settings.max_tokens == 128  # env beats file
    assert settings.backend == "scripted" and settings.temperature == 0.2  # file beats defaults
    monkeypatch.setenv("LAVA_CONFIG", str(config))
    monkeypatch.delenv("LAVA_PORT")
    assert Settings.load().port == 9001


def test_api_keys_from_provider_variables_stay_secret(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-123")
    settings = Settings.load(backend="openai")
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-from-env-123"
    assert "sk-from-env-123" not in repr(settings)


def test_bad_values_and_files_are_refused(tmp_path) -> None:
    with pytest.raises(ValidationError):
        Settings.load(backend="gpt5")
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("no_such_setting = 1\n")
    with pytest.raises(ValidationError):
        Settings.load(bad)


def _readme_settings_table() -> dict[str, tuple[str, str]]:
    """README's configuration table: setting -> (flag, default as written)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (`[^`]+`)? ?\| ([^|]+) \|", text, re.M)
    return {name: (flag.strip("`"), default.strip()) for name, flag, default in rows}


def _written(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_readme_settings_table_lists_every_setting_with_its_real_default_and_flag() -> None:
    # The table is where users look a default up; it drifted once in docs/deploy.md (8 for 16).
    table = _readme_settings_table()
    secrets = {"openai_api_key", "gemini_api_key"}  # documented below the table, by their variables
    assert sorted(set(Settings.model_fields) - secrets - set(table)) == []
    assert sorted(set(table) - set(Settings.model_fields)) == []
    commands = argparse.ArgumentParser().add_subparsers()
    cli._serve_parser(commands)
    parser_flags = {action.dest: action.option_strings for action in commands.choices["serve"]._actions}
    for name, (flag, written) in table.items():
        field = Settings.model_fields[name]
        default = field.default_factory() if field.default_factory is not None else field.default
        if written.startswith("`"):
            literal = written.strip("`").replace("~", str(Path.home()), 1)
            assert literal == _written(default), name
        else:  # a dash, "guessed" or "all cores": no value until lava works one out
            assert default is None, name
        if flag:
            assert flag in parser_flags.get(name, []), name
