"""CSRF is enforced on htmx requests (issue #9 acceptance item 4; design §4: session auth with CSRF).

htmx sends the token in the `X-CSRFToken` header that `templates/base.html` configures once on
<body> with `hx-headers`. These tests use a client that enforces CSRF like a browser: a POST
without the token is refused with 403 and writes nothing; with the token read from the page,
as htmx sends it, the same POST goes through.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from pools.models import AuditEntry, PoolEvent, PoolOrder
from pools.models.pods import Pod
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pod_helpers import pool_with_nodes, submit

HX = {"HTTP_HX_REQUEST": "true"}


def browser(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def htmx_token(client: Client) -> str:
    """The token as htmx sends it: from the `hx-headers` attribute of the layout's <body>."""
    page = client.get(reverse("pools:list"))
    match = re.search(r"<body hx-headers='([^']*)'", page.content.decode())
    assert match, "base.html configures htmx's headers on <body>"
    return json.loads(match.group(1))["X-CSRFToken"]


@pytest.fixture
def order(actors):
    return services.pool_create(user=actors["lead"], document=make_document("train-pool-a")).orders.get()


def test_an_htmx_post_without_the_token_is_refused_and_writes_nothing(actors, order):
    client = browser(actors["admin"])
    counts = (AuditEntry.objects.count(), PoolEvent.objects.count())
    response = client.post(reverse("order-decide", args=[order.pk, "approve"]), **HX)
    assert response.status_code == 403 and b"CSRF" in response.content
    order.refresh_from_db()
    assert order.status == PoolOrder.Status.PENDING
    assert (AuditEntry.objects.count(), PoolEvent.objects.count()) == counts


def test_an_htmx_post_with_the_header_token_goes_through(actors, order):
    client = browser(actors["admin"])
    response = client.post(reverse("order-decide", args=[order.pk, "approve"]), HTTP_X_CSRFTOKEN=htmx_token(client), **HX)
    assert response.status_code == 302
    order.refresh_from_db()
    assert order.status != PoolOrder.Status.PENDING
    assert AuditEntry.objects.filter(action="order.approved", object_id=str(order.pk), actor=actors["admin"]).count() == 1


def test_a_wrong_token_is_refused_too(actors):
    pool_with_nodes(actors["lead"], nodes=1)
    pod = submit(actors["member"], "train-job")
    client = browser(actors["member"])
    htmx_token(client)  # the session has a CSRF cookie; the header does not match it
    response = client.post(reverse("pods:delete", args=[pod.namespace, pod.name]), HTTP_X_CSRFTOKEN="x" * 64, **HX)
    assert response.status_code == 403
    assert Pod.objects.filter(pk=pod.pk).exists()
    response = client.post(reverse("pods:delete", args=[pod.namespace, pod.name]), HTTP_X_CSRFTOKEN=htmx_token(client), **HX)
    assert response.status_code == 302 and not Pod.objects.filter(pk=pod.pk).exists()


def test_the_api_with_a_browser_session_needs_the_token_as_well(actors, order):
    """The browser may call the REST API with its session (design §4): DRF checks CSRF then."""
    client = browser(actors["admin"])
    url = reverse("api:order-approve", args=[order.pk])
    refused = client.post(url, content_type="application/json", **HX)
    assert refused.status_code == 403 and "CSRF" in refused.json()["errors"][0]["message"]
    order.refresh_from_db()
    assert order.status == PoolOrder.Status.PENDING
    accepted = client.post(url, content_type="application/json", HTTP_X_CSRFTOKEN=htmx_token(client), **HX)
    assert accepted.status_code == 200, accepted.content
