"""schemathesis over the OpenAPI schema with two teams' identities (issue 9 item 3).

Every operation is called with generated input as a lead of `algorithm`; the server must never
answer 5xx and every response must conform to the schema. A second identity (the lead of
`inference`) then reads what the first could see, and must be told 404 for every object of the
first team (object-level authorization).
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from pools.services import pools as services
from tests.conftest import make_document

# The product's own API; the node-agent API authenticates agents, not people, and has its own tests.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
schema = schemathesis.openapi.from_wsgi("/api/schema/", application).include(path_regex="^/api/v1/")


@pytest.fixture
def in_process_requests():
    """Keep the test's database connection open across WSGI calls, as Django's test client does
    (the request_finished signal would otherwise close it mid-transaction on PostgreSQL)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def identities(actors, in_process_requests):
    pool = services.pool_create(user=actors["lead"], document=make_document("fuzz-pool"))
    tokens = {role: Token.objects.get_or_create(user=actors[role])[0].key for role in ("lead", "other_lead")}
    return {"tokens": tokens, "pool": pool}


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_never_fails_and_keeps_its_schema(case, identities):
    response = case.call(headers={"Authorization": f"Token {identities['tokens']['lead']}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    # The acceptance is "no 5xx, responses as documented". Generated bodies that fit the schema
    # but break a spec rule (a zone that does not exist) are rightly 400, so the positive/negative
    # data checks do not apply.
    case.validate_response(response, checks=CHECKS)


@pytest.mark.django_db
def test_another_teams_objects_are_not_found_for_every_read(client, identities):
    pool, other = identities["pool"], identities["tokens"]["other_lead"]
    order = pool.orders.get()
    reads = [f"/api/v1/pools/{pool.name}/", f"/api/v1/pools/{pool.name}/events/", f"/api/v1/orders/{order.pk}/"]
    for path in reads:
        assert client.get(path, HTTP_AUTHORIZATION=f"Token {other}").status_code == 404, path
    listed = client.get("/api/v1/pools/", HTTP_AUTHORIZATION=f"Token {other}").json()
    assert pool.name not in {p["metadata"]["name"] for p in listed}
