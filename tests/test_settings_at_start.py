"""A setting that cannot work stops every process at start with one line naming its variable,
rendered as Django renders ImproperlyConfigured (the last line of stderr), not a ValueError or
TypeError deep inside logging, django-q or dj_database_url, and not a silent start that fails
later (every controller, or files written to whatever the current directory is)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from config.env import env_choice, env_log_level
from tests.conftest import ROOT

IMPROPERLY_CONFIGURED = "django.core.exceptions.ImproperlyConfigured: "


def check(**environment: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **environment}
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def assert_refused(result: subprocess.CompletedProcess, variable: str) -> str:
    """Non-zero exit; stderr ends with one ImproperlyConfigured line that names `variable`, and
    no other exception (no chained ValueError or TypeError) is rendered."""
    assert result.returncode != 0, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(IMPROPERLY_CONFIGURED) and variable in last, result.stderr
    assert "During handling of the above exception" not in result.stderr, result.stderr
    assert "direct cause of the following exception" not in result.stderr, result.stderr
    return last.removeprefix(IMPROPERLY_CONFIGURED)


@pytest.mark.parametrize("variable", ["LOG_LEVEL", "Q_LOG_LEVEL"])
def test_a_log_level_in_lower_case_is_accepted_and_an_unknown_one_refused(variable):
    accepted = check(**{variable: "warning"})
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    line = assert_refused(check(**{variable: "loud"}), variable)
    assert "'loud'" in line and "INFO" in line


def test_the_log_level_helper_upper_cases(monkeypatch):
    monkeypatch.setenv("SOME_LEVEL", " info ")
    assert env_log_level("SOME_LEVEL", "WARNING") == "INFO"
    monkeypatch.setenv("SOME_LEVEL", "warn")
    assert env_log_level("SOME_LEVEL", "INFO") == "WARNING"
    monkeypatch.delenv("SOME_LEVEL")
    assert env_log_level("SOME_LEVEL", "ERROR") == "ERROR"


@pytest.mark.parametrize("url", ["", "   ", "postgresql//typo", "mongodb://h/db", "postgres://ebcloud:s3cret@db:notaport/ebcloud", "postgres://ebcloud:s3cret@db:5432"])
def test_a_bad_or_empty_database_url_is_refused_in_one_line_without_its_password(url):
    line = assert_refused(check(DATABASE_URL=url), "DATABASE_URL")
    assert "postgres://USER:PASSWORD@HOST:PORT/NAME" in line  # the expected shape
    assert "s3cret" not in line


def test_connections_kept_open_are_checked_before_use():
    """After a database restart a kept connection is dead: Django replaces it at the start of a
    request or task instead of failing it (CONN_HEALTH_CHECKS, with DATABASE_CONN_MAX_AGE)."""
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


@pytest.mark.parametrize(("variable", "typo", "known"), [
    ("EBCLOUD_CLUSTER", "k8s", "kubernetes"),
    ("EBCLOUD_CLOUD_PROVIDER", "aws", "simulated"),
])
def test_an_unknown_cluster_or_cloud_provider_is_refused_at_start(variable, typo, known):
    line = assert_refused(check(**{variable: typo}), variable)
    assert repr(typo) in line and known in line


def test_the_settings_know_the_names_the_providers_implement(settings, monkeypatch):
    """The names settings accept are the ones pools/providers builds (no name passes the start
    check and then fails every controller)."""
    from pools.providers import get_cloud_provider, get_cluster_backend

    monkeypatch.setattr("pools.providers.kubernetes.KubernetesCluster", lambda: "a real cluster")  # no kubeconfig here
    for name in settings.EBCLOUD_CLOUD_PROVIDERS:
        settings.EBCLOUD_CLOUD_PROVIDER = name
        assert get_cloud_provider() is not None
    for name in settings.EBCLOUD_CLUSTER_BACKENDS:
        settings.EBCLOUD_CLUSTER_BACKEND = name
        assert get_cluster_backend() is not None


def test_the_choice_helper(monkeypatch):
    monkeypatch.setenv("SOME_CHOICE", "b")
    assert env_choice("SOME_CHOICE", "a", ("a", "b")) == "b"


def test_an_empty_var_dir_is_refused_not_the_current_directory():
    assert_refused(check(EBCLOUD_VAR_DIR=""), "EBCLOUD_VAR_DIR")


def test_a_var_dir_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = assert_refused(check(EBCLOUD_VAR_DIR=str(blocker / "var")), "EBCLOUD_VAR_DIR")
    assert str(blocker / "var") in line
