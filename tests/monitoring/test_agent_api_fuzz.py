"""schemathesis over the agent API (issue 6 §1-2): whatever an agent (or an attacker holding a
credential) sends, the server answers with a documented status and never 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from config.wsgi import application
from tests.monitoring.conftest import joined

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]
schema = schemathesis.openapi.from_wsgi("/api/schema/", application).include(path_regex="^/api/agent/v1/")


@pytest.fixture
def credential(node, actors):
    return joined(node, actors["admin"])


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """schemathesis calls the WSGI app directly; like Django's test client, keep the end of a
    request from closing the test's database connection (it would on PostgreSQL)."""
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_agent_api_never_fails_and_answers_as_documented(case, credential):
    response = case.call(headers={"Authorization": f"Bearer {credential}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    case.validate_response(response, checks=CHECKS)
