"""Security: login throttling, production settings, and a bad-input corpus on every pool write path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from pools.core.documents import dump_yaml
from pools.models import GpuNodePool
from tests.conftest import ROOT
from tests.corpus import DOCUMENT_CORPUS, YAML_CORPUS
from tests.pools.pool_helpers import db_state


def test_repeated_failed_logins_lock_the_username_from_that_address(client, actors):
    for _ in range(4):
        assert client.post("/login/", {"username": "lead", "password": "wrong"}).status_code == 200
    assert client.post("/login/", {"username": "lead", "password": "wrong"}).status_code == 429  # the 5th failure locks
    locked = client.post("/login/", {"username": "lead", "password": "pw-lead"})
    assert locked.status_code == 429
    # The same user from another address is not locked out.
    elsewhere = client.post("/login/", {"username": "lead", "password": "pw-lead"}, REMOTE_ADDR="10.9.9.9")
    assert elsewhere.status_code == 302


def test_the_token_endpoint_is_throttled_too(client, actors):
    for _ in range(5):
        client.post("/api/v1/auth/token/", {"username": "member", "password": "nope"})
    locked = client.post("/api/v1/auth/token/", {"username": "member", "password": "pw-member"})
    assert locked.status_code == 429 and locked.json()["errors"]
    assert int(locked["Content-Length"]) == len(locked.content)  # the body was replaced: a client read 5 bytes more and hung


def test_production_settings_pass_the_deploy_check():
    env = {**os.environ, "DEBUG": "false", "SECRET_KEY": "x" * 60 + "production-only-test-key", "ALLOWED_HOSTS": "pools.example.com"}
    env.pop("EBCLOUD_TESTING", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key():
    env = {**os.environ, "DEBUG": "false", "SECRET_KEY": ""}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "SECRET_KEY must be set" in result.stderr


# --- the bad-input corpus: every write path answers 4xx with a reason and writes nothing -----

@pytest.mark.parametrize("case", sorted(YAML_CORPUS))
def test_bad_yaml_is_a_400_on_the_api_and_writes_nothing(api, case):
    before = db_state()
    response = api("lead").post("/api/v1/pools/", YAML_CORPUS[case].encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"][0]["message"]
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(YAML_CORPUS))
def test_bad_yaml_is_refused_by_the_import_page(client, actors, case):
    client.force_login(actors["lead"])
    before = db_state()
    response = client.post("/pools/import/", {"upload": SimpleUploadedFile("pool.yaml", YAML_CORPUS[case].encode())})
    assert response.status_code == 400
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(DOCUMENT_CORPUS))
def test_bad_documents_are_a_400_with_a_field_path(api, case):
    before = db_state()
    response = api("lead").post("/api/v1/pools/", DOCUMENT_CORPUS[case], format="json")
    assert response.status_code == 400, response.content[:300]
    assert all(e["field"] for e in response.json()["errors"])
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(DOCUMENT_CORPUS))
def test_bad_documents_pasted_into_the_import_page_render_escaped(client, actors, case):
    client.force_login(actors["lead"])
    response = client.post("/pools/import/", {"document": dump_yaml(DOCUMENT_CORPUS[case])})
    assert response.status_code == 400
    assert b"<script>alert(1)</script>" not in response.content
    assert GpuNodePool.objects.count() == 0


@pytest.mark.parametrize("query", ["q=%27%20OR%201%3D1--", "team=%3Cscript%3E", "ordering=;DROP", "q=a%00b", "gpuModel=" + "x" * 5000])
def test_hostile_filters_are_harmless(api, client, actors, query):
    assert api("lead").get(f"/api/v1/pools/?{query}").status_code == (400 if "%00" in query or query.startswith("ordering=") else 200)
    client.force_login(actors["lead"])
    page = client.get(f"/pools/?{query}")
    assert page.status_code == 200 and b"<script>" not in page.content.split(b"</head>")[1]


@pytest.mark.parametrize(("url", "field"), [("/api/v1/pools/?phase=Running", "phase"), ("/api/v1/orders/?status=%00", "status"), ("/api/v1/pools/?team=a%00", "team")])
def test_invalid_filters_are_a_400_naming_the_parameter(api, url, field):
    response = api("admin").get(url)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == field
