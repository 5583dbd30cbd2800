"""Helpers of the `ebcloud` CLI tests: the live-server marker, config file, CliRunner and login fixtures."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from rest_framework.authtoken.models import Token

from ebcloud import config as ebcloud_config
from ebcloud.cli import cli


def live(test):
    """A test that talks to pytest-django's live server (shared, transactional database)."""
    return pytest.mark.live(pytest.mark.django_db(transaction=True)(test))


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    path = tmp_path / "ebcloud" / "config.yaml"
    monkeypatch.setenv("EBCLOUD_CONFIG", str(path))
    monkeypatch.delenv("EBCLOUD_SERVER", raising=False)
    monkeypatch.delenv("EBCLOUD_TOKEN", raising=False)
    monkeypatch.delenv("EBCLOUD_DEBUG", raising=False)
    return path


@pytest.fixture
def ebcloud(config_file):
    """ebcloud(*args, input=None, env=None) -> click Result; stdout and stderr apart."""
    runner = CliRunner()

    def run(*args: str, input: str | bytes | None = None, env: dict | None = None):
        return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return run


@pytest.fixture
def login_as(live_server, actors, config_file):
    """Store `role`'s token in the config file, as `ebcloud login` would (without the hashing)."""

    def login(role: str) -> str:
        token, _ = Token.objects.get_or_create(user=actors[role])
        ebcloud_config.save(
            ebcloud_config.Config(
                server=live_server.url, token=token.key, username=actors[role].username
            )
        )
        return token.key

    return login


def one_error_line(result) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]
