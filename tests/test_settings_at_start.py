"""A setting that cannot work stops every process at start with one line naming its variable:
`error: <why>` alone on stderr and exit code 2 (config/startup.py), not Django's traceback, not
a ValueError or TypeError deep inside logging, django-q or dj_database_url, and not a silent
start that fails later (every controller, or files written to whatever the current directory
is). A server (config/wsgi.py) prints the same line and still fails its start loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

from config.env import env_choice, env_log_level
from config.startup import EXIT_MISCONFIGURED
from tests.conftest import ROOT


def check(*command: str, **environment: str) -> subprocess.CompletedProcess:
    """`manage.py check` (or `manage.py <command>`) with these variables set."""
    env = {**os.environ, **environment}
    return subprocess.run([sys.executable, "manage.py", *(command or ["check"])], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def assert_refused(result: subprocess.CompletedProcess, variable: str) -> str:
    """Exit 2; stderr is exactly one line, `error: ...` naming `variable`; no traceback."""
    assert result.returncode == EXIT_MISCONFIGURED, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and variable in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == "", result.stdout + result.stderr
    return lines[0].removeprefix("error: ")


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


@pytest.mark.parametrize(("environment", "variable", "says"), [
    ({"DEBUG": "false", "SECRET_KEY": ""}, "SECRET_KEY", "must be set when DEBUG is false"),
    ({"DEBUG": "maybe"}, "DEBUG", "'maybe'"),
    ({"Q_WORKERS": "two"}, "Q_WORKERS", "an integer"),  # int()'s ValueError is not rendered too
    ({"EBCLOUD_MAX_DOCUMENT_DEPTH": "3"}, "EBCLOUD_MAX_DOCUMENT_DEPTH", "at least 16"),
    ({"EBCLOUD_SIM_XID_RATE": "nan"}, "EBCLOUD_SIM_XID_RATE", "'nan'"),
])
def test_every_kind_of_bad_value_is_one_line_and_exit_2(environment, variable, says):
    assert says in assert_refused(check(**environment), variable)


@pytest.mark.parametrize("command", [["qcluster"], ["demo", "--no-fleet"], ["help"], ["no_such_command"]])
def test_the_worker_the_demo_and_any_other_command_refuse_in_the_same_one_line(command):
    """The worker and `make run`'s command read the settings before anything else runs."""
    assert "'loud'" in assert_refused(check(*command, LOG_LEVEL="loud"), "LOG_LEVEL")


def test_a_bug_is_not_taken_for_a_setting_and_keeps_its_traceback():
    """Only ImproperlyConfigured from loading the settings is one line: a settings module that
    does not import, or an ImproperlyConfigured that a command raises later, keep Django's
    rendering with the traceback and exit 1."""
    missing = check(DJANGO_SETTINGS_MODULE="config.no_such_settings")
    assert missing.returncode == 1 and "Traceback" in missing.stderr and "ModuleNotFoundError" in missing.stderr
    later = check("shell", "-c", "from django.core.exceptions import ImproperlyConfigured as E; raise E('later')")
    assert later.returncode == 1 and "Traceback" in later.stderr
    assert later.stderr.strip().splitlines()[-1] == "django.core.exceptions.ImproperlyConfigured: later"


@pytest.mark.parametrize("module", ["config.wsgi", "config.asgi"])
def test_a_server_loading_the_application_prints_the_line_and_still_fails_its_start(module):
    """granian or gunicorn importing the application: the one line first, then the exception
    the server reports as a failed start (not a SystemExit it could take for a worker that
    exited and start again), without the settings module's frames."""
    env = {**os.environ, "LOG_LEVEL": "loud"}
    result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and lines[0].startswith("error: LOG_LEVEL must be one of"), result.stderr
    assert lines[-1] == "django.core.exceptions.ImproperlyConfigured: " + lines[0].removeprefix("error: ")
    assert "config/settings.py" not in result.stderr and "config/env.py" not in result.stderr
